//! AArch64 kernels: Advanced SIMD (NEON) single-row dots and multi-row (GEMM) tiles.

pub(crate) mod neon;
