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
//!
//! [`softmax_row`] is the same op over a whole unmasked row (the MoE router's
//! probabilities), where ggml's tail past the last 16-lane chunk uses libm's `expf`.

use crate::ops::f16dot::reduce16;

const CHUNK: usize = 16;

/// The soft cap `c·tanh(x/c)` in place, as llama.cpp's graph computes it:
/// `ggml_scale(1/c)`, `ggml_tanh` (libm's `tanhf`), `ggml_scale(c)`. The multiply by
/// the rounded reciprocal differs from a division in the last bit.
pub fn soft_cap(x: &mut [f32], c: f32) {
    let inv = 1.0 / c;
    x.iter_mut().for_each(|v| *v = (*v * inv).tanh() * c);
}

/// ggml's `ggml_v_expf` (Cody–Waite reduction, degree-5 polynomial, `scalef`),
/// one lane at a time; within ~1.5 ulp of `exp`. Written without an early return
/// (both results computed, one selected) so the softmax loop vectorizes.
#[inline(always)]
pub fn ggml_expf(x: f32) -> f32 {
    let f = f32::from_bits;
    let r = f(0x4b40_0000); // 0x1.8p23: rounds x·log2(e) to an integer
    let z = x.mul_add(f(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
    let u = b * b;
    let j = f(0x3c07_2010)
        .mul_add(b, f(0x3d2b_9f17))
        .mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)))
        .mul_add(u, f(0x3f7f_fff6).mul_add(b, 1.0));
    // scalef(j, n) = j·2^n with one rounding: exact in f64, then rounded once. For
    // |n| <= 192 (the lanes whose result is kept), z = 0x1.8p23 + n lies in
    // [2^23, 2^24), so n is the difference of the bit patterns (as ggml reads it),
    // and 2^n is built from its exponent bits; other lanes compute garbage that
    // the select below discards.
    let k = (z.to_bits() as i32).wrapping_sub(r.to_bits() as i32);
    let two_n = f64::from_bits(u64::from(k.wrapping_add(1023) as u32) << 52);
    let scaled = (f64::from(j) * two_n) as f32;
    let out_of_range = if n <= 0.0 { 0.0 } else { f32::INFINITY };
    if n.abs() > 192.0 {
        out_of_range
    } else {
        scaled
    }
}

/// In place: `w[i] = exp(w[i] − max) / Σ`, where `w[i]` is the score of cache
/// cell `first_cell + i` and `max` is the row maximum.
pub fn softmax_cells(w: &mut [f32], first_cell: usize, max: f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::f16dot::has_fma() {
        // SAFETY: the CPU supports FMA (checked at run time just above).
        return unsafe { softmax_cells_fma(w, first_cell, max) };
    }
    softmax_cells_body(w, first_cell, max)
}

/// [`softmax_cells`] with the `mul_add`s of [`ggml_expf`] as FMA instructions
/// rather than calls to the software `fmaf` (the same single rounding).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn softmax_cells_fma(w: &mut [f32], first_cell: usize, max: f32) {
    softmax_cells_body(w, first_cell, max)
}

/// One 16-cell chunk at a time: exponentials into the chunk's lanes (zero where
/// the row has no cell), then the chunk's reduction joins the f64 total.
#[inline(always)]
fn softmax_cells_body(w: &mut [f32], first_cell: usize, max: f32) {
    let mut sum = 0f64;
    let mut i = 0;
    while i < w.len() {
        let lane0 = (first_cell + i) % CHUNK;
        let take = (CHUNK - lane0).min(w.len() - i);
        let mut chunk = [0f32; CHUNK];
        for (c, v) in chunk[lane0..lane0 + take]
            .iter_mut()
            .zip(&mut w[i..i + take])
        {
            *v = ggml_expf(*v - max);
            *c = *v;
        }
        sum += f64::from(reduce16(&chunk));
        i += take;
    }
    let inv = (1.0 / sum) as f32;
    for v in w.iter_mut() {
        *v *= inv;
    }
}

/// In place: a whole-row softmax as ggml's CPU `soft_max` computes it (no mask, scale
/// 1; the MoE router's): 16-lane chunks through [`ggml_expf`] joining an f64 total
/// in `_mm512_reduce_add_ps` order, the tail (`len % 16` values) through libm's
/// `expf`, then every value times the f32 reciprocal of the total.
pub fn softmax_row(w: &mut [f32]) {
    let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let whole = w.len() - w.len() % CHUNK;
    let mut sum = 0f64;
    for chunk in w[..whole].chunks_exact_mut(CHUNK) {
        let mut lanes = [0f32; CHUNK];
        for (l, v) in lanes.iter_mut().zip(chunk.iter_mut()) {
            *v = ggml_expf(*v - max);
            *l = *v;
        }
        sum += f64::from(reduce16(&lanes));
    }
    for v in &mut w[whole..] {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
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
        for n in -192i32..=192 {
            let b = f64::from_bits(((i64::from(n) + 1023) as u64) << 52);
            assert_eq!(b, 2f64.powi(n), "{n}");
        }
        assert!(ggml_expf(f32::NAN).is_nan());
        assert_eq!(ggml_expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(ggml_expf(-200.0), 0.0);
        assert_eq!(ggml_expf(0.0), 1.0);
    }

    /// ggml_expf as first written: early return, 2^n from `powi`.
    fn expf_reference(x: f32) -> f32 {
        let f = f32::from_bits;
        let r = f(0x4b40_0000);
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
        (f64::from(j) * 2f64.powi(n as i32)) as f32
    }

    #[test]
    fn expf_equals_reference_bitwise() {
        let mut xs: Vec<f32> = (-400_000..400_000).map(|i| i as f32 * 4e-4).collect();
        xs.extend((0..u32::MAX).step_by(65_537).map(f32::from_bits));
        xs.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
        ]);
        for x in xs {
            let (a, b) = (ggml_expf(x), expf_reference(x));
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{x}: {a} vs {b}"
            );
        }
    }

    /// The cell-at-a-time loop `softmax_cells` replaced.
    fn reference(w: &mut [f32], first_cell: usize, max: f32) {
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

    #[test]
    fn chunked_body_equals_cell_loop_bitwise() {
        for first in [0usize, 1, 15, 16, 17, 100] {
            for len in [1usize, 2, 15, 16, 17, 33, 200] {
                let w: Vec<f32> = (0..len)
                    .map(|i| ((i * 31 + first) as f32 * 0.173).sin() * 30.0)
                    .collect();
                let max = w.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let (mut a, mut b) = (w.clone(), w.clone());
                softmax_cells(&mut a, first, max);
                reference(&mut b, first, max);
                let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "first {first} len {len}");
            }
        }
    }

    #[test]
    fn softmax_row_tracks_f64_softmax() {
        for len in [1usize, 2, 8, 15, 16, 20, 64, 128, 131] {
            let mut w: Vec<f32> = (0..len).map(|i| (i as f32 * 0.91).sin() * 6.0).collect();
            let max = w.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f64> = w.iter().map(|&x| f64::from(x - max).exp()).collect();
            let z: f64 = e.iter().sum();
            softmax_row(&mut w);
            for (a, b) in w.iter().zip(&e) {
                assert!(
                    (f64::from(*a) - b / z).abs() < 1e-6,
                    "{len}: {a} vs {}",
                    b / z
                );
            }
        }
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
