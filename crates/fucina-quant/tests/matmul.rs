//! Threaded GEMV / GEMM agree bit for bit with row-by-row dots of the same kernel
//! (threading and tiling change nothing numerically), and bad shapes are errors.

mod common;

use common::uniform;
use fucina_quant::{ActType, GgmlType, Isa, Kernels, QMatrix, ThreadPool};

#[test]
fn gemv_and_gemm_equal_rowwise_dots() {
    let kernels = Kernels::for_isa(Isa::best()).expect("kernels");
    for threads in [1, 2, 3] {
        let pool = ThreadPool::new(threads).expect("pool");
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q5_0,
            GgmlType::F16,
            GgmlType::TQ2_0,
        ] {
            let (rows, cols, n) = (37, 512, 75);
            let mut w = Vec::new();
            fucina_quant::quantize(ty, &uniform(1, rows * cols, 1.0), &mut w)
                .expect("quantize weights");
            let m = QMatrix::new(kernels, ty, &w, rows, cols).expect("matrix");
            let x = uniform(2, n * cols, 1.0);
            let mut y = vec![0f32; n * rows];
            m.gemm(&pool, &x, n, &mut y).expect("gemm");
            let e = m.entry();
            for t in 0..n {
                let mut a = Vec::new();
                e.act
                    .quantize_row(&x[t * cols..(t + 1) * cols], &mut a)
                    .expect("act");
                let row_bytes = w.len() / rows;
                for r in 0..rows {
                    let want = e.dot(&w[r * row_bytes..(r + 1) * row_bytes], &a);
                    assert_eq!(
                        y[t * rows + r].to_bits(),
                        want.to_bits(),
                        "{ty} t{t} r{r} threads {threads}"
                    );
                }
            }
            let mut y1 = vec![0f32; rows];
            m.gemv(&pool, &x[..cols], &mut y1).expect("gemv");
            assert_eq!(y1, y[..rows].to_vec());
            // A caller-owned activation buffer, reused across calls and shapes.
            let mut acts = vec![7u8; 3];
            let mut y2 = vec![0f32; n * rows];
            m.gemm_with(&pool, &x, n, &mut y2, &mut acts)
                .expect("gemm_with");
            assert!(y2.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()));
            m.gemv_with(&pool, &x[..cols], &mut y1, &mut acts)
                .expect("gemv_with");
            assert_eq!(y1, y[..rows].to_vec());
        }
    }
}

#[test]
fn bad_shapes_are_errors() {
    let kernels = Kernels::for_isa(Isa::Scalar).expect("scalar");
    let pool = ThreadPool::new(2).expect("pool");
    let w = vec![0u8; 34 * 4];
    assert!(QMatrix::new(kernels, GgmlType::Q8_0, &w, 4, 33).is_err());
    assert!(QMatrix::new(kernels, GgmlType::Q8_0, &w, 5, 32).is_err());
    assert!(QMatrix::new(kernels, GgmlType::Q8_0, &w, usize::MAX, 32).is_err());
    assert!(QMatrix::new(kernels, GgmlType::Q8_1, &w, 4, 32).is_err());
    let m = QMatrix::new(kernels, GgmlType::Q8_0, &w, 4, 32).expect("matrix");
    assert!(m.gemv(&pool, &[0.0; 31], &mut [0.0; 4]).is_err());
    assert!(m.gemv(&pool, &[0.0; 32], &mut [0.0; 5]).is_err());
    assert!(m.gemm(&pool, &[0.0; 64], 2, &mut [0.0; 4]).is_err());
    assert_eq!(ActType::Q8_0.row_bytes(64), 68);
}
