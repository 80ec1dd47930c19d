//! The attention softmax as llama.cpp's CPU `soft_max` executes it on AVX-512
//! machines (`ggml_vec_soft_max_f32`): the KQ row spans the whole padded cache
//! view (cells 0..n_kv, masked cells −∞), exponentials come from ggml's polynomial
//! `ggml_v_expf` (not libm's `expf`), 16 cells at a time, and each 16-cell chunk is
//! summed in `_mm512_reduce_add_ps` order before joining an f64 total.
//!
//! Masked cells contribute exact zeros, so only the visible positions are computed,
//! each in the chunk of its cache cell (cell = position while the cache has not
//! wrapped, which is how llama.cpp fills a fresh sequence). The result is the same
//! to the last bit as long as `n_kv` is a multiple of 16, which llama.cpp's padding
//! (to 256 cells) guarantees.

use crate::ops::f16dot::reduce16;

const CHUNK: usize = 16;

/// ggml's `ggml_v_expf` (Cody–Waite reduction, degree-5 polynomial, `scalef`),
/// one lane at a time; within ~1.5 ulp of `exp`.
#[inline]
pub fn ggml_expf(x: f32) -> f32 {
    let f = f32::from_bits;
    let r = f(0x4b40_0000); // 0x1.8p23: rounds x·log2(e) to an integer
    let z = x.mul_add(f(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    let u = b * b;
    let j = f(0x3c07_2010)
        .mul_add(b, f(0x3d2b_9f17))
        .mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)))
        .mul_add(u, f(0x3f7f_fff6).mul_add(b, 1.0));
    // scalef(j, n) = j·2^n with one rounding: exact in f64, then rounded once.
    (f64::from(j) * 2f64.powi(n as i32)) as f32
}

/// In place: `w[i] = exp(w[i] − max) / Σ`, where `w[i]` is the score of cache
/// cell `first_cell + i` and `max` is the row maximum.
pub fn softmax_cells(w: &mut [f32], first_cell: usize, max: f32) {
    let mut sum = 0f64;
    let mut chunk = [0f32; CHUNK];
    let mut cur = first_cell / CHUNK;
    for (i, v) in w.iter_mut().enumerate() {
        let cell = first_cell + i;
        if cell / CHUNK != cur {
            sum += f64::from(reduce16(&chunk));
            chunk = [0f32; CHUNK];
            cur = cell / CHUNK;
        }
        *v = ggml_expf(*v - max);
        chunk[cell % CHUNK] = *v;
    }
    sum += f64::from(reduce16(&chunk));
    let inv = (1.0 / sum) as f32;
    for v in w.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expf_tracks_exp() {
        for i in -20_000..2_000 {
            let x = i as f32 * 0.005;
            let e = f64::from(x).exp();
            let g = f64::from(ggml_expf(x));
            // Relative bound for normal results; subnormals are off by < 1 ulp (2^-149).
            let ulp = f64::from(f32::from_bits(1));
            assert!((g - e).abs() <= 2.5e-7 * e + ulp, "{x}: {g} vs {e}");
        }
        assert_eq!(ggml_expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(ggml_expf(-200.0), 0.0);
        assert_eq!(ggml_expf(0.0), 1.0);
    }

    #[test]
    fn softmax_sums_to_one_in_any_cell_alignment() {
        for first in [0usize, 5, 16, 30] {
            let mut w: Vec<f32> = (0..40).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
            let max = w.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let want: Vec<f64> = {
                let e: Vec<f64> = w.iter().map(|&x| f64::from(x - max).exp()).collect();
                let z: f64 = e.iter().sum();
                e.iter().map(|v| v / z).collect()
            };
            softmax_cells(&mut w, first, max);
            for (a, b) in w.iter().zip(&want) {
                assert!((f64::from(*a) - b).abs() < 1e-6, "{first}: {a} vs {b}");
            }
        }
    }
}
