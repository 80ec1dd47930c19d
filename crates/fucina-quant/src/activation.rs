//! Activation row formats for dot products: a row of f32 activations is converted
//! once (per matmul call) into the form the weight type's kernel multiplies with,
//! as llama.cpp does (`vec_dot_type`).
//!
//! Invariant the SIMD kernels rely on: Q8_0 / Q8_1 / Q8_K quants are in −127..=127
//! (never −128); the quantizers here guarantee it.

use crate::formats::{float, kquants, legacy};
use crate::{QuantError, Result};

/// The format an activation row is converted to before a dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's spelling, like `GgmlType`
pub enum ActType {
    /// Plain f32 (F32 weights, and the generic dequantizing path).
    F32,
    /// IEEE half (F16 weights).
    F16,
    /// bfloat16 (BF16 weights).
    BF16,
    /// 32-element blocks, f16 scale, i8 quants.
    Q8_0,
    /// Q8_0 plus the f16 block sum `d·Σq` (weights with a min: Q4_1, Q5_1).
    Q8_1,
    /// 256-element blocks, f32 scale, i8 quants, i16 sums of 16 (K-quants, IQ4_XS).
    Q8_K,
}

impl ActType {
    /// Elements per block.
    pub const fn block_size(self) -> usize {
        match self {
            ActType::F32 | ActType::F16 | ActType::BF16 => 1,
            ActType::Q8_0 | ActType::Q8_1 => legacy::QK,
            ActType::Q8_K => kquants::QK_K,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            ActType::F32 => 4,
            ActType::F16 | ActType::BF16 => 2,
            ActType::Q8_0 => legacy::Q8_0_BYTES,
            ActType::Q8_1 => legacy::Q8_1_BYTES,
            ActType::Q8_K => kquants::Q8_K_BYTES,
        }
    }

    /// Bytes of a row of `n` elements (`n` a multiple of the block size).
    pub const fn row_bytes(self, n: usize) -> usize {
        n / self.block_size() * self.block_bytes()
    }

    /// Convert `src` into activation blocks appended to `out`; `src.len()` must be a
    /// multiple of the block size.
    pub fn quantize_row(self, src: &[f32], out: &mut Vec<u8>) -> Result<()> {
        if !src.len().is_multiple_of(self.block_size()) {
            return Err(QuantError::Shape(format!(
                "{self:?} activations: {} elements is not a multiple of {}",
                src.len(),
                self.block_size()
            )));
        }
        let start = out.len();
        out.resize(start + self.row_bytes(src.len()), 0);
        self.quantize_into(src, &mut out[start..]);
        Ok(())
    }

    /// Convert `src` (length a multiple of the block size) into `out` (exactly `row_bytes`).
    pub(crate) fn quantize_into(self, src: &[f32], out: &mut [u8]) {
        match self {
            ActType::F32 => float::quantize_f32(src, out),
            ActType::F16 => float::quantize_f16(src, out),
            ActType::BF16 => float::quantize_bf16(src, out),
            ActType::Q8_0 => legacy::quantize_q8_0_act(src, out),
            ActType::Q8_1 => legacy::quantize_q8_1(src, out),
            ActType::Q8_K => kquants::quantize_q8_k(src, out),
        }
    }
}
