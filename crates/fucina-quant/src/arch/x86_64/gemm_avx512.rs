//! AVX-512 (VNNI) multi-row (GEMM) block kernels: tiles of 4 weight rows × 4 activation
//! rows (8 activation rows per weight row for K-quants; AVX-512VL gives 32 vector
//! registers), integer dots with `vpdpbusd` / `vpdpwssd`, bitwise equal to `avx512`'s
//! single-row kernels.

use super::gemm_blocks::gemm_kernels;

gemm_kernels!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    4,
    4,
    8
);

// The integer primitives of `avx512` (kept identical: the bitwise tests compare them).

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn dot_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(
        _mm256_setzero_si256(),
        _mm256_sign_epi8(x, x),
        _mm256_sign_epi8(y, x),
    )
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn madd_acc(acc: __m256i, p16: __m256i, s16: __m256i) -> __m256i {
    _mm256_dpwssd_epi32(acc, p16, s16)
}
