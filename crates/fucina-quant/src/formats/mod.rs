//! Block formats as data: one file per family, and the registry that maps a
//! [`GgmlType`] to its geometry, reference (de)quantizer and dot activation type.
//!
//! Every function here is the scalar oracle: SIMD kernels are tested against it.

pub mod float;
pub mod fp4;
pub mod iq;
mod iq_grids;
pub mod kquants;
mod kquants_quant;
pub mod legacy;
pub mod q1_0;
pub mod q2_0;
pub mod ternary;

use fucina_gguf::GgmlType;

use crate::activation::ActType;
use crate::half::{f16_to_f32, f32_to_f16};

/// Dequantize whole blocks: `src.len()` is a multiple of the block bytes and
/// `out.len()` the matching element count (checked by the caller).
pub type DequantFn = fn(src: &[u8], out: &mut [f32]);
/// Quantize whole blocks: `src.len()` is a multiple of the block size and
/// `out.len()` the matching byte count (checked by the caller).
pub type QuantFn = fn(src: &[f32], out: &mut [u8]);

/// Dot product of one weight row with one activation row (both whole blocks; the
/// kernel uses the shorter of the two). Safe for any input slices.
pub type VecDotFn = fn(w: &[u8], a: &[u8]) -> f32;

/// How a weight type takes part in dot products.
#[derive(Clone, Copy, Debug)]
pub enum Dot {
    /// A block kernel against activations converted to `act`; `scalar` is the
    /// reference every SIMD variant is tested against.
    Kernel {
        /// The activation format.
        act: ActType,
        /// The scalar reference kernel.
        scalar: VecDotFn,
    },
    /// Generic path through row dequantization (rare formats): weight blocks are
    /// dequantized to f32 and multiplied with f32 activations. Correct, not fast.
    ViaDequant,
}

/// What the registry knows about one ggml type.
#[derive(Clone, Copy, Debug)]
pub struct Format {
    /// The type.
    pub ty: GgmlType,
    /// Elements per block.
    pub block_size: usize,
    /// Bytes per block.
    pub type_size: usize,
    /// Reference dequantizer (the oracle), if the type has a public definition.
    pub dequantize: Option<DequantFn>,
    /// Reference quantizer, if one is implemented (bit-exact with gguf-py / ggml `_ref`).
    pub quantize: Option<QuantFn>,
    /// Dot-product support (`None`: the type cannot be a matmul weight).
    pub dot: Option<Dot>,
}

macro_rules! registry {
    ($( $ty:ident => $deq:expr, $q:expr, $dot:expr; )*) => {
        /// The registry: one row per supported ggml type.
        pub static REGISTRY: &[Format] = &[
            $( Format {
                ty: GgmlType::$ty,
                block_size: block_size(GgmlType::$ty),
                type_size: type_size(GgmlType::$ty),
                dequantize: $deq,
                quantize: $q,
                dot: $dot,
            }, )*
        ];
    };
}

const fn block_size(ty: GgmlType) -> usize {
    use GgmlType::*;
    match ty {
        F32 | F16 | BF16 | I8 | I16 | I32 | I64 | F64 => 1,
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4_NL | MXFP4 => 32,
        NVFP4 | Q2_0 => 64,
        Q1_0 => 128,
        _ => kquants::QK_K,
    }
}

const fn type_size(ty: GgmlType) -> usize {
    use GgmlType::*;
    match ty {
        F32 | I32 => 4,
        F16 | BF16 | I16 => 2,
        I8 => 1,
        I64 | F64 => 8,
        Q4_0 => legacy::Q4_0_BYTES,
        Q4_1 => legacy::Q4_1_BYTES,
        Q5_0 => legacy::Q5_0_BYTES,
        Q5_1 => legacy::Q5_1_BYTES,
        Q8_0 => legacy::Q8_0_BYTES,
        Q8_1 => 36,
        Q2_K => kquants::Q2_K_BYTES,
        Q3_K => kquants::Q3_K_BYTES,
        Q4_K => kquants::Q4_K_BYTES,
        Q5_K => kquants::Q5_K_BYTES,
        Q6_K => kquants::Q6_K_BYTES,
        Q8_K => kquants::Q8_K_BYTES,
        IQ2_XXS => iq::IQ2_XXS_BYTES,
        IQ2_XS => iq::IQ2_XS_BYTES,
        IQ2_S => iq::IQ2_S_BYTES,
        IQ3_XXS => iq::IQ3_XXS_BYTES,
        IQ3_S => iq::IQ3_S_BYTES,
        IQ1_S => iq::IQ1_S_BYTES,
        IQ1_M => iq::IQ1_M_BYTES,
        IQ4_NL => iq::IQ4_NL_BYTES,
        IQ4_XS => iq::IQ4_XS_BYTES,
        TQ1_0 => ternary::TQ1_0_BYTES,
        TQ2_0 => ternary::TQ2_0_BYTES,
        MXFP4 => fp4::MXFP4_BYTES,
        NVFP4 => fp4::NVFP4_BYTES,
        Q1_0 => q1_0::Q1_0_BYTES,
        Q2_0 => q2_0::Q2_0_BYTES,
    }
}

// Q8_1 is listed without a codec: it is ggml's activation-side format (36-byte
// `block_q8_1`, f16 d and s); gguf-py still sizes it at 40 (an old f32 layout), so
// no file holding it can be checked against a reference. The integer types are
// not float data.
registry! {
    F32 => Some(float::dequantize_f32), Some(float::quantize_f32), Some(Dot::Kernel { act: ActType::F32, scalar: float::dot_f32 });
    F16 => Some(float::dequantize_f16), Some(float::quantize_f16), Some(Dot::Kernel { act: ActType::F16, scalar: float::dot_f16 });
    BF16 => Some(float::dequantize_bf16), Some(float::quantize_bf16), Some(Dot::Kernel { act: ActType::BF16, scalar: float::dot_bf16 });
    Q4_0 => Some(legacy::dequantize_q4_0), Some(legacy::quantize_q4_0), Some(Dot::Kernel { act: ActType::Q8_0, scalar: legacy::dot_q4_0_q8_0 });
    Q4_1 => Some(legacy::dequantize_q4_1), Some(legacy::quantize_q4_1), Some(Dot::Kernel { act: ActType::Q8_1, scalar: legacy::dot_q4_1_q8_1 });
    Q5_0 => Some(legacy::dequantize_q5_0), Some(legacy::quantize_q5_0), Some(Dot::Kernel { act: ActType::Q8_0, scalar: legacy::dot_q5_0_q8_0 });
    Q5_1 => Some(legacy::dequantize_q5_1), Some(legacy::quantize_q5_1), Some(Dot::Kernel { act: ActType::Q8_1, scalar: legacy::dot_q5_1_q8_1 });
    Q8_0 => Some(legacy::dequantize_q8_0), Some(legacy::quantize_q8_0), Some(Dot::Kernel { act: ActType::Q8_0, scalar: legacy::dot_q8_0_q8_0 });
    Q8_1 => None, None, None;
    Q2_K => Some(kquants::dequantize_q2_k), None, Some(Dot::Kernel { act: ActType::Q8_K, scalar: kquants::dot_q2_k_q8_k });
    Q3_K => Some(kquants::dequantize_q3_k), None, Some(Dot::Kernel { act: ActType::Q8_K, scalar: kquants::dot_q3_k_q8_k });
    Q4_K => Some(kquants::dequantize_q4_k), Some(kquants_quant::quantize_q4_k), Some(Dot::Kernel { act: ActType::Q8_K, scalar: kquants::dot_q4_k_q8_k });
    Q5_K => Some(kquants::dequantize_q5_k), Some(kquants_quant::quantize_q5_k), Some(Dot::Kernel { act: ActType::Q8_K, scalar: kquants::dot_q5_k_q8_k });
    Q6_K => Some(kquants::dequantize_q6_k), Some(kquants_quant::quantize_q6_k), Some(Dot::Kernel { act: ActType::Q8_K, scalar: kquants::dot_q6_k_q8_k });
    Q8_K => Some(kquants::dequantize_q8_k), Some(kquants::quantize_q8_k), Some(Dot::ViaDequant);
    IQ2_XXS => Some(iq::dequantize_iq2_xxs), None, Some(Dot::ViaDequant);
    IQ2_XS => Some(iq::dequantize_iq2_xs), None, Some(Dot::ViaDequant);
    IQ2_S => Some(iq::dequantize_iq2_s), None, Some(Dot::ViaDequant);
    IQ3_XXS => Some(iq::dequantize_iq3_xxs), None, Some(Dot::ViaDequant);
    IQ3_S => Some(iq::dequantize_iq3_s), None, Some(Dot::ViaDequant);
    IQ1_S => Some(iq::dequantize_iq1_s), None, Some(Dot::ViaDequant);
    IQ1_M => Some(iq::dequantize_iq1_m), None, Some(Dot::ViaDequant);
    IQ4_NL => Some(iq::dequantize_iq4_nl), None, Some(Dot::Kernel { act: ActType::Q8_0, scalar: iq::dot_iq4_nl_q8_0 });
    IQ4_XS => Some(iq::dequantize_iq4_xs), None, Some(Dot::Kernel { act: ActType::Q8_K, scalar: iq::dot_iq4_xs_q8_k });
    TQ1_0 => Some(ternary::dequantize_tq1_0), Some(ternary::quantize_tq1_0), Some(Dot::ViaDequant);
    TQ2_0 => Some(ternary::dequantize_tq2_0), Some(ternary::quantize_tq2_0), Some(Dot::ViaDequant);
    MXFP4 => Some(fp4::dequantize_mxfp4), Some(fp4::quantize_mxfp4), Some(Dot::ViaDequant);
    NVFP4 => Some(fp4::dequantize_nvfp4), None, Some(Dot::ViaDequant);
    Q1_0 => Some(q1_0::dequantize_q1_0), Some(q1_0::quantize_q1_0), Some(Dot::ViaDequant);
    Q2_0 => Some(q2_0::dequantize_q2_0), Some(q2_0::quantize_q2_0), Some(Dot::ViaDequant);
}

/// The registry row of `ty`, if the type is known to this crate.
pub fn format(ty: GgmlType) -> Option<&'static Format> {
    REGISTRY.iter().find(|f| f.ty == ty)
}

#[inline]
pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

#[inline]
pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[inline]
pub(crate) fn f16_at(b: &[u8], off: usize) -> f32 {
    f16_to_f32(u16_at(b, off))
}

#[inline]
pub(crate) fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_bits(u32_at(b, off))
}

#[inline]
pub(crate) fn put_f16(b: &mut [u8], off: usize, v: f32) {
    b[off..off + 2].copy_from_slice(&f32_to_f16(v).to_le_bytes());
}

/// C `roundf`: round half away from zero.
#[inline]
pub(crate) fn roundf(x: f32) -> f32 {
    x.round()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_geometry_matches_the_gguf_table() {
        for f in REGISTRY {
            assert_eq!(f.block_size as u64, f.ty.block_size(), "{}", f.ty);
            assert_eq!(f.type_size as u64, f.ty.type_size(), "{}", f.ty);
        }
        for ty in GgmlType::all() {
            assert_eq!(block_size(ty) as u64, ty.block_size(), "{ty}");
            assert_eq!(type_size(ty) as u64, ty.type_size(), "{ty}");
        }
    }
}
