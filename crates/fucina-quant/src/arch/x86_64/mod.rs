//! x86-64 kernels: AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL, DQ, VNNI; BF16 when present),
//! single-row dots and their multi-row (GEMM) forms.

pub(crate) mod avx2;
pub(crate) mod avx512;
mod blocks;
pub(crate) mod gemm_avx2;
pub(crate) mod gemm_avx512;
mod gemm_blocks;
pub(crate) mod kq_tiled;
mod primitives;
pub(crate) mod q4_k_lanes;
pub(crate) mod q4_k_tiles;
pub(crate) mod q6_k_x8;
pub(crate) mod q8_0_x8;
pub(crate) mod sgemm;
