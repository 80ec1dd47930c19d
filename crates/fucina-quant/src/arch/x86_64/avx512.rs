//! x86-64 AVX-512 kernels (F, BW, VL, DQ + VNNI; Ice Lake, Sapphire Rapids, Zen 4 and
//! later). Block kernels are the shared 256-bit bodies with the VNNI primitives
//! (`vpdpbusd` / `vpdpwssd`: exact, no saturation); float kernels use 512-bit FMA, and
//! BF16 uses `vdpbf16ps` when the CPU has AVX512-BF16. CPUs with AVX-512 but no VNNI
//! (Skylake-X) are served by the AVX2 module.

use fucina_gguf::GgmlType;

use super::blocks::{block_kernels, safe_entries};
use crate::arch::{widen_bf16, widen_f16, widen_f32};
use crate::formats::VecDotFn;

/// The features this module's kernels require (BF16 is optional, detected separately).
pub(crate) const FEATURES: &[&str] = &[
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512vnni",
];

block_kernels!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni");

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn dot_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(
        _mm256_setzero_si256(),
        _mm256_sign_epi8(x, x),
        _mm256_sign_epi8(y, x),
    )
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn dot_u8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, y)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn madd_acc(acc: __m256i, p16: __m256i, s16: __m256i) -> __m256i {
    _mm256_dpwssd_epi32(acc, p16, s16)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn load_i512(b: &[u8]) -> __m512i {
    let b = &b[..64];
    // SAFETY: `b` has 64 readable bytes and `loadu` needs no alignment.
    unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
}

/// Shared float dot in `ggml_vec_dot_bf16`'s AVX-512 order: `load` widens 16 elements
/// of `size` bytes to f32 lanes, two accumulators over 32-element steps (GCC contracts
/// ggml's `mul` + `add` into one FMA); `one` widens a single element of the tail.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn float_dot(
    w: &[u8],
    a: &[u8],
    size: usize,
    load: impl Fn(&[u8]) -> __m512,
    one: fn(&[u8]) -> f32,
) -> f32 {
    let n = (w.len() / size).min(a.len() / size);
    let step = 16 * size;
    let mut acc = [_mm512_setzero_ps(); 2];
    let main = n / 32 * 32;
    for (x, y) in w[..main * size]
        .chunks_exact(2 * step)
        .zip(a[..main * size].chunks_exact(2 * step))
    {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm512_fmadd_ps(load(&x[k * step..]), load(&y[k * step..]), *acc);
        }
    }
    // ggml_vec_dot_bf16: each accumulator reduced on its own, joined (with the tail's
    // exact products) in an f64 sum.
    let mut sum = f64::from(_mm512_reduce_add_ps(acc[0])) + f64::from(_mm512_reduce_add_ps(acc[1]));
    for i in main..n {
        sum += f64::from(one(&w[i * size..]) * one(&a[i * size..]));
    }
    sum as f32
}

/// The SIMD part of ggml's `ggml_vec_dot_f32` / `ggml_vec_dot_f16` on AVX-512
/// (`GGML_F32_STEP` 64): four 16-lane FMA accumulators over the first `n / 64 · 64`
/// elements, reduced as `GGML_F32x16_REDUCE` does (0+2 and 1+3, then 0+1, then
/// `_mm512_reduce_add_ps`). Returns that sum and the elements it covered.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn ggml_dot_main(w: &[u8], a: &[u8], size: usize, load: impl Fn(&[u8]) -> __m512) -> (f32, usize) {
    let n = (w.len() / size).min(a.len() / size);
    let step = 16 * size;
    let mut acc = [_mm512_setzero_ps(); 4];
    let main = n / 64 * 64;
    for (x, y) in w[..main * size]
        .chunks_exact(4 * step)
        .zip(a[..main * size].chunks_exact(4 * step))
    {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm512_fmadd_ps(load(&x[k * step..]), load(&y[k * step..]), *acc);
        }
    }
    let (s02, s13) = (_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
    (_mm512_reduce_add_ps(_mm512_add_ps(s02, s13)), main)
}

// F32 · F32 in `ggml_vec_dot_f32`'s order; the tail as GCC contracts
// `sumf += x[i]*y[i]` (one FMA into the f32 sum).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
fn f32_f32(w: &[u8], a: &[u8]) -> f32 {
    let (mut sum, main) = ggml_dot_main(w, a, 4, |b| _mm512_castsi512_ps(load_i512(b)));
    let n = (w.len() / 4).min(a.len() / 4);
    for i in main..n {
        sum = widen_f32(&w[i * 4..]).mul_add(widen_f32(&a[i * 4..]), sum);
    }
    sum
}

// F16 · F16 in `ggml_vec_dot_f16`'s order: the tail's exact products join an f64 sum.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
fn f16_f16(w: &[u8], a: &[u8]) -> f32 {
    let (sum, main) = ggml_dot_main(w, a, 2, |b| _mm512_cvtph_ps(load_i256(b)));
    let n = (w.len() / 2).min(a.len() / 2);
    let mut sum = f64::from(sum);
    for i in main..n {
        sum += f64::from(widen_f16(&w[i * 2..]) * widen_f16(&a[i * 2..]));
    }
    sum as f32
}

// BF16 · BF16 without AVX512-BF16: widen by a 16-bit shift.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
fn bf16_bf16(w: &[u8], a: &[u8]) -> f32 {
    float_dot(
        w,
        a,
        2,
        |b| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(load_i256(b)))),
        widen_bf16,
    )
}

// BF16 · BF16 with `vdpbf16ps` (pairs of exact products added into f32 lanes), in
// `ggml_vec_dot_bf16`'s order: two accumulators over 64-element steps, each reduced
// on its own into an f64 sum with the tail's exact products.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16")]
fn bf16_bf16_dp(w: &[u8], a: &[u8]) -> f32 {
    let n = (w.len() / 2).min(a.len() / 2);
    let main = n / 64 * 64;
    let mut acc = [_mm512_setzero_ps(); 2];
    for (x, y) in w[..main * 2]
        .chunks_exact(128)
        .zip(a[..main * 2].chunks_exact(128))
    {
        for (k, acc) in acc.iter_mut().enumerate() {
            let (xv, yv) = (load_i512(&x[64 * k..]), load_i512(&y[64 * k..]));
            // SAFETY: `__m512i` and `__m512bh` are both 64-byte plain SIMD vectors;
            // every bit pattern is a valid value of either.
            let (xb, yb) = unsafe {
                (
                    core::mem::transmute::<__m512i, __m512bh>(xv),
                    core::mem::transmute::<__m512i, __m512bh>(yv),
                )
            };
            *acc = _mm512_dpbf16_ps(*acc, xb, yb);
        }
    }
    let mut sum = f64::from(_mm512_reduce_add_ps(acc[0])) + f64::from(_mm512_reduce_add_ps(acc[1]));
    for i in main..n {
        sum += f64::from(widen_bf16(&w[i * 2..]) * widen_bf16(&a[i * 2..]));
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
    iq4_xs_q8_k,
    f32_f32,
    f16_f16,
    bf16_bf16,
);

mod entry_bf16 {
    pub(crate) fn bf16_bf16_dp(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: installed by `kernel` only when AVX512-BF16 is detected in addition to
        // this ISA's features (which `dispatch` has already detected).
        unsafe { super::bf16_bf16_dp(w, a) }
    }
}

mod entry_zmm {
    pub(crate) fn q6_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: installed by `kernel` only for this ISA, whose features (the same set
        // as `gemm_avx512`'s) `dispatch` has detected at run time.
        unsafe { super::super::gemm_avx512::q6_k_dot(w, a) }
    }
}

/// The AVX-512 kernel for weights of type `ty`, if this ISA has one.
pub(crate) fn kernel(ty: GgmlType) -> Option<VecDotFn> {
    use GgmlType::*;
    Some(match ty {
        F32 => entry::f32_f32,
        F16 => entry::f16_f16,
        BF16 if std::arch::is_x86_feature_detected!("avx512bf16") => entry_bf16::bf16_bf16_dp,
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
        Q6_K => entry_zmm::q6_k_q8_k,
        IQ4_XS => entry::iq4_xs_q8_k,
        _ => return None,
    })
}
