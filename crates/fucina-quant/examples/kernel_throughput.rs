//! In-cache GEMV throughput of the K-quant kernels, one thread: a 256 × 2048 matrix
//! (≤ 430 KB, resident in L2) multiplied again and again, best call reported as
//! weight GB/s. This is the kernel's compute ceiling: when it is not well above the
//! memory bandwidth per thread (`gemv_bench`'s probe / threads), a streaming GEMV is
//! compute-bound and the kernel's instruction count is what to cut.
//!
//! `cargo run --release -p fucina-quant --example kernel_throughput`

use std::time::Instant;

use fucina_quant::{GgmlType, Kernels, Packed, QMatrix, ThreadPool};

/// Best time of `reps` calls of `f`, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let kernels = Kernels::from_env().expect("kernels");
    let pool = ThreadPool::new(1).expect("pool");
    let (rows, cols) = (256usize, 2048usize);
    println!("isa {}", kernels.isa().name());
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
    ] {
        let src: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect();
        let mut w = Vec::new();
        fucina_quant::quantize(ty, &src, &mut w).expect("quantize");
        let m = QMatrix::new(kernels, ty, &w, rows, cols).expect("matrix");
        let x: Vec<f32> = (0..cols).map(|i| (i as f32).sin()).collect();
        let mut y = vec![0f32; rows];
        let t = best(2000, || m.gemv(&pool, &x, &mut y).expect("gemv"));
        let gbs = |t: f64| w.len() as f64 / t / 1e9;
        println!("{ty} rows: {:.1} us, {:.1} GB/s", t * 1e6, gbs(t));
        if let Some(p) = Packed::new(m.entry(), &w, rows, cols).expect("repack") {
            let pm = QMatrix::interleaved(kernels, &p).expect("interleaved");
            let t = best(2000, || pm.gemv(&pool, &x, &mut y).expect("gemv"));
            println!("{ty} x8:   {:.1} us, {:.1} GB/s", t * 1e6, gbs(t));
        }
    }
}
