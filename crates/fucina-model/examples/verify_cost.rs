//! Cost of a pinned forward of 1 + k rows (a speculative verify batch) against a
//! one-row decode step, after a 128-token context: `verify_cost [path] [threads]`
//! (defaults: the Gemma 3 270M test model, 2 threads; a third argument `batch` measures
//! unpinned forwards, a prompt chunk's or a batch's numerics, instead). Rounds alternate
//! the row counts; each keeps its best time. A second line gives the same verifies with
//! greedy picks instead of logits (`SeqPool::eval_verify_greedy_from`: the head's
//! shortcut where it has one), as a greedy speculative decode runs them.

use std::sync::Arc;
use std::time::Instant;

use fucina_engine::SeqPool;
use fucina_model::{KvDtype, Model, ModelOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = match args.get(1).filter(|s| s.as_str() != "-") {
        Some(p) => p.into(),
        None => fucina_testdata::gemma3_270m(),
    };
    let threads = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let batch = args.get(3).map(String::as_str) == Some("batch");
    let model = Arc::new(Model::load(&path, ModelOptions::with_threads(threads))?);
    model.wait_repacked();
    let n_vocab = model.config().n_vocab as u32;
    let ctx: Vec<u32> = (0..160u32)
        .map(|i| 2 + (i * 7919) % (n_vocab - 2))
        .collect();
    let mut pool = SeqPool::new(model, 512, KvDtype::F16)?;
    pool.set_pinned(!batch);
    let seq = pool.alloc()?;
    pool.eval(seq, &ctx[..128], &mut |_, _| {})?;
    let ks = [0usize, 1, 2, 4, 7, 8, 15, 16];
    let mut best = [[f64::MAX; 8]; 2];
    for _ in 0..12 {
        for (i, &k) in ks.iter().enumerate() {
            let rows = &ctx[128..129 + k];
            for (mode, best) in best.iter_mut().enumerate() {
                if mode == 1 && batch {
                    continue;
                }
                let t = Instant::now();
                match (k, mode, batch) {
                    (0, _, _) => drop(pool.eval(seq, rows, &mut |_, _| {})?),
                    (_, _, true) => drop(pool.eval_all(seq, rows)?),
                    (_, 0, _) => drop(pool.eval_verify_from(seq, rows, 0)?),
                    _ => drop(pool.eval_verify_greedy_from(seq, rows, 0, 0)?),
                }
                best[i] = best[i].min(t.elapsed().as_secs_f64());
                pool.truncate(seq, 128)?;
            }
        }
    }
    let line = |b: &[f64; 8]| -> String {
        ks.iter()
            .zip(b)
            .map(|(k, b)| format!("k={k}: {:.2}", b / best[0][0]))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "one row {:.2} ms; verify cost / one row: {}",
        best[0][0] * 1e3,
        line(&best[0])
    );
    if !batch {
        println!("greedy picks, cost / one row: {}", line(&best[1]));
    }
    Ok(())
}
