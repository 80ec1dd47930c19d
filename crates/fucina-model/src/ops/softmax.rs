//! The attention softmax as llama.cpp's CPU `soft_max` executes it
//! (`ggml_vec_soft_max_f32`): the KQ row spans the whole padded cache view (cells
//! 0..n_kv, masked cells −∞), exponentials come from ggml's polynomial `ggml_v_expf`
//! (not libm's `expf`), one vector of cells at a time, and each chunk is summed in
//! the vector's horizontal-add order before joining an f64 total. The vector is the
//! followed llama.cpp build's ([`GgmlBuild::host`]): 16 cells, `_mm512_reduce_add_ps`
//! and the `scalef` exponential ([`ggml_expf`]) for an AVX-512 build; 8 cells, the
//! SSE pairwise sum ([`reduce8`]) and the `k·j + k` exponential ([`ggml_expf_avx2`])
//! for an AVX2 one.
//!
//! Masked cells contribute exact zeros, so only the visible positions are computed,
//! each in the chunk of its cache cell (cell = position while the cache has not
//! wrapped, which is how llama.cpp fills a fresh sequence). The result is the same
//! to the last bit as long as `n_kv` is a multiple of 16, which llama.cpp's padding
//! (to 256 cells) guarantees.
//!
//! [`softmax_row`] is the same op over a whole unmasked row (the MoE router's
//! probabilities), where ggml's tail past the last whole chunk uses libm's `expf`.

use fucina_quant::GgmlBuild;

use crate::ops::f16dot::{reduce16, reduce8};

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

/// ggml's `ggml_v_expf` as an AVX2 build has it (`__m256`), one lane at a time: the
/// same reduction and polynomial as [`ggml_expf`] but without its constant term, and
/// `2^n` applied as `k·j + k` with `k = 2^n` built in the exponent bits (one FMA, no
/// `scalef`); for `126 < |n| <= 192` two scale factors `s1`, `s2` keep the product
/// representable, beyond that `s1·s1` saturates to 0 or ∞. Its results differ from
/// [`ggml_expf`]'s in the last bit for about one input in three. Branch-free (all
/// three results computed, one selected) so loops over it vectorize.
#[inline(always)]
pub fn ggml_expf_avx2(x: f32) -> f32 {
    let f = f32::from_bits;
    let r = f(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
    // 2^n: n sits in z's low mantissa bits; shifted into the exponent field of 1.0.
    let e = z.to_bits() << 23;
    let k = f(e.wrapping_add(1f32.to_bits()));
    let u = b * b;
    let j = f(0x3c07_2010)
        .mul_add(b, f(0x3d2b_9f17))
        .mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)))
        .mul_add(u, f(0x3f7f_fff6) * b);
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f(g.wrapping_add(0x7f00_0000));
    let s2 = f(e.wrapping_sub(g));
    let a = n.abs();
    // ggml's compares are ordered (`_CMP_GT_OQ`): a NaN `n` takes the first form.
    if a > 192.0 {
        s1 * s1
    } else if a > 126.0 {
        s2.mul_add(j, s2) * s1
    } else {
        k.mul_add(j, k)
    }
}

/// In place: `w[i] = exp(w[i] − max) / Σ`, where `w[i]` is the score of cache
/// cell `first_cell + i` and `max` is the row maximum.
pub fn softmax_cells(w: &mut [f32], first_cell: usize, max: f32) {
    let build = GgmlBuild::host();
    #[cfg(target_arch = "x86_64")]
    if crate::ops::f16dot::has_fma() {
        // SAFETY: the CPU supports FMA (checked at run time just above).
        return unsafe { softmax_cells_fma(w, first_cell, max, build) };
    }
    softmax_cells_build(w, first_cell, max, build)
}

/// [`softmax_cells`] with the `mul_add`s of the exponentials as FMA instructions
/// rather than calls to the software `fmaf` (the same single rounding).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn softmax_cells_fma(w: &mut [f32], first_cell: usize, max: f32, build: GgmlBuild) {
    softmax_cells_build(w, first_cell, max, build)
}

#[inline(always)]
fn softmax_cells_build(w: &mut [f32], first_cell: usize, max: f32, build: GgmlBuild) {
    match build {
        GgmlBuild::Avx512 => softmax_cells_body::<16>(w, first_cell, max, ggml_expf, reduce16),
        GgmlBuild::Avx2 => softmax_cells_body::<8>(w, first_cell, max, ggml_expf_avx2, reduce8),
    }
}

/// One `L`-cell chunk at a time: exponentials into the chunk's lanes (zero where
/// the row has no cell), then the chunk's reduction joins the f64 total.
#[inline(always)]
fn softmax_cells_body<const L: usize>(
    w: &mut [f32],
    first_cell: usize,
    max: f32,
    expf: impl Fn(f32) -> f32,
    reduce: impl Fn(&[f32; L]) -> f32,
) {
    let mut sum = 0f64;
    let mut i = 0;
    while i < w.len() {
        let lane0 = (first_cell + i) % L;
        let take = (L - lane0).min(w.len() - i);
        let mut chunk = [0f32; L];
        for (c, v) in chunk[lane0..lane0 + take]
            .iter_mut()
            .zip(&mut w[i..i + take])
        {
            *v = expf(*v - max);
            *c = *v;
        }
        sum += f64::from(reduce(&chunk));
        i += take;
    }
    let inv = (1.0 / sum) as f32;
    for v in w.iter_mut() {
        *v *= inv;
    }
}

/// In place: a whole-row softmax as ggml's CPU `soft_max` computes it (no mask, scale
/// 1; the MoE router's): whole chunks of the build's vector through its
/// `ggml_v_expf` joining an f64 total in its horizontal-add order, the tail (`len %
/// lanes` values) through libm's `expf`, then every value times the f32 reciprocal
/// of the total.
pub fn softmax_row(w: &mut [f32]) {
    match GgmlBuild::host() {
        GgmlBuild::Avx512 => softmax_row_body::<16>(w, ggml_expf, reduce16),
        GgmlBuild::Avx2 => softmax_row_body::<8>(w, ggml_expf_avx2, reduce8),
    }
}

fn softmax_row_body<const L: usize>(
    w: &mut [f32],
    expf: impl Fn(f32) -> f32,
    reduce: impl Fn(&[f32; L]) -> f32,
) {
    let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let whole = w.len() - w.len() % L;
    let mut sum = 0f64;
    for chunk in w[..whole].chunks_exact_mut(L) {
        let mut lanes = [0f32; L];
        for (l, v) in lanes.iter_mut().zip(chunk.iter_mut()) {
            *v = expf(*v - max);
            *l = *v;
        }
        sum += f64::from(reduce(&lanes));
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

    /// A dense sweep, every 65,537th bit pattern, zeros, infinities and the extremes.
    fn expf_inputs() -> Vec<f32> {
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
        xs
    }

    #[test]
    fn expf_equals_reference_bitwise() {
        let xs = expf_inputs();
        for x in xs {
            let (a, b) = (ggml_expf(x), expf_reference(x));
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{x}: {a} vs {b}"
            );
        }
    }

    /// The cell-at-a-time loop `softmax_cells` replaced, for `build`.
    fn reference(w: &mut [f32], first_cell: usize, max: f32, build: GgmlBuild) {
        let lanes = build.lanes();
        type Pair = (fn(f32) -> f32, fn(&[f32]) -> f32);
        let (expf, reduce): Pair = match build {
            GgmlBuild::Avx512 => (ggml_expf, |c| reduce16(c.try_into().expect("16"))),
            GgmlBuild::Avx2 => (ggml_expf_avx2, |c| reduce8(c.try_into().expect("8"))),
        };
        let mut sum = 0f64;
        let mut chunk = vec![0f32; lanes];
        let mut cur = first_cell / lanes;
        for (i, v) in w.iter_mut().enumerate() {
            let cell = first_cell + i;
            if cell / lanes != cur {
                sum += f64::from(reduce(&chunk));
                chunk.fill(0.0);
                cur = cell / lanes;
            }
            *v = expf(*v - max);
            chunk[cell % lanes] = *v;
        }
        sum += f64::from(reduce(&chunk));
        let inv = (1.0 / sum) as f32;
        for v in w.iter_mut() {
            *v *= inv;
        }
    }

    #[test]
    fn chunked_body_equals_cell_loop_bitwise() {
        for build in [GgmlBuild::Avx512, GgmlBuild::Avx2] {
            for first in [0usize, 1, 7, 8, 15, 16, 17, 100] {
                for len in [1usize, 2, 7, 8, 9, 15, 16, 17, 33, 200] {
                    let w: Vec<f32> = (0..len)
                        .map(|i| ((i * 31 + first) as f32 * 0.173).sin() * 30.0)
                        .collect();
                    let max = w.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                    let (mut a, mut b) = (w.clone(), w.clone());
                    softmax_cells_build(&mut a, first, max, build);
                    reference(&mut b, first, max, build);
                    let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{build:?} first {first} len {len}");
                }
            }
        }
    }

    /// ggml's AVX2 `ggml_v_expf` transcribed lane by lane as written: the early
    /// return when no lane has `|n| > 126`, the bit-mask selects otherwise.
    fn expf_avx2_reference(x: f32) -> f32 {
        let f = f32::from_bits;
        let r = f(0x4b40_0000);
        let z = x.mul_add(f(0x3fb8_aa3b), r);
        let n = z - r;
        let b = (-n).mul_add(f(0x35bf_be8e), (-n).mul_add(f(0x3f31_7200), x));
        let e = z.to_bits() << 23;
        let k = f(e.wrapping_add(0x3f80_0000));
        let c = n.abs() > 126.0;
        let u = b * b;
        let j = f(0x3c07_2010)
            .mul_add(b, f(0x3d2b_9f17))
            .mul_add(u, f(0x3e2a_af33).mul_add(b, f(0x3eff_fedb)))
            .mul_add(u, f(0x3f7f_fff6) * b);
        if !c {
            return j.mul_add(k, k);
        }
        let g = if n <= 0.0 { 0x8200_0000u32 } else { 0 };
        let s1 = f(g.wrapping_add(0x7f00_0000));
        let s2 = f(e.wrapping_sub(g));
        let d = n.abs() > 192.0;
        let mask = |m: bool| if m { u32::MAX } else { 0 };
        let inner =
            (mask(c) & (s2.mul_add(j, s2) * s1).to_bits()) | (!mask(c) & k.mul_add(j, k).to_bits());
        f((mask(d) & (s1 * s1).to_bits()) | (!mask(d) & inner))
    }

    #[test]
    fn avx2_expf_equals_the_transcription_and_tracks_exp() {
        let mut xs = expf_inputs();
        // Both sides of the 126 / 192 switches.
        xs.extend((-14_000..14_000).map(|i| i as f32 * 0.01));
        let mut differs = 0;
        for &x in &xs {
            let (a, b) = (ggml_expf_avx2(x), expf_avx2_reference(x));
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{x}: {a} vs {b}"
            );
            differs += usize::from(a.to_bits() != ggml_expf(x).to_bits() && !a.is_nan());
        }
        // Not the AVX-512 build's function: they part in the last bit now and then.
        assert!(differs > xs.len() / 20, "{differs} of {}", xs.len());
        for i in -20_000..2_000 {
            let x = i as f32 * 0.005;
            let e = f64::from(x).exp();
            let g = f64::from(ggml_expf_avx2(x));
            let ulp = f64::from(f32::from_bits(1));
            assert!((g - e).abs() <= 2.5e-7 * e + ulp, "{x}: {g} vs {e}");
        }
        assert!(ggml_expf_avx2(f32::NAN).is_nan());
        assert_eq!(ggml_expf_avx2(f32::NEG_INFINITY), 0.0);
        assert_eq!(ggml_expf_avx2(-200.0), 0.0);
        assert_eq!(ggml_expf_avx2(200.0), f32::INFINITY);
        assert_eq!(ggml_expf_avx2(0.0), 1.0);
    }

    #[test]
    fn softmax_row_tracks_f64_softmax() {
        for (len, build) in [1usize, 2, 8, 15, 16, 20, 64, 128, 131]
            .into_iter()
            .flat_map(|l| [(l, GgmlBuild::Avx512), (l, GgmlBuild::Avx2)])
        {
            let mut w: Vec<f32> = (0..len).map(|i| (i as f32 * 0.91).sin() * 6.0).collect();
            let max = w.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f64> = w.iter().map(|&x| f64::from(x - max).exp()).collect();
            let z: f64 = e.iter().sum();
            match build {
                GgmlBuild::Avx512 => softmax_row_body::<16>(&mut w, ggml_expf, reduce16),
                GgmlBuild::Avx2 => softmax_row_body::<8>(&mut w, ggml_expf_avx2, reduce8),
            }
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
