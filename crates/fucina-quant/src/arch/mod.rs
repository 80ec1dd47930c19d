//! Per-ISA kernel modules. Each exposes `kernel(ty) -> Option<VecDotFn>` (and the
//! `FEATURES` it needs detected) with the same function names; `dispatch` picks one set
//! at run time.
//!
//! * `x86_64`: AVX2 and AVX-512 single-row dots and their multi-row (GEMM) tiles.
//! * `aarch64`: NEON single-row dots (baseline ARMv8.0-A, no `dotprod`), bitwise the
//!   scalar reference for every quantized format, and 4-row GEMM tiles for Q4_0, Q5_0,
//!   Q8_0, Q4_K, Q5_K, Q6_K; built and tested on x86-64 hosts under qemu-user
//!   (`scripts/test`). No packed (repacked Q4_K) kernels and no NEON activation
//!   quantizers: those use the row-major tiles and the scalar quantizers.

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use crate::half::{bf16_to_f32, f16_to_f32};

/// Little-endian f32 at the start of `b` (tail elements of the float kernels).
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) fn widen_f32(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Little-endian f16 at the start of `b`, widened.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) fn widen_f16(b: &[u8]) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// Little-endian bf16 at the start of `b`, widened.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) fn widen_bf16(b: &[u8]) -> f32 {
    bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))
}
