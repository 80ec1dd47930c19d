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
pub(crate) mod whole_block;

/// Bytes ahead of the block being read that [`crate::repack::Prefetch::L2`] fetches.
/// An Intel Xeon (AVX-512, AMX; 2 threads, 2026-12) streamed the packed GEMVs at
/// 0.69-0.76 of its read bandwidth prefetching into L1 (Q6_K's 248k-row head 19.3
/// GB/s) and at 0.82-0.94 prefetching into L2 4-12 KiB ahead (24.2 GB/s): requests to
/// L2 do not hold a core's few L1 fill buffers while they wait on memory.
pub(crate) const L2_AHEAD: usize = 8 << 10;

/// Software prefetch of `lines` cache lines of a weight stream read at `at`, as
/// `mode` says: into L1 `l1_ahead` bytes ahead, into L2 [`L2_AHEAD`] ahead, or none
/// (a hint: addresses past the stream's end are never dereferenced).
#[inline(always)]
pub(crate) fn prefetch_stream(
    at: *const u8,
    lines: usize,
    mode: crate::repack::Prefetch,
    l1_ahead: usize,
) {
    use crate::repack::Prefetch;
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
    match mode {
        Prefetch::Off => {}
        Prefetch::L1 => {
            for l in 0..lines {
                // SAFETY: SSE (x86-64's baseline); a prefetch never faults.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(l1_ahead + 64 * l).cast()) };
            }
        }
        Prefetch::L2 => {
            for l in 0..lines {
                // SAFETY: SSE (x86-64's baseline); a prefetch never faults.
                unsafe { _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(L2_AHEAD + 64 * l).cast()) };
            }
        }
    }
}
