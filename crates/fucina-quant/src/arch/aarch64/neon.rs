//! AArch64 Advanced SIMD (NEON) dot kernels for baseline ARMv8.0-A.
//!
//! No `dotprod`: its intrinsic (`vdotq_s32`) is not stable Rust, so the integer dots
//! are widening multiplies (`smull`, exact: any i8·i8 fits i16) folded by pairwise
//! widening adds into i32 lanes, lane `l` of [`dot4`] holding the sum of products
//! `4l..4l+3` — the same grouping as ggml's AVX2 `madd` lanes.
//!
//! Every quantized kernel is bitwise the scalar reference on every input: the integer
//! block sums are exact (i32, far from overflow for the value ranges each format
//! allows), and the float steps are the reference's own, in its order. Q4_0, Q5_0,
//! Q8_0 and Q6_K keep ggml's eight f32 lanes as two 4-lane FMA accumulators, reduced
//! as `hsum_lanes8`; the other formats do their per-block float arithmetic in scalar
//! code, expression for expression as the reference. The float kernels (F32, F16,
//! BF16) sum in four 4-lane FMA accumulators, so they differ from the in-order scalar
//! sum by summation order only (bounded; tails and short rows are summed in order).
//!
//! Q4_0, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K are written once as `_rows` kernels over `N`
//! activation rows (each weight block decoded once for all of them, every row with its
//! own accumulators): `N = 1` is the single-row dot, `N = 4` the multi-row (GEMM) tile
//! that [`crate::gemm::TileDot`] installs, so the two are bitwise equal by construction.

use core::arch::aarch64::*;
use core::arch::asm;

use fucina_gguf::GgmlType;

use crate::arch::{widen_bf16, widen_f16, widen_f32};
use crate::formats::iq::{iq4_xs_scales, KVALUES_IQ4NL};
use crate::formats::kquants::{bsum, k_scale_min, q3_k_scales};
use crate::formats::{f16_at, f32_at, VecDotFn};
use crate::gemm::TileFn;

/// The features this module's kernels require.
pub(crate) const FEATURES: &[&str] = &["neon"];

/// Byte `k` selects bit `k % 8` (see [`bits_x10`]).
const BIT_MASKS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];

// ---- primitives -------------------------------------------------------------------------

/// 16 bytes at the start of `b`.
#[target_feature(enable = "neon")]
#[inline]
fn ld_u8(b: &[u8]) -> uint8x16_t {
    let b = &b[..16];
    // SAFETY: `b` has 16 readable bytes and a byte `ld1` needs no alignment.
    unsafe { vld1q_u8(b.as_ptr()) }
}

/// 16 bytes at the start of `b`, as i8.
#[target_feature(enable = "neon")]
#[inline]
fn ld_s8(b: &[u8]) -> int8x16_t {
    vreinterpretq_s8_u8(ld_u8(b))
}

/// 8 bytes at the start of `b`.
#[target_feature(enable = "neon")]
#[inline]
fn ld_u8x8(b: &[u8]) -> uint8x8_t {
    let b = &b[..8];
    // SAFETY: `b` has 8 readable bytes and a byte `ld1` needs no alignment.
    unsafe { vld1_u8(b.as_ptr()) }
}

/// Four i32 at the start of `v`.
#[target_feature(enable = "neon")]
#[inline]
fn ld_i32x4(v: &[i32]) -> int32x4_t {
    let v = &v[..4];
    // SAFETY: `v` has 4 readable i32, aligned as `&[i32]` guarantees.
    unsafe { vld1q_s32(v.as_ptr()) }
}

#[target_feature(enable = "neon")]
#[inline]
fn s8(v: uint8x16_t) -> int8x16_t {
    vreinterpretq_s8_u8(v)
}

/// Lane `l` = Σ_{k<4} x[4l+k]·y[4l+k], exact (each product fits i16, sums are i32).
#[target_feature(enable = "neon")]
#[inline]
fn dot4(x: int8x16_t, y: int8x16_t) -> int32x4_t {
    let lo = vpaddlq_s16(vmull_s8(vget_low_s8(x), vget_low_s8(y)));
    let hi = vpaddlq_s16(vmull_high_s8(x, y));
    vpaddq_s32(lo, hi)
}

/// Σ_{j<32} q_j·y_j for the 32 quants `q0` (0..16), `q1` (16..32) and the i8 at `y[..32]`.
#[target_feature(enable = "neon")]
#[inline]
fn dot32(q0: int8x16_t, q1: int8x16_t, y: &[u8]) -> i32 {
    vaddvq_s32(vaddq_s32(
        dot4(q0, ld_s8(&y[0..16])),
        dot4(q1, ld_s8(&y[16..32])),
    ))
}

/// Low nibbles of 16 packed bytes.
#[target_feature(enable = "neon")]
#[inline]
fn lo_nib(b: uint8x16_t) -> uint8x16_t {
    vandq_u8(b, vdupq_n_u8(0x0f))
}

/// High nibbles of 16 packed bytes.
#[target_feature(enable = "neon")]
#[inline]
fn hi_nib(b: uint8x16_t) -> uint8x16_t {
    vshrq_n_u8::<4>(b)
}

/// `v >> n` per byte (`n` < 8).
#[target_feature(enable = "neon")]
#[inline]
fn shr(v: uint8x16_t, n: usize) -> uint8x16_t {
    vshlq_u8(v, vdupq_n_s8(-(n as i8)))
}

/// Byte `k` = 0x10 where bit `k` of `bits` is set, else 0 (the 5th quant bit).
#[target_feature(enable = "neon")]
#[inline]
fn bits_x10(bits: u16) -> uint8x16_t {
    let v = vcombine_u8(vdup_n_u8(bits as u8), vdup_n_u8((bits >> 8) as u8));
    vandq_u8(vtstq_u8(v, ld_u8(&BIT_MASKS)), vdupq_n_u8(0x10))
}

/// ggml's `hsum_float_8` of lanes `acc[0]` = 0..4, `acc[1]` = 4..8:
/// `((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))` (`kquants::hsum_lanes8`).
#[target_feature(enable = "neon")]
#[inline]
fn hsum8(acc: [float32x4_t; 2]) -> f32 {
    let s = vaddq_f32(acc[0], acc[1]);
    (vgetq_lane_f32::<0>(s) + vgetq_lane_f32::<2>(s))
        + (vgetq_lane_f32::<1>(s) + vgetq_lane_f32::<3>(s))
}

/// One block of ggml's eight-lane order (`legacy::lanes_block`): lane `l` of the 32
/// products (quants `q0`, `q1` by the i8 at `y[..32]`) gets `fma(d, Σ_{4l..4l+3}, lane)`.
#[target_feature(enable = "neon")]
#[inline]
fn lanes_block(acc: &mut [float32x4_t; 2], d: f32, q0: int8x16_t, q1: int8x16_t, y: &[u8]) {
    let d = vdupq_n_f32(d);
    acc[0] = vfmaq_f32(acc[0], d, vcvtq_f32_s32(dot4(q0, ld_s8(&y[0..16]))));
    acc[1] = vfmaq_f32(acc[1], d, vcvtq_f32_s32(dot4(q1, ld_s8(&y[16..32]))));
}

/// The IQ4_NL code book as a 16-byte lookup table.
#[target_feature(enable = "neon")]
#[inline]
fn iq4nl_table() -> int8x16_t {
    ld_s8(&KVALUES_IQ4NL.map(|v| v as u8))
}

// ---- legacy 32-element blocks -----------------------------------------------------------

/// Whole blocks every row holds: the fewest of the weight row's `nw` and each
/// activation row's (blocks of `ab` bytes); for one row, what `chunks_exact` + `zip` use.
#[inline]
fn blocks<const N: usize>(nw: usize, a: &[&[u8]; N], ab: usize) -> usize {
    a.iter().fold(nw, |n, y| n.min(y.len() / ab))
}

/// A Q8_0-activation weight row (`ts`-byte blocks whose first field is the f16 scale)
/// against `N` activation rows in ggml's eight-lane order: `decode` gives a block's 32
/// signed quants once, reused for every activation row; each output keeps its own
/// lanes and runs the single-row arithmetic (`N = 1` *is* the single-row kernel).
#[target_feature(enable = "neon")]
#[inline]
fn legacy_rows<const N: usize>(
    w: &[u8],
    ts: usize,
    a: &[&[u8]; N],
    decode: impl Fn(&[u8]) -> (int8x16_t, int8x16_t),
) -> [f32; N] {
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for b in 0..blocks(w.len() / ts, a, 34) {
        let x = &w[ts * b..ts * (b + 1)];
        let (q0, q1) = decode(x);
        let dx = f16_at(x, 0);
        for (acc, y) in acc.iter_mut().zip(a) {
            let y = &y[34 * b..34 * (b + 1)];
            lanes_block(acc, dx * f16_at(y, 0), q0, q1, &y[2..34]);
        }
    }
    acc.map(|acc| hsum8(acc))
}

// Q4_0 (−8..=7) · Q8_0, eight lanes.
#[target_feature(enable = "neon")]
fn q4_0_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    let eight = vdupq_n_s8(8);
    legacy_rows(w, 18, a, |x| {
        let b = ld_u8(&x[2..18]);
        (
            vsubq_s8(s8(lo_nib(b)), eight),
            vsubq_s8(s8(hi_nib(b)), eight),
        )
    })
}

// Q4_1 (0..=15) · Q8_1, plus m·s per block.
#[target_feature(enable = "neon")]
fn q4_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(20).zip(a.chunks_exact(36)) {
        let b = ld_u8(&x[4..20]);
        let s = dot32(s8(lo_nib(b)), s8(hi_nib(b)), &y[4..36]);
        acc += (f16_at(x, 0) * f16_at(y, 0)) * s as f32 + f16_at(x, 2) * f16_at(y, 2);
    }
    acc
}

// Q5_0 (−16..=15) · Q8_0, eight lanes.
#[target_feature(enable = "neon")]
fn q5_0_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    let sixteen = vdupq_n_s8(16);
    legacy_rows(w, 22, a, |x| {
        let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
        let b = ld_u8(&x[6..22]);
        (
            vsubq_s8(s8(vorrq_u8(lo_nib(b), bits_x10(qh as u16))), sixteen),
            vsubq_s8(
                s8(vorrq_u8(hi_nib(b), bits_x10((qh >> 16) as u16))),
                sixteen,
            ),
        )
    })
}

// Q5_1 (0..=31) · Q8_1, plus m·s per block.
#[target_feature(enable = "neon")]
fn q5_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(24).zip(a.chunks_exact(36)) {
        let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
        let b = ld_u8(&x[8..24]);
        let q0 = s8(vorrq_u8(lo_nib(b), bits_x10(qh as u16)));
        let q1 = s8(vorrq_u8(hi_nib(b), bits_x10((qh >> 16) as u16)));
        let s = dot32(q0, q1, &y[4..36]);
        acc += (f16_at(x, 0) * f16_at(y, 0)) * s as f32 + f16_at(x, 2) * f16_at(y, 2);
    }
    acc
}

// Q8_0 (any i8) · Q8_0, eight lanes.
#[target_feature(enable = "neon")]
fn q8_0_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    legacy_rows(w, 34, a, |x| (ld_s8(&x[2..18]), ld_s8(&x[18..34])))
}

// IQ4_NL (code book −127..=113) · Q8_0.
#[target_feature(enable = "neon")]
fn iq4_nl_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let table = iq4nl_table();
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        acc += (f16_at(x, 0) * f16_at(y, 0)) * table_block_sum(table, x, y) as f32;
    }
    acc
}

/// The exact sum of an 18-byte block's 32 products with a Q8_0 block, its nibbles
/// indexing `table` (IQ4_NL's code book, Q4_0's `q − 8`).
#[target_feature(enable = "neon")]
#[inline]
fn table_block_sum(table: int8x16_t, x: &[u8], y: &[u8]) -> i32 {
    let b = ld_u8(&x[2..18]);
    dot32(
        vqtbl1q_s8(table, lo_nib(b)),
        vqtbl1q_s8(table, hi_nib(b)),
        &y[2..34],
    )
}

// Q4_0 / IQ4_NL · Q8_0 in llama.cpp's repacked whole-block order (`crate::whole_block`):
// each block's exact integer sum, one fused multiply-add by `d_w·d_a` per block.
#[target_feature(enable = "neon")]
fn whole_blocks(table: int8x16_t, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let s = table_block_sum(table, x, y);
        acc = (s as f32).mul_add(f16_at(x, 0) * f16_at(y, 0), acc);
    }
    acc
}

#[target_feature(enable = "neon")]
fn whole_block_tile(table: &[i8; 16], ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    let nw = ws.len();
    if nw == 0 || stride == 0 {
        return;
    }
    // SAFETY: `table` is 16 readable bytes.
    let t = unsafe { vld1q_s8(table.as_ptr()) };
    for (o, a) in out.chunks_exact_mut(nw).zip(acts.chunks_exact(stride)) {
        for (o, w) in o.iter_mut().zip(ws) {
            *o = whole_blocks(t, w, a);
        }
    }
}

#[target_feature(enable = "neon")]
fn q4_0_whole_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    whole_block_tile(&crate::whole_block::Q4_0_VALUES, ws, acts, stride, out);
}

#[target_feature(enable = "neon")]
fn iq4_nl_whole_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    whole_block_tile(&KVALUES_IQ4NL, ws, acts, stride, out);
}

/// The whole-block tile of Q4_0 / IQ4_NL (`crate::whole_block::tile`'s NEON form).
pub(crate) fn whole_block_kernel(ty: GgmlType) -> Option<TileFn> {
    match ty {
        GgmlType::Q4_0 => Some(entry::q4_0_whole_tile),
        GgmlType::IQ4_NL => Some(entry::iq4_nl_whole_tile),
        _ => None,
    }
}

// ---- K-quants (256-element super-blocks, Q8_K activations) --------------------------------

/// Σ_{g<16} scale(g)·Σ_{k<16} q·a over the 16-element groups of a super-block, where
/// `q(c, h)` gives the 16 quants of group `2c + h` (elements `32c + 16h..`), each
/// multiplied by the Q8_K quants of the same elements. Exact in i32.
#[target_feature(enable = "neon")]
#[inline]
fn groups16(
    y: &[u8],
    scale: impl Fn(usize) -> i32,
    q: impl Fn(usize, usize) -> int8x16_t,
) -> int32x4_t {
    let mut acc = vdupq_n_s32(0);
    for c in 0..8 {
        for h in 0..2 {
            let g = 2 * c + h;
            let p = dot4(q(c, h), ld_s8(&y[4 + 16 * g..20 + 16 * g]));
            acc = vmlaq_n_s32(acc, p, scale(g));
        }
    }
    acc
}

/// Q2_K / Q3_K: the 2-bit field of chunk `c` (elements `32c..32c+32`), half `h`.
#[target_feature(enable = "neon")]
#[inline]
fn q2_field(qs: &[u8], c: usize, h: usize) -> uint8x16_t {
    let (half, j) = (c / 4, c % 4);
    vandq_u8(shr(ld_u8(&qs[32 * half + 16 * h..]), 2 * j), vdupq_n_u8(3))
}

// Q2_K (0..=3, 4-bit scales and mins) · Q8_K.
#[target_feature(enable = "neon")]
fn q2_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(84).zip(a.chunks_exact(292)) {
        let (sc, qs) = (&x[0..16], &x[16..80]);
        let isum = vaddvq_s32(groups16(
            y,
            |g| i32::from(sc[g] & 0x0f),
            |c, h| s8(q2_field(qs, c, h)),
        ));
        let summs: i32 = (0..16).map(|g| i32::from(sc[g] >> 4) * bsum(y, g)).sum();
        let da = f32_at(y, 0);
        acc += (f16_at(x, 80) * da) * isum as f32 - (f16_at(x, 82) * da) * summs as f32;
    }
    acc
}

// Q3_K (−4..=3, signed 6-bit scales) · Q8_K.
#[target_feature(enable = "neon")]
fn q3_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(110).zip(a.chunks_exact(292)) {
        let (hmask, qs) = (&x[0..32], &x[32..96]);
        let sc = q3_k_scales(&x[96..108]);
        let isum = vaddvq_s32(groups16(
            y,
            |g| i32::from(sc[g]),
            |c, h| {
                // Element i's high bit is bit i/32 (= c) of hmask[i % 32]; clear means −4.
                let high = vtstq_u8(ld_u8(&hmask[16 * h..]), vdupq_n_u8(1 << c));
                vsubq_s8(s8(q2_field(qs, c, h)), s8(vbicq_u8(vdupq_n_u8(4), high)))
            },
        ));
        acc += (f16_at(x, 108) * f32_at(y, 0)) * isum as f32;
    }
    acc
}

/// Q4_K / Q5_K: Σ_g scale_g·Σ q·a over the eight 32-element sub-blocks, `q[2g + h]`
/// holding the 16 quants `16h..16h+16` of sub-block `g`.
#[target_feature(enable = "neon")]
#[inline]
fn k_isum(y: &[u8], sc: &[u8; 8], q: &[int8x16_t; 16]) -> i32 {
    let mut acc = vdupq_n_s32(0);
    for (g, &s) in sc.iter().enumerate() {
        let off = 4 + 32 * g;
        let p = vaddq_s32(
            dot4(q[2 * g], ld_s8(&y[off..off + 16])),
            dot4(q[2 * g + 1], ld_s8(&y[off + 16..off + 32])),
        );
        acc = vmlaq_n_s32(acc, p, i32::from(s));
    }
    vaddvq_s32(acc)
}

/// Q4_K / Q5_K: Σ_g min_g·(bsum of the sub-block's two groups).
fn k_summs(y: &[u8], mn: &[u8; 8]) -> i32 {
    (0..8)
        .map(|g| i32::from(mn[g]) * (bsum(y, 2 * g) + bsum(y, 2 * g + 1)))
        .sum()
}

/// Q4_K / Q5_K: low 4 bits of sub-block `g`, half `h` (low nibbles for even `g`).
#[target_feature(enable = "neon")]
#[inline]
fn k_nibbles(qs: &[u8], g: usize, h: usize) -> uint8x16_t {
    let b = ld_u8(&qs[32 * (g / 2) + 16 * h..]);
    if g.is_multiple_of(2) {
        lo_nib(b)
    } else {
        hi_nib(b)
    }
}

// Q4_K (0..=15, 6-bit scales and mins) · Q8_K: two f32 accumulators, one FMA each per
// super-block, as the reference. Each weight super-block is decoded once for all rows.
#[target_feature(enable = "neon")]
fn q4_k_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    let mut acc = [(0f32, 0f32); N];
    for b in 0..blocks(w.len() / 144, a, 292) {
        let x = &w[144 * b..144 * (b + 1)];
        let (sc, mn) = k_scale_min(&x[4..16]);
        let qs = &x[16..144];
        let q: [int8x16_t; 16] = core::array::from_fn(|k| s8(k_nibbles(qs, k / 2, k % 2)));
        let (dw, dmin) = (f16_at(x, 0), f16_at(x, 2));
        for ((acc, accm), y) in acc.iter_mut().zip(a) {
            let y = &y[292 * b..292 * (b + 1)];
            let isum = k_isum(y, &sc, &q);
            let summs = k_summs(y, &mn);
            let da = f32_at(y, 0);
            *acc = (isum as f32).mul_add(dw * da, *acc);
            *accm = (summs as f32).mul_add(dmin * da, *accm);
        }
    }
    acc.map(|(acc, accm)| acc - accm)
}

// Q5_K (0..=31) · Q8_K.
#[target_feature(enable = "neon")]
fn q5_k_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    let mut acc = [0f32; N];
    for b in 0..blocks(w.len() / 176, a, 292) {
        let x = &w[176 * b..176 * (b + 1)];
        let (sc, mn) = k_scale_min(&x[4..16]);
        let (qh, qs) = (&x[16..48], &x[48..176]);
        let q: [int8x16_t; 16] = core::array::from_fn(|k| {
            let (g, h) = (k / 2, k % 2);
            // The 5th bit of element i is bit g of qh[i % 32].
            let high = vtstq_u8(ld_u8(&qh[16 * h..]), vdupq_n_u8(1 << g));
            s8(vorrq_u8(
                k_nibbles(qs, g, h),
                vandq_u8(high, vdupq_n_u8(0x10)),
            ))
        });
        let (dw, dmin) = (f16_at(x, 0), f16_at(x, 2));
        for (acc, y) in acc.iter_mut().zip(a) {
            let y = &y[292 * b..292 * (b + 1)];
            let isum = k_isum(y, &sc, &q);
            let summs = k_summs(y, &mn);
            let da = f32_at(y, 0);
            *acc += (dw * da) * isum as f32 - (dmin * da) * summs as f32;
        }
    }
    acc
}

// Q6_K (u = 0..=63 stands for u − 32; i8 scales) · Q8_K, in ggml's eight AVX2 lanes:
// lane l sums scale·u·a over the elements with (i mod 32)/4 = l, less 32·(scale·bsum)
// of groups 2l and 2l+1, then one FMA per lane per super-block. Each weight super-block
// is decoded once for all rows.
#[target_feature(enable = "neon")]
fn q6_k_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for b in 0..blocks(w.len() / 210, a, 292) {
        let x = &w[210 * b..210 * (b + 1)];
        let (ql, qh, scales) = (&x[0..128], &x[128..192], &x[192..208]);
        let sc = |g: usize| i32::from(scales[g] as i8);
        // u[2c + h]: the unsigned quants of chunk c (elements 32c..32c+32), half h.
        let u: [int8x16_t; 16] = core::array::from_fn(|k| {
            let (c, h) = (k / 2, k % 2);
            let (half, j) = (c / 4, c % 4);
            let l = ld_u8(&ql[64 * half + 32 * (j % 2) + 16 * h..]);
            let low = if j < 2 { lo_nib(l) } else { hi_nib(l) };
            let high = vandq_u8(shr(ld_u8(&qh[32 * half + 16 * h..]), 2 * j), vdupq_n_u8(3));
            s8(vorrq_u8(low, vshlq_n_u8::<4>(high)))
        });
        let dw = f16_at(x, 208);
        for (acc, y) in acc.iter_mut().zip(a) {
            let y = &y[292 * b..292 * (b + 1)];
            let mut lanes = [vdupq_n_s32(0); 2];
            for (k, u) in u.iter().enumerate() {
                let p = dot4(*u, ld_s8(&y[4 + 16 * k..20 + 16 * k]));
                lanes[k % 2] = vmlaq_n_s32(lanes[k % 2], p, sc(k));
            }
            let sub: [i32; 8] = core::array::from_fn(|l| {
                32 * (sc(2 * l) * bsum(y, 2 * l) + sc(2 * l + 1) * bsum(y, 2 * l + 1))
            });
            let d = vdupq_n_f32(dw * f32_at(y, 0));
            for (h, acc) in acc.iter_mut().enumerate() {
                let v = vsubq_s32(lanes[h], ld_i32x4(&sub[4 * h..]));
                *acc = vfmaq_f32(*acc, d, vcvtq_f32_s32(v));
            }
        }
    }
    acc.map(|acc| hsum8(acc))
}

// IQ4_XS (code book, signed 6-bit scales) · Q8_K.
#[target_feature(enable = "neon")]
fn iq4_xs_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let table = iq4nl_table();
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(136).zip(a.chunks_exact(292)) {
        let sc = iq4_xs_scales(x);
        let mut isum = vdupq_n_s32(0);
        for (g, &s) in sc.iter().enumerate() {
            let b = ld_u8(&x[8 + 16 * g..24 + 16 * g]);
            let off = 4 + 32 * g;
            let p = vaddq_s32(
                dot4(vqtbl1q_s8(table, lo_nib(b)), ld_s8(&y[off..off + 16])),
                dot4(vqtbl1q_s8(table, hi_nib(b)), ld_s8(&y[off + 16..off + 32])),
            );
            isum = vmlaq_n_s32(isum, p, i32::from(s));
        }
        acc += (f16_at(x, 0) * f32_at(y, 0)) * vaddvq_s32(isum) as f32;
    }
    acc
}

// ---- float rows ------------------------------------------------------------------------

/// Four f16 at the start of `b`, widened exactly (`fcvtl`).
#[target_feature(enable = "neon")]
#[inline]
fn f16x4(b: &[u8]) -> float32x4_t {
    let h = vreinterpret_u16_u8(ld_u8x8(b));
    let r: float32x4_t;
    // SAFETY: `fcvtl` is a base Advanced SIMD instruction (the `neon` feature this
    // function requires); it reads only `h` and writes only `r`, touching no memory and
    // no stack. It may set FPSR's cumulative exception bits (signalling NaN inputs), so
    // `preserves_flags` is not claimed.
    unsafe {
        asm!(
            "fcvtl {r:v}.4s, {h:v}.4h",
            r = lateout(vreg) r,
            h = in(vreg) h,
            options(pure, nomem, nostack),
        );
    }
    r
}

/// Shared float dot: `load` widens 4 elements of `size` bytes to f32 lanes, `one`
/// widens a single element (for the tail, summed in order after the lanes).
#[target_feature(enable = "neon")]
#[inline]
fn float_dot(
    w: &[u8],
    a: &[u8],
    size: usize,
    load: impl Fn(&[u8]) -> float32x4_t,
    one: fn(&[u8]) -> f32,
) -> f32 {
    let n = (w.len() / size).min(a.len() / size);
    let step = 4 * size;
    let mut acc = [vdupq_n_f32(0.0); 4];
    let main = n / 16 * 16;
    for (x, y) in w[..main * size]
        .chunks_exact(4 * step)
        .zip(a[..main * size].chunks_exact(4 * step))
    {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = vfmaq_f32(*acc, load(&x[k * step..]), load(&y[k * step..]));
        }
    }
    let mut sum = vaddvq_f32(vaddq_f32(
        vaddq_f32(acc[0], acc[1]),
        vaddq_f32(acc[2], acc[3]),
    ));
    for i in main..n {
        sum += one(&w[i * size..]) * one(&a[i * size..]);
    }
    sum
}

// F32 · F32.
#[target_feature(enable = "neon")]
fn f32_f32(w: &[u8], a: &[u8]) -> f32 {
    float_dot(w, a, 4, |b| vreinterpretq_f32_u8(ld_u8(b)), widen_f32)
}

// F16 · F16 (products exact in f32).
#[target_feature(enable = "neon")]
fn f16_f16(w: &[u8], a: &[u8]) -> f32 {
    float_dot(w, a, 2, |b| f16x4(b), widen_f16)
}

// BF16 · BF16, widened by a 16-bit shift (products exact in f32).
#[target_feature(enable = "neon")]
fn bf16_bf16(w: &[u8], a: &[u8]) -> f32 {
    float_dot(
        w,
        a,
        2,
        |b| vreinterpretq_f32_u32(vshll_n_u16::<16>(vreinterpret_u16_u8(ld_u8x8(b)))),
        widen_bf16,
    )
}

// ---- single-row and multi-row (GEMM) forms of the `_rows` kernels ---------------------

/// Activation rows per multi-row call of a `_rows` kernel.
const TILE: usize = 4;

macro_rules! rows_forms {
    ($($rows:ident => $single:ident, $tile:ident;)*) => {$(
        // The single-row kernel: the `_rows` kernel on one activation row.
        #[target_feature(enable = "neon")]
        fn $single(w: &[u8], a: &[u8]) -> f32 {
            $rows::<1>(w, &[a])[0]
        }

        // The multi-row kernel: `TILE` activation rows per weight-row pass.
        #[target_feature(enable = "neon")]
        fn $tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            tile(ws, acts, stride, out, |w, a| $rows::<TILE>(w, a), |w, a| $rows::<1>(w, a));
        }
    )*};
}

rows_forms! {
    q4_0_rows => q4_0_q8_0, q4_0_tile;
    q5_0_rows => q5_0_q8_0, q5_0_tile;
    q8_0_rows => q8_0_q8_0, q8_0_tile;
    q4_k_rows => q4_k_q8_k, q4_k_tile;
    q5_k_rows => q5_k_q8_k, q5_k_tile;
    q6_k_rows => q6_k_q8_k, q6_k_tile;
}

/// The [`crate::gemm::TileFn`] contract over a `_rows` kernel: `out[t·nw + i]` = weight
/// row `i` · activation row `t`, `TILE` activation rows at a time (each weight block
/// decoded once for them), the remainder one by one. Every output is computed by the
/// same per-row code as the single-row kernel, so it is bitwise that kernel's result.
#[target_feature(enable = "neon")]
#[inline]
fn tile(
    ws: &[&[u8]],
    acts: &[u8],
    stride: usize,
    out: &mut [f32],
    rows: impl Fn(&[u8], &[&[u8]; TILE]) -> [f32; TILE],
    one: impl Fn(&[u8], &[&[u8]; 1]) -> [f32; 1],
) {
    let nw = ws.len();
    if nw == 0 {
        return;
    }
    let nt = out.len() / nw;
    let row = |t: usize| &acts[t * stride..(t + 1) * stride];
    let mut t = 0;
    while t + TILE <= nt {
        let a: [&[u8]; TILE] = core::array::from_fn(|k| row(t + k));
        for (i, w) in ws.iter().enumerate() {
            for (k, v) in rows(w, &a).into_iter().enumerate() {
                out[(t + k) * nw + i] = v;
            }
        }
        t += TILE;
    }
    for t in t..nt {
        for (i, w) in ws.iter().enumerate() {
            out[t * nw + i] = one(w, &[row(t)])[0];
        }
    }
}

/// The kernels as safe function pointers for the dispatch table and the GEMM tiles.
mod entry {
    macro_rules! safe_entries {
        ($($name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
            $(
                pub(crate) fn $name($($arg: $ty),*) $(-> $ret)? {
                    // SAFETY: `dispatch` (and `gemm`, for the tiles) installs these entries
                    // only for `Isa::Neon`, which is selectable only after run-time
                    // detection of every feature in `FEATURES` (this module's
                    // `#[target_feature]` set).
                    unsafe { super::$name($($arg),*) }
                }
            )*
        };
    }

    safe_entries! {
        q4_0_q8_0(w: &[u8], a: &[u8]) -> f32;
        q4_1_q8_1(w: &[u8], a: &[u8]) -> f32;
        q5_0_q8_0(w: &[u8], a: &[u8]) -> f32;
        q5_1_q8_1(w: &[u8], a: &[u8]) -> f32;
        q8_0_q8_0(w: &[u8], a: &[u8]) -> f32;
        iq4_nl_q8_0(w: &[u8], a: &[u8]) -> f32;
        q2_k_q8_k(w: &[u8], a: &[u8]) -> f32;
        q3_k_q8_k(w: &[u8], a: &[u8]) -> f32;
        q4_k_q8_k(w: &[u8], a: &[u8]) -> f32;
        q5_k_q8_k(w: &[u8], a: &[u8]) -> f32;
        q6_k_q8_k(w: &[u8], a: &[u8]) -> f32;
        iq4_xs_q8_k(w: &[u8], a: &[u8]) -> f32;
        f32_f32(w: &[u8], a: &[u8]) -> f32;
        f16_f16(w: &[u8], a: &[u8]) -> f32;
        bf16_bf16(w: &[u8], a: &[u8]) -> f32;
        q4_0_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);
        q5_0_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);
        q8_0_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);
        q4_k_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);
        q5_k_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);
        q6_k_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);
        q4_0_whole_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);
        iq4_nl_whole_tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);
    }
}

/// The NEON multi-row (GEMM) kernel for weights of type `ty`, if this ISA has one.
pub(crate) fn tile_kernel(ty: GgmlType) -> Option<TileFn> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => entry::q4_0_tile,
        Q5_0 => entry::q5_0_tile,
        Q8_0 => entry::q8_0_tile,
        Q4_K => entry::q4_k_tile,
        Q5_K => entry::q5_k_tile,
        Q6_K => entry::q6_k_tile,
        _ => return None,
    })
}

/// The NEON kernel for weights of type `ty`, if this ISA has one.
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
