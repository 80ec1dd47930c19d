//! llama.cpp's tiled K-quant matmul order (ggml-cpu `tiled/`) for Q3_K to Q6_K and
//! IQ4_XS, on AVX2 and AVX-512: the tile kernels of [`crate::TileDot::new_tiled`].
//!
//! Per weight row, output and super-block the arithmetic is the scalar reference
//! `kquants::dot_q6_k_q8_k_tiled`: an exact integer `isum` (any summation order gives
//! the same value), then `r = f32(isum) · d_w` (rounded multiply) and
//! `out = fma(r, d_a, out)` (one rounding: GCC contracts the kernel's
//! `_mm512_add_ps(buf, _mm512_mul_ps(result, d1))` into `vfmadd213ps`), super-blocks in
//! order. Lanes are activation rows: eight
//! outputs of one weight row share each float step, so every ISA gives the scalar
//! reference's bits.

use core::arch::x86_64::*;

use crate::formats::iq::{iq4_xs_scales, IQ4_XS_BYTES, KVALUES_IQ4NL};
use crate::formats::kquants::{
    k_scale_min, q3_k_scales, Q3_K_BYTES, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, Q8_K_BYTES,
};

/// Activation rows per register group (the driver's `$k` vectors of 8 allow 16; 16
/// rows on AVX-512 measured 105 vs 8 rows' 135 GMAC/s single-thread on Zen 4, the
/// single-row-order Q6_K tile 142: 16 concurrent activation streams cost more than the
/// shared decode saves).
const G: usize = 8;

/// Drive `sums` (the exact per-block integer sums of one weight row against a group of
/// `G` activation rows, block at byte `yo` of each row: callers pass only whole blocks)
/// over every weight row × activation row of the call, with the tiled float epilogue.
macro_rules! tiled_driver {
    ($feat:literal, $sums:ident, $k:literal) => {
        tiled_driver!($feat, $sums, $k, tile_impl, q6_k, Q6_K_BYTES, 208, GK);
    };
    ($feat:literal, $sums:ident, $k:literal, $imp:ident, $pubname:ident, $bytes:expr, $doff:literal, $gk:ident) => {
        /// Activation rows per group: `$k` vectors of 8.
        const $gk: usize = 8 * $k;
        /// `out[t * ws.len() + i]` = the tiled-order dot of `ws[i]` with activation row
        /// `t` of `acts` (rows of `stride` bytes); `acts` holds every row `out` asks for.
        #[target_feature(enable = $feat)]
        fn $imp(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            let nw = ws.len();
            if nw == 0 || stride == 0 {
                return;
            }
            let nt = (out.len() / nw).min(acts.len() / stride);
            let nb_a = stride / Q8_K_BYTES;
            // The activation scales of one row group, block-major: `da[$gk·b + t]`.
            let mut da = vec![0f32; nb_a * $gk];
            for t0 in (0..nt).step_by($gk) {
                let n = (nt - t0).min($gk);
                // Short groups repeat their last row (its outputs are not stored).
                let y: [&[u8]; $gk] = core::array::from_fn(|t| {
                    let r = t0 + t.min(n - 1);
                    &acts[r * stride..r * stride + nb_a * Q8_K_BYTES]
                });
                for (b, d) in da.chunks_exact_mut($gk).enumerate() {
                    for (d, y) in d.iter_mut().zip(&y) {
                        *d = f32_at(&y[b * Q8_K_BYTES..]);
                    }
                }
                for (i, w) in ws.iter().enumerate() {
                    let nb = (w.len() / $bytes).min(nb_a);
                    let mut acc = [_mm256_setzero_ps(); $k];
                    for (b, (x, da)) in w
                        .chunks_exact($bytes)
                        .zip(da.chunks_exact($gk))
                        .take(nb)
                        .enumerate()
                    {
                        let isum = $sums(x, &y, b * Q8_K_BYTES);
                        let dw = _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes([
                            x[$doff],
                            x[$doff + 1],
                        ])));
                        for (v, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
                            let da = &da[8 * v..8 * v + 8];
                            // SAFETY: `da` is 8 f32; `loadu` needs no alignment.
                            let da = unsafe { _mm256_loadu_ps(da.as_ptr()) };
                            let r = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), dw);
                            *acc = _mm256_fmadd_ps(r, da, *acc);
                        }
                    }
                    let mut vals = [0f32; $gk];
                    for (v, acc) in vals.chunks_exact_mut(8).zip(acc) {
                        // SAFETY: `v` has 8 f32 slots; `storeu` needs no alignment.
                        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), acc) };
                    }
                    for (t, &v) in vals[..n].iter().enumerate() {
                        out[(t0 + t) * nw + i] = v;
                    }
                }
            }
        }

        /// A tiled-order tile kernel without mins (a [`crate::gemm::TileFn`]).
        pub(crate) fn $pubname(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            // SAFETY: `TileDot::new_tiled` installs this kernel only for entries of
            // this ISA, which `Kernels` hands out only where the CPU supports $feat.
            unsafe { $imp(ws, acts, stride, out) }
        }
    };
}

/// Q4_K / Q5_K (`$hi`: the fifth bit from `qh`) in the tiled order with mins: per
/// super-block `r = f32(isum)·d_w`, `r = fnmadd(dmin_w, f32(summs), r)` (one rounding),
/// `out = fma(r, d_a, out)`; lanes are 8 activation rows, integer sums on 256-bit registers.
macro_rules! tiled_k45 {
    ($feat:literal, $name:ident, $bytes:expr, $hi:literal) => {
        /// Exact `isum = Σ_g sc_g · Σ q·a` and `summs = Σ_g mn_g · (bsum_2g + bsum_2g+1)`
        /// of the block `x` against the 8 Q8_K blocks at byte `yo` of `y` (lane t: `y[t]`).
        #[target_feature(enable = $feat)]
        #[inline]
        fn $name(x: &[u8], y: &[&[u8]; G], yo: usize) -> (__m256i, __m256i) {
            let x = &x[..$bytes];
            let (sc, mn) = k_scale_min(&x[4..16]);
            let qs = if $hi { &x[48..176] } else { &x[16..144] };
            let qh = if $hi {
                load_i256(&x[16..48])
            } else {
                _mm256_setzero_si256()
            };
            let m4 = _mm256_set1_epi8(0x0f);
            let one = _mm256_set1_epi8(1);
            let mut sumi = [_mm256_setzero_si256(); G];
            for j in 0..4 {
                let v = load_i256(&qs[32 * j..32 * j + 32]);
                let mut lo = _mm256_and_si256(v, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                if $hi {
                    let b0 = _mm256_and_si256(
                        _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32)),
                        one,
                    );
                    let b1 = _mm256_and_si256(
                        _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32 + 1)),
                        one,
                    );
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(b0));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16::<4>(b1));
                }
                let s_lo = _mm256_set1_epi16(i16::from(sc[2 * j]));
                let s_hi = _mm256_set1_epi16(i16::from(sc[2 * j + 1]));
                let off = yo + 4 + 64 * j;
                for (sumi, y) in sumi.iter_mut().zip(y) {
                    // SAFETY: block `yo / 292` is whole in `y` (see the driver).
                    let (a0, a1) = unsafe { (ld256(y, off), ld256(y, off + 32)) };
                    let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), s_lo);
                    let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), s_hi);
                    *sumi = _mm256_add_epi32(*sumi, _mm256_add_epi32(p0, p1));
                }
            }
            let mins: [i16; 16] = core::array::from_fn(|k| i16::from(mn[k / 2]));
            // SAFETY: `mins` is 16 i16 = 32 readable bytes; `loadu` needs no alignment.
            let mins = unsafe { _mm256_loadu_si256(mins.as_ptr().cast()) };
            // A loop, not `array::from_fn`: closures do not inherit target features.
            let mut summs = [_mm256_setzero_si256(); G];
            for (s, y) in summs.iter_mut().zip(y) {
                // SAFETY: block `yo / 292` is whole in `y[t]` (see the driver).
                *s = _mm256_madd_epi16(unsafe { ld256(y, yo + 260) }, mins);
            }
            (reduce8(sumi), reduce8(summs))
        }
    };
}

/// Q3_K in the tiled order (no mins): exact `Σ_g sc_g · Σ (q − 4)·a` over 8 activation
/// rows, unsigned quants `q = low2 | high·4` (0..=7) through `maddubs`, the offset as
/// `4 · Σ_g sc_g · bsum_g`.
macro_rules! tiled_q3_k {
    ($feat:literal) => {
        #[target_feature(enable = $feat)]
        #[inline]
        fn q3_k_sums(x: &[u8], y: &[&[u8]; G], yo: usize) -> [__m256i; 1] {
            let x = &x[..Q3_K_BYTES];
            let hmask = load_i256(&x[0..32]);
            let sc = q3_k_scales(&x[96..108]);
            let m3 = _mm256_set1_epi8(3);
            let one = _mm256_set1_epi8(1);
            let mut sumi = [_mm256_setzero_si256(); G];
            for half in 0..2 {
                let qs = load_i256(&x[32 + 32 * half..64 + 32 * half]);
                for grp in 0..4 {
                    // Elements 128·half + 32·grp + l: bits 2·grp of qs[32·half + l], bit
                    // 4·half + grp of hmask[l]; groups 8·half + 2·grp (+1 for l >= 16).
                    let low = _mm256_and_si256(
                        _mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * grp as i32)),
                        m3,
                    );
                    let high = _mm256_and_si256(
                        _mm256_srl_epi16(hmask, _mm_cvtsi32_si128((4 * half + grp) as i32)),
                        one,
                    );
                    let q = _mm256_or_si256(low, _mm256_slli_epi16::<2>(high));
                    let g = 8 * half + 2 * grp;
                    let s = _mm256_set_m128i(
                        _mm_set1_epi16(i16::from(sc[g + 1])),
                        _mm_set1_epi16(i16::from(sc[g])),
                    );
                    let off = yo + 4 + 128 * half + 32 * grp;
                    for (sumi, y) in sumi.iter_mut().zip(y) {
                        // SAFETY: block `yo / 292` is whole in `y` (see the driver).
                        let p = _mm256_maddubs_epi16(q, unsafe { ld256(y, off) });
                        *sumi = _mm256_add_epi32(*sumi, _mm256_madd_epi16(p, s));
                    }
                }
            }
            // SAFETY: `sc` is 16 i8 = 16 readable bytes; `loadu` needs no alignment.
            let sc16 = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(sc.as_ptr().cast()) });
            for (sumi, y) in sumi.iter_mut().zip(y) {
                // SAFETY: block `yo / 292` is whole in `y` (see the driver).
                let off = _mm256_madd_epi16(unsafe { ld256(y, yo + 260) }, sc16);
                *sumi = _mm256_sub_epi32(*sumi, _mm256_slli_epi32::<2>(off));
            }
            [reduce8(sumi)]
        }
    };
}

/// The driver of the with-mins types: [`tiled_driver`]'s loops with the fnmadd step.
macro_rules! tiled_driver_min {
    ($feat:literal, $sums:ident, $imp:ident, $pubname:ident, $bytes:expr) => {
        #[target_feature(enable = $feat)]
        fn $imp(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            let nw = ws.len();
            if nw == 0 || stride == 0 {
                return;
            }
            let nt = (out.len() / nw).min(acts.len() / stride);
            let nb_a = stride / Q8_K_BYTES;
            let mut da = vec![0f32; nb_a * G];
            for t0 in (0..nt).step_by(G) {
                let n = (nt - t0).min(G);
                let y: [&[u8]; G] = core::array::from_fn(|t| {
                    let r = t0 + t.min(n - 1);
                    &acts[r * stride..r * stride + nb_a * Q8_K_BYTES]
                });
                for (b, d) in da.chunks_exact_mut(G).enumerate() {
                    for (d, y) in d.iter_mut().zip(&y) {
                        *d = f32_at(&y[b * Q8_K_BYTES..]);
                    }
                }
                for (i, w) in ws.iter().enumerate() {
                    let nb = (w.len() / $bytes).min(nb_a);
                    let mut acc = _mm256_setzero_ps();
                    for (b, (x, da)) in w
                        .chunks_exact($bytes)
                        .zip(da.chunks_exact(G))
                        .take(nb)
                        .enumerate()
                    {
                        let (isum, summs) = $sums(x, &y, b * Q8_K_BYTES);
                        let dw = _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes([x[0], x[1]])));
                        let dm = _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes([x[2], x[3]])));
                        // SAFETY: `da` is 8 f32; `loadu` needs no alignment.
                        let da = unsafe { _mm256_loadu_ps(da.as_ptr()) };
                        let r = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), dw);
                        let r = _mm256_fnmadd_ps(dm, _mm256_cvtepi32_ps(summs), r);
                        acc = _mm256_fmadd_ps(r, da, acc);
                    }
                    let mut vals = [0f32; G];
                    // SAFETY: `vals` has 8 f32 slots; `storeu` needs no alignment.
                    unsafe { _mm256_storeu_ps(vals.as_mut_ptr(), acc) };
                    for (t, &v) in vals[..n].iter().enumerate() {
                        out[(t0 + t) * nw + i] = v;
                    }
                }
            }
        }

        /// A tiled-order tile kernel with mins (a [`crate::gemm::TileFn`]).
        pub(crate) fn $pubname(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            // SAFETY: `TileDot::new_tiled` installs this kernel only for entries of
            // this ISA, which `Kernels` hands out only where the CPU supports $feat.
            unsafe { $imp(ws, acts, stride, out) }
        }
    };
}

/// The f32 scale `d` of a Q8_K block.
#[inline(always)]
fn f32_at(y: &[u8]) -> f32 {
    f32::from_le_bytes([y[0], y[1], y[2], y[3]])
}

/// Eight vectors of eight i32 lanes → one vector of their eight lane totals.
#[target_feature(enable = "avx2")]
#[inline]
fn reduce8(s: [__m256i; 8]) -> __m256i {
    let t0 = _mm256_hadd_epi32(s[0], s[1]);
    let t1 = _mm256_hadd_epi32(s[2], s[3]);
    let t2 = _mm256_hadd_epi32(s[4], s[5]);
    let t3 = _mm256_hadd_epi32(s[6], s[7]);
    let u0 = _mm256_hadd_epi32(t0, t1);
    let u1 = _mm256_hadd_epi32(t2, t3);
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(u0, u1),
        _mm256_permute2x128_si256::<0x31>(u0, u1),
    )
}

#[target_feature(enable = "avx2")]
#[inline]
fn load_i256(b: &[u8]) -> __m256i {
    let b = &b[..32];
    // SAFETY: `b` has 32 readable bytes and `loadu` needs no alignment.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// 32 bytes of `y` at `off`, unchecked.
///
/// # Safety
/// `off + 32 <= y.len()`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn ld256(y: &[u8], off: usize) -> __m256i {
    debug_assert!(off + 32 <= y.len());
    // SAFETY: the caller guarantees 32 readable bytes at `off`; `loadu` needs no alignment.
    unsafe { _mm256_loadu_si256(y.as_ptr().add(off).cast()) }
}

#[target_feature(enable = "avx2")]
#[inline]
fn load_i128(b: &[u8]) -> __m128i {
    let b = &b[..16];
    // SAFETY: `b` has 16 readable bytes and `loadu` needs no alignment.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// AVX2 (+FMA, F16C).
pub(crate) mod avx2 {
    use super::*;

    /// Exact `Σ_g scale_g · Σ (q − 32) · a` of the Q6_K block `x` against the Q8_K
    /// blocks `y` (lane `t` for `y[t]`): unsigned quants through `maddubs` (pairs at most
    /// 2·63·127, no saturation), the offset as `32 · Σ_g scale_g · bsum_g`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn sums(x: &[u8], y: &[&[u8]; G], yo: usize) -> [__m256i; 1] {
        let x = &x[..Q6_K_BYTES];
        let sc = &x[192..208];
        let mut sumi = [_mm256_setzero_si256(); G];
        let m4 = _mm256_set1_epi8(0x0f);
        let m3 = _mm256_set1_epi8(3);
        for h in 0..2 {
            let ql0 = load_i256(&x[64 * h..64 * h + 32]);
            let ql1 = load_i256(&x[64 * h + 32..64 * h + 64]);
            let qh = load_i256(&x[128 + 32 * h..160 + 32 * h]);
            for k in 0..4 {
                // Elements 128h + 32k .. +32: nibble k/2 of ql0 (k even) / ql1 (k odd),
                // bits 2k..2k+2 of qh; groups 8h + 2k (bytes 0..16) and 8h + 2k + 1.
                let ql = if k % 2 == 0 { ql0 } else { ql1 };
                let low = _mm256_and_si256(
                    _mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (k as i32 / 2))),
                    m4,
                );
                let high =
                    _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32)), m3);
                let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
                let g = 8 * h + 2 * k;
                let s = _mm256_set_m128i(
                    _mm_set1_epi16(i16::from(sc[g + 1] as i8)),
                    _mm_set1_epi16(i16::from(sc[g] as i8)),
                );
                let off = yo + 4 + 128 * h + 32 * k;
                for (sumi, y) in sumi.iter_mut().zip(y) {
                    // SAFETY: block `yo / 292` is whole in `y` (see `tile_impl`).
                    let p = _mm256_maddubs_epi16(q, unsafe { ld256(y, off) });
                    *sumi = _mm256_add_epi32(*sumi, _mm256_madd_epi16(p, s));
                }
            }
        }
        let sc16 = _mm256_cvtepi8_epi16(load_i128(sc));
        for (sumi, y) in sumi.iter_mut().zip(y) {
            // SAFETY: block `yo / 292` is whole in `y` (see `tile_impl`).
            let off = _mm256_madd_epi16(unsafe { ld256(y, yo + 260) }, sc16);
            *sumi = _mm256_sub_epi32(*sumi, _mm256_slli_epi32::<5>(off));
        }
        [reduce8(sumi)]
    }

    /// Exact `Σ_g scale_g · Σ kvalue(q) · a` of the IQ4_XS block `x` against the Q8_K
    /// blocks `y` (lane `t` for `y[t]`): the code book's signed values through the
    /// sign trick (pairs at most 2·127·127, no saturation), times each group's scale.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn iq4_xs_sums(x: &[u8], y: &[&[u8]; G], yo: usize) -> [__m256i; 1] {
        let x = &x[..IQ4_XS_BYTES];
        let sc = iq4_xs_scales(x);
        let lut = _mm256_broadcastsi128_si256(load_i128(&KVALUES_IQ4NL.map(|v| v as u8)));
        let m4 = _mm256_set1_epi8(0x0f);
        let mut sumi = [_mm256_setzero_si256(); G];
        for (g, &s) in sc.iter().enumerate() {
            // Elements 32g .. 32g + 16 from the low nibbles, the next 16 from the high.
            let q = load_i128(&x[8 + 16 * g..24 + 16 * g]);
            let q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(q), q), m4);
            let w = _mm256_shuffle_epi8(lut, q);
            let aw = _mm256_abs_epi8(w);
            let s = _mm256_set1_epi16(i16::from(s));
            for (sumi, y) in sumi.iter_mut().zip(y) {
                // SAFETY: block `yo / 292` is whole in `y` (see the driver).
                let a = unsafe { ld256(y, yo + 4 + 32 * g) };
                let p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(a, w));
                *sumi = _mm256_add_epi32(*sumi, _mm256_madd_epi16(p, s));
            }
        }
        [reduce8(sumi)]
    }

    tiled_driver!("avx2,fma,f16c", sums, 1);
    tiled_driver!(
        "avx2,fma,f16c",
        iq4_xs_sums,
        1,
        iq4_xs_impl,
        iq4_xs,
        IQ4_XS_BYTES,
        0,
        GK_IQ4
    );
    tiled_q3_k!("avx2,fma,f16c");
    tiled_driver!(
        "avx2,fma,f16c",
        q3_k_sums,
        1,
        q3_k_impl,
        q3_k,
        Q3_K_BYTES,
        108,
        GK3
    );
    tiled_k45!("avx2,fma,f16c", q4_k_sums, Q4_K_BYTES, false);
    tiled_k45!("avx2,fma,f16c", q5_k_sums, Q5_K_BYTES, true);
    tiled_driver_min!("avx2,fma,f16c", q4_k_sums, q4_k_impl, q4_k, Q4_K_BYTES);
    tiled_driver_min!("avx2,fma,f16c", q5_k_sums, q5_k_impl, q5_k, Q5_K_BYTES);
}

/// AVX-512 (F, BW, VL, DQ, VNNI): 64 quants per register.
pub(crate) mod avx512 {
    use super::*;

    /// Scale-broadcast indices: 128-bit lane k of chunk pair j takes group 4j + k.
    const SCALE_IDX: [[i16; 32]; 4] = {
        let mut t = [[0i16; 32]; 4];
        let mut j = 0;
        while j < 4 {
            let mut e = 0;
            while e < 32 {
                t[j][e] = (4 * j + e / 8) as i16;
                e += 1;
            }
            j += 1;
        }
        t
    };

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    #[inline]
    fn load_i512(b: &[u8]) -> __m512i {
        let b = &b[..64];
        // SAFETY: `b` has 64 readable bytes and `loadu` needs no alignment.
        unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
    }

    /// 64 bytes of `y` at `off`, unchecked.
    ///
    /// # Safety
    /// `off + 64 <= y.len()`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    #[inline]
    unsafe fn ld512(y: &[u8], off: usize) -> __m512i {
        debug_assert!(off + 64 <= y.len());
        // SAFETY: the caller guarantees 64 readable bytes at `off`; `loadu` needs no
        // alignment.
        unsafe { _mm512_loadu_si512(y.as_ptr().add(off).cast()) }
    }

    /// [`super::avx2`]'s sums on 512-bit registers: chunk pair j (elements 64j..64j+64,
    /// contiguous activation bytes) per register, scales through `vpdpwssd`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
    #[inline]
    fn sums(x: &[u8], y: &[&[u8]; G], yo: usize) -> [__m256i; 1] {
        let x = &x[..Q6_K_BYTES];
        let sc16 = _mm256_cvtepi8_epi16(load_i128(&x[192..208]));
        let scz = _mm512_castsi256_si512(sc16);
        let m4 = _mm512_set1_epi8(0x0f);
        let m2 = _mm512_set1_epi8(0x30);
        let mut q = [_mm512_setzero_si512(); 4];
        for h in 0..2 {
            // ql bytes 0..32 (low half) feed elements 128h + l (low nibbles) and
            // 128h + 64 + l (high nibbles), bytes 32..64 elements +32 / +96; qh bit pairs
            // 0, 1, 2, 3 of byte l go to elements 128h + l, +32, +64, +96.
            let ql = load_i512(&x[64 * h..64 * h + 64]);
            let qh = load_i256(&x[128 + 32 * h..160 + 32 * h]);
            let qh2 =
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), _mm256_srli_epi16::<2>(qh));
            q[2 * h] = _mm512_or_si512(
                _mm512_and_si512(ql, m4),
                _mm512_and_si512(_mm512_slli_epi16::<4>(qh2), m2),
            );
            q[2 * h + 1] = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                _mm512_and_si512(qh2, m2),
            );
        }
        let mut s = [_mm512_setzero_si512(); 4];
        for (s, idx) in s.iter_mut().zip(&SCALE_IDX) {
            // SAFETY: `idx` is 32 i16 = 64 readable bytes; `loadu` needs no alignment.
            let idx = unsafe { _mm512_loadu_si512(idx.as_ptr().cast()) };
            *s = _mm512_permutexvar_epi16(idx, scz);
        }
        let sc2 = _mm512_inserti64x4::<1>(scz, sc16);
        let mut pairs = [_mm512_setzero_si512(); G / 2];
        for p in 0..G / 2 {
            let (y0, y1) = (y[2 * p], y[2 * p + 1]);
            let mut s0 = _mm512_setzero_si512();
            let mut s1 = _mm512_setzero_si512();
            for j in 0..4 {
                // SAFETY: block `yo / 292` is whole in `y0` and `y1` (see `tile_impl`).
                let (a0, a1) = unsafe { (ld512(y0, yo + 4 + 64 * j), ld512(y1, yo + 4 + 64 * j)) };
                s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(q[j], a0), s[j]);
                s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(q[j], a1), s[j]);
            }
            // Fold each output's halves (output 0 low, output 1 high), minus the offset.
            let folded = _mm512_add_epi32(
                _mm512_shuffle_i64x2::<0x44>(s0, s1),
                _mm512_shuffle_i64x2::<0xee>(s0, s1),
            );
            // SAFETY: block `yo / 292` is whole in `y0` and `y1` (see `tile_impl`).
            let (b0, b1) = unsafe { (ld256(y0, yo + 260), ld256(y1, yo + 260)) };
            let bs = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(b0), b1);
            let v = _mm512_sub_epi32(folded, _mm512_slli_epi32::<5>(_mm512_madd_epi16(bs, sc2)));
            pairs[p] = v;
        }
        // Lane totals of the 16 outputs (8 lanes each, two outputs per register) by an
        // unpack-and-add tree: per 128-bit lane, 4 + 4 -> ... -> one 4-lane partial per
        // output, then the two partials of each output, then back to output order.
        let mut t = [_mm512_setzero_si512(); 2];
        for (q, t) in t.iter_mut().enumerate() {
            let (a, b) = (pairs[2 * q], pairs[2 * q + 1]);
            *t = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
        }
        let u = _mm512_add_epi32(
            _mm512_unpacklo_epi64(t[0], t[1]),
            _mm512_unpackhi_epi64(t[0], t[1]),
        );
        let z = _mm512_add_epi32(
            _mm512_shuffle_i64x2::<0b10_00_10_00>(u, u),
            _mm512_shuffle_i64x2::<0b11_01_11_01>(u, u),
        );
        // The low half of z holds outputs 0 2 4 6 | 1 3 5 7.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        [_mm256_permutevar8x32_epi32(
            _mm512_castsi512_si256(z),
            order,
        )]
    }

    tiled_driver!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
        sums,
        1
    );
    tiled_q3_k!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni");
    tiled_driver!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
        q3_k_sums,
        1,
        q3_k_impl,
        q3_k,
        Q3_K_BYTES,
        108,
        GK3
    );
    tiled_k45!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
        q4_k_sums,
        Q4_K_BYTES,
        false
    );
    tiled_k45!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
        q5_k_sums,
        Q5_K_BYTES,
        true
    );
    tiled_driver_min!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
        q4_k_sums,
        q4_k_impl,
        q4_k,
        Q4_K_BYTES
    );
    tiled_driver_min!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
        q5_k_sums,
        q5_k_impl,
        q5_k,
        Q5_K_BYTES
    );
}
