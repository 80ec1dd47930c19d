//! Logits of a token sequence, for comparisons against other engines:
//! `dump_logits MODEL TOKENS_FILE OUT_FILE [threads] [mode]`. `TOKENS_FILE` holds
//! whitespace-separated token ids; `OUT_FILE` receives `n_tokens × n_vocab` little-
//! endian f32 logits, row-major. `mode` `batch` (default) evaluates the tokens as one
//! prompt batch with logits for every row; `decode` one token per forward, as a
//! generation runs. f16 KV cache, the model's default numerics.

use std::sync::Arc;

use fucina_engine::Session;
use fucina_model::{KvDtype, Model, ModelOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, tokens, out, rest @ ..] = args.as_slice() else {
        return Err(
            "usage: dump_logits MODEL TOKENS_FILE OUT_FILE [threads] [batch|decode]".into(),
        );
    };
    let threads = rest.first().and_then(|s| s.parse().ok()).unwrap_or(2);
    let decode = rest.get(1).is_some_and(|m| m == "decode");
    let toks: Vec<u32> = std::fs::read_to_string(tokens)?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let model = Arc::new(Model::load(model, ModelOptions::with_threads(threads))?);
    model.wait_repacked();
    let mut s = Session::new(model, toks.len() + 8, KvDtype::F16)?;
    let logits = if decode {
        let mut all = Vec::new();
        for &t in &toks {
            all.extend_from_slice(s.eval(&[t], true)?);
        }
        all
    } else {
        s.eval(&toks, true)?.to_vec()
    };
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(out, bytes)?;
    Ok(())
}
