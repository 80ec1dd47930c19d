//! The f16 dot products of attention (`q·k` over the head dim, `p·v` over cache
//! cells) in the float order llama.cpp executes for prompt batches: llamafile's
//! tinyBLAS f16 kernel. A build for AVX-512 keeps one 16-lane FMA accumulator per
//! output (lane = element index mod 16), reduced with `_mm512_reduce_add_ps`: that
//! order is this module's; a build for AVX2 keeps one 8-lane accumulator
//! ([`crate::f16dot_avx2`]). [`dots`] and [`dot`] follow the build
//! [`GgmlBuild::host`] names, [`dots_for`] and [`dot_for`] the one they are given.
//!
//! llama.cpp runs single-token decode through `ggml_vec_dot_f16` instead (four
//! accumulators): that order lives in [`crate::f16dot_vec`], and the
//! model's forward picks it for one-row batches and, in pinned mode, for every row (so a
//! batch of rows equals the same rows one at a time, bitwise).
//!
//! Inputs are f16 values widened to f32, padded with zeros to a multiple of
//! [`F16_PAD`]: `fma(0, v, acc) = acc`, so padding (like llama.cpp's masked
//! cells) changes nothing.

use crate::half::{f16_to_f32, f32_to_f16};
use crate::GgmlBuild;

/// Element alignment of the inputs (a multiple of the 16 lanes).
pub const F16_PAD: usize = 64;

/// `_mm512_reduce_add_ps` of 16 lanes in GCC's order (halves, then [`reduce8`]).
#[inline(always)]
pub fn reduce16(v: &[f32; 16]) -> f32 {
    reduce8(&core::array::from_fn(|k| v[k + 8] + v[k]))
}

/// The SSE horizontal sum of 8 lanes that tinyBLAS's `hsum(__m256)` and ggml's AVX2
/// softmax use: halves (`k + 4` onto `k`), then `(t0 + t2) + (t1 + t3)`.
#[inline(always)]
pub fn reduce8(v: &[f32; 8]) -> f32 {
    let t4: [f32; 4] = core::array::from_fn(|k| v[k + 4] + v[k]);
    (t4[0] + t4[2]) + (t4[1] + t4[3])
}

#[inline(always)]
fn body(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (xc, yc) in x.chunks_exact(16).zip(y.chunks_exact(16)) {
        for l in 0..16 {
            acc[l] = xc[l].mul_add(yc[l], acc[l]);
        }
    }
    reduce16(&acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn body_fma(x: &[f32], y: &[f32]) -> f32 {
    body(x, y)
}

/// Whether the CPU has FMA (detected once).
#[cfg(target_arch = "x86_64")]
pub fn has_fma() -> bool {
    use std::sync::OnceLock;
    static FMA: OnceLock<bool> = OnceLock::new();
    *FMA.get_or_init(|| std::arch::is_x86_feature_detected!("fma"))
}

/// `Σ x·y` over the first `x.len()` elements (a multiple of 16; `y` at least as
/// long) in tinyBLAS order. FMA hardware is used where present; elsewhere
/// `mul_add` is the same single-rounding FMA in software.
pub fn dot(x: &[f32], y: &[f32]) -> f32 {
    dot_for(GgmlBuild::host(), x, y)
}

/// [`dot`] in `build`'s prompt order (tinyBLAS with 16 or 8 lanes).
pub fn dot_for(build: GgmlBuild, x: &[f32], y: &[f32]) -> f32 {
    let y = &y[..x.len().min(y.len())];
    if build == GgmlBuild::Avx2 {
        return crate::f16dot_avx2::prompt_dot(x, y);
    }
    #[cfg(target_arch = "x86_64")]
    if has_fma() {
        // SAFETY: the CPU supports FMA (checked at run time above).
        return unsafe { body_fma(x, y) };
    }
    body(x, y)
}

/// `f32_to_f16` of every element of `src` into `dst` (same length), with F16C
/// where the CPU has it: IEEE round-to-nearest-even, the same as the software
/// conversion; chunks holding a NaN take the software path so NaN payloads match.
pub fn to_f16_bits(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "to_f16_bits lengths");
    #[cfg(target_arch = "x86_64")]
    let done = if has_f16c() {
        // SAFETY: F16C and AVX were detected at run time (has_f16c).
        unsafe { to_f16_bits_f16c(src, dst) }
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for (o, &x) in dst[done..].iter_mut().zip(&src[done..]) {
        *o = f32_to_f16(x);
    }
}

/// In place: every element rounded to f16 and widened back
/// (`f16_to_f32(f32_to_f16(x))`), with F16C where the CPU has it.
pub fn round_f16_in_place(x: &mut [f32]) {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if has_f16c() {
        // SAFETY: F16C and AVX were detected at run time (has_f16c).
        done = unsafe { round_f16_f16c(x) };
    }
    for v in &mut x[done..] {
        *v = f16_to_f32(f32_to_f16(*v));
    }
}

#[cfg(target_arch = "x86_64")]
fn has_f16c() -> bool {
    use std::sync::OnceLock;
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| {
        std::arch::is_x86_feature_detected!("f16c") && std::arch::is_x86_feature_detected!("avx")
    })
}

/// Whole groups of 8 (software for groups with a NaN); returns how many it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn to_f16_bits_f16c(src: &[f32], dst: &mut [u16]) -> usize {
    use core::arch::x86_64::*;
    let mut n = 0;
    for (s, d) in src.chunks_exact(8).zip(dst.chunks_exact_mut(8)) {
        // SAFETY: `s` has 8 readable floats and `d` 8 writable u16 (16 bytes);
        // unaligned loads/stores need no alignment.
        unsafe {
            let v = _mm256_loadu_ps(s.as_ptr());
            if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)) != 0 {
                for (o, &x) in d.iter_mut().zip(s) {
                    *o = f32_to_f16(x);
                }
            } else {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(d.as_mut_ptr().cast(), h);
            }
        }
        n += 8;
    }
    n
}

/// Whole groups of 8 (software for groups with a NaN); returns how many it did.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn round_f16_f16c(x: &mut [f32]) -> usize {
    use core::arch::x86_64::*;
    let mut n = 0;
    for c in x.chunks_exact_mut(8) {
        // SAFETY: `c` has 8 floats; unaligned loads/stores need no alignment.
        unsafe {
            let v = _mm256_loadu_ps(c.as_ptr());
            if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)) != 0 {
                for v in c.iter_mut() {
                    *v = f16_to_f32(f32_to_f16(*v));
                }
            } else {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        n += 8;
    }
    n
}

/// Which body runs [`dots`]: chosen once from the CPU (and `FUCINA_ISA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Fma,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

fn body_choice() -> Body {
    use std::sync::OnceLock;
    static B: OnceLock<Body> = OnceLock::new();
    *B.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::Isa;
            let isa = crate::Kernels::from_env().map_or_else(|_| Isa::best(), |k| k.isa());
            match isa {
                Isa::Avx512 if std::arch::is_x86_feature_detected!("avx512f") => Body::Avx512,
                Isa::Avx2 | Isa::Avx512 => Body::Avx2,
                _ if has_fma() => Body::Fma,
                _ => Body::Portable,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Body::Portable
    })
}

/// Shape of a [`dots`] call: `N` vectors `x_h = x[h·x_stride..]` against `ny`
/// vectors `y_i = y[i·y_stride..]`, all over `len` elements (a multiple of 16).
/// Lanes of `y`'s first chunk outside `first_mask` (bit `l` = lane `l`) and of its
/// last chunk outside `last_mask` read as zero.
#[derive(Clone, Copy, Debug)]
pub struct DotsShape {
    /// Distance between consecutive `x` vectors.
    pub x_stride: usize,
    /// Number of `y` vectors.
    pub ny: usize,
    /// Distance between consecutive `y` vectors.
    pub y_stride: usize,
    /// Elements per dot (multiple of 16).
    pub len: usize,
    /// Lanes of the first chunk of every `y` that count.
    pub first_mask: u16,
    /// Lanes of the last chunk of every `y` that count.
    pub last_mask: u16,
    /// Distance between the outputs of consecutive `x` vectors.
    pub out_stride: usize,
}

impl DotsShape {
    /// One unmasked dot of one `x` and one `y` over `len` elements.
    pub fn single(len: usize) -> DotsShape {
        DotsShape {
            x_stride: len,
            ny: 1,
            y_stride: len,
            len,
            first_mask: u16::MAX,
            last_mask: u16::MAX,
            out_stride: 1,
        }
    }
}

/// `out[h·out_stride + i] = dot(x_h, masked y_i)` for `N` vectors `x_h` and `ny` vectors
/// `y_i` (see [`DotsShape`]), each bitwise what [`dot`] returns for the same two
/// zero-masked vectors: every output keeps its own 16 lane accumulators, updated
/// chunk by chunk in order with one FMA per lane, and reduced as [`reduce16`]. What
/// changes is the schedule: each `y` chunk is loaded once for `N` independent
/// accumulator chains, which hides the FMA latency a single dot is bound by.
#[inline]
pub fn dots<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    dots_for::<N>(GgmlBuild::host(), x, y, sh, out)
}

/// [`dots`] in `build`'s prompt order: the AVX-512 build's as described above, or
/// the AVX2 build's ([`crate::f16dot_avx2`]: one 8-lane accumulator per output).
#[inline]
pub fn dots_for<const N: usize>(
    build: GgmlBuild,
    x: &[f32],
    y: &[f32],
    sh: &DotsShape,
    out: &mut [f32],
) {
    assert!(
        N > 0 && sh.len.is_multiple_of(16) && out.len() >= (N - 1) * sh.out_stride + sh.ny,
        "dots shape"
    );
    assert!(x.len() >= (N - 1) * sh.x_stride + sh.len, "dots x bounds");
    assert!(
        sh.ny == 0 || y.len() >= (sh.ny - 1) * sh.y_stride + sh.len,
        "dots y bounds"
    );
    if sh.ny == 0 || sh.len == 0 {
        for h in 0..N {
            out[h * sh.out_stride..][..sh.ny].fill(0.0);
        }
        return;
    }
    if build == GgmlBuild::Avx2 {
        return crate::f16dot_avx2::prompt_dots::<N>(x, y, sh, out);
    }
    match body_choice() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F was detected at run time (body_choice); bounds asserted above.
        Body::Avx512 => unsafe { dots_avx512::<N>(x, y, sh, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and FMA belong to the detected Avx2/Avx512 ISA; bounds asserted.
        Body::Avx2 => unsafe { dots_avx2::<N>(x, y, sh, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU supports FMA (checked at run time in body_choice).
        Body::Fma => unsafe { dots_fma::<N>(x, y, sh, out) },
        Body::Portable => dots_portable::<N>(x, y, sh, out),
    }
}

/// The mask of chunk `c` of `nc`.
#[inline(always)]
pub(crate) fn chunk_mask(sh: &DotsShape, c: usize, nc: usize) -> u16 {
    let mut m = u16::MAX;
    if c == 0 {
        m &= sh.first_mask;
    }
    if c + 1 == nc {
        m &= sh.last_mask;
    }
    m
}

/// Chunk `c` of `y_i` with the lanes outside `m` zeroed.
#[inline(always)]
pub(crate) fn masked_chunk(yi: &[f32], c: usize, m: u16) -> [f32; 16] {
    let mut t = [0f32; 16];
    for (l, v) in t.iter_mut().enumerate() {
        if m >> l & 1 == 1 {
            *v = yi[16 * c + l];
        }
    }
    t
}

#[inline(always)]
fn dots_portable<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    tinyblas_portable::<N, 16>(x, y, sh, out, reduce16)
}

/// tinyBLAS's order with `L` lanes (16 or 8), scalar: one accumulator per output,
/// element `e` into lane `e % L` by a fused multiply-add, elements in order, then
/// `reduce`. The reference of both builds' prompt order.
#[inline(always)]
pub(crate) fn tinyblas_portable<const N: usize, const L: usize>(
    x: &[f32],
    y: &[f32],
    sh: &DotsShape,
    out: &mut [f32],
    reduce: fn(&[f32; L]) -> f32,
) {
    let nc = sh.len / 16;
    for i in 0..sh.ny {
        let yi = &y[i * sh.y_stride..];
        let mut acc = [[0f32; L]; N];
        for c in 0..nc {
            let yc = masked_chunk(yi, c, chunk_mask(sh, c, nc));
            for (h, a) in acc.iter_mut().enumerate() {
                let xc = &x[h * sh.x_stride + 16 * c..][..16];
                for (e, (&xv, &yv)) in xc.iter().zip(&yc).enumerate() {
                    let l = (16 * c + e) % L;
                    a[l] = xv.mul_add(yv, a[l]);
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            out[h * sh.out_stride + i] = reduce(a);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn dots_fma<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    dots_portable::<N>(x, y, sh, out)
}

/// `reduce16` of the lanes `lo` (0..8) and `hi` (8..16) in registers: the same
/// pairs are added in the same order (`+` commutes bitwise).
///
/// # Safety
/// The CPU supports AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
pub(crate) unsafe fn reduce_halves(
    lo: core::arch::x86_64::__m256,
    hi: core::arch::x86_64::__m256,
) -> f32 {
    use core::arch::x86_64::*;
    let t8 = _mm256_add_ps(hi, lo);
    let t4 = _mm_add_ps(_mm256_extractf128_ps::<1>(t8), _mm256_castps256_ps128(t8));
    let t2 = _mm_add_ps(_mm_movehl_ps(t4, t4), t4);
    _mm_cvtss_f32(_mm_add_ss(t2, _mm_shuffle_ps::<1>(t2, t2)))
}

/// # Safety
/// The CPU supports AVX2 and FMA; `dots`'s bounds contract holds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let nc = sh.len / 16;
    let xp = x.as_ptr();
    for i in 0..sh.ny {
        let yi = &y[i * sh.y_stride..];
        let mut a0 = [_mm256_setzero_ps(); N];
        let mut a1 = [_mm256_setzero_ps(); N];
        for c in 0..nc {
            // SAFETY: chunk c of y_i is in bounds (asserted by `dots`); AVX is enabled.
            let (y0, y1) = unsafe { crate::f16dot_avx2::y_chunk(yi, sh, c, nc) };
            // SAFETY: x_h's chunk c lies inside `x` (asserted by `dots`); unaligned loads
            // need no alignment.
            unsafe {
                for h in 0..N {
                    let xh = xp.add(h * sh.x_stride + 16 * c);
                    a0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(xh), y0, a0[h]);
                    a1[h] = _mm256_fmadd_ps(_mm256_loadu_ps(xh.add(8)), y1, a1[h]);
                }
            }
        }
        for h in 0..N {
            // SAFETY: AVX is part of this function's features.
            out[h * sh.out_stride + i] = unsafe { reduce_halves(a0[h], a1[h]) };
        }
    }
}

/// # Safety
/// The CPU supports AVX-512F; `dots`'s bounds contract holds.
// The AVX-512 intrinsics are stable since Rust 1.89, which fucina-quant (a
// dependency of this crate) already requires.
#[allow(clippy::incompatible_msrv)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dots_avx512<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let nc = sh.len / 16;
    let xp = x.as_ptr();
    // Chunk c of y_i and of every x_h lies inside `y` / `x` (asserted by `dots`).
    let load_y = |yp: *const f32, c: usize, m: u16| {
        // SAFETY: `yp` is some y_i, whose chunk c is in bounds (above); a masked
        // load reads only the kept lanes.
        unsafe {
            if m == u16::MAX {
                _mm512_loadu_ps(yp.add(16 * c))
            } else {
                _mm512_maskz_loadu_ps(m, yp.add(16 * c))
            }
        }
    };
    // SAFETY: AVX-512F implies AVX.
    let reduce = |a: __m512| unsafe {
        reduce_halves(
            _mm512_castps512_ps256(a),
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a))),
        )
    };
    let mut i = 0;
    // Two y vectors per pass: each x chunk is loaded once for 2·N FMA chains.
    while i + 1 < sh.ny {
        let yp0 = y[i * sh.y_stride..].as_ptr();
        let yp1 = y[(i + 1) * sh.y_stride..].as_ptr();
        let mut a0 = [_mm512_setzero_ps(); N];
        let mut a1 = [_mm512_setzero_ps(); N];
        for c in 0..nc {
            let m = chunk_mask(sh, c, nc);
            let (y0, y1) = (load_y(yp0, c, m), load_y(yp1, c, m));
            for h in 0..N {
                // SAFETY: chunk c of x_h is in bounds (asserted by `dots`).
                let xh = unsafe { _mm512_loadu_ps(xp.add(h * sh.x_stride + 16 * c)) };
                a0[h] = _mm512_fmadd_ps(xh, y0, a0[h]);
                a1[h] = _mm512_fmadd_ps(xh, y1, a1[h]);
            }
        }
        for h in 0..N {
            out[h * sh.out_stride + i] = reduce(a0[h]);
            out[h * sh.out_stride + i + 1] = reduce(a1[h]);
        }
        i += 2;
    }
    if i < sh.ny {
        let yp = y[i * sh.y_stride..].as_ptr();
        let mut a = [_mm512_setzero_ps(); N];
        for c in 0..nc {
            let yc = load_y(yp, c, chunk_mask(sh, c, nc));
            for (h, ah) in a.iter_mut().enumerate() {
                // SAFETY: chunk c of x_h is in bounds (asserted by `dots`).
                let xh = unsafe { _mm512_loadu_ps(xp.add(h * sh.x_stride + 16 * c)) };
                *ah = _mm512_fmadd_ps(xh, yc, *ah);
            }
        }
        for (h, ah) in a.iter().enumerate() {
            out[h * sh.out_stride + i] = reduce(*ah);
        }
    }
}

/// Run `n` `x` vectors through `kernel(k, …)` (the `k`-vector form, `k <= 4`), four
/// at a time.
pub(crate) fn by_four(
    n: usize,
    x: &[f32],
    sh: &DotsShape,
    out: &mut [f32],
    mut kernel: impl FnMut(usize, &[f32], &mut [f32]),
) {
    let mut h = 0;
    while h < n {
        let k = (n - h).min(4);
        kernel(k, &x[h * sh.x_stride..], &mut out[h * sh.out_stride..]);
        h += k;
    }
}

/// [`dots`] for a run-time number `n` of `x` vectors, four at a time.
pub fn dots_n(n: usize, x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    dots_n_for(GgmlBuild::host(), n, x, y, sh, out)
}

/// [`dots_for`] for a run-time number `n` of `x` vectors, four at a time.
pub fn dots_n_for(
    build: GgmlBuild,
    n: usize,
    x: &[f32],
    y: &[f32],
    sh: &DotsShape,
    out: &mut [f32],
) {
    by_four(n, x, sh, out, |k, x, out| match k {
        1 => dots_for::<1>(build, x, y, sh, out),
        2 => dots_for::<2>(build, x, y, sh, out),
        3 => dots_for::<3>(build, x, y, sh, out),
        _ => dots_for::<4>(build, x, y, sh, out),
    });
}

/// Ask for the cache lines of `bytes` ahead of their use (a hint: no effect on
/// results).
#[inline(always)]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: prefetching is a hint that never faults; the address is in `bytes`.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_f64_and_ignores_zero_padding() {
        let x: Vec<f32> = (0..128).map(|i| ((i * 7) as f32 * 0.13).sin()).collect();
        let y: Vec<f32> = (0..128).map(|i| ((i * 3) as f32 * 0.29).cos()).collect();
        let exact: f64 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| f64::from(*a) * f64::from(*b))
            .sum();
        let d = dot_for(GgmlBuild::Avx512, &x, &y);
        assert!((f64::from(d) - exact).abs() < 1e-4, "{d} vs {exact}");
        let mut xp = x[..100].to_vec();
        xp.resize(128, 0.0);
        let part = dot_for(GgmlBuild::Avx512, &xp, &y);
        let mut xs = x[..100].to_vec();
        xs.resize(192, 0.0);
        let mut ys = y.clone();
        ys.resize(192, 5.0);
        assert_eq!(
            part.to_bits(),
            dot_for(GgmlBuild::Avx512, &xs, &ys).to_bits()
        );
        assert_eq!(part.to_bits(), body(&xp, &y).to_bits());
    }

    #[test]
    fn dots_equal_dot_bitwise_with_masks() {
        let (n, len, xs, ys, ny) = (7usize, 96usize, 130usize, 101usize, 5usize);
        let x: Vec<f32> = (0..(n - 1) * xs + len)
            .map(|i| ((i * 13) as f32 * 0.071).sin() * 3.0)
            .collect();
        let mut y: Vec<f32> = (0..(ny - 1) * ys + len)
            .map(|i| ((i * 5) as f32 * 0.19).cos())
            .collect();
        // Masked-out lanes may hold anything, even infinities.
        y[0] = f32::INFINITY;
        y[ys + len - 1] = f32::NAN;
        for (len, fm, lm) in [
            (len, u16::MAX, u16::MAX),
            (len, 0xfffe, 0x7fff),
            (16, 0x0ff0, 0x3fff),
            (32, 0xff00, 0x00ff),
        ] {
            let sh = DotsShape {
                x_stride: xs,
                ny,
                y_stride: ys,
                len,
                first_mask: fm,
                last_mask: lm,
                out_stride: ny + 3,
            };
            let mut want = vec![0u32; ny * n];
            for i in 0..ny {
                let mut yi = y[i * ys..i * ys + len].to_vec();
                let nc = len / 16;
                for l in 0..16 {
                    if fm >> l & 1 == 0 {
                        yi[l] = 0.0;
                    }
                    if lm >> l & 1 == 0 {
                        yi[16 * (nc - 1) + l] = 0.0;
                    }
                }
                for h in 0..n {
                    want[i * n + h] =
                        dot_for(GgmlBuild::Avx512, &x[h * xs..h * xs + len], &yi).to_bits();
                }
            }
            let os = sh.out_stride;
            let mut out = vec![0f32; n * os];
            dots_n_for(GgmlBuild::Avx512, n, &x, &y, &sh, &mut out);
            let got: Vec<u32> = (0..ny * n)
                .map(|k| out[(k % n) * os + k / n].to_bits())
                .collect();
            assert_eq!(got, want, "{len} {fm:x} {lm:x}");
            for k in 1..=4 {
                let mut out = vec![0f32; k * os];
                dots_n_for(GgmlBuild::Avx512, k, &x, &y, &sh, &mut out);
                for i in 0..ny {
                    for h in 0..k {
                        assert_eq!(out[h * os + i].to_bits(), want[i * n + h], "{k}");
                    }
                }
            }
            let mut out = vec![0f32; 4 * os];
            dots_portable::<4>(&x, &y, &sh, &mut out);
            for i in 0..ny {
                for h in 0..4 {
                    assert_eq!(out[h * os + i].to_bits(), want[i * n + h]);
                }
            }
        }
    }

    #[test]
    fn f16c_rounding_equals_software() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut xs: Vec<f32> = (0..200_000)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                f32::from_bits(seed as u32)
            })
            .collect();
        // Every f16 value, the midpoints between neighbours and their f32 neighbours.
        for h in 0..=u16::MAX {
            let a = f16_to_f32(h);
            let b = f16_to_f32(h.wrapping_add(1));
            let mid = ((f64::from(a) + f64::from(b)) / 2.0) as f32;
            xs.extend([
                a,
                mid,
                f32::from_bits(mid.to_bits() + 1),
                f32::from_bits(mid.to_bits().wrapping_sub(1)),
            ]);
        }
        xs.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            65520.0,
            -65519.0,
            1e-8,
            -0.0,
        ]);
        let want: Vec<u16> = xs.iter().map(|&x| f32_to_f16(x)).collect();
        let mut got = vec![0u16; xs.len()];
        to_f16_bits(&xs, &mut got);
        assert_eq!(got, want);
        let mut r = xs.clone();
        round_f16_in_place(&mut r);
        for (a, &h) in r.iter().zip(&want) {
            assert_eq!(a.to_bits(), f16_to_f32(h).to_bits());
        }
    }

    #[test]
    fn reduce16_pairs_lanes_as_gcc() {
        // (1e8 + 1) rounds back to 1e8 in f32, so the result shows the pairing.
        let v: [f32; 16] = core::array::from_fn(|i| if i == 0 { 1e8 } else { 1.0 });
        assert_eq!(reduce16(&v), 1e8 + 8.0);
    }
}
