//! Per-ISA kernel modules. Each exposes `kernel(ty) -> Option<VecDotFn>` with the same
//! function names; `dispatch` picks one set at run time. aarch64 NEON kernels are not
//! written yet (this machine cannot build or run them), so aarch64 uses the scalar path.

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use crate::half::{bf16_to_f32, f16_to_f32};

/// Little-endian f32 at the start of `b` (tail elements of the float kernels).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn widen_f32(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Little-endian f16 at the start of `b`, widened.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn widen_f16(b: &[u8]) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// Little-endian bf16 at the start of `b`, widened.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn widen_bf16(b: &[u8]) -> f32 {
    bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))
}
