//! The f16 attention dots in the float order llama.cpp executes for single-token
//! decode: `ggml_vec_dot_f16` (llamafile's tinyBLAS, whose order [`super::f16dot`]
//! follows, declines batches of one row). On AVX-512 machines that is four
//! 16-lane accumulators: element `e` of each 64-element step goes to accumulator
//! `(e / 16) % 4`, lane `e % 16`, one FMA each; the accumulators are folded as
//! `(a0 + a2) + (a1 + a3)` lane by lane and reduced with `_mm512_reduce_add_ps`
//! ([`reduce16`]); elements past the last whole step are added afterwards in f64
//! (each product rounded to f32 first), and the sum is rounded to f32.
//!
//! That is the AVX-512 build's order; a build for AVX2 steps 32 elements through
//! four 8-lane accumulators ([`crate::f16dot_avx2`]). [`dots_vec`] and
//! [`dots_vec_f16`] follow the build [`GgmlBuild::host`] names (the one llama.cpp
//! makes on this machine), the `_for` forms the one they are given. The AVX-512
//! order also runs on AVX2 machines (`FUCINA_GGML_BUILD=avx512`, or the scalar
//! reference): each 16-lane accumulator is then a pair of 8-lane registers (lanes
//! 0..8 and 8..16), the same FMAs on the same lanes in the same order, so the same
//! bits.
//!
//! Same shapes and masking contract as [`super::f16dot::dots`]; the `y` vectors'
//! element 0 must sit at a multiple of 64 of llama.cpp's element index (a cache
//! cell or head-dim offset aligned to [`super::f16dot::F16_PAD`]) so the
//! accumulator of each element is llama.cpp's.

#[cfg(target_arch = "x86_64")]
use super::f16dot::{chunk_mask, masked_chunk};
use super::f16dot::{reduce16, DotsShape};
use crate::GgmlBuild;

const STEP: usize = 64;

/// Whether the AVX-512 body runs: the CPU has AVX-512F and the kernels' ISA
/// (`FUCINA_ISA`, else the best detected) is AVX-512.
#[cfg(target_arch = "x86_64")]
fn use_avx512() -> bool {
    use std::sync::OnceLock;
    static B: OnceLock<bool> = OnceLock::new();
    *B.get_or_init(|| {
        let isa = crate::Kernels::from_env().map_or_else(|_| crate::Isa::best(), |k| k.isa());
        isa == crate::Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512f")
    })
}

/// Whether the AVX2 bodies run (where the AVX-512 ones do not): the kernels' ISA is
/// AVX2 or better and the CPU has AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
fn use_avx2() -> bool {
    use std::sync::OnceLock;
    static B: OnceLock<bool> = OnceLock::new();
    *B.get_or_init(|| {
        let isa = crate::Kernels::from_env().map_or_else(|_| crate::Isa::best(), |k| k.isa());
        matches!(isa, crate::Isa::Avx2 | crate::Isa::Avx512)
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    })
}

/// `y` vectors per block of the AVX2 bodies: every `x` vector runs over one block
/// before the next, so the block (a few KiB) is read from L1 by all of them.
#[cfg(target_arch = "x86_64")]
const Y_BLOCK: usize = 32;

/// One dot of the AVX2 bodies: the four 16-lane accumulators as eight 8-lane
/// halves (`acc[2q]` lanes 0..8 of accumulator `q`, `acc[2q + 1]` lanes 8..16),
/// folded as `(a0 + a2) + (a1 + a3)` per lane and reduced as [`reduce16`].
///
/// # Safety
/// The CPU supports AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn fold_reduce_avx2(acc: &[core::arch::x86_64::__m256; 8]) -> f32 {
    use core::arch::x86_64::_mm256_add_ps;
    let lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
    let hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
    // SAFETY: AVX is enabled for this function.
    unsafe { super::f16dot::reduce_halves(lo, hi) }
}

/// [`dots_vec`] on AVX2: per `x` vector eight register accumulators, the `y`
/// vectors in blocks of [`Y_BLOCK`].
///
/// # Safety
/// The CPU supports AVX2 and FMA; [`dots_vec`]'s bounds contract holds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let nc = sh.len / 16;
    let np = sh.len / STEP * STEP;
    for b0 in (0..sh.ny).step_by(Y_BLOCK) {
        for h in 0..N {
            let xh = &x[h * sh.x_stride..];
            for i in b0..(b0 + Y_BLOCK).min(sh.ny) {
                let yi = &y[i * sh.y_stride..];
                let mut acc = [_mm256_setzero_ps(); 8];
                for step in 0..np / STEP {
                    for q in 0..4 {
                        let c = 4 * step + q;
                        let m = chunk_mask(sh, c, nc);
                        let t: [f32; 16];
                        let yc = if m == u16::MAX {
                            &yi[16 * c..16 * c + 16]
                        } else {
                            t = masked_chunk(yi, c, m);
                            &t[..]
                        };
                        let xc = &xh[16 * c..16 * c + 16];
                        // SAFETY: `yc` and `xc` hold 16 floats; unaligned loads.
                        unsafe {
                            let (y0, y1) = (
                                _mm256_loadu_ps(yc.as_ptr()),
                                _mm256_loadu_ps(yc.as_ptr().add(8)),
                            );
                            acc[2 * q] =
                                _mm256_fmadd_ps(_mm256_loadu_ps(xc.as_ptr()), y0, acc[2 * q]);
                            acc[2 * q + 1] = _mm256_fmadd_ps(
                                _mm256_loadu_ps(xc.as_ptr().add(8)),
                                y1,
                                acc[2 * q + 1],
                            );
                        }
                    }
                }
                // SAFETY: AVX is part of this function's features.
                let mut s = f64::from(unsafe { fold_reduce_avx2(&acc) });
                for (e, &xv) in xh.iter().enumerate().take(sh.len).skip(np) {
                    s += f64::from(xv * masked(yi, sh, e));
                }
                out[h * sh.out_stride + i] = s as f32;
            }
        }
    }
}

/// [`dots_vec_f16`] on AVX2 + F16C: as [`dots_avx2`], the `y` chunks converted from
/// f16 in registers. The 64-element steps wholly inside `valid` run without checks;
/// a chunk straddling `valid`'s ends goes through a zeroed copy.
///
/// # Safety
/// AVX2, FMA and F16C; [`dots_vec_f16`]'s asserted bounds hold for `N` vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots_f16_avx2<const N: usize>(x: &[f32], y: &[u8], sh: &F16Shape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let (v0, v1) = (sh.valid.start, sh.valid.end);
    let steps = sh.len / STEP;
    // Steps s0..s1 lie wholly inside `valid`.
    let s0 = v0.div_ceil(STEP).min(steps);
    let s1 = (v1 / STEP).max(s0);
    // One chunk of y_i (f16 bytes from `yo`) at element `lo`, zero outside `valid`.
    let chunk = |yo: usize, lo: usize| -> (__m256, __m256) {
        if lo + 16 <= v0 || lo >= v1 {
            return (_mm256_setzero_ps(), _mm256_setzero_ps());
        }
        let mut t = [0u8; 32];
        let (a, b) = (v0.max(lo), v1.min(lo + 16));
        t[2 * (a - lo)..2 * (b - lo)].copy_from_slice(&y[yo + 2 * a..yo + 2 * b]);
        // SAFETY: `t` holds 16 f16 values; F16C is enabled for this function.
        unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(t.as_ptr().cast())),
                _mm256_cvtph_ps(_mm_loadu_si128(t.as_ptr().add(16).cast())),
            )
        }
    };
    for b0 in (0..sh.ny).step_by(Y_BLOCK) {
        let b1 = (b0 + Y_BLOCK).min(sh.ny);
        // Strided vectors (K rows of a cache): the next block is fetched ahead.
        if sh.y_stride > sh.len {
            for i in b1..(b1 + Y_BLOCK).min(sh.ny) {
                let yo = 2 * i * sh.y_stride;
                super::f16dot::prefetch(&y[yo + 2 * v0..yo + 2 * v1]);
            }
        }
        for h in 0..N {
            let xp = x[h * sh.x_stride..][..sh.len].as_ptr();
            for i in b0..b1 {
                let yo = 2 * i * sh.y_stride;
                let mut acc = [_mm256_setzero_ps(); 8];
                let edge = |step: usize, acc: &mut [__m256; 8]| {
                    for q in 0..4 {
                        let lo = STEP * step + 16 * q;
                        let (y0, y1) = chunk(yo, lo);
                        // SAFETY: chunk `lo / 16` of x_h lies inside `x` (asserted).
                        unsafe {
                            acc[2 * q] =
                                _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(lo)), y0, acc[2 * q]);
                            acc[2 * q + 1] = _mm256_fmadd_ps(
                                _mm256_loadu_ps(xp.add(lo + 8)),
                                y1,
                                acc[2 * q + 1],
                            );
                        }
                    }
                };
                for step in 0..s0 {
                    edge(step, &mut acc);
                }
                // SAFETY: elements STEP·s0..STEP·s1 of y_i are valid, so inside `y`,
                // and of x_h inside `x` (asserted by `dots_vec_f16`).
                unsafe {
                    let yp = y.as_ptr().add(yo);
                    for step in s0..s1 {
                        for q in 0..4 {
                            let lo = STEP * step + 16 * q;
                            let p = yp.add(2 * lo);
                            let y0 = _mm256_cvtph_ps(_mm_loadu_si128(p.cast()));
                            let y1 = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16).cast()));
                            acc[2 * q] =
                                _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(lo)), y0, acc[2 * q]);
                            acc[2 * q + 1] = _mm256_fmadd_ps(
                                _mm256_loadu_ps(xp.add(lo + 8)),
                                y1,
                                acc[2 * q + 1],
                            );
                        }
                    }
                }
                for step in s1..steps {
                    edge(step, &mut acc);
                }
                // SAFETY: AVX is part of this function's features.
                out[h * sh.out_stride + i] = unsafe { fold_reduce_avx2(&acc) };
            }
        }
    }
}

/// The masked value of element `e` of `y_i` (zero outside the first / last chunk masks).
#[inline(always)]
fn masked(yi: &[f32], sh: &DotsShape, e: usize) -> f32 {
    let (c, l) = (e / 16, e % 16);
    let nc = sh.len / 16;
    let mut m = u16::MAX;
    if c == 0 {
        m &= sh.first_mask;
    }
    if c + 1 == nc {
        m &= sh.last_mask;
    }
    if m >> l & 1 == 1 {
        yi[e]
    } else {
        0.0
    }
}

#[inline(always)]
fn dots_portable<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    let np = sh.len / STEP * STEP;
    for i in 0..sh.ny {
        let yi = &y[i * sh.y_stride..];
        let mut acc = [[[0f32; 16]; 4]; N];
        for e in 0..np {
            let yv = masked(yi, sh, e);
            for (h, a) in acc.iter_mut().enumerate() {
                let xv = x[h * sh.x_stride + e];
                let slot = &mut a[(e / 16) % 4][e % 16];
                *slot = xv.mul_add(yv, *slot);
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

/// Fold the four accumulators, reduce, add the leftovers `np..len` in f64.
#[inline(always)]
fn finish(a: &[[f32; 16]; 4], prod: impl Fn(usize) -> f32, np: usize, len: usize) -> f32 {
    let v: [f32; 16] = core::array::from_fn(|l| (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]));
    let mut s = f64::from(reduce16(&v));
    for e in np..len {
        s += f64::from(prod(e));
    }
    s as f32
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn dots_fma<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    dots_portable::<N>(x, y, sh, out)
}

/// # Safety
/// The CPU supports AVX-512F; [`dots_vec`]'s bounds contract holds.
// The AVX-512 intrinsics are stable since Rust 1.89, which fucina-quant (a
// dependency of this crate) already requires.
#[allow(clippy::incompatible_msrv)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn dots_avx512<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let np = sh.len / STEP * STEP;
    let mut i = 0;
    if np == sh.len {
        // No leftovers: the dots of up to 16 `y` vectors are reduced together, lane
        // by lane in `reduce16`'s pairing ([`reduce16x16`]).
        while i < sh.ny {
            let nb = (sh.ny - i).min(16);
            let mut folded = [[_mm512_setzero_ps(); 16]; N];
            for k in 0..nb {
                // SAFETY: the caller's contract ([`dots_vec`]'s asserted bounds).
                let a = unsafe { accumulate::<N>(x, y, sh, i + k) };
                fold_into(&mut folded, k, &a);
            }
            store_reduced(&folded, nb, &mut out[i..], sh.out_stride);
            i += nb;
        }
        return;
    }
    for i in 0..sh.ny {
        let yi = &y[i * sh.y_stride..];
        // SAFETY: as above.
        let acc = unsafe { accumulate::<N>(x, y, sh, i) };
        for (h, a) in acc.iter().enumerate() {
            let mut lanes = [[0f32; 16]; 4];
            for (d, s) in lanes.iter_mut().zip(a) {
                // SAFETY: `d` holds 16 floats.
                unsafe { _mm512_storeu_ps(d.as_mut_ptr(), *s) };
            }
            out[h * sh.out_stride + i] = finish(
                &lanes,
                |e| x[h * sh.x_stride + e] * masked(yi, sh, e),
                np,
                sh.len,
            );
        }
    }
}

/// The four accumulators of every `x_h` against `y_i` over the whole 64-element
/// steps (the masked chunk loads of [`dots_vec`]'s contract).
///
/// # Safety
/// The CPU supports AVX-512F; [`dots_vec`]'s bounds contract holds and `i < sh.ny`.
#[allow(clippy::incompatible_msrv)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[inline]
unsafe fn accumulate<const N: usize>(
    x: &[f32],
    y: &[f32],
    sh: &DotsShape,
    i: usize,
) -> [[core::arch::x86_64::__m512; 4]; N] {
    use core::arch::x86_64::*;
    let nc = sh.len / 16;
    let np = sh.len / STEP * STEP;
    let xp = x.as_ptr();
    // SAFETY: `y_i` starts inside `y` (`i < ny`, bounds asserted by `dots_vec`).
    let yp = unsafe { y.as_ptr().add(i * sh.y_stride) };
    let mut acc = [[_mm512_setzero_ps(); 4]; N];
    // The four chunks of a step unrolled: constant accumulator indices (registers).
    for step in 0..np / STEP {
        for q in 0..4 {
            let c = 4 * step + q;
            let mut m = u16::MAX;
            if c == 0 {
                m &= sh.first_mask;
            }
            if c + 1 == nc {
                m &= sh.last_mask;
            }
            // SAFETY: chunk c of y_i and of every x_h lies inside `y` / `x` (asserted by
            // `dots_vec`); a masked load reads only the kept lanes.
            let yc = unsafe {
                if m == u16::MAX {
                    _mm512_loadu_ps(yp.add(16 * c))
                } else {
                    _mm512_maskz_loadu_ps(m, yp.add(16 * c))
                }
            };
            for (h, a) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let xh = unsafe { _mm512_loadu_ps(xp.add(h * sh.x_stride + 16 * c)) };
                a[q] = _mm512_fmadd_ps(xh, yc, a[q]);
            }
        }
    }
    acc
}

/// Fold the four accumulators of every `x_h` as `(a0 + a2) + (a1 + a3)` into slot
/// `k` of its block of 16 dots.
#[allow(clippy::incompatible_msrv)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn fold_into<const N: usize>(
    folded: &mut [[core::arch::x86_64::__m512; 16]; N],
    k: usize,
    acc: &[[core::arch::x86_64::__m512; 4]; N],
) {
    use core::arch::x86_64::_mm512_add_ps;
    for (f, a) in folded.iter_mut().zip(acc) {
        f[k] = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
    }
}

/// Reduce each `x_h`'s block of 16 folded dots and store the first `nb` at
/// `out[h·out_stride..]`.
#[allow(clippy::incompatible_msrv)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn store_reduced<const N: usize>(
    folded: &[[core::arch::x86_64::__m512; 16]; N],
    nb: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    for (h, f) in folded.iter().enumerate() {
        let mut r = [0f32; 16];
        // SAFETY: `r` holds 16 floats; `storeu` needs no alignment.
        unsafe { core::arch::x86_64::_mm512_storeu_ps(r.as_mut_ptr(), reduce16x16(f)) };
        out[h * out_stride..h * out_stride + nb].copy_from_slice(&r[..nb]);
    }
}

/// [`reduce16`] of 16 vectors at once: lane `n` of the result is `reduce16(v[n])`,
/// bitwise. Every addition pairs the same two values as `reduce16` (lanes `k` and
/// `k + 8`, then `k` and `k + 4` of the halves, then `(0 + 2) + (1 + 3)`), only for
/// several vectors per instruction (float addition is commutative, so operand order
/// inside a pair does not matter).
#[allow(clippy::incompatible_msrv)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn reduce16x16(v: &[core::arch::x86_64::__m512; 16]) -> core::arch::x86_64::__m512 {
    use core::arch::x86_64::*;
    // Halves: b[p] = [v[2p] lanes k + k+8 (k < 8) | v[2p+1] likewise].
    let mut b = [_mm512_setzero_ps(); 8];
    for (p, b) in b.iter_mut().enumerate() {
        let (x, y) = (v[2 * p], v[2 * p + 1]);
        *b = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(x, y),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y),
        );
    }
    // Quarters: 128-bit block j of c[q] = the four t4 lanes of v[4q + j].
    let mut c = [_mm512_setzero_ps(); 4];
    for (q, c) in c.iter_mut().enumerate() {
        let (x, y) = (b[2 * q], b[2 * q + 1]);
        *c = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y),
        );
    }
    // Per 128-bit block: (t4[0] + t4[2], t4[1] + t4[3]) of two vectors, then their sum.
    let u0 = _mm512_add_ps(
        _mm512_shuffle_ps::<0b01_00_01_00>(c[0], c[1]),
        _mm512_shuffle_ps::<0b11_10_11_10>(c[0], c[1]),
    );
    let u1 = _mm512_add_ps(
        _mm512_shuffle_ps::<0b01_00_01_00>(c[2], c[3]),
        _mm512_shuffle_ps::<0b11_10_11_10>(c[2], c[3]),
    );
    let r = _mm512_add_ps(
        _mm512_shuffle_ps::<0b10_00_10_00>(u0, u1),
        _mm512_shuffle_ps::<0b11_01_11_01>(u0, u1),
    );
    // Lane 4j + m holds v[4m + j]: transpose the 4 × 4 back to vector order.
    let idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(idx, r)
}

/// `out[h·out_stride + i] = Σ x_h·(masked y_i)` in `ggml_vec_dot_f16`'s order (see
/// the module doc) for `N` vectors `x_h` and `sh.ny` vectors `y_i`; `sh.len` need
/// only be a multiple of 16.
pub fn dots_vec<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    dots_vec_for::<N>(GgmlBuild::host(), x, y, sh, out)
}

/// [`dots_vec`] in `build`'s decode order: the AVX-512 build's as described in the
/// module doc, or the AVX2 build's ([`crate::f16dot_avx2`]: 32-element steps of four
/// 8-lane accumulators).
pub fn dots_vec_for<const N: usize>(
    build: GgmlBuild,
    x: &[f32],
    y: &[f32],
    sh: &DotsShape,
    out: &mut [f32],
) {
    assert!(
        N > 0 && sh.len.is_multiple_of(16) && out.len() >= (N - 1) * sh.out_stride + sh.ny,
        "dots_vec shape"
    );
    assert!(
        x.len() >= (N - 1) * sh.x_stride + sh.len,
        "dots_vec x bounds"
    );
    assert!(
        sh.ny == 0 || y.len() >= (sh.ny - 1) * sh.y_stride + sh.len,
        "dots_vec y bounds"
    );
    if build == GgmlBuild::Avx2 {
        return crate::f16dot_avx2::vec_dots::<N>(x, y, sh, out);
    }
    #[cfg(target_arch = "x86_64")]
    {
        if use_avx512() {
            // SAFETY: AVX-512F and FMA were detected at run time; bounds asserted above.
            return unsafe { dots_avx512::<N>(x, y, sh, out) };
        }
        if use_avx2() {
            // SAFETY: AVX2 and FMA were detected at run time; bounds asserted above.
            return unsafe { dots_avx2::<N>(x, y, sh, out) };
        }
        if super::f16dot::has_fma() {
            // SAFETY: the CPU supports FMA (checked at run time).
            return unsafe { dots_fma::<N>(x, y, sh, out) };
        }
    }
    dots_portable::<N>(x, y, sh, out)
}

/// Shape of [`dots_vec_f16`]: `x` vectors as in [`DotsShape`], `y` vectors read
/// from f16 storage (a KV cache) with only the elements in `valid` counted (the rest
/// read as zero, as if widened into a zeroed buffer).
#[derive(Clone, Debug)]
pub struct F16Shape {
    /// Distance between consecutive `x` vectors (f32 elements).
    pub x_stride: usize,
    /// Number of `y` vectors.
    pub ny: usize,
    /// Distance between consecutive `y` vectors (f16 elements).
    pub y_stride: usize,
    /// Elements per dot: a multiple of 64.
    pub len: usize,
    /// The elements of every `y` that are read; the others count as zero.
    pub valid: std::ops::Range<usize>,
    /// Distance between the outputs of consecutive `x` vectors.
    pub out_stride: usize,
}

/// [`dots_vec_n`] with the `y` vectors still in f16 (`y` holds their bytes, little
/// endian): converted in registers, bitwise what widening them into a zeroed f32
/// buffer (valid elements only) and calling [`dots_vec_n`] with full masks gives.
/// Returns `false`, computing nothing, where this fused form is unavailable (neither
/// AVX-512 BW/VL nor AVX2 with F16C, or `len` not a multiple of 64): the caller
/// widens instead.
pub fn dots_vec_f16(n: usize, x: &[f32], y: &[u8], sh: &F16Shape, out: &mut [f32]) -> bool {
    dots_vec_f16_for(GgmlBuild::host(), n, x, y, sh, out)
}

/// [`dots_vec_f16`] in `build`'s decode order (the AVX2 build's needs `len` to be a
/// multiple of its 32-element step, and AVX2 with F16C).
pub fn dots_vec_f16_for(
    build: GgmlBuild,
    n: usize,
    x: &[f32],
    y: &[u8],
    sh: &F16Shape,
    out: &mut [f32],
) -> bool {
    if n == 0 || sh.ny == 0 {
        return false;
    }
    assert!(
        sh.valid.start <= sh.valid.end
            && sh.valid.end <= sh.len
            && x.len() >= (n - 1) * sh.x_stride + sh.len
            && y.len() >= 2 * ((sh.ny - 1) * sh.y_stride + sh.valid.end)
            && out.len() >= (n - 1) * sh.out_stride + sh.ny,
        "dots_vec_f16 shape"
    );
    if build == GgmlBuild::Avx2 {
        return crate::f16dot_avx2::vec_dots_f16(n, x, y, sh, out);
    }
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = use_avx512_f16();
        if !(avx512 || use_avx2()) || !sh.len.is_multiple_of(STEP) {
            return false;
        }
        let kernels: [F16Kernel; 4] = if avx512 {
            [
                dots_f16_avx512::<1>,
                dots_f16_avx512::<2>,
                dots_f16_avx512::<3>,
                dots_f16_avx512::<4>,
            ]
        } else {
            [
                dots_f16_avx2::<1>,
                dots_f16_avx2::<2>,
                dots_f16_avx2::<3>,
                dots_f16_avx2::<4>,
            ]
        };
        // SAFETY: the kernels' features (AVX-512 F/BW/VL, or AVX2/FMA/F16C) were detected
        // at run time; bounds asserted above.
        unsafe { run_f16_kernels(&kernels, n, x, y, sh, out) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (n, x, y, sh, out);
        false
    }
}

/// A fused f16 body for a fixed number of `x` vectors (its CPU features unchecked).
#[cfg(target_arch = "x86_64")]
pub(crate) type F16Kernel = unsafe fn(&[f32], &[u8], &F16Shape, &mut [f32]);

/// Run `n` `x` vectors through `kernels[k - 1]` (the `k`-vector form), four at a time.
///
/// # Safety
/// The CPU has the kernels' features; [`dots_vec_f16`]'s bounds hold for `n` vectors.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn run_f16_kernels(
    kernels: &[F16Kernel; 4],
    n: usize,
    x: &[f32],
    y: &[u8],
    sh: &F16Shape,
    out: &mut [f32],
) {
    let mut h = 0;
    while h < n {
        let k = (n - h).min(4);
        // SAFETY: the caller's contract.
        unsafe { kernels[k - 1](&x[h * sh.x_stride..], y, sh, &mut out[h * sh.out_stride..]) };
        h += k;
    }
}

/// `y` vectors fetched ahead by [`dots_vec_f16`] when they are strided.
#[cfg(target_arch = "x86_64")]
const PREFETCH_ROWS: usize = 16;

/// Chunk masks of [`dots_f16_avx512`] kept on the stack (vectors of up to 1,024
/// elements; longer ones put theirs on the heap).
#[cfg(target_arch = "x86_64")]
const MASK_CHUNKS: usize = 64;

/// Whether the fused f16 body runs: [`use_avx512`] and AVX-512 BW + VL (masked
/// 16-bit loads).
#[cfg(target_arch = "x86_64")]
fn use_avx512_f16() -> bool {
    use std::sync::OnceLock;
    static B: OnceLock<bool> = OnceLock::new();
    *B.get_or_init(|| {
        use_avx512()
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
    })
}

/// # Safety
/// AVX-512 F/BW/VL; [`dots_vec_f16`]'s asserted bounds hold for `N` vectors.
#[allow(clippy::incompatible_msrv)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
unsafe fn dots_f16_avx512<const N: usize>(x: &[f32], y: &[u8], sh: &F16Shape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let (v0, v1) = (sh.valid.start, sh.valid.end);
    // Per 16-lane chunk, the mask of its lanes inside `valid` (the others are zero, as
    // in a zeroed widened buffer; the FMA still runs: `fma(x, 0, acc)`), worked out
    // once per call instead of per chunk of every vector: that bookkeeping, a score of
    // scalar instructions per chunk, bound the kernel (0.6 FMAs a cycle on 128-dim K
    // rows, Zen 5). Where every chunk is whole (K rows), the loads are plain.
    let n_chunks = sh.len / 16;
    let mut mask_buf = [0u16; MASK_CHUNKS];
    let mut mask_vec = Vec::new();
    let masks: &mut [u16] = if n_chunks <= MASK_CHUNKS {
        &mut mask_buf[..n_chunks]
    } else {
        mask_vec.resize(n_chunks, 0);
        &mut mask_vec
    };
    for (c, m) in masks.iter_mut().enumerate() {
        let lo = 16 * c;
        if lo + 16 > v0 && lo < v1 {
            let first = v0.saturating_sub(lo);
            let last = (v1 - lo).min(16);
            *m = (u16::MAX >> (16 - (last - first))) << first;
        }
    }
    let masks: &[u16] = masks;
    let all_full = masks.iter().all(|&m| m == u16::MAX);
    let mut i = 0;
    while i < sh.ny {
        let nb = (sh.ny - i).min(16);
        let mut folded = [[_mm512_setzero_ps(); 16]; N];
        for k in 0..nb {
            let yo = 2 * (i + k) * sh.y_stride;
            // Strided vectors (K rows of a cache) are fetched ahead: a few rows in
            // flight hide the latency the hardware prefetcher leaves on strides.
            if sh.y_stride > sh.len && i + k + PREFETCH_ROWS < sh.ny {
                let ahead = &y[yo + 2 * PREFETCH_ROWS * sh.y_stride..];
                super::f16dot::prefetch(&ahead[2 * sh.valid.start..2 * sh.valid.end]);
            }
            let mut acc = [[_mm512_setzero_ps(); 4]; N];
            // Whole 64-element steps, the four chunks unrolled so that every
            // accumulator index is a constant (the accumulators stay in registers).
            for step in 0..sh.len / STEP {
                for q in 0..4 {
                    let lo = STEP * step + 16 * q;
                    let p = y.as_ptr().wrapping_add(yo + 2 * lo);
                    // SAFETY: with `all_full`, every element of y_i up to `len` is valid
                    // (bounds asserted by `dots_vec_f16`); otherwise the masked load
                    // touches only the chunk's valid lanes (none for a zero mask: a
                    // masked-off lane never faults).
                    let h = unsafe {
                        if all_full {
                            _mm256_loadu_si256(p.cast())
                        } else {
                            _mm256_maskz_loadu_epi16(masks[4 * step + q], p.cast())
                        }
                    };
                    let yc = _mm512_cvtph_ps(h);
                    for (h, a) in acc.iter_mut().enumerate() {
                        // SAFETY: chunk `lo / 16` of x_h lies inside `x` (asserted).
                        let xh = unsafe { _mm512_loadu_ps(x.as_ptr().add(h * sh.x_stride + lo)) };
                        a[q] = _mm512_fmadd_ps(xh, yc, a[q]);
                    }
                }
            }
            fold_into(&mut folded, k, &acc);
        }
        store_reduced(&folded, nb, &mut out[i..], sh.out_stride);
        i += nb;
    }
}

/// [`dots_vec`] for a run-time number `n` of `x` vectors, four at a time.
pub fn dots_vec_n(n: usize, x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    let build = GgmlBuild::host();
    super::f16dot::by_four(n, x, sh, out, |k, x, out| match k {
        1 => dots_vec_for::<1>(build, x, y, sh, out),
        2 => dots_vec_for::<2>(build, x, y, sh, out),
        3 => dots_vec_for::<3>(build, x, y, sh, out),
        _ => dots_vec_for::<4>(build, x, y, sh, out),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml_vec_dot_f16 transcribed literally (AVX-512 lane layout, scalar FMAs).
    #[allow(clippy::needless_range_loop)]
    fn ggml_vec_dot(x: &[f32], y: &[f32]) -> f32 {
        let n = x.len();
        let np = n & !(STEP - 1);
        let mut sum = [[0f32; 16]; 4];
        for i in (0..np).step_by(STEP) {
            for (j, s) in sum.iter_mut().enumerate() {
                for l in 0..16 {
                    let e = i + 16 * j + l;
                    s[l] = x[e].mul_add(y[e], s[l]);
                }
            }
        }
        for l in 0..16 {
            sum[0][l] += sum[2][l];
            sum[1][l] += sum[3][l];
        }
        for l in 0..16 {
            sum[0][l] += sum[1][l];
        }
        let mut sumf = f64::from(reduce16(&sum[0]));
        for e in np..n {
            sumf += f64::from(x[e] * y[e]);
        }
        sumf as f32
    }

    /// `ny` vectors of `len` packed one after another (x likewise), outputs `ny` apart.
    fn packed_shape(len: usize, ny: usize, first: u16, last: u16) -> DotsShape {
        DotsShape {
            x_stride: len,
            ny,
            y_stride: len,
            len,
            first_mask: first,
            last_mask: last,
            out_stride: ny,
        }
    }

    fn vals(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) as f32 * 1e-9).sin() * 3.0)
            .collect()
    }

    #[test]
    fn equals_literal_ggml_vec_dot_with_masks_and_leftovers() {
        // ny past 16 and not a multiple of it: the AVX-512 body reduces the dots of
        // up to 16 `y` vectors together when there are no leftovers.
        for (len, ny) in [16, 48, 64, 80, 128, 144, 256, 320]
            .into_iter()
            .zip([3, 37, 16, 5, 21, 3, 40, 17])
        {
            for (first, last) in [
                (u16::MAX, u16::MAX),
                (0xfff0, u16::MAX),
                (u16::MAX, 0x00ff),
                (0xff00, 0x0fff),
            ] {
                let x = vals(4 * len, 7);
                let y = vals(ny * len, 11);
                let sh = packed_shape(len, ny, first, last);
                let mut out = vec![0f32; 4 * ny];
                for h in 0..4 {
                    dots_vec_for::<1>(
                        GgmlBuild::Avx512,
                        &x[h * len..],
                        &y,
                        &sh,
                        &mut out[h * ny..],
                    );
                }
                let mut portable = vec![0f32; 4 * ny];
                for h in 0..4 {
                    dots_portable::<1>(&x[h * len..], &y, &sh, &mut portable[h * ny..]);
                }
                for h in 0..4 {
                    for i in 0..ny {
                        let mut yi = y[i * len..(i + 1) * len].to_vec();
                        let nc = len / 16;
                        for (e, v) in yi.iter_mut().enumerate() {
                            let (c, l) = (e / 16, e % 16);
                            let mut m = u16::MAX;
                            if c == 0 {
                                m &= first;
                            }
                            if c + 1 == nc {
                                m &= last;
                            }
                            if m >> l & 1 == 0 {
                                *v = 0.0;
                            }
                        }
                        let want = ggml_vec_dot(&x[h * len..(h + 1) * len], &yi);
                        assert_eq!(
                            out[h * ny + i].to_bits(),
                            want.to_bits(),
                            "len {len} ny {ny} h {h} i {i}"
                        );
                        assert_eq!(
                            portable[h * ny + i].to_bits(),
                            want.to_bits(),
                            "portable len {len}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn fused_f16_equals_widened_dots_bitwise() {
        use crate::half::{f32_to_f16, widen_f16_into};
        for (len, ny, valid) in [
            (64, 3, 0..64),
            (128, 37, 0..128),
            (192, 20, 5..150),
            (256, 16, 64..65),
            // Longer than the masks kept on the stack (a p·v over > 1,024 cells).
            (1088, 3, 10..1080),
            (1152, 2, 0..1152),
        ] {
            let x = vals(4 * len, 3);
            // f16 storage with a stride wider than `len`; values outside `valid` are
            // garbage that must never count.
            let stride = len + 24;
            let y16: Vec<u8> = vals(ny * stride, 5)
                .iter()
                .flat_map(|&v| f32_to_f16(v * 7.0).to_le_bytes())
                .collect();
            let sh = F16Shape {
                x_stride: len,
                ny,
                y_stride: stride,
                len,
                valid: valid.clone(),
                out_stride: ny,
            };
            let mut got = vec![f32::NAN; 4 * ny];
            if !dots_vec_f16_for(GgmlBuild::Avx512, 4, &x, &y16, &sh, &mut got) {
                eprintln!("fused f16 dots unavailable on this CPU: nothing to compare");
                return;
            }
            let mut y = vec![0f32; ny * len];
            for i in 0..ny {
                let src = &y16[2 * (i * stride + valid.start)..2 * (i * stride + valid.end)];
                widen_f16_into(src, &mut y[i * len + valid.start..i * len + valid.end]);
            }
            let dsh = packed_shape(len, ny, u16::MAX, u16::MAX);
            let mut want = vec![0f32; 4 * ny];
            dots_vec_for::<4>(GgmlBuild::Avx512, &x, &y, &dsh, &mut want);
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "len {len} ny {ny} output {k}");
            }
        }
    }

    /// The AVX2 bodies, called directly (an AVX-512 host dispatches past them), equal
    /// the literal ggml order bitwise: the f32 one (masks and leftovers) through the
    /// portable body, which the test above checks against it; the f16 one directly,
    /// with `valid` ranges that cut steps and chunks.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_bodies_equal_the_literal_order_bitwise() {
        use crate::half::{f16_to_f32, f32_to_f16};
        if !(std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c"))
        {
            eprintln!("no AVX2/FMA/F16C here: nothing to run");
            return;
        }
        for (len, ny, first, last) in [
            (64, 40, u16::MAX, u16::MAX),
            (80, 33, 0xfff0, 0x0fff),
            (576, 9, 0xff00, 0x00ff),
        ] {
            let x = vals(2 * len, 21);
            let y = vals(ny * len, 22);
            let sh = packed_shape(len, ny, first, last);
            let mut got = vec![f32::NAN; 2 * ny];
            // SAFETY: AVX2 and FMA detected above; the shapes fit the buffers.
            unsafe { dots_avx2::<2>(&x, &y, &sh, &mut got) };
            let mut want = vec![f32::NAN; 2 * ny];
            for h in 0..2 {
                dots_portable::<1>(&x[h * len..], &y, &sh, &mut want[h * ny..]);
            }
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "f32 body, len {len}"
            );
        }
        for (len, ny, valid) in [
            (128, 70, 0..128),
            (192, 5, 3..130),
            (256, 33, 64..200),
            (64, 2, 0..1),
        ] {
            let x = vals(3 * len, 31);
            let stride = len + 8;
            let y16: Vec<u16> = vals(ny * stride, 32)
                .iter()
                .map(|&v| f32_to_f16(v * 5.0))
                .collect();
            let bytes: Vec<u8> = y16.iter().flat_map(|v| v.to_le_bytes()).collect();
            let sh = F16Shape {
                x_stride: len,
                ny,
                y_stride: stride,
                len,
                valid: valid.clone(),
                out_stride: ny,
            };
            let mut got = vec![f32::NAN; 3 * ny];
            // SAFETY: AVX2, FMA and F16C detected above; the shapes fit the buffers.
            unsafe { dots_f16_avx2::<3>(&x, &bytes, &sh, &mut got) };
            for h in 0..3 {
                for i in 0..ny {
                    let yi: Vec<f32> = (0..len)
                        .map(|e| match valid.contains(&e) {
                            true => f16_to_f32(y16[i * stride + e]),
                            false => 0.0,
                        })
                        .collect();
                    let want = ggml_vec_dot(&x[h * len..(h + 1) * len], &yi);
                    assert_eq!(
                        got[h * ny + i].to_bits(),
                        want.to_bits(),
                        "f16 body, len {len} h {h} i {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn differs_from_the_prompt_order_somewhere() {
        // The two orders are different functions: over many random vectors at
        // least one result differs in the last bits (else this module is moot).
        let len = 256;
        let x = vals(len, 3);
        let mut differ = 0;
        for s in 0..64 {
            let y = vals(len, 1000 + s);
            let sh = DotsShape::single(len);
            let mut a = [0f32];
            let mut b = [0f32];
            dots_vec_for::<1>(GgmlBuild::Avx512, &x, &y, &sh, &mut a);
            crate::f16dot::dots_for::<1>(GgmlBuild::Avx512, &x, &y, &sh, &mut b);
            differ += usize::from(a[0].to_bits() != b[0].to_bits());
        }
        assert!(differ > 0);
    }
}
