//! AVX-512 (VNNI) multi-row (GEMM) block kernels: tiles of 4 weight rows × 8 activation
//! rows for the Q8_0-activation types (two weight rows per 512-bit register), 8
//! activation rows per weight row for K-quants (AVX-512VL gives 32 vector registers);
//! integer dots with `vpdpbusd` / `vpdpwssd`; bitwise equal to `avx512`'s single-row
//! kernels.

use super::gemm_blocks::gemm_kernels;

gemm_kernels!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    4,
    8,
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

/// The Q8_0-activation tile on 512-bit registers: two weight rows share a register
/// (one per 256-bit half, each half running exactly the single-row kernel's 8 lanes)
/// and every activation block is broadcast to both halves. The integer lane sums use
/// unsigned quants `q + off` and subtract `off · Σy` per lane (`vpdpbusd` has no sign
/// trick at 512 bits): the same exact lane values as `dot_i8`, so the same floats.
/// Odd tile widths use the 256-bit body.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn legacy_tile<const W: usize, const N: usize>(
    w: &[&[u8]; W],
    ts: usize,
    a: &[&[u8]; N],
    off: i8,
    decode: impl Fn(&[u8]) -> __m256i,
) -> [[f32; W]; N] {
    if !W.is_multiple_of(2) {
        return legacy_tile_ymm(w, ts, a, decode);
    }
    // Pair p lives in slot p of these W-sized arrays; slots ≥ W/2 are never touched.
    let mut acc = [[_mm512_setzero_ps(); W]; N];
    let nb = w.iter().fold(usize::MAX, |n, x| n.min(x.len() / ts));
    let nb = a.iter().fold(nb, |n, y| n.min(y.len() / 34));
    let offv = _mm512_set1_epi8(off);
    for b in 0..nb {
        let mut q = [_mm512_setzero_si512(); W];
        let mut dx = [_mm512_setzero_ps(); W];
        for p in 0..W / 2 {
            let x0 = &w[2 * p][b * ts..(b + 1) * ts];
            let x1 = &w[2 * p + 1][b * ts..(b + 1) * ts];
            let q2 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(decode(x0)), decode(x1));
            q[p] = _mm512_add_epi8(q2, offv);
            dx[p] = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(f16x8(x0, 0)), f16x8(x1, 0));
        }
        for (acc, y) in acc.iter_mut().zip(a) {
            let y = &y[34 * b..34 * b + 34];
            let yv = _mm512_broadcast_i64x4(load_i256(&y[2..34]));
            let zero = _mm512_setzero_si512();
            let neg = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offv, yv));
            let h = u16::from_le_bytes([y[0], y[1]]);
            let dy = _mm512_cvtph_ps(_mm256_set1_epi16(h as i16));
            for p in 0..W / 2 {
                let s = _mm512_dpbusd_epi32(neg, q[p], yv);
                acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(dx[p], dy), _mm512_cvtepi32_ps(s), acc[p]);
            }
        }
    }
    let mut out = [[0f32; W]; N];
    for (o, acc) in out.iter_mut().zip(acc) {
        for p in 0..W / 2 {
            o[2 * p] = hsum(_mm512_castps512_ps256(acc[p]));
            o[2 * p + 1] = hsum(_mm512_extractf32x8_ps::<1>(acc[p]));
        }
    }
    out
}
