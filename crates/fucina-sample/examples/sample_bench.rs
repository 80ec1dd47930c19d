//! Times `Sampler::sample` on Gemma-3-sized rows (262,144 logits).
//!
//!     cargo run --release -p fucina-sample --example sample_bench
//!
//! Rows: a synthetic one shaped like a language model's (logits ~ N(0, 3)
//! plus a handful of peaked tokens holding ~95% of the mass), a flat stress
//! row whose top-p 0.95 nucleus is ~15k tokens, and the real Gemma 3 rows of
//! the parity goldens (mean over them). Budgets (a decode step is ~9 ms):
//! ≲ 0.3 ms at defaults, ≲ 0.4 ms for top_k 0 / top_p 0.95, ≲ 0.05 ms greedy.

#[path = "../tests/common/golden.rs"]
mod golden;

use std::hint::black_box;
use std::time::Instant;

use fucina_sample::{Rng, Sampler, SamplingParams};

const N_VOCAB: usize = 262_144;
const ITERS: u32 = 60;
const BATCHES: u32 = 5;

fn normal_row(peaks: &[f32]) -> Vec<f32> {
    let mut rng = Rng::new(42);
    let mut row: Vec<f32> = (0..N_VOCAB)
        .map(|_| {
            // Box-Muller: one normal deviate from two uniforms.
            let u1 = 1.0 - rng.next_f64();
            let u2 = rng.next_f64();
            (3.0 * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
        })
        .collect();
    for (i, &v) in peaks.iter().enumerate() {
        row[(i * 31_337 + 1_000) % N_VOCAB] = v;
    }
    row
}

/// µs per `sample` call (the best of `BATCHES` batches of `ITERS`, so other
/// load on the machine inflates it less), averaged over `rows`, and the mean
/// kept count. With `copy_each` the row is copied back before every call so
/// penalties do not accumulate (the copy is included).
fn time(
    params: &SamplingParams,
    rows: &[Vec<f32>],
    history: &[u32],
    copy_each: bool,
) -> (f64, f64) {
    let (mut us, mut kept) = (0.0, 0.0);
    for row in rows {
        let mut s = Sampler::new(params.clone(), row.len()).expect("valid params");
        let mut logits = row.clone();
        kept += s
            .candidates(&mut logits, history, &mut [])
            .expect("sampling works")
            .len() as f64;
        logits.copy_from_slice(row);
        let mut best = f64::INFINITY;
        for _ in 0..BATCHES {
            let t = Instant::now();
            for _ in 0..ITERS {
                if copy_each {
                    logits.copy_from_slice(row);
                }
                black_box(
                    s.sample(black_box(&mut logits), history, &mut [])
                        .expect("sampling works"),
                );
            }
            best = best.min(t.elapsed().as_secs_f64() * 1e6 / ITERS as f64);
        }
        us += best;
    }
    (us / rows.len() as f64, kept / rows.len() as f64)
}

fn main() {
    let d = SamplingParams::default;
    let cases: Vec<(&str, SamplingParams, bool)> = vec![
        ("defaults (top_k 40, top_p .95, min_p .05)", d(), false),
        (
            "top_k 0, top_p .95 (min_p .05, temp .8)",
            SamplingParams { top_k: 0, ..d() },
            false,
        ),
        (
            "top_k 0, top_p .95, min_p 0",
            SamplingParams {
                top_k: 0,
                min_p: 0.0,
                ..d()
            },
            false,
        ),
        (
            "top_k 0, top_p 1, min_p .05",
            SamplingParams {
                top_k: 0,
                top_p: 1.0,
                ..d()
            },
            false,
        ),
        ("top_k 200", SamplingParams { top_k: 200, ..d() }, false),
        (
            "greedy",
            SamplingParams {
                temperature: 0.0,
                ..d()
            },
            false,
        ),
        (
            "typical .9, top_k 0 (sorts the vocabulary)",
            SamplingParams {
                top_k: 0,
                typical_p: 0.9,
                ..d()
            },
            false,
        ),
        (
            "defaults + penalties, 64-token window (+copy)",
            SamplingParams {
                repeat_penalty: 1.1,
                frequency_penalty: 0.1,
                ..d()
            },
            true,
        ),
    ];
    let history: Vec<u32> = (0..64u32).map(|i| (i * 7_919) % 50_000).collect();
    let mut sets: Vec<(&str, Vec<Vec<f32>>)> = vec![
        (
            "synthetic N(0,3) + peaks",
            vec![normal_row(&[
                19.0, 18.5, 18.2, 17.9, 17.5, 17.0, 16.0, 15.0,
            ])],
        ),
        (
            "flat stress row",
            vec![normal_row(&[
                16.0, 15.0, 14.5, 14.0, 13.0, 12.0, 11.0, 10.0,
            ])],
        ),
    ];
    let real: Vec<Vec<f32>> = golden::real_rows().into_iter().map(|(_, r)| r).collect();
    if !real.is_empty() {
        sets.push(("real Gemma 3 rows (goldens, mean)", real));
    }
    println!("Sampler::sample on {N_VOCAB}-token rows, single thread, µs per call (mean kept candidates)");
    for (set, rows) in &sets {
        println!(
            "\n{set} ({} row{})",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" }
        );
        for (name, params, copy_each) in &cases {
            let (us, kept) = time(params, rows, &history, *copy_each);
            println!("  {name:<46} {us:>8.1} µs   ({kept:.0} kept)");
        }
    }
    let row = &sets[0].1[0];
    let mut buf = row.clone();
    let t = Instant::now();
    for _ in 0..ITERS {
        buf.copy_from_slice(black_box(row));
        black_box(&mut buf);
    }
    println!(
        "\n  {:<46} {:>8.1} µs",
        "(copying one row alone)",
        t.elapsed().as_secs_f64() * 1e6 / ITERS as f64
    );
}
