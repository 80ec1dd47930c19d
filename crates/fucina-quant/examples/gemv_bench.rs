//! GEMV bandwidth benchmark (driven by `benches/gemv.py`; runnable alone).
//!
//! Prints one JSON object per line: the machine's measured memory read bandwidth
//! (same threads, same run), then per matrix the best GEMV time with this crate's
//! spin-then-park pool and with rayon, and the effective weight bandwidth.
//!
//! `cargo run --release -p fucina-quant --example gemv_bench -- [threads] [filter]`

use std::time::Instant;

use fucina_quant::{GgmlType, Kernels, QMatrix, ThreadPool};
use rayon::prelude::*;

fn splitmix(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Best of the repetitions: on a shared machine the minimum is the measurement least
/// disturbed by other processes (the same statistic is used for the memory probe).
fn best(v: Vec<f64>) -> f64 {
    v.into_iter().fold(f64::INFINITY, f64::min)
}

/// Read bandwidth: `threads` threads each sum their half of a buffer far larger than the caches.
fn memory_read_bandwidth(pool: &ThreadPool) -> f64 {
    let words = 512usize << 20 >> 3; // 512 MiB
    let buf: Vec<u64> = (0..words as u64).collect();
    let parts = pool.n_threads();
    let per = words / parts;
    let sink = std::sync::atomic::AtomicU64::new(0);
    let mut times = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        pool.run(&|i| {
            let mut acc = [0u64; 8];
            for c in buf[i * per..(i + 1) * per].chunks_exact(8) {
                for (a, v) in acc.iter_mut().zip(c) {
                    *a = a.wrapping_add(*v);
                }
            }
            sink.fetch_add(
                acc.iter().fold(0, |s, v| s ^ v),
                std::sync::atomic::Ordering::Relaxed,
            );
        });
        times.push(t.elapsed().as_secs_f64());
    }
    (per * parts * 8) as f64 / best(times)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let filter = args.get(2).cloned().unwrap_or_default();
    let kernels = match Kernels::from_env() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let pool = ThreadPool::new(threads).expect("pool");
    let rayon_pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool");
    let bw = memory_read_bandwidth(&pool);
    println!(
        r#"{{"kind": "memory", "threads": {threads}, "read_bytes_per_s": {bw:.4e}, "isa": "{}"}}"#,
        kernels.isa().name()
    );

    let shapes: &[(GgmlType, usize, usize)] = &[
        (GgmlType::Q8_0, 262_144, 640),
        (GgmlType::Q8_0, 4096, 640),
        (GgmlType::Q4_K, 640, 2048),
        (GgmlType::Q6_K, 640, 2048),
        (GgmlType::Q4_K, 4096, 4096),
        (GgmlType::Q6_K, 4096, 4096),
    ];
    for &(ty, rows, cols) in shapes {
        let name = format!("{ty} {rows}x{cols}");
        if !name.contains(filter.as_str()) {
            continue;
        }
        let mut w = Vec::new();
        let block_rows = (1 << 22) / cols;
        for r0 in (0..rows).step_by(block_rows) {
            let r1 = (r0 + block_rows).min(rows);
            fucina_quant::quantize(ty, &splitmix(r0 as u64, (r1 - r0) * cols), &mut w)
                .expect("quantize");
        }
        let m = QMatrix::new(kernels, ty, &w, rows, cols).expect("matrix");
        let x = splitmix(99, cols);
        let mut y = vec![0f32; rows];
        // Enough repetitions for ~1 s per variant.
        let t = Instant::now();
        m.gemv(&pool, &x, &mut y).expect("gemv");
        let once = t.elapsed().as_secs_f64().max(1e-6);
        let reps = ((1.0 / once) as usize).clamp(5, 20_000);
        let mut ours = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            m.gemv(&pool, &x, &mut y).expect("gemv");
            ours.push(t.elapsed().as_secs_f64());
        }
        // The same kernel and activation conversion, threaded by rayon.
        let e = *m.entry();
        let row_bytes = w.len() / rows;
        let mut yr = vec![0f32; rows];
        let mut theirs = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            let mut a = Vec::new();
            e.act.quantize_row(&x, &mut a).expect("activation");
            rayon_pool.install(|| {
                yr.par_chunks_mut(16).enumerate().for_each(|(c, out)| {
                    for (k, v) in out.iter_mut().enumerate() {
                        let r = c * 16 + k;
                        *v = e.dot(&w[r * row_bytes..(r + 1) * row_bytes], &a);
                    }
                })
            });
            theirs.push(t.elapsed().as_secs_f64());
        }
        assert_eq!(y, yr, "rayon and pool results differ");
        let (t_ours, t_rayon) = (best(ours), best(theirs));
        println!(
            r#"{{"kind": "gemv", "type": "{ty}", "rows": {rows}, "cols": {cols}, "bytes": {}, "threads": {threads}, "seconds": {t_ours:.6e}, "rayon_seconds": {t_rayon:.6e}, "bytes_per_s": {:.4e}, "fraction_of_memory_bw": {:.3}, "kernel": "{:?}"}}"#,
            w.len(),
            w.len() as f64 / t_ours,
            w.len() as f64 / t_ours / bw,
            e.path,
        );
    }
}
