//! Cost of a pinned matmul of m rows against m = 1, per weight of a model's first layer
//! and its output head: `matmul_rows [path] [threads]` (defaults: the Gemma 3 270M test
//! model, 2 threads). Prints microseconds and the ratio to one row for m = 1, 2, 3, 5, 8, 17.

use std::sync::Arc;
use std::time::Instant;

use fucina_gguf::GgufFile;
use fucina_model::matmul::{matmul, MatmulScratch};
use fucina_model::{Linear, ThreadPool};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = match args.get(1).filter(|s| s.as_str() != "-") {
        Some(p) => p.into(),
        None => fucina_testdata::gemma3_270m(),
    };
    let threads = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2);
    let file = Arc::new(GgufFile::open(&path)?);
    let pool = ThreadPool::new(threads)?;
    let mut names: Vec<String> = [
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ]
    .iter()
    .map(|s| format!("blk.0.{s}.weight"))
    .collect();
    names.push("blk.1.ffn_down.weight".into());
    names.push(
        if file.tensor("output.weight").is_ok() {
            "output.weight"
        } else {
            "token_embd.weight"
        }
        .into(),
    );
    for name in names {
        let Ok(t) = file.tensor(&name) else { continue };
        let dims = t.dims.clone();
        let (cols, rows) = (dims[0] as usize, dims[1] as usize);
        let w = Linear::bind(&file, &name, rows, cols)?;
        w.repack()?;
        let mut sc = MatmulScratch::default();
        sc.set_pinned(true);
        let x: Vec<f32> = (0..17 * cols)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 300.0)
            .collect();
        let mut y = vec![0f32; 17 * rows];
        let mut line = format!(
            "{name:28} {:?} {rows}x{cols} packed={}:",
            w.ty(),
            w.packed().is_some()
        );
        let mut one = 0.0;
        for m in [1usize, 2, 3, 5, 8, 17] {
            let reps = (2_000_000_000 / (rows * cols * m)).clamp(3, 2000);
            let mut best = f64::MAX;
            for _ in 0..3 {
                let t = Instant::now();
                for _ in 0..reps {
                    matmul(&pool, &w, &x[..m * cols], m, &mut y[..m * rows], &mut sc)?;
                }
                best = best.min(t.elapsed().as_secs_f64() / reps as f64);
            }
            if m == 1 {
                one = best;
            }
            line += &format!("  m{m} {:.0}us ({:.2}x)", best * 1e6, best / one);
        }
        if w.packed().is_some_and(|p| p.has_approx()) {
            // The greedy shortcut over the same rows: its time, and its picks against
            // the argmax of the pinned logits.
            line += "\n    greedy argmax:";
            let mut picks = Vec::new();
            for m in [1usize, 5, 8, 12, 17] {
                let reps = (2_000_000_000 / (rows * cols * m)).clamp(3, 2000);
                let mut best = f64::MAX;
                for _ in 0..3 {
                    let t = Instant::now();
                    for _ in 0..reps {
                        fucina_model::greedy::argmax_rows(
                            &pool,
                            &w,
                            &x[..m * cols],
                            m,
                            &mut sc,
                            &mut picks,
                        )?;
                    }
                    best = best.min(t.elapsed().as_secs_f64() / reps as f64);
                }
                matmul(&pool, &w, &x[..m * cols], m, &mut y[..m * rows], &mut sc)?;
                for (t, &p) in picks.iter().enumerate() {
                    let want = fucina_model::greedy::first_argmax(&y[t * rows..(t + 1) * rows]);
                    assert_eq!(p, want, "row {t} of {m}");
                }
                line += &format!("  m{m} {:.0}us", best * 1e6);
            }
        }
        println!("{line}");
    }
    Ok(())
}
