//! Q1_0: 1-bit sign quantization, 128 elements per block (ggml `block_q1_0`).
//!
//! | bytes | fields |
//! |-------|--------|
//! | 18 | `d: f16`, `qs: [u8; 16]` — bit `j` (byte `j/8`, bit `j%8`) set means `+d`, clear `−d` |
//!
//! gguf-py has no Q1_0 codec; the oracle is ggml's `dequantize_row_q1_0` /
//! `quantize_row_q1_0_ref` (goldens from the C reference, see `tools/gen_quant_goldens.py`).

use super::{f16_at, put_f16};

const QK1_0: usize = 128;
/// Bytes of a Q1_0 block.
pub const Q1_0_BYTES: usize = 18;

pub(crate) fn dequantize_q1_0(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(Q1_0_BYTES)
        .zip(out.chunks_exact_mut(QK1_0))
    {
        // ggml's software f16 widening goes through a multiply, which quiets a signalling NaN.
        let d = f16_at(b, 0);
        let d = if d.is_nan() {
            f32::from_bits(d.to_bits() | 0x0040_0000)
        } else {
            d
        };
        for (j, y) in y.iter_mut().enumerate() {
            *y = if (b[2 + j / 8] >> (j % 8)) & 1 == 1 {
                d
            } else {
                -d
            };
        }
    }
}

pub(crate) fn quantize_q1_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src
        .chunks_exact(QK1_0)
        .zip(out.chunks_exact_mut(Q1_0_BYTES))
    {
        let sum_abs = x.iter().fold(0f32, |s, v| s + v.abs());
        put_f16(b, 0, sum_abs / QK1_0 as f32);
        b[2..].fill(0);
        for (j, &v) in x.iter().enumerate() {
            if v >= 0.0 {
                b[2 + j / 8] |= 1 << (j % 8);
            }
        }
    }
}
