//! x86-64 kernels: AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL, DQ, VNNI; BF16 when present).

pub(crate) mod avx2;
pub(crate) mod avx512;
mod blocks;
