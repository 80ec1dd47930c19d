//! The f16 attention dots in the float order of a llama.cpp build for AVX2
//! ([`GgmlBuild::Avx2`](crate::GgmlBuild)), which [`crate::f16dot::dots`],
//! [`crate::f16dot_vec::dots_vec`] and [`crate::f16dot_vec::dots_vec_f16`] run when
//! that build is followed (same shapes, masks and contracts as theirs):
//!
//! - prompt batches, llamafile's `tinyBLAS<8, __m256, …>`: one 8-lane FMA
//!   accumulator per output (element `e` to lane `e % 8`, elements in order), reduced
//!   with tinyBLAS's `hsum(__m256)` ([`reduce8`]);
//! - single-token decode, `ggml_vec_dot_f16` with `GGML_F16_STEP` 32 and
//!   `GGML_F16_EPR` 8: four 8-lane accumulators, element `e` of each 32-element step
//!   to accumulator `(e / 8) % 4`, lane `e % 8`; folded `(a0 + a2) + (a1 + a3)` lane by
//!   lane and reduced in `GGML_F32x8_REDUCE`'s `_mm_hadd_ps` pairs ([`reduce8_hadd`]);
//!   elements past the last whole step are added afterwards in f64 (each product
//!   rounded to f32 first), and the sum is rounded to f32.
//!
//! Each form has a portable body (the reference, scalar `mul_add`s) and an AVX2 one
//! that keeps the same FMAs on the same lanes in the same order, so the same bits.

#[cfg(target_arch = "x86_64")]
use crate::f16dot::masked_chunk;
use crate::f16dot::{chunk_mask, reduce8, DotsShape};
use crate::f16dot_vec::F16Shape;

/// Elements per `ggml_vec_dot_f16` step of an AVX2 build.
pub(crate) const VEC_STEP: usize = 32;

/// `GGML_F32x8_REDUCE`'s last stage: the halves added (`k` and `k + 4`), then
/// `_mm_hadd_ps` twice: `(t0 + t1) + (t2 + t3)`.
#[inline(always)]
pub fn reduce8_hadd(v: &[f32; 8]) -> f32 {
    let t: [f32; 4] = core::array::from_fn(|k| v[k] + v[k + 4]);
    (t[0] + t[1]) + (t[2] + t[3])
}

/// Whether the AVX2 bodies run: the CPU has AVX2, FMA and F16C (detected once).
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    use std::sync::OnceLock;
    static B: OnceLock<bool> = OnceLock::new();
    *B.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    })
}

// ---- prompt order (tinyBLAS, 8 lanes) ----

/// [`crate::f16dot::dots`] in the AVX2 build's prompt order; bounds asserted by it.
pub(crate) fn prompt_dots<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 and FMA were detected at run time; the caller asserted the bounds.
        return unsafe { prompt_avx2::<N>(x, y, sh, out) };
    }
    prompt_portable::<N>(x, y, sh, out)
}

/// One unmasked prompt-order dot over `x.len()` elements (a multiple of 16).
pub(crate) fn prompt_dot(x: &[f32], y: &[f32]) -> f32 {
    let mut o = [0f32];
    prompt_dots::<1>(x, y, &DotsShape::single(x.len()), &mut o);
    o[0]
}

fn prompt_portable<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    crate::f16dot::tinyblas_portable::<N, 8>(x, y, sh, out, reduce8)
}

/// tinyBLAS's `hsum(__m256)` ([`reduce8`]) in registers.
///
/// # Safety
/// The CPU supports AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn hsum(v: core::arch::x86_64::__m256) -> f32 {
    use core::arch::x86_64::*;
    let t4 = _mm_add_ps(_mm256_extractf128_ps::<1>(v), _mm256_castps256_ps128(v));
    let t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)))
}

/// Chunk `c` of `yi` as two 8-lane halves, lanes outside the chunk's mask zero.
///
/// # Safety
/// The CPU supports AVX; chunk `c` of `yi` is in bounds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
pub(crate) unsafe fn y_chunk(
    yi: &[f32],
    sh: &DotsShape,
    c: usize,
    nc: usize,
) -> (core::arch::x86_64::__m256, core::arch::x86_64::__m256) {
    use core::arch::x86_64::_mm256_loadu_ps;
    let m = chunk_mask(sh, c, nc);
    let t;
    let yc = if m == u16::MAX {
        &yi[16 * c..16 * c + 16]
    } else {
        t = masked_chunk(yi, c, m);
        &t[..]
    };
    // SAFETY: `yc` holds 16 floats; unaligned loads need no alignment.
    unsafe {
        (
            _mm256_loadu_ps(yc.as_ptr()),
            _mm256_loadu_ps(yc.as_ptr().add(8)),
        )
    }
}

/// # Safety
/// The CPU supports AVX2 and FMA; [`crate::f16dot::dots`]'s bounds contract holds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn prompt_avx2<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let nc = sh.len / 16;
    let xp = x.as_ptr();
    // One FMA chain per output: two `y` vectors per pass give 2·N independent chains.
    let mut i = 0;
    while i < sh.ny {
        let pair = i + 1 < sh.ny;
        let y0 = &y[i * sh.y_stride..];
        let y1 = if pair {
            &y[(i + 1) * sh.y_stride..]
        } else {
            y0
        };
        let mut a0 = [_mm256_setzero_ps(); N];
        let mut a1 = [_mm256_setzero_ps(); N];
        for c in 0..nc {
            // SAFETY: chunk c of both y vectors is in bounds (asserted by `dots`).
            let (p0, p1) = unsafe { y_chunk(y0, sh, c, nc) };
            // SAFETY: as above.
            let (q0, q1) = unsafe { y_chunk(y1, sh, c, nc) };
            for h in 0..N {
                // SAFETY: chunk c of x_h lies inside `x` (asserted by `dots`).
                let (xl, xh) = unsafe {
                    let p = xp.add(h * sh.x_stride + 16 * c);
                    (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
                };
                a0[h] = _mm256_fmadd_ps(xh, p1, _mm256_fmadd_ps(xl, p0, a0[h]));
                if pair {
                    a1[h] = _mm256_fmadd_ps(xh, q1, _mm256_fmadd_ps(xl, q0, a1[h]));
                }
            }
        }
        for h in 0..N {
            // SAFETY: AVX is part of this function's features.
            out[h * sh.out_stride + i] = unsafe { hsum(a0[h]) };
            if pair {
                // SAFETY: as above.
                out[h * sh.out_stride + i + 1] = unsafe { hsum(a1[h]) };
            }
        }
        i += if pair { 2 } else { 1 };
    }
}

// ---- decode order (ggml_vec_dot_f16, 4 × 8 lanes in 32-element steps) ----

/// The masked value of element `e` of `y_i` (zero outside the first / last chunk masks).
#[inline(always)]
fn masked(yi: &[f32], sh: &DotsShape, e: usize) -> f32 {
    let m = chunk_mask(sh, e / 16, sh.len / 16);
    if m >> (e % 16) & 1 == 1 {
        yi[e]
    } else {
        0.0
    }
}

/// Fold the four accumulators, reduce, add the leftovers `np..len` in f64.
#[inline(always)]
fn finish(a: &[[f32; 8]; 4], prod: impl Fn(usize) -> f32, np: usize, len: usize) -> f32 {
    let v: [f32; 8] = core::array::from_fn(|l| (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]));
    let mut s = f64::from(reduce8_hadd(&v));
    for e in np..len {
        s += f64::from(prod(e));
    }
    s as f32
}

/// [`crate::f16dot_vec::dots_vec`] in the AVX2 build's decode order; bounds asserted
/// by it.
pub(crate) fn vec_dots<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 and FMA were detected at run time; the caller asserted the bounds.
        return unsafe { vec_avx2::<N>(x, y, sh, out) };
    }
    vec_portable::<N>(x, y, sh, out)
}

fn vec_portable<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    let np = sh.len / VEC_STEP * VEC_STEP;
    for i in 0..sh.ny {
        let yi = &y[i * sh.y_stride..];
        let mut acc = [[[0f32; 8]; 4]; N];
        for e in 0..np {
            let yv = masked(yi, sh, e);
            for (h, a) in acc.iter_mut().enumerate() {
                let slot = &mut a[(e / 8) % 4][e % 8];
                *slot = x[h * sh.x_stride + e].mul_add(yv, *slot);
            }
        }
        for (h, a) in acc.iter().enumerate() {
            out[h * sh.out_stride + i] = finish(
                a,
                |e| x[h * sh.x_stride + e] * masked(yi, sh, e),
                np,
                sh.len,
            );
        }
    }
}

/// The fold and [`reduce8_hadd`] of four 8-lane accumulators, in registers.
///
/// # Safety
/// The CPU supports AVX and SSE3.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,sse3")]
#[inline]
unsafe fn fold_hadd(a: &[core::arch::x86_64::__m256; 4]) -> f32 {
    use core::arch::x86_64::*;
    let v = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
    let t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let t1 = _mm_hadd_ps(t0, t0);
    _mm_cvtss_f32(_mm_hadd_ps(t1, t1))
}

/// # Safety
/// The CPU supports AVX2 and FMA; [`crate::f16dot_vec::dots_vec`]'s bounds contract holds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn vec_avx2<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let nc = sh.len / 16;
    let np = sh.len / VEC_STEP * VEC_STEP;
    let xp = x.as_ptr();
    for i in 0..sh.ny {
        let yi = &y[i * sh.y_stride..];
        let mut acc = [[_mm256_setzero_ps(); 4]; N];
        for step in 0..np / VEC_STEP {
            for q in 0..2 {
                let c = 2 * step + q;
                // SAFETY: chunk c of y_i is in bounds (asserted by `dots_vec`).
                let (y0, y1) = unsafe { y_chunk(yi, sh, c, nc) };
                for (h, a) in acc.iter_mut().enumerate() {
                    // SAFETY: chunk c of x_h lies inside `x` (asserted by `dots_vec`).
                    let (xl, xh) = unsafe {
                        let p = xp.add(h * sh.x_stride + 16 * c);
                        (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)))
                    };
                    a[2 * q] = _mm256_fmadd_ps(xl, y0, a[2 * q]);
                    a[2 * q + 1] = _mm256_fmadd_ps(xh, y1, a[2 * q + 1]);
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            // SAFETY: AVX and SSE3 are implied by this function's AVX2.
            let mut s = f64::from(unsafe { fold_hadd(a) });
            for e in np..sh.len {
                s += f64::from(x[h * sh.x_stride + e] * masked(yi, sh, e));
            }
            out[h * sh.out_stride + i] = s as f32;
        }
    }
}

/// [`crate::f16dot_vec::dots_vec_f16`] in the AVX2 build's decode order: `false`
/// (nothing computed) where it is unavailable (no AVX2/FMA/F16C, or `len` not a
/// multiple of [`VEC_STEP`]). The caller asserted the bounds.
pub(crate) fn vec_dots_f16(n: usize, x: &[f32], y: &[u8], sh: &F16Shape, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if !has_avx2() || !sh.len.is_multiple_of(VEC_STEP) {
            return false;
        }
        let kernels: [crate::f16dot_vec::F16Kernel; 4] = [
            vec_f16_avx2::<1>,
            vec_f16_avx2::<2>,
            vec_f16_avx2::<3>,
            vec_f16_avx2::<4>,
        ];
        // SAFETY: AVX2, FMA and F16C were detected at run time; bounds asserted by the
        // caller.
        unsafe { crate::f16dot_vec::run_f16_kernels(&kernels, n, x, y, sh, out) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (n, x, y, sh, out);
        false
    }
}

/// # Safety
/// AVX2, FMA and F16C; the bounds of [`crate::f16dot_vec::dots_vec_f16`] hold for
/// `N` vectors and `sh.len` is a multiple of [`VEC_STEP`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn vec_f16_avx2<const N: usize>(x: &[f32], y: &[u8], sh: &F16Shape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let (v0, v1) = (sh.valid.start, sh.valid.end);
    // 8 elements of y_i (f16 bytes from `yo`) at element `lo`, zero outside `valid`.
    let part = |yo: usize, lo: usize| -> __m256 {
        if lo >= v0 && lo + 8 <= v1 {
            // SAFETY: elements lo..lo + 8 of y_i are valid, so inside `y` (asserted).
            return unsafe { _mm256_cvtph_ps(_mm_loadu_si128(y.as_ptr().add(yo + 2 * lo).cast())) };
        }
        if lo + 8 <= v0 || lo >= v1 {
            return _mm256_setzero_ps();
        }
        let mut t = [0u8; 16];
        let (a, b) = (v0.max(lo), v1.min(lo + 8));
        t[2 * (a - lo)..2 * (b - lo)].copy_from_slice(&y[yo + 2 * a..yo + 2 * b]);
        // SAFETY: `t` holds 8 f16 values; F16C is enabled for this function.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(t.as_ptr().cast())) }
    };
    for i in 0..sh.ny {
        let yo = 2 * i * sh.y_stride;
        let mut acc = [[_mm256_setzero_ps(); 4]; N];
        for step in 0..sh.len / VEC_STEP {
            for q in 0..4 {
                let lo = VEC_STEP * step + 8 * q;
                let yq = part(yo, lo);
                for (h, a) in acc.iter_mut().enumerate() {
                    // SAFETY: elements lo..lo + 8 of x_h lie inside `x` (asserted).
                    let xq = unsafe { _mm256_loadu_ps(x.as_ptr().add(h * sh.x_stride + lo)) };
                    a[q] = _mm256_fmadd_ps(xq, yq, a[q]);
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            // SAFETY: AVX and SSE3 are implied by this function's AVX2.
            out[h * sh.out_stride + i] = unsafe { fold_hadd(a) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::half::{f16_to_f32, f32_to_f16};

    /// ggml_vec_dot_f16 of an AVX2 build transcribed literally (scalar FMAs).
    #[allow(clippy::needless_range_loop)]
    fn ggml_vec_dot(x: &[f32], y: &[f32]) -> f32 {
        let n = x.len();
        let np = n & !(VEC_STEP - 1);
        let mut sum = [[0f32; 8]; 4];
        for i in (0..np).step_by(VEC_STEP) {
            for (j, s) in sum.iter_mut().enumerate() {
                for l in 0..8 {
                    let e = i + 8 * j + l;
                    s[l] = x[e].mul_add(y[e], s[l]);
                }
            }
        }
        for l in 0..8 {
            sum[0][l] += sum[2][l];
            sum[1][l] += sum[3][l];
        }
        for l in 0..8 {
            sum[0][l] += sum[1][l];
        }
        let t0: [f32; 4] = core::array::from_fn(|k| sum[0][k] + sum[0][k + 4]);
        let t1 = [t0[0] + t0[1], t0[2] + t0[3]];
        let mut sumf = f64::from(t1[0] + t1[1]);
        for e in np..n {
            sumf += f64::from(x[e] * y[e]);
        }
        sumf as f32
    }

    /// tinyBLAS<8, __m256> for one output, transcribed literally.
    fn tinyblas_dot(x: &[f32], y: &[f32]) -> f32 {
        let mut acc = [0f32; 8];
        for (xc, yc) in x.chunks_exact(8).zip(y.chunks_exact(8)) {
            for l in 0..8 {
                acc[l] = xc[l].mul_add(yc[l], acc[l]);
            }
        }
        let lo_hi: [f32; 4] = core::array::from_fn(|k| acc[k + 4] + acc[k]);
        let t = [lo_hi[0] + lo_hi[2], lo_hi[1] + lo_hi[3]];
        t[0] + t[1]
    }

    fn vals(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                // f16-representable values, as attention's operands are.
                f16_to_f32(f32_to_f16((s % 20_001) as f32 / 1000.0 - 10.0))
            })
            .collect()
    }

    /// Every (len, masks) case: the expected dots from the literal transcriptions
    /// over zero-masked copies, against both bodies of both forms.
    #[test]
    fn both_forms_equal_the_literal_orders_with_masks_and_leftovers() {
        let (n, ny) = (5usize, 7usize);
        for (len, fm, lm) in [
            (16usize, u16::MAX, u16::MAX),
            (48, u16::MAX, u16::MAX),
            (96, 0xfff0, 0x0fff),
            (112, 0xfffe, 0x7fff),
            (256, 0xff00, 0x00ff),
            (272, u16::MAX, 0x0001),
        ] {
            let (xs, ys) = (len + 3, len + 5);
            let x = vals((n - 1) * xs + len, len as u32);
            let mut y = vals((ny - 1) * ys + len, 7 + len as u32);
            // Masked-out lanes may hold anything, even non-finite values.
            if fm & 1 == 0 {
                y[0] = f32::INFINITY;
            }
            if lm >> 15 == 0 {
                y[(ny - 1) * ys + len - 1] = f32::NAN;
            }
            let sh = DotsShape {
                x_stride: xs,
                ny,
                y_stride: ys,
                len,
                first_mask: fm,
                last_mask: lm,
                out_stride: ny + 2,
            };
            let mut want_vec = vec![0u32; n * ny];
            let mut want_prompt = vec![0u32; n * ny];
            for i in 0..ny {
                let yi: Vec<f32> = (0..len).map(|e| masked(&y[i * ys..], &sh, e)).collect();
                assert!(yi.iter().all(|v| v.is_finite()), "{len}");
                for h in 0..n {
                    let xh = &x[h * xs..h * xs + len];
                    want_vec[h * ny + i] = ggml_vec_dot(xh, &yi).to_bits();
                    want_prompt[h * ny + i] = tinyblas_dot(xh, &yi).to_bits();
                }
            }
            let run = |f: &dyn Fn(&mut [f32]), k: usize| -> Vec<u32> {
                let mut out = vec![0f32; k * sh.out_stride];
                f(&mut out);
                (0..k * ny)
                    .map(|j| out[(j / ny) * sh.out_stride + j % ny].to_bits())
                    .collect()
            };
            for k in 1..=4 {
                let want_v: Vec<u32> = want_vec[..k * ny].to_vec();
                let want_p: Vec<u32> = want_prompt[..k * ny].to_vec();
                macro_rules! check {
                    ($k:literal) => {
                        if k == $k {
                            assert_eq!(run(&|o| vec_portable::<$k>(&x, &y, &sh, o), k), want_v);
                            assert_eq!(run(&|o| vec_dots::<$k>(&x, &y, &sh, o), k), want_v);
                            assert_eq!(run(&|o| prompt_portable::<$k>(&x, &y, &sh, o), k), want_p);
                            assert_eq!(run(&|o| prompt_dots::<$k>(&x, &y, &sh, o), k), want_p);
                        }
                    };
                }
                check!(1);
                check!(2);
                check!(3);
                check!(4);
            }
        }
    }

    #[test]
    fn fused_f16_equals_widened_dots_bitwise() {
        let (n, ny, len) = (3usize, 9usize, 96usize);
        let ys = len + 32;
        let x = vals((n - 1) * len + len, 3);
        let yv = vals((ny - 1) * ys + len, 4);
        let bytes: Vec<u8> = yv
            .iter()
            .flat_map(|&v| f32_to_f16(v).to_le_bytes())
            .collect();
        for valid in [0..len, 5..len, 0..77, 9..40, 31..33] {
            let sh = F16Shape {
                x_stride: len,
                ny,
                y_stride: ys,
                len,
                valid: valid.clone(),
                out_stride: ny,
            };
            let mut fused = vec![0f32; n * ny];
            if !vec_dots_f16(n, &x, &bytes, &sh, &mut fused) {
                return; // no AVX2 / F16C here: nothing to compare
            }
            let mut widened = vec![0f32; ny * len];
            for i in 0..ny {
                for e in valid.clone() {
                    widened[i * len + e] = yv[i * ys + e];
                }
            }
            let dsh = DotsShape {
                x_stride: len,
                ny,
                y_stride: len,
                len,
                first_mask: u16::MAX,
                last_mask: u16::MAX,
                out_stride: ny,
            };
            let mut want = vec![0f32; n * ny];
            vec_portable::<3>(&x, &widened, &dsh, &mut want);
            let same = fused
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{valid:?}");
        }
    }

    #[test]
    fn the_two_reductions_pair_lanes_differently() {
        // (1e8 + 1) rounds back to 1e8 in f32, so the result shows the pairing.
        let v: [f32; 8] = core::array::from_fn(|i| match i {
            0 => 1e8,
            2 => -1e8,
            _ => 1.0,
        });
        // Both add k and k + 4 first: [1e8, 2, -1e8, 2]; then tinyBLAS pairs (0, 2) and
        // (1, 3), the hadds (0, 1) and (2, 3), where each 2 vanishes into ±1e8.
        assert_eq!(reduce8(&v), 4.0);
        assert_eq!(reduce8_hadd(&v), 0.0);
    }
}
