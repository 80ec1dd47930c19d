//! GEMV / GEMM row claiming (guided: large claims first, small last, capped per claim)
//! covers every output exactly once, bitwise the row-wise dot, for row counts around
//! the tile and claim sizes and any thread count.

mod common;

use common::uniform;
use fucina_quant::{GgmlType, Isa, Kernels, QMatrix, ThreadPool};

#[test]
fn every_row_is_computed_once_whatever_the_claims() {
    let kernels = Kernels::for_isa(Isa::best()).expect("kernels");
    for threads in [1, 2, 3, 4] {
        let pool = ThreadPool::new(threads).expect("pool");
        for (ty, cols) in [(GgmlType::Q8_0, 64), (GgmlType::Q6_K, 256)] {
            for rows in [1usize, 7, 8, 9, 16, 17, 100, 1000, 5003] {
                let mut w = Vec::new();
                fucina_quant::quantize(ty, &uniform(rows as u64, rows * cols, 1.0), &mut w)
                    .expect("quantize");
                let m = QMatrix::new(kernels, ty, &w, rows, cols).expect("matrix");
                let e = m.entry();
                let row_bytes = w.len() / rows;
                for n in [1usize, 3] {
                    let x = uniform(7 + n as u64, n * cols, 1.0);
                    let mut y = vec![f32::NAN; n * rows];
                    m.gemm(&pool, &x, n, &mut y).expect("gemm");
                    for t in 0..n {
                        let mut a = Vec::new();
                        e.act
                            .quantize_row(&x[t * cols..(t + 1) * cols], &mut a)
                            .expect("act");
                        for r in 0..rows {
                            let want = e.dot(&w[r * row_bytes..(r + 1) * row_bytes], &a);
                            assert_eq!(
                                y[t * rows + r].to_bits(),
                                want.to_bits(),
                                "{ty} {rows}x{cols}, {n} rows, {threads} threads: [{t}][{r}]"
                            );
                        }
                    }
                }
            }
        }
    }
}
