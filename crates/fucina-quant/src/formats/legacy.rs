//! Legacy 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (+ the Q8_1 activation form).
//!
//! Layouts (little-endian, packed, no padding):
//!
//! | type | bytes | fields |
//! |------|-------|--------|
//! | Q4_0 | 18 | `d: f16`, `qs: [u8; 16]` — element `j` is `qs[j] & 15` (j < 16) or `qs[j-16] >> 4`; value `d·(q-8)` |
//! | Q4_1 | 20 | `d: f16`, `m: f16`, `qs: [u8; 16]` — value `d·q + m` |
//! | Q5_0 | 22 | `d: f16`, `qh: u32` (bit j = 5th bit of element j), `qs: [u8; 16]` — value `d·(q-16)` |
//! | Q5_1 | 24 | `d: f16`, `m: f16`, `qh: u32`, `qs: [u8; 16]` — value `d·q + m` |
//! | Q8_0 | 34 | `d: f16`, `qs: [i8; 32]` — value `d·q` |
//! | Q8_1 (activations) | 36 | `d: f16`, `s: f16` (= d·Σq), `qs: [i8; 32]` |
//!
//! The dequantizers reproduce gguf-py's float operations in the same order, so
//! the results are bit-identical; the quantizers follow gguf-py (= ggml's `_ref`).

use super::kquants::hsum_lanes8;
use super::{f16_at, put_f16, roundf};

/// Elements per legacy block.
pub const QK: usize = 32;
/// Bytes of a Q4_0 block.
pub const Q4_0_BYTES: usize = 18;
/// Bytes of a Q4_1 block.
pub const Q4_1_BYTES: usize = 20;
/// Bytes of a Q5_0 block.
pub const Q5_0_BYTES: usize = 22;
/// Bytes of a Q5_1 block.
pub const Q5_1_BYTES: usize = 24;
/// Bytes of a Q8_0 block.
pub const Q8_0_BYTES: usize = 34;
/// Bytes of a Q8_1 activation block (ggml's current `block_q8_1`).
pub const Q8_1_BYTES: usize = 36;

fn nibble(qs: &[u8], j: usize) -> u8 {
    if j < QK / 2 {
        qs[j] & 0x0f
    } else {
        qs[j - QK / 2] >> 4
    }
}

pub(crate) fn dequantize_q4_0(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_0_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for (j, y) in y.iter_mut().enumerate() {
            *y = d * f32::from(nibble(&b[2..], j) as i8 - 8);
        }
    }
}

pub(crate) fn dequantize_q4_1(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_1_BYTES).zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        for (j, y) in y.iter_mut().enumerate() {
            *y = d * f32::from(nibble(&b[4..], j)) + m;
        }
    }
}

fn q5(qh: u32, qs: &[u8], j: usize) -> u8 {
    nibble(qs, j) | ((((qh >> j) & 1) as u8) << 4)
}

pub(crate) fn dequantize_q5_0(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_0_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        for (j, y) in y.iter_mut().enumerate() {
            *y = d * f32::from(q5(qh, &b[6..], j) as i8 - 16);
        }
    }
}

pub(crate) fn dequantize_q5_1(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_1_BYTES).zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        for (j, y) in y.iter_mut().enumerate() {
            *y = d * f32::from(q5(qh, &b[8..], j)) + m;
        }
    }
}

pub(crate) fn dequantize_q8_0(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q8_0_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for (&q, y) in b[2..].iter().zip(y.iter_mut()) {
            *y = f32::from(q as i8) * d;
        }
    }
}

/// Index of the first element with the largest magnitude (numpy `argmax(abs(x))`).
fn signed_absmax(x: &[f32]) -> f32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if v.abs() > x[best].abs() {
            best = i;
        }
    }
    x[best]
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

fn inv(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

/// `trunc(v)` clamped to `0..=max` the way gguf-py's `astype(uint8).clip(0, max)` does
/// for the in-range values a quantizer produces.
fn trunc_clip(v: f32, max: u8) -> u8 {
    (v.trunc() as u8).min(max)
}

fn pack_nibbles(q: &[u8; QK], qs: &mut [u8]) {
    for j in 0..QK / 2 {
        qs[j] = (q[j] & 0x0f) | (q[j + QK / 2] << 4);
    }
}

fn pack_qh(q: &[u8; QK]) -> [u8; 4] {
    let mut qh = 0u32;
    for (j, &v) in q.iter().enumerate() {
        qh |= u32::from(v >> 4) << j;
    }
    qh.to_le_bytes()
}

pub(crate) fn quantize_q4_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(Q4_0_BYTES)) {
        let d = signed_absmax(x) / -8.0;
        let id = inv(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = trunc_clip(v * id + 8.5, 15);
        }
        put_f16(b, 0, d);
        pack_nibbles(&q, &mut b[2..]);
    }
}

pub(crate) fn quantize_q4_1(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(Q4_1_BYTES)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inv(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = trunc_clip((v - min) * id + 0.5, 15);
        }
        put_f16(b, 0, d);
        put_f16(b, 2, min);
        pack_nibbles(&q, &mut b[4..]);
    }
}

pub(crate) fn quantize_q5_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(Q5_0_BYTES)) {
        let d = signed_absmax(x) / -16.0;
        let id = inv(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = trunc_clip(v * id + 16.5, 31);
        }
        put_f16(b, 0, d);
        b[2..6].copy_from_slice(&pack_qh(&q));
        pack_nibbles(&q, &mut b[6..]);
    }
}

pub(crate) fn quantize_q5_1(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(Q5_1_BYTES)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inv(d);
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = trunc_clip((v - min) * id + 0.5, 31);
        }
        put_f16(b, 0, d);
        put_f16(b, 2, min);
        b[4..8].copy_from_slice(&pack_qh(&q));
        pack_nibbles(&q, &mut b[8..]);
    }
}

/// How a Q8 block maps `x` to an integer.
#[derive(Clone, Copy)]
enum Q8Rounding {
    /// ggml's C reference (and gguf-py): `roundf(x · (1/d))`, ties away from zero.
    Reference,
    /// ggml's x86 (AVX/AVX2) activation quantizer: `round_ties_even(x · (127/amax))`.
    X86,
}

/// Quantize one 32-block to Q8_0; returns the integer sum of the quants and the unrounded scale.
fn q8_block(x: &[f32], b: &mut [u8], rounding: Q8Rounding) -> (i32, f32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    put_f16(b, 0, d);
    let mut sum = 0i32;
    let id = match rounding {
        Q8Rounding::Reference => inv(d),
        Q8Rounding::X86 if amax != 0.0 => 127.0 / amax,
        Q8Rounding::X86 => 0.0,
    };
    for (q, &v) in b[2..].iter_mut().zip(x) {
        let r = match rounding {
            Q8Rounding::Reference => roundf(v * id) as i8,
            Q8Rounding::X86 => (v * id).round_ties_even() as i8,
        };
        sum += i32::from(r);
        *q = r as u8;
    }
    (sum, d)
}

/// Quantize to Q8_0 as ggml's `quantize_row_q8_0_ref` (gguf-py's `quantize`).
pub(crate) fn quantize_q8_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        q8_block(x, b, Q8Rounding::Reference);
    }
}

/// Quantize activations to Q8_0 as ggml's x86 `quantize_row_q8_0` does (the
/// `from_float` llama.cpp runs on this machine kind): scale `127/amax`, ties to even.
/// It differs from [`quantize_q8_0`] only in rare last-bit roundings, but those move
/// logits measurably, so the activation path follows llama.cpp's executed code.
pub(crate) fn quantize_q8_0_act(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        q8_block(x, b, Q8Rounding::X86);
    }
}

/// Quantize activations to Q8_1: Q8_0 quants plus `s = d·Σq`, rounded as ggml's x86
/// `quantize_row_q8_1` (see [`quantize_q8_0_act`]).
pub(crate) fn quantize_q8_1(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
        let mut tmp = [0u8; Q8_0_BYTES];
        let (sum, d) = q8_block(x, &mut tmp, Q8Rounding::X86);
        b[0..2].copy_from_slice(&tmp[0..2]);
        put_f16(b, 2, sum as f32 * d);
        b[4..].copy_from_slice(&tmp[2..]);
    }
}

// ---- scalar dot products (the oracle for the SIMD kernels) ----------------------------
//
// Each block contributes `(d_w·d_a)·Σ q_w·q_a` (plus `m_w·s_a` for the types with a
// min); blocks are accumulated in order in one f32, except Q4_0 / Q5_0 / Q8_0, which
// keep ggml's eight lanes (see `lanes_block`).

#[inline]
fn isum(a: impl Iterator<Item = i32>) -> i32 {
    a.sum()
}

fn act_q8(a: &[u8]) -> impl Iterator<Item = i32> + '_ {
    a.iter().map(|&v| i32::from(v as i8))
}

/// ggml's AVX2 kernels (and llamafile's tinyBLAS) for Q8_0-activation weights keep
/// eight f32 lanes: lane `l` gets `fma(d_w·d_a, Σ_{j=4l..4l+3} q_w·q_a, lane)` per
/// block, and the lanes are summed once at the end (`hsum_float_8`). Q4_0, Q5_0 and
/// Q8_0 follow that order exactly, so the scalar oracle, the SIMD kernels and
/// llama.cpp agree to the bit.
#[inline]
fn lanes_block(acc: &mut [f32; 8], d: f32, prod: impl Fn(usize) -> i32) {
    for (l, lane) in acc.iter_mut().enumerate() {
        let p: i32 = (4 * l..4 * l + 4).map(&prod).sum();
        *lane = d.mul_add(p as f32, *lane);
    }
}

/// Q4_0 weights · Q8_0 activations.
pub(crate) fn dot_q4_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in w.chunks_exact(Q4_0_BYTES).zip(a.chunks_exact(Q8_0_BYTES)) {
        let ya = &y[2..];
        lanes_block(&mut acc, f16_at(x, 0) * f16_at(y, 0), |j| {
            (i32::from(nibble(&x[2..], j)) - 8) * i32::from(ya[j] as i8)
        });
    }
    hsum_lanes8(&acc)
}

/// Q4_1 weights · Q8_1 activations.
pub(crate) fn dot_q4_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(Q4_1_BYTES).zip(a.chunks_exact(Q8_1_BYTES)) {
        let s = isum(
            (0..QK)
                .map(|j| i32::from(nibble(&x[4..], j)))
                .zip(act_q8(&y[4..]))
                .map(|(p, q)| p * q),
        );
        acc += (f16_at(x, 0) * f16_at(y, 0)) * s as f32 + f16_at(x, 2) * f16_at(y, 2);
    }
    acc
}

/// Q5_0 weights · Q8_0 activations.
pub(crate) fn dot_q5_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in w.chunks_exact(Q5_0_BYTES).zip(a.chunks_exact(Q8_0_BYTES)) {
        let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
        let ya = &y[2..];
        lanes_block(&mut acc, f16_at(x, 0) * f16_at(y, 0), |j| {
            (i32::from(q5(qh, &x[6..], j)) - 16) * i32::from(ya[j] as i8)
        });
    }
    hsum_lanes8(&acc)
}

/// Q5_1 weights · Q8_1 activations.
pub(crate) fn dot_q5_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(Q5_1_BYTES).zip(a.chunks_exact(Q8_1_BYTES)) {
        let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
        let s = isum(
            (0..QK)
                .map(|j| i32::from(q5(qh, &x[8..], j)))
                .zip(act_q8(&y[4..]))
                .map(|(p, q)| p * q),
        );
        acc += (f16_at(x, 0) * f16_at(y, 0)) * s as f32 + f16_at(x, 2) * f16_at(y, 2);
    }
    acc
}

/// Q8_0 weights · Q8_0 activations.
pub(crate) fn dot_q8_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in w.chunks_exact(Q8_0_BYTES).zip(a.chunks_exact(Q8_0_BYTES)) {
        let ya = &y[2..];
        lanes_block(&mut acc, f16_at(x, 0) * f16_at(y, 0), |j| {
            (i32::from(x[2 + j] as i8)) * i32::from(ya[j] as i8)
        });
    }
    hsum_lanes8(&acc)
}
