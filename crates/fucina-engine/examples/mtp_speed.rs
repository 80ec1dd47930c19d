//! Decode speed with MTP self-speculation against plain decoding on one GGUF that has
//! a multi-token-prediction head (`glm4moe`): `mtp_speed MODEL [threads] [prompt]
//! [tokens] [max_draft]` (defaults 2, 64, 64, 3). Greedy, end-of-generation ignored, a
//! synthetic byte-level vocabulary (the random-weight files carry none). Prints the
//! decode tok/s of plain decoding, of speculation with the cost gate (the default) and
//! with the gate off (every step drafts: the raw verify cost), each run's tokens per
//! step (committed / decode steps), drafted and accepted, and whether the tokens
//! equal plain decoding's.

use std::sync::Arc;
use std::time::Instant;

use fucina_engine::{Generation, GenerationOptions, SeqPool, SpecOptions};
use fucina_gguf::{Array, Metadata, StringArray, Value};
use fucina_model::{KvDtype, Model, ModelOptions};
use fucina_sample::SamplingParams;
use fucina_tokenizer::Tokenizer;

fn arg(args: &[String], i: usize, default: usize) -> usize {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// `<unk>`, `<s>`, `</s>`, byte tokens, then plain pieces up to `n` entries.
fn tokenizer(n: usize) -> Result<Arc<Tokenizer>, Box<dyn std::error::Error>> {
    let mut tokens = StringArray::with_capacity(n, n * 8);
    let mut types = Vec::with_capacity(n);
    for i in 0..n {
        let (piece, ty) = match i {
            0 => ("<unk>".to_string(), 2),
            1 => ("<s>".to_string(), 3),
            2 => ("</s>".to_string(), 3),
            3..=258 => (format!("<0x{:02X}>", i - 3), 6),
            _ => (format!("\u{2581}t{i}"), 1),
        };
        tokens.push(piece.as_bytes());
        types.push(ty);
    }
    let mut md = Metadata::with_capacity(8);
    md.insert("tokenizer.ggml.model", Value::String(b"llama".to_vec()));
    md.insert("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    md.insert(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.0; n])),
    );
    md.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.insert("tokenizer.ggml.bos_token_id", Value::U32(1));
    md.insert("tokenizer.ggml.eos_token_id", Value::U32(2));
    Ok(Arc::new(Tokenizer::from_metadata(&md)?))
}

struct RunOut {
    tokens: Vec<u32>,
    decode_s: f64,
    steps: usize,
    stats: Option<fucina_engine::SpecStats>,
}

fn run(
    pool: &mut SeqPool,
    tok: &Arc<Tokenizer>,
    prompt: &[u32],
    n: usize,
    spec: Option<SpecOptions>,
) -> Result<RunOut, Box<dyn std::error::Error>> {
    let opts = GenerationOptions {
        max_tokens: Some(n),
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        ignore_eos: true,
        speculation: spec,
        ..GenerationOptions::default()
    };
    let mut g = Generation::new(pool, Arc::clone(tok), prompt, opts, vec![])?;
    // The first step prefills; decode is timed from the second.
    g.step(pool, &mut [], &mut |_, _| {})?;
    let t = Instant::now();
    let mut steps = 0;
    while !g.is_finished() {
        let queued = g.has_queued();
        if g.step(pool, &mut [], &mut |_, _| {})?.is_none() {
            break;
        }
        steps += usize::from(!queued);
    }
    let decode_s = t.elapsed().as_secs_f64();
    let out = RunOut {
        tokens: g.generated().to_vec(),
        decode_s,
        steps,
        stats: g.spec_stats(),
    };
    g.release(pool);
    Ok(out)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: mtp_speed MODEL [threads] [prompt] [tokens] [max_draft]")?;
    let threads = arg(&args, 2, 2);
    let n_prompt = arg(&args, 3, 64).max(1);
    let n_gen = arg(&args, 4, 64).max(2);
    let max_draft = arg(&args, 5, 3).max(2);
    let model = Arc::new(Model::load(path, ModelOptions::with_threads(threads))?);
    model.wait_repacked();
    if model.mtp().is_none() {
        return Err("the model has no MTP head".into());
    }
    let n_vocab = model.config().n_vocab;
    let tok = tokenizer(n_vocab)?;
    let prompt: Vec<u32> = (0..n_prompt as u32)
        .map(|i| 3 + (i * 7919) % (n_vocab as u32 - 3))
        .collect();
    let mut pool = SeqPool::new(model, n_prompt + n_gen + max_draft + 8, KvDtype::F16)?;
    let spec = |economics: bool| SpecOptions {
        max_draft,
        min_draft: 1,
        economics,
        ..SpecOptions::default()
    };
    // Warm-up runs (trunk and head), so page-in and allocation costs of the mapping
    // do not land on the first timed run.
    run(&mut pool, &tok, &prompt, 4, None)?;
    run(&mut pool, &tok, &prompt, 4, Some(spec(false)))?;
    let plain = run(&mut pool, &tok, &prompt, n_gen, None)?;
    let decoded = (plain.tokens.len() - 1) as f64;
    let plain_tps = decoded / plain.decode_s;
    println!("plain: {plain_tps:.2} tok/s ({} decode steps)", plain.steps);
    for (label, economics) in [("gated", true), ("always drafting", false)] {
        let r = run(&mut pool, &tok, &prompt, n_gen, Some(spec(economics)))?;
        let s = r.stats.unwrap_or_default();
        let tps = (r.tokens.len() - 1) as f64 / r.decode_s;
        println!(
            "MTP {label}: {tps:.2} tok/s (x{:.2} plain), {:.2} tokens per step over {} steps \
             ({} verify), drafted {}, accepted {}, same tokens as plain: {}",
            tps / plain_tps,
            decoded / r.steps.max(1) as f64,
            r.steps,
            s.spec_steps,
            s.drafted,
            s.accepted,
            r.tokens == plain.tokens
        );
    }
    Ok(())
}
