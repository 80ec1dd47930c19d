//! Ternary formats TQ1_0 and TQ2_0 (256-element super-blocks, values in {−1, 0, 1}·d).
//!
//! | type | bytes | fields, in order |
//! |------|-------|------------------|
//! | TQ1_0 | 54 | `qs: [u8; 48]` (5 trits per byte, base-3 fixed point), `qh: [u8; 4]` (4 trits per byte), `d: f16` |
//! | TQ2_0 | 66 | `qs: [u8; 64]` (2 bits per element, value = q − 1), `d: f16` |
//!
//! A TQ1_0 byte holds trits `t_k` as `ceil(Σ t_k·3^(4−k) · 256 / 243)`; trit `k` is
//! recovered as `((byte·3^k mod 256)·3) >> 8`. Element order: bytes 0..32 give
//! elements `k·32 + l`, bytes 32..48 give `160 + k·16 + l`, `qh` gives `240 + k·4 + l`.

use super::{f16_at, put_f16, roundf};

const QK_K: usize = 256;
/// Bytes of a TQ1_0 block.
pub const TQ1_0_BYTES: usize = 54;
/// Bytes of a TQ2_0 block.
pub const TQ2_0_BYTES: usize = 66;

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// TQ1_0: (byte index, power index) of element `i`.
#[inline]
fn tq1_pos(i: usize) -> (usize, usize) {
    if i < 160 {
        (i % 32, i / 32)
    } else if i < 240 {
        (32 + (i - 160) % 16, (i - 160) / 16)
    } else {
        (48 + (i - 240) % 4, (i - 240) / 4)
    }
}

/// TQ1_0: the trit (0, 1 or 2) of element `i` of a block.
#[inline]
pub(crate) fn tq1_trit(b: &[u8], i: usize) -> u8 {
    let (byte, k) = tq1_pos(i);
    let v = b[byte].wrapping_mul(POW3[k]);
    ((u16::from(v) * 3) >> 8) as u8
}

pub(crate) fn dequantize_tq1_0(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(TQ1_0_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 52);
        for (i, y) in y.iter_mut().enumerate() {
            *y = d * f32::from(tq1_trit(b, i) as i8 - 1);
        }
    }
}

/// TQ2_0: the 2-bit code (value + 1) of element `i`.
#[inline]
pub(crate) fn tq2_code(qs: &[u8], i: usize) -> u8 {
    let (half, j, l) = (i / 128, (i % 128) / 32, i % 32);
    (qs[half * 32 + l] >> (2 * j)) & 3
}

pub(crate) fn dequantize_tq2_0(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(TQ2_0_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 64);
        for (i, y) in y.iter_mut().enumerate() {
            *y = d * f32::from(tq2_code(b, i) as i8 - 1);
        }
    }
}

/// Trits `round(x/amax) + 1` of one block, and `amax`.
fn trits(x: &[f32]) -> ([u8; QK_K], f32) {
    let d = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let id = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut q = [0u8; QK_K];
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (roundf(v * id) as i8 + 1) as u8;
    }
    (q, d)
}

pub(crate) fn quantize_tq1_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(TQ1_0_BYTES))
    {
        let (q, d) = trits(x);
        let mut acc = [0u16; 52];
        for (i, &t) in q.iter().enumerate() {
            let (byte, k) = tq1_pos(i);
            // Within a byte, the first trit is the most significant base-3 digit (3^4).
            acc[byte] += u16::from(t) * u16::from(POW3[4 - k]);
        }
        for (o, &v) in b[..52].iter_mut().zip(&acc) {
            *o = (v * 256).div_ceil(243) as u8;
        }
        put_f16(b, 52, d);
    }
}

pub(crate) fn quantize_tq2_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(TQ2_0_BYTES))
    {
        let (q, d) = trits(x);
        b[..64].fill(0);
        for (i, &t) in q.iter().enumerate() {
            let (half, j, l) = (i / 128, (i % 128) / 32, i % 32);
            b[half * 32 + l] |= t << (2 * j);
        }
        put_f16(b, 64, d);
    }
}
