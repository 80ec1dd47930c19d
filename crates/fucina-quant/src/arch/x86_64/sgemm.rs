//! llamafile's tinyBLAS float order (ggml-cpu `llamafile/sgemm.cpp`), which
//! llama.cpp runs on batched F32, F16 and BF16 mul_mats (at least two activation
//! rows, weight rows % 4 == 0, row length a multiple of the vector width): per output
//! one vector accumulator of `lanes` f32 lanes over the row, `acc = fma(w, a, acc)`
//! (BF16 and F16 widened exactly), then tinyBLAS's `hsum` of the lanes
//! (`_mm512_reduce_add_ps` for 16 lanes; for 8, the halves added, then `movehl` and
//! `movehdup` pairs). The scalar definition is [`crate::gemm::sgemm_order_reference`].
//! A build with AVX512-BF16 runs BF16 as `tinyBLAS<32, __m512, __m512bh>` instead:
//! `acc = vdpbf16ps(acc, w, a)` over 32 values per step ([`avx512::bf16_dp`]).

use core::arch::x86_64::*;

/// AVX-512: 16 lanes.
pub(crate) mod avx512 {
    use super::*;

    /// Up to [`GROUP`] outputs of one activation row at once (independent
    /// accumulator chains; each output's order is its own).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    #[inline]
    fn dots(ws: &[&[u8]], a: &[u8], size: usize, load: impl Fn(&[u8]) -> __m512, out: &mut [f32]) {
        let step = 16 * size;
        let n = ws.iter().map(|w| w.len()).min().unwrap_or(0).min(a.len()) / step * step;
        let mut acc = [_mm512_setzero_ps(); GROUP];
        for o in (0..n).step_by(step) {
            let y = load(&a[o..]);
            for (acc, w) in acc.iter_mut().zip(ws) {
                *acc = _mm512_fmadd_ps(load(&w[o..]), y, *acc);
            }
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = _mm512_reduce_add_ps(acc);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    fn f32_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        let load = |b: &[u8]| {
            let b = &b[..64];
            // SAFETY: `b` has 64 readable bytes and `loadu` needs no alignment.
            unsafe { _mm512_loadu_ps(b.as_ptr().cast()) }
        };
        tile(ws, acts, stride, out, |w, a, o| dots(w, a, 4, load, o));
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    fn f16_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        let load = |b: &[u8]| {
            let b = &b[..32];
            // SAFETY: `b` has 32 readable bytes and `loadu` needs no alignment.
            _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(b.as_ptr().cast()) })
        };
        tile(ws, acts, stride, out, |w, a, o| dots(w, a, 2, load, o));
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    fn bf16_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        let load = |b: &[u8]| {
            let b = &b[..32];
            // SAFETY: `b` has 32 readable bytes and `loadu` needs no alignment.
            let h = unsafe { _mm256_loadu_si256(b.as_ptr().cast()) };
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        };
        tile(ws, acts, stride, out, |w, a, o| dots(w, a, 2, load, o));
    }

    /// Up to [`GROUP`] BF16 outputs of one activation row with `vdpbf16ps`, 32 values
    /// per step, as `tinyBLAS<32, __m512, __m512bh>`.
    #[target_feature(
        enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16"
    )]
    #[inline]
    fn dots_dp(ws: &[&[u8]], a: &[u8], out: &mut [f32]) {
        let n = ws.iter().map(|w| w.len()).min().unwrap_or(0).min(a.len()) / 64 * 64;
        let load = |b: &[u8]| {
            let b = &b[..64];
            // SAFETY: `b` has 64 readable bytes and `loadu` needs no alignment; every bit
            // pattern of a 64-byte vector is a valid `__m512bh`.
            unsafe {
                core::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(b.as_ptr().cast()))
            }
        };
        let mut acc = [_mm512_setzero_ps(); GROUP];
        for o in (0..n).step_by(64) {
            let y = load(&a[o..]);
            for (acc, w) in acc.iter_mut().zip(ws) {
                *acc = _mm512_dpbf16_ps(*acc, load(&w[o..]), y);
            }
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = _mm512_reduce_add_ps(acc);
        }
    }

    #[target_feature(
        enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16"
    )]
    fn bf16_dp_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        tile(ws, acts, stride, out, |w, a, o| dots_dp(w, a, o));
    }

    /// The F32 tile ([`crate::gemm::TileFn`]); the caller checked the ISA.
    pub(crate) fn f32(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        // SAFETY: installed only for `Isa::Avx512`, whose features were detected.
        unsafe { f32_tile(ws, acts, stride, out) }
    }

    /// The BF16 tile without AVX512-BF16 ([`crate::gemm::TileFn`]): 16 lanes of
    /// widened values; the caller checked the ISA.
    pub(crate) fn bf16(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        // SAFETY: installed only for `Isa::Avx512`, whose features were detected.
        unsafe { bf16_tile(ws, acts, stride, out) }
    }

    /// The BF16 tile with AVX512-BF16 ([`crate::gemm::TileFn`]); the caller checked
    /// the ISA and `avx512bf16`.
    pub(crate) fn bf16_dp(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        // SAFETY: installed only for `Isa::Avx512` on a CPU with AVX512-BF16 (both
        // detected at run time by the caller).
        unsafe { bf16_dp_tile(ws, acts, stride, out) }
    }

    /// The F16 tile ([`crate::gemm::TileFn`]); the caller checked the ISA.
    pub(crate) fn f16(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        // SAFETY: installed only for `Isa::Avx512`, whose features were detected.
        unsafe { f16_tile(ws, acts, stride, out) }
    }
}

/// AVX2: 8 lanes.
pub(crate) mod avx2 {
    use super::*;

    /// Up to [`GROUP`] outputs of one activation row at once (independent
    /// accumulator chains; each output's order is its own).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn dots(ws: &[&[u8]], a: &[u8], size: usize, load: impl Fn(&[u8]) -> __m256, out: &mut [f32]) {
        let step = 8 * size;
        let n = ws.iter().map(|w| w.len()).min().unwrap_or(0).min(a.len()) / step * step;
        let mut acc = [_mm256_setzero_ps(); GROUP];
        for o in (0..n).step_by(step) {
            let y = load(&a[o..]);
            for (acc, w) in acc.iter_mut().zip(ws) {
                *acc = _mm256_fmadd_ps(load(&w[o..]), y, *acc);
            }
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            let x = _mm_add_ps(_mm256_extractf128_ps::<1>(acc), _mm256_castps256_ps128(acc));
            let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
            *o = _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn f32_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        let load = |b: &[u8]| {
            let b = &b[..32];
            // SAFETY: `b` has 32 readable bytes and `loadu` needs no alignment.
            unsafe { _mm256_loadu_ps(b.as_ptr().cast()) }
        };
        tile(ws, acts, stride, out, |w, a, o| dots(w, a, 4, load, o));
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        let load = |b: &[u8]| {
            let b = &b[..16];
            // SAFETY: `b` has 16 readable bytes and `loadu` needs no alignment.
            _mm256_cvtph_ps(unsafe { _mm_loadu_si128(b.as_ptr().cast()) })
        };
        tile(ws, acts, stride, out, |w, a, o| dots(w, a, 2, load, o));
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn bf16_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        let load = |b: &[u8]| {
            let b = &b[..16];
            // SAFETY: `b` has 16 readable bytes and `loadu` needs no alignment.
            let h = unsafe { _mm_loadu_si128(b.as_ptr().cast()) };
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
        };
        tile(ws, acts, stride, out, |w, a, o| dots(w, a, 2, load, o));
    }

    /// The F32 tile ([`crate::gemm::TileFn`]); the caller checked the ISA.
    pub(crate) fn f32(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        // SAFETY: installed only for `Isa::Avx2`, whose features were detected.
        unsafe { f32_tile(ws, acts, stride, out) }
    }

    /// The BF16 tile ([`crate::gemm::TileFn`]); the caller checked the ISA.
    pub(crate) fn bf16(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        // SAFETY: installed only for `Isa::Avx2`, whose features were detected.
        unsafe { bf16_tile(ws, acts, stride, out) }
    }

    /// The F16 tile ([`crate::gemm::TileFn`]); the caller checked the ISA.
    pub(crate) fn f16(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        // SAFETY: installed only for `Isa::Avx2`, whose features were detected.
        unsafe { f16_tile(ws, acts, stride, out) }
    }
}

/// Weight rows computed together per activation row.
const GROUP: usize = 4;

/// `out[t · nw + i]` = the dot of `ws[i]` with activation row `t`, for every whole
/// activation row, `dots(group, act, out)` computing up to [`GROUP`] weights at once.
#[inline(always)]
fn tile(
    ws: &[&[u8]],
    acts: &[u8],
    stride: usize,
    out: &mut [f32],
    dots: impl Fn(&[&[u8]], &[u8], &mut [f32]),
) {
    let nw = ws.len();
    if nw == 0 {
        return;
    }
    for (o, a) in out
        .chunks_exact_mut(nw)
        .zip(acts.chunks_exact(stride.max(1)))
    {
        for (o, w) in o.chunks_mut(GROUP).zip(ws.chunks(GROUP)) {
            dots(w, a, o);
        }
    }
}
