//! AVX2 + FMA + F16C multi-row (GEMM) block kernels: tiles of 2 weight rows × 4
//! activation rows, bitwise equal to `avx2`'s single-row kernels.

use super::gemm_blocks::gemm_kernels;

gemm_kernels!("avx2,fma,f16c", 2, 4, 4);

tile_entry!(q6_k_q8_k, rows q6_k_rows_ymm);

// The integer primitives of `avx2` (kept identical: the bitwise tests compare them).

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_i8(x: __m256i, y: __m256i) -> __m256i {
    let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn madd_acc(acc: __m256i, p16: __m256i, s16: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(p16, s16))
}

/// The Q8_0-activation tile: the shared 256-bit body (`off` is not needed: `dot_i8`
/// takes signed quants).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn legacy_tile<const W: usize, const N: usize>(
    w: &[&[u8]; W],
    ts: usize,
    a: &[&[u8]; N],
    _off: i8,
    decode: impl Fn(&[u8]) -> __m256i,
) -> [[f32; W]; N] {
    legacy_tile_ymm(w, ts, a, decode)
}

/// Q4_K rows: the shared 256-bit body.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q4_k_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    q4_k_rows_ymm(w, a)
}
