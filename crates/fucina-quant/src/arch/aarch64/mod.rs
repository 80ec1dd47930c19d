//! AArch64 kernels: Advanced SIMD (NEON), single-row dots.

pub(crate) mod neon;
