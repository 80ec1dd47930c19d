//! GEMV bandwidth benchmark (driven by `benches/gemv.py`; runnable alone).
//!
//! Prints one JSON object per line: the machine's measured memory read bandwidth
//! (same threads, same run), then per matrix and layout (row-major `rows`, packed
//! `x8` where the ISA has packed kernels) the best GEMV time with this crate's
//! spin-then-park pool and with rayon, the effective weight bandwidth, and the memory
//! bandwidth probed in rounds alternating with the GEMVs (the fraction's reference).
//!
//! `cargo run --release -p fucina-quant --example gemv_bench -- [threads] [filter]`

use std::time::Instant;

use fucina_quant::{GgmlType, Kernels, Packed, QMatrix, ThreadPool};
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

/// Read-bandwidth probe: the pool's threads sum 1 MiB chunks of a 512 MiB buffer
/// (far larger than the caches), claimed from a counter like the GEMV's row chunks.
/// Repetitions alternate the plain sum and one with software prefetch 16 KiB ahead
/// (what the packed GEMV kernels do); the best of all is kept, so the probe never
/// reads less than the kernels could.
struct Probe {
    buf: Vec<u64>,
    rep: usize,
}

impl Probe {
    fn new() -> Probe {
        Probe {
            buf: (0..(512u64 << 20 >> 3)).collect(),
            rep: 0,
        }
    }

    /// One repetition's bytes per second.
    fn once(&mut self, pool: &ThreadPool) -> f64 {
        use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
        let (buf, words, chunk) = (&self.buf, self.buf.len(), (1 << 20) >> 3);
        let prefetch = self.rep % 2 == 1;
        self.rep += 1;
        let sink = AtomicU64::new(0);
        let next = AtomicUsize::new(0);
        let t = Instant::now();
        pool.run(&|_| {
            let mut acc = 0u64;
            loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c * chunk >= words {
                    break;
                }
                acc ^= sum_words(&buf[c * chunk..(c + 1) * chunk], prefetch);
            }
            sink.fetch_add(acc, Ordering::Relaxed);
        });
        (words * 8) as f64 / t.elapsed().as_secs_f64()
    }
}

/// Wrapping sum of `words`, with AVX2 loads where the CPU has them (software
/// prefetch with `prefetch`).
fn sum_words(words: &[u64], prefetch: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was detected just above.
            return unsafe {
                if prefetch {
                    sum_avx2::<true>(words)
                } else {
                    sum_avx2::<false>(words)
                }
            };
        }
    }
    let _ = prefetch;
    words.iter().fold(0, |s, v| s.wrapping_add(*v))
}

/// Sum with 256-bit loads, four independent accumulators (so the probe, like the
/// GEMV kernels, is limited by memory rather than by narrow loads).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_avx2<const PREFETCH: bool>(words: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 4];
    for c in words.chunks_exact(16) {
        if PREFETCH {
            _mm_prefetch::<_MM_HINT_T0>(c.as_ptr().wrapping_add(2048).cast());
            _mm_prefetch::<_MM_HINT_T0>(c.as_ptr().wrapping_add(2048 + 8).cast());
        }
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` has 16 words, so words 4k..4k+4 are in bounds; loadu needs no alignment.
            let v = unsafe { _mm256_loadu_si256(c[4 * k..].as_ptr().cast()) };
            *a = _mm256_add_epi64(*a, v);
        }
    }
    let s = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    let mut out = [0u64; 4];
    // SAFETY: `out` is 32 writable bytes.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), s) };
    out.iter().fold(0, |x, y| x.wrapping_add(*y))
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
    let mut probe = Probe::new();
    let bw = (0..14).map(|_| probe.once(&pool)).fold(0f64, f64::max);
    println!(
        r#"{{"kind": "memory", "threads": {threads}, "read_bytes_per_s": {bw:.4e}, "isa": "{}"}}"#,
        kernels.isa().name()
    );

    let shapes: &[(GgmlType, usize, usize)] = &[
        (GgmlType::Q8_0, 262_144, 640),
        (GgmlType::Q8_0, 4096, 640),
        // Gemma 3 270M's Q5_0 FFN matrices (widened to Q8_0 when packed), and larger.
        (GgmlType::Q5_0, 2048, 640),
        (GgmlType::Q5_0, 4096, 4096),
        (GgmlType::Q4_0, 4096, 4096),
        (GgmlType::Q4_K, 640, 2048),
        (GgmlType::Q6_K, 640, 2048),
        (GgmlType::Q4_K, 4096, 4096),
        (GgmlType::Q6_K, 4096, 4096),
        // The output head of the Qwen2/Qwen3 family in a Q4_K_M file.
        (GgmlType::Q6_K, 151_936, 2048),
        // Qwen3.5-0.8B's output head (short rows: 4 super-blocks each).
        (GgmlType::Q6_K, 248_320, 1024),
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
        // Rotate through enough copies (≥ 256 MiB) that every GEMV streams its weights
        // from memory, as in a real model whose layers do not fit the caches.
        let copies = ((256usize << 20) / w.len()).max(1);
        let all = w.repeat(copies);
        let mats: Vec<QMatrix> = all
            .chunks_exact(w.len())
            .map(|c| QMatrix::new(kernels, ty, c, rows, cols).expect("matrix"))
            .collect();
        let x = splitmix(99, cols);
        let e = *mats[0].entry();
        let row_bytes = w.len() / rows;
        // Repacked into interleaved 8-row groups where the ISA has packed kernels for
        // the type (what the model runs on).
        let t = Instant::now();
        let packs: Vec<Packed> = all
            .chunks_exact(w.len())
            .filter_map(|c| Packed::new(&e, c, rows, cols).expect("repack"))
            .collect();
        let repack_s = t.elapsed().as_secs_f64();
        if let Some((with, without)) = Packed::q4_k_prefetch_timings(&e) {
            println!(
                r#"{{"kind": "q4_k_prefetch", "with_seconds": {with:.4e}, "without_seconds": {without:.4e}, "prefetch": "{:?}"}}"#,
                Packed::prefetch(&e).expect("a packed layout")
            );
        }
        if let Some((tp, tr)) = Packed::calibrate(&e) {
            println!(
                r#"{{"kind": "calibrate", "type": "{ty}", "packed_seconds": {tp:.4e}, "rows_seconds": {tr:.4e}, "pays_off": {}, "prefetch": "{:?}"}}"#,
                Packed::pays_off(&e),
                Packed::prefetch(&e).expect("a packed layout")
            );
        }
        let pm: Vec<QMatrix> = packs
            .iter()
            .map(|p| QMatrix::interleaved(kernels, p).expect("interleaved"))
            .collect();
        let (mut y, mut yr, mut yp) = (vec![0f32; rows], vec![0f32; rows], vec![0f32; rows]);
        // Enough calls per round for ~60 ms per variant.
        let t = Instant::now();
        mats[0].gemv(&pool, &x, &mut y).expect("gemv");
        let once = t.elapsed().as_secs_f64().max(1e-6);
        let per_round = ((0.06 / once) as usize).clamp(3, 2_000);
        // Rounds alternate the memory probe and every variant, so that all of them
        // see the same phases of a shared machine's memory system; each keeps its
        // best call (the least disturbed).
        let (mut t_ours, mut t_rayon, mut t_packed, mut mem) =
            (f64::INFINITY, f64::INFINITY, f64::INFINITY, 0f64);
        let mut call = 0usize;
        for _round in 0..16 {
            mem = mem.max(probe.once(&pool));
            for _ in 0..per_round {
                call += 1;
                let i = call % copies;
                let t = Instant::now();
                mats[i].gemv(&pool, &x, &mut y).expect("gemv");
                t_ours = t_ours.min(t.elapsed().as_secs_f64());
                // The same kernel and activation conversion, threaded by rayon.
                let wi = &all[i * w.len()..][..w.len()];
                let t = Instant::now();
                let mut a = Vec::new();
                e.act.quantize_row(&x, &mut a).expect("activation");
                rayon_pool.install(|| {
                    yr.par_chunks_mut(16).enumerate().for_each(|(c, out)| {
                        for (k, v) in out.iter_mut().enumerate() {
                            let r = c * 16 + k;
                            *v = e.dot(&wi[r * row_bytes..(r + 1) * row_bytes], &a);
                        }
                    })
                });
                t_rayon = t_rayon.min(t.elapsed().as_secs_f64());
                if let Some(m) = pm.get(i) {
                    let t = Instant::now();
                    m.gemv(&pool, &x, &mut yp).expect("gemv");
                    t_packed = t_packed.min(t.elapsed().as_secs_f64());
                }
            }
        }
        assert_eq!(y, yr, "rayon and pool results differ");
        let record = |layout: &str, t: f64| {
            println!(
                r#"{{"kind": "gemv", "type": "{ty}", "layout": "{layout}", "rows": {rows}, "cols": {cols}, "bytes": {}, "threads": {threads}, "seconds": {t:.6e}, "rayon_seconds": {t_rayon:.6e}, "bytes_per_s": {:.4e}, "memory_bytes_per_s": {mem:.4e}, "fraction_of_memory_bw": {:.3}, "copies": {copies}, "kernel": "{:?}"}}"#,
                w.len(),
                w.len() as f64 / t,
                w.len() as f64 / t / mem,
                e.path,
            )
        };
        record("rows", t_ours);
        if !pm.is_empty() {
            println!(
                r#"{{"kind": "repack", "type": "{ty}", "rows": {rows}, "cols": {cols}, "bytes": {}, "seconds": {repack_s:.4e}, "bytes_per_s": {:.4e}}}"#,
                all.len(),
                all.len() as f64 / repack_s
            );
            assert!(
                y.iter().zip(&yp).all(|(a, b)| a.to_bits() == b.to_bits()),
                "interleaved and row-major results differ"
            );
            record("x8", t_packed);
        }
    }
}
