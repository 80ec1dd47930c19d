//! The i-quants: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS.
//!
//! Layouts (little-endian, packed; all but IQ4_NL are 256-element super-blocks):
//!
//! | type | bytes | fields, in order |
//! |------|-------|------------------|
//! | IQ2_XXS | 66  | `d: f16`, `qs: [u32; 16]` — per 32 elements a pair (4 grid bytes; 4×7 sign bits + 4-bit scale) |
//! | IQ2_XS  | 74  | `d: f16`, `qs: [u16; 32]` (9-bit grid index + 7-bit sign index), `scales: [u8; 8]` (nibbles) |
//! | IQ2_S   | 82  | `d: f16`, `qs: [u8; 32]`, `signs: [u8; 32]`, `qh: [u8; 8]` (2 high index bits each), `scales: [u8; 8]` |
//! | IQ3_XXS | 98  | `d: f16`, `qs: [u8; 64]` (grid indices), `scales_signs: [u32; 8]` |
//! | IQ3_S   | 110 | `d: f16`, `qs: [u8; 64]`, `qh: [u8; 8]` (9th index bit), `signs: [u8; 32]`, `scales: [u8; 4]` |
//! | IQ1_S   | 50  | `d: f16`, `qs: [u8; 32]`, `qh: [u16; 8]` (3 high index bits ×4, 3-bit scale, delta sign) |
//! | IQ1_M   | 56  | `qs: [u8; 32]`, `qh: [u8; 16]`, `scales: [u16; 4]` (3-bit scales; f16 `d` spread over the top nibbles) |
//! | IQ4_NL  | 18  | `d: f16`, `qs: [u8; 16]` — Q4_0 nibble order, values from a 16-entry non-linear table |
//! | IQ4_XS  | 136 | `d: f16`, `scales_h: u16`, `scales_l: [u8; 4]`, `qs: [u8; 128]` |
//!
//! Dequantization repeats gguf-py's float operations in order (bit-identical;
//! gguf-py and ggml's C reference agree on every type here).

use super::iq_grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS,
};
use super::{f16_at, u16_at, u32_at};
use crate::half::f16_to_f32;

/// Bytes of an IQ2_XXS block.
pub const IQ2_XXS_BYTES: usize = 66;
/// Bytes of an IQ2_XS block.
pub const IQ2_XS_BYTES: usize = 74;
/// Bytes of an IQ2_S block.
pub const IQ2_S_BYTES: usize = 82;
/// Bytes of an IQ3_XXS block.
pub const IQ3_XXS_BYTES: usize = 98;
/// Bytes of an IQ3_S block.
pub const IQ3_S_BYTES: usize = 110;
/// Bytes of an IQ1_S block.
pub const IQ1_S_BYTES: usize = 50;
/// Bytes of an IQ1_M block.
pub const IQ1_M_BYTES: usize = 56;
/// Bytes of an IQ4_NL block.
pub const IQ4_NL_BYTES: usize = 18;
/// Bytes of an IQ4_XS block.
pub const IQ4_XS_BYTES: usize = 136;

/// The IQ4_NL / IQ4_XS code book.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The IQ1_S / IQ1_M grid offset.
pub const IQ1_DELTA: f32 = 0.125;

const QK_K: usize = 256;

#[inline]
fn grid_byte(row: u64, j: usize) -> u8 {
    (row >> (8 * j)) as u8
}

/// `v · (−1)` as the hardware multiply does it (gguf-py multiplies by a ±1 array):
/// a NaN passes through unchanged instead of having its sign flipped.
#[inline]
fn negate_like_mul(v: f32) -> f32 {
    if v.is_nan() {
        v
    } else {
        -v
    }
}

/// Write 8 values `db · grid[j] · (±1)` with sign bit `j` of `signs`.
#[inline]
fn put8(y: &mut [f32], db: f32, row: u64, signs: u8) {
    for (j, y) in y.iter_mut().enumerate() {
        let v = db * f32::from(grid_byte(row, j));
        *y = if (signs >> j) & 1 == 1 {
            negate_like_mul(v)
        } else {
            v
        };
    }
}

/// Write 4 values from a 4-coordinate grid row.
#[inline]
fn put4(y: &mut [f32], db: f32, row: u32, signs: u8, shift: usize) {
    for (j, y) in y.iter_mut().enumerate() {
        let v = db * f32::from((row >> (8 * j)) as u8);
        *y = if (signs >> (shift + j)) & 1 == 1 {
            negate_like_mul(v)
        } else {
            v
        };
    }
}

pub(crate) fn dequantize_iq2_xxs(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ2_XXS_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let aux0 = u32_at(b, 2 + 8 * ib);
            let aux1 = u32_at(b, 6 + 8 * ib);
            let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let row = IQ2XXS_GRID[((aux0 >> (8 * l)) & 0xff) as usize];
                put8(y, db, row, KSIGNS[((aux1 >> (7 * l)) & 0x7f) as usize]);
            }
        }
    }
}

/// The 16 IQ2_XS / IQ2_S block scales `d·(0.5 + s)·0.25`.
fn iq2_scales(d: f32, scales: &[u8]) -> [f32; 16] {
    let mut db = [0f32; 16];
    for (i, v) in db.iter_mut().enumerate() {
        let s = (scales[i / 2] >> (4 * (i % 2))) & 0x0f;
        *v = d * (0.5 + f32::from(s)) * 0.25;
    }
    db
}

pub(crate) fn dequantize_iq2_xs(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ2_XS_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let db = iq2_scales(f16_at(b, 0), &b[66..74]);
        for (i, y) in y.chunks_exact_mut(8).enumerate() {
            let q = u16_at(b, 2 + 2 * i);
            put8(
                y,
                db[i / 2],
                IQ2XS_GRID[usize::from(q & 511)],
                KSIGNS[usize::from(q >> 9)],
            );
        }
    }
}

pub(crate) fn dequantize_iq2_s(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ2_S_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let (qs, signs, qh) = (&b[2..34], &b[34..66], &b[66..74]);
        let db = iq2_scales(f16_at(b, 0), &b[74..82]);
        for (i, y) in y.chunks_exact_mut(8).enumerate() {
            let high = (qh[i / 4] >> (2 * (i % 4))) & 3;
            let idx = usize::from(qs[i]) | (usize::from(high) << 8);
            put8(y, db[i / 2], IQ2S_GRID[idx], signs[i]);
        }
    }
}

pub(crate) fn dequantize_iq3_xxs(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ3_XXS_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        let qs = &b[2..66];
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let aux = u32_at(b, 66 + 4 * ib);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let signs = KSIGNS[((aux >> (7 * l)) & 0x7f) as usize];
                let q = &qs[ib * 8 + l * 2..];
                put4(&mut y[0..4], db, IQ3XXS_GRID[usize::from(q[0])], signs, 0);
                put4(&mut y[4..8], db, IQ3XXS_GRID[usize::from(q[1])], signs, 4);
            }
        }
    }
}

pub(crate) fn dequantize_iq3_s(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ3_S_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
        for (i, y) in y.chunks_exact_mut(4).enumerate() {
            let s = (scales[i / 16] >> (4 * ((i / 8) % 2))) & 0x0f;
            let db = d * f32::from(1 + 2 * s);
            let idx = usize::from(qs[i]) | (usize::from((qh[i / 8] >> (i % 8)) & 1) << 8);
            put4(y, db, IQ3S_GRID[idx], signs[i / 2], 4 * (i % 2));
        }
    }
}

/// Write 8 values `dl · (grid[j] + delta)` from an IQ1 grid row.
#[inline]
fn put8_iq1(y: &mut [f32], dl: f32, row: u64, delta: f32) {
    for (j, y) in y.iter_mut().enumerate() {
        *y = dl * (f32::from(grid_byte(row, j) as i8) + delta);
    }
}

pub(crate) fn dequantize_iq1_s(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ1_S_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        let qs = &b[2..34];
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let qh = u16_at(b, 34 + 2 * ib);
            let dl = d * f32::from(2 * ((qh >> 12) & 7) + 1);
            let delta = if qh & 0x8000 == 0 {
                IQ1_DELTA
            } else {
                -IQ1_DELTA
            };
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let idx = usize::from(qs[4 * ib + l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
                put8_iq1(y, dl, IQ1S_GRID[idx], delta);
            }
        }
    }
}

/// IQ1_M's f16 super-block scale, spread over the top nibbles of the four scale words.
pub(crate) fn iq1_m_d(b: &[u8]) -> f32 {
    let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
    f16_to_f32((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000))
}

pub(crate) fn dequantize_iq1_m(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ1_M_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = iq1_m_d(b);
        let (qs, qh) = (&b[0..32], &b[32..48]);
        for (i, y) in y.chunks_exact_mut(8).enumerate() {
            // 16 groups of 16 elements each have a 3-bit scale.
            let g = i / 2;
            let s = (u16_at(b, 48 + 2 * (g / 4)) >> (3 * (g % 4))) & 7;
            let dl = d * f32::from(2 * s + 1);
            let nib = (qh[i / 2] >> (4 * (i % 2))) & 0x0f;
            let idx = usize::from(qs[i]) | (usize::from(nib & 7) << 8);
            let delta = if nib & 8 == 0 { IQ1_DELTA } else { -IQ1_DELTA };
            put8_iq1(y, dl, IQ1S_GRID[idx], delta);
        }
    }
}

pub(crate) fn dequantize_iq4_nl(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(IQ4_NL_BYTES).zip(out.chunks_exact_mut(32)) {
        let d = f16_at(b, 0);
        for (j, y) in y.iter_mut().enumerate() {
            let q = if j < 16 {
                b[2 + j] & 0x0f
            } else {
                b[2 + j - 16] >> 4
            };
            *y = d * f32::from(KVALUES_IQ4NL[usize::from(q)]);
        }
    }
}

/// IQ4_XS: the 8 signed 6-bit sub-block scales.
pub(crate) fn iq4_xs_scales(b: &[u8]) -> [i8; 8] {
    let sh = u16_at(b, 2);
    let mut out = [0i8; 8];
    for (g, o) in out.iter_mut().enumerate() {
        let low = (b[4 + g / 2] >> (4 * (g % 2))) & 0x0f;
        let high = ((sh >> (2 * g)) & 3) as u8;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

pub(crate) fn dequantize_iq4_xs(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ4_XS_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        let scales = iq4_xs_scales(b);
        for (g, y) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * f32::from(scales[g]);
            let qs = &b[8 + 16 * g..24 + 16 * g];
            for (j, y) in y.iter_mut().enumerate() {
                let q = if j < 16 {
                    qs[j] & 0x0f
                } else {
                    qs[j - 16] >> 4
                };
                *y = dl * f32::from(KVALUES_IQ4NL[usize::from(q)]);
            }
        }
    }
}

// ---- scalar dot products (the oracle for the SIMD kernels) -----------------------------

/// IQ4_NL weights · Q8_0 activations: `(d_w·d_a)·Σ kvalue(q)·a` per block.
pub(crate) fn dot_iq4_nl_q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(IQ4_NL_BYTES).zip(a.chunks_exact(34)) {
        let s: i32 = (0..32)
            .map(|j| {
                let q = if j < 16 {
                    x[2 + j] & 0x0f
                } else {
                    x[2 + j - 16] >> 4
                };
                i32::from(KVALUES_IQ4NL[usize::from(q)]) * i32::from(y[2 + j] as i8)
            })
            .sum();
        acc += (f16_at(x, 0) * f16_at(y, 0)) * s as f32;
    }
    acc
}

/// The exact `Σ_g scale_g·Σ kvalue(q)·a` of an IQ4_XS super-block `x` and a Q8_K block `y`.
fn iq4_xs_isum(x: &[u8], y: &[u8]) -> i32 {
    let mut isum = 0i32;
    for (g, &sc) in iq4_xs_scales(x).iter().enumerate() {
        let qs = &x[8 + 16 * g..24 + 16 * g];
        let s: i32 = (0..32)
            .map(|j| {
                let q = if j < 16 {
                    qs[j] & 0x0f
                } else {
                    qs[j - 16] >> 4
                };
                i32::from(KVALUES_IQ4NL[usize::from(q)]) * i32::from(y[4 + 32 * g + j] as i8)
            })
            .sum();
        isum += i32::from(sc) * s;
    }
    isum
}

/// IQ4_XS weights · Q8_K activations in llama.cpp's tiled-matmul order (ggml-cpu
/// `tiled/`, its batches of 8 rows or more): per super-block the exact
/// `isum = Σ_g scale_g·Σ kvalue(q)·a`, `r = f32(isum)·d_w` (rounded), then
/// `out = fma(r, d_a, out)`.
pub(crate) fn dot_iq4_xs_q8_k_tiled(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(IQ4_XS_BYTES).zip(a.chunks_exact(292)) {
        let r = iq4_xs_isum(x, y) as f32 * f16_at(x, 0);
        acc = r.mul_add(f32::from_le_bytes([y[0], y[1], y[2], y[3]]), acc);
    }
    acc
}

/// IQ4_XS weights · Q8_K activations: `(d_w·d_a)·Σ_g scale_g·Σ kvalue(q)·a` per super-block.
pub(crate) fn dot_iq4_xs_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(IQ4_XS_BYTES).zip(a.chunks_exact(292)) {
        let isum = iq4_xs_isum(x, y);
        acc += (f16_at(x, 0) * f32::from_le_bytes([y[0], y[1], y[2], y[3]])) * isum as f32;
    }
    acc
}
