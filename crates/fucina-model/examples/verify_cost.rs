//! Cost of a pinned forward of 1 + k rows (a speculative verify batch) against a
//! one-row decode step, after a 128-token context: `verify_cost [path] [threads]`
//! (defaults: the Gemma 3 270M test model, 2 threads; a third argument `batch` measures
//! unpinned forwards, a prompt chunk's or a batch's numerics, instead). Rounds alternate
//! the row counts; each keeps its best time.

use std::sync::Arc;
use std::time::Instant;

use fucina_engine::Session;
use fucina_model::{KvDtype, Model, ModelOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = match args.get(1).filter(|s| s.as_str() != "-") {
        Some(p) => p.into(),
        None => fucina_testdata::gemma3_270m(),
    };
    let threads = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let model = Arc::new(Model::load(&path, ModelOptions::with_threads(threads))?);
    model.wait_repacked();
    let n_vocab = model.config().n_vocab as u32;
    let ctx: Vec<u32> = (0..160u32)
        .map(|i| 2 + (i * 7919) % (n_vocab - 2))
        .collect();
    let mut s = Session::new(model, 512, KvDtype::F16)?;
    s.set_pinned(args.get(3).map(String::as_str) != Some("batch"));
    s.eval(&ctx[..128], false)?;
    let ks = [0usize, 1, 2, 4, 7, 8, 15, 16];
    let mut best = [f64::MAX; 8];
    for _ in 0..12 {
        for (i, &k) in ks.iter().enumerate() {
            let t = Instant::now();
            s.eval(&ctx[128..129 + k], true)?;
            best[i] = best[i].min(t.elapsed().as_secs_f64());
            s.truncate(128);
        }
    }
    let line: Vec<String> = ks
        .iter()
        .zip(best)
        .map(|(k, b)| format!("k={k}: {:.2}", b / best[0]))
        .collect();
    println!(
        "one row {:.2} ms; verify cost / one row: {}",
        best[0] * 1e3,
        line.join(", ")
    );
    Ok(())
}
