//! x86-64 AVX2 + FMA + F16C kernels (Haswell and later, Zen and later).
//!
//! Integer dots use the `maddubs` sign trick: `|x| · sign(y, x)` is exact because
//! activation quants stay in −127..=127 (see `activation`), so a pair sum is at most
//! 2·128·127 < 2^15.

use fucina_gguf::GgmlType;

use super::blocks::{block_kernels, safe_entries};
use crate::arch::{widen_bf16, widen_f16, widen_f32};
use crate::formats::VecDotFn;

/// The features this module's kernels require.
pub(crate) const FEATURES: &[&str] = &["avx2", "fma", "f16c"];

block_kernels!("avx2,fma,f16c");

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_i8(x: __m256i, y: __m256i) -> __m256i {
    let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_u8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn madd_acc(acc: __m256i, p16: __m256i, s16: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(p16, s16))
}

/// The SIMD part of ggml's `ggml_vec_dot_f32` / `ggml_vec_dot_f16` on AVX2
/// (`GGML_F32_STEP` 32): four 8-lane FMA accumulators over the first `n / 32 · 32`
/// elements, reduced as `GGML_F32x8_REDUCE` does (0+2 and 1+3, then 0+1, then the
/// two halves, then two `hadd`s). Returns that sum and the elements it covered.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn ggml_dot_main(w: &[u8], a: &[u8], size: usize, load: impl Fn(&[u8]) -> __m256) -> (f32, usize) {
    let n = (w.len() / size).min(a.len() / size);
    let step = 8 * size;
    let mut acc = [_mm256_setzero_ps(); 4];
    let main = n / 32 * 32;
    for (x, y) in w[..main * size]
        .chunks_exact(4 * step)
        .zip(a[..main * size].chunks_exact(4 * step))
    {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(load(&x[k * step..]), load(&y[k * step..]), *acc);
        }
    }
    let (s02, s13) = (_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    let v = _mm256_add_ps(s02, s13);
    let t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let t1 = _mm_hadd_ps(t0, t0);
    (_mm_cvtss_f32(_mm_hadd_ps(t1, t1)), main)
}

// F32 · F32 in `ggml_vec_dot_f32`'s order; the tail as GCC contracts
// `sumf += x[i]*y[i]` (one FMA into the f32 sum).
#[target_feature(enable = "avx2,fma,f16c")]
fn f32_f32(w: &[u8], a: &[u8]) -> f32 {
    let (mut sum, main) = ggml_dot_main(w, a, 4, |b| _mm256_castsi256_ps(load_i256(b)));
    let n = (w.len() / 4).min(a.len() / 4);
    for i in main..n {
        sum = widen_f32(&w[i * 4..]).mul_add(widen_f32(&a[i * 4..]), sum);
    }
    sum
}

// F16 · F16 (widened with F16C) in `ggml_vec_dot_f16`'s order: the tail's exact
// products join an f64 sum.
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_f16(w: &[u8], a: &[u8]) -> f32 {
    let (sum, main) = ggml_dot_main(w, a, 2, |b| _mm256_cvtph_ps(load_i128(b)));
    let n = (w.len() / 2).min(a.len() / 2);
    let mut sum = f64::from(sum);
    for i in main..n {
        sum += f64::from(widen_f16(&w[i * 2..]) * widen_f16(&a[i * 2..]));
    }
    sum as f32
}

// BF16 · BF16, widened by a 16-bit shift.
#[target_feature(enable = "avx2,fma,f16c")]
fn bf16_bf16(w: &[u8], a: &[u8]) -> f32 {
    float_dot(
        w,
        a,
        2,
        |b| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(load_i128(b)))),
        widen_bf16,
    )
}

/// Shared float dot in `ggml_vec_dot_bf16`'s AVX2 order: `load` widens 8 elements of
/// `size` bytes to f32 lanes, four accumulators over 32-element steps (GCC contracts
/// ggml's `mul` + `add` into one FMA), folded `(0 + 2) + (1 + 3)`, summed as tinyBLAS's
/// `hsum`; `one` widens a single element of the tail, whose exact products join the
/// f64 sum.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn float_dot(
    w: &[u8],
    a: &[u8],
    size: usize,
    load: impl Fn(&[u8]) -> __m256,
    one: fn(&[u8]) -> f32,
) -> f32 {
    let n = (w.len() / size).min(a.len() / size);
    let step = 8 * size;
    let mut acc = [_mm256_setzero_ps(); 4];
    let main = n / 32 * 32;
    for (x, y) in w[..main * size]
        .chunks_exact(4 * step)
        .zip(a[..main * size].chunks_exact(4 * step))
    {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(load(&x[k * step..]), load(&y[k * step..]), *acc);
        }
    }
    let mut sum = f64::from(hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[2]),
        _mm256_add_ps(acc[1], acc[3]),
    )));
    for i in main..n {
        sum += f64::from(one(&w[i * size..]) * one(&a[i * size..]));
    }
    sum as f32
}

safe_entries!(
    q4_0_q8_0,
    q4_1_q8_1,
    q5_0_q8_0,
    q5_1_q8_1,
    q8_0_q8_0,
    iq4_nl_q8_0,
    q2_k_q8_k,
    q3_k_q8_k,
    q4_k_q8_k,
    q5_k_q8_k,
    q6_k_q8_k,
    iq4_xs_q8_k,
    f32_f32,
    f16_f16,
    bf16_bf16,
);

/// The AVX2 kernel for weights of type `ty`, if this ISA has one.
pub(crate) fn kernel(ty: GgmlType) -> Option<VecDotFn> {
    use GgmlType::*;
    Some(match ty {
        F32 => entry::f32_f32,
        F16 => entry::f16_f16,
        BF16 => entry::bf16_bf16,
        Q4_0 => entry::q4_0_q8_0,
        Q4_1 => entry::q4_1_q8_1,
        Q5_0 => entry::q5_0_q8_0,
        Q5_1 => entry::q5_1_q8_1,
        Q8_0 => entry::q8_0_q8_0,
        IQ4_NL => entry::iq4_nl_q8_0,
        Q2_K => entry::q2_k_q8_k,
        Q3_K => entry::q3_k_q8_k,
        Q4_K => entry::q4_k_q8_k,
        Q5_K => entry::q5_k_q8_k,
        Q6_K => entry::q6_k_q8_k,
        IQ4_XS => entry::iq4_xs_q8_k,
        _ => return None,
    })
}
