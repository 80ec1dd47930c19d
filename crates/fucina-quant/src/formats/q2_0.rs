//! Q2_0: 2-bit symmetric quantization, 64 elements per block (ggml `block_q2_0`).
//!
//! | bytes | fields |
//! |-------|--------|
//! | 18 | `d: f16`, `qs: [u8; 16]` — element `j` is bits `2*(j%4)..` of byte `j/4`; codes 0,1,2,3 mean −d, 0, +d, +2d |
//!
//! gguf-py has no Q2_0 codec; the oracles are ggml's `dequantize_row_q2_0`
//! (`((int)q - 1) * d`) and `quantize_row_q2_0_ref` (goldens from the C reference,
//! see `tools/gen_quant_goldens.py`).

use super::{f16_at, put_f16};

const QK2_0: usize = 64;
/// Bytes of a Q2_0 block.
pub const Q2_0_BYTES: usize = 18;

pub(crate) fn dequantize_q2_0(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(Q2_0_BYTES)
        .zip(out.chunks_exact_mut(QK2_0))
    {
        let d = f16_at(b, 0);
        for (j, y) in y.iter_mut().enumerate() {
            let q = (b[2 + j / 4] >> ((j % 4) * 2)) & 0x03;
            *y = (i32::from(q) - 1) as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q2_0_ref`: `d = max |x|` (stored as f16), code
/// `clamp(roundf(x / d) + 1, 0, 3)` with `1/d` computed in f32 (0 for an all-zero
/// block) and ties rounded away from zero. A NaN quotient takes code 0, as the C
/// cast of NaN to `int` (INT_MIN on x86-64) clamps.
pub(crate) fn quantize_q2_0(src: &[f32], out: &mut [u8]) {
    for (x, b) in src
        .chunks_exact(QK2_0)
        .zip(out.chunks_exact_mut(Q2_0_BYTES))
    {
        let amax = x
            .iter()
            .fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m });
        let id = if amax > 0.0 { 1.0 / amax } else { 0.0 };
        put_f16(b, 0, amax);
        b[2..].fill(0);
        for (j, &v) in x.iter().enumerate() {
            let r = (v * id).round();
            let q = if r.is_nan() {
                0
            } else {
                (r as i32).saturating_add(1).clamp(0, 3)
            };
            b[2 + j / 4] |= (q as u8) << ((j % 4) * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_minus_one_to_plus_two_times_d() {
        let mut block = [0u8; Q2_0_BYTES];
        block[..2].copy_from_slice(&0x3800u16.to_le_bytes()); // f16 0.5
                                                              // Byte 2 holds elements 0..4 with codes 0, 1, 2, 3.
        block[2] = 0b11_10_01_00;
        // Element 63 (byte 17, bits 6..8) gets code 2.
        block[17] = 0b10_00_00_00;
        let mut out = [f32::NAN; QK2_0];
        dequantize_q2_0(&block, &mut out);
        assert_eq!(&out[..4], &[-0.5, 0.0, 0.5, 1.0]);
        assert_eq!(out[4], -0.5, "code 0 elsewhere is -d");
        assert_eq!(out[63], 0.5);
    }

    #[test]
    fn quantize_round_trips_codes() {
        // d = 2 (the max |x|); x/d = -0.5 rounds away from zero to -1 (code 0),
        // 0.25 to 0 (code 1), 0.75 to 1 (code 2), 1.0 to 1 (code 2).
        let mut x = [0f32; QK2_0];
        x[..4].copy_from_slice(&[-1.0, 0.5, 1.5, 2.0]);
        let mut b = [0u8; Q2_0_BYTES];
        quantize_q2_0(&x, &mut b);
        assert_eq!(f16_at(&b, 0), 2.0);
        assert_eq!(b[2], 0b10_10_01_00);
        let mut back = [0f32; QK2_0];
        dequantize_q2_0(&b, &mut back);
        assert_eq!(&back[..4], &[-2.0, 0.0, 2.0, 2.0]);
        // All-zero block: d = 0 and every code 1 (value 0).
        quantize_q2_0(&[0.0; QK2_0], &mut b);
        assert_eq!(
            &b,
            &[
                0, 0, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55, 0x55,
                0x55, 0x55, 0x55
            ]
        );
    }
}
