//! Q2_0: 2-bit symmetric quantization, 64 elements per block (ggml `block_q2_0`).
//!
//! | bytes | fields |
//! |-------|--------|
//! | 18 | `d: f16`, `qs: [u8; 16]` — element `j` is bits `2*(j%4)..` of byte `j/4`; codes 0,1,2,3 mean −d, 0, +d, +2d |
//!
//! gguf-py has no Q2_0 codec; the oracle is ggml's `dequantize_row_q2_0`
//! (`((int)q - 1) * d`). No quantizer: ggml has no reference one either.

use super::f16_at;

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
}
