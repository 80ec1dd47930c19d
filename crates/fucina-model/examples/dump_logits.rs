//! Logits of a token sequence, for comparisons against other engines:
//! `dump_logits MODEL TOKENS_FILE OUT_FILE [threads] [mode]`. `TOKENS_FILE` holds
//! whitespace-separated token ids; `OUT_FILE` receives `n_tokens × n_vocab` little-
//! endian f32 logits, row-major. `mode` `batch` (default) evaluates the tokens as one
//! prompt batch with logits for every row; `decode` one token per forward; `prompt:N`
//! the first N as one batch and the rest one per forward, as a generation after an
//! N-token prompt runs. f16 KV cache, the model's default numerics.

use std::sync::Arc;

use fucina_engine::Session;
use fucina_model::{KvDtype, Model, ModelOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, tokens, out, rest @ ..] = args.as_slice() else {
        return Err(
            "usage: dump_logits MODEL TOKENS_FILE OUT_FILE [threads] [batch|decode|prompt:N]"
                .into(),
        );
    };
    let threads = rest.first().and_then(|s| s.parse().ok()).unwrap_or(2);
    // `batch`: every token in one batch; `decode`: one per forward; `prompt:N`: the
    // first N as one batch, then one per forward (a prompt, then its generation).
    let mode = rest.get(1).map_or("batch", String::as_str);
    let n_batch = match mode {
        "batch" => usize::MAX,
        "decode" => 0,
        m => m
            .strip_prefix("prompt:")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("unknown mode {m:?}: batch, decode or prompt:N"))?,
    };
    let toks: Vec<u32> = std::fs::read_to_string(tokens)?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let model = Arc::new(Model::load(model, ModelOptions::with_threads(threads))?);
    model.wait_repacked();
    let mut s = Session::new(model, toks.len() + 8, KvDtype::F16)?;
    let (prompt, rest) = toks.split_at(n_batch.min(toks.len()));
    let mut logits = Vec::new();
    if !prompt.is_empty() {
        logits.extend_from_slice(s.eval(prompt, true)?);
    }
    for &t in rest {
        logits.extend_from_slice(s.eval(&[t], true)?);
    }
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(out, bytes)?;
    Ok(())
}
