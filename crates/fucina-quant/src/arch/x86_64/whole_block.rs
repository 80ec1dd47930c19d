//! The whole-block order of Q4_0 / IQ4_NL (`crate::whole_block`) on AVX2 (AVX-512
//! CPUs run the same body): eight weight rows at a time, as ggml's repacked GEMV
//! does. Per block each row's 32 nibbles become signed bytes through the type's table
//! (`vpshufb`), each row's exact integer sum with the activation block is reduced into
//! lane `k` = row `k` of one register, and one FMA by `d_w · d_a` accumulates the
//! eight rows. Bitwise `crate::whole_block::dot_blocks`.

use core::arch::x86_64::*;

use crate::formats::iq::KVALUES_IQ4NL;
use crate::whole_block::{BLOCK, Q4_0_VALUES};

/// Bytes of one Q8_0 activation block.
const ACT_BLOCK: usize = 34;
/// Activation rows whose accumulators one pass over a weight group keeps.
const ROWS: usize = 16;

/// The Q4_0 whole-block tile kernel (a [`crate::gemm::TileFn`]).
pub(crate) fn q4_0(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: `whole_block::tile` hands this kernel out only for AVX2 / AVX-512
    // entries, which `Kernels` builds only where the CPU has AVX2, FMA and F16C.
    unsafe { tile(&Q4_0_VALUES, ws, acts, stride, out) }
}

/// The IQ4_NL whole-block tile kernel (a [`crate::gemm::TileFn`]).
pub(crate) fn iq4_nl(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: as in `q4_0`.
    unsafe { tile(&KVALUES_IQ4NL, ws, acts, stride, out) }
}

/// Lane `k` = the sum of the eight lanes of `p[k]` (exact integer sums).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn reduce8(p: &[__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(p[0], p[1]);
    let h23 = _mm256_hadd_epi32(p[2], p[3]);
    let h45 = _mm256_hadd_epi32(p[4], p[5]);
    let h67 = _mm256_hadd_epi32(p[6], p[7]);
    // Per 128-bit half: rows 0-3 (resp. 4-7), each the sum of its half's lanes.
    let h0123 = _mm256_hadd_epi32(h01, h23);
    let h4567 = _mm256_hadd_epi32(h45, h67);
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(h0123, h4567),
        _mm256_permute2x128_si256::<0x31>(h0123, h4567),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
fn tile(table: &[i8; 16], ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    let nw = ws.len();
    if nw == 0 || stride == 0 {
        return;
    }
    let nt = (out.len() / nw).min(acts.len() / stride);
    // Whole blocks every row and the activations hold (the single-row kernels' rule).
    let nb = ws
        .iter()
        .map(|w| w.len() / BLOCK)
        .min()
        .unwrap_or(0)
        .min(stride / ACT_BLOCK);
    // SAFETY: `table` is 16 readable bytes.
    let lut = unsafe { _mm_loadu_si128(table.as_ptr().cast()) };
    let lut = _mm256_broadcastsi128_si256(lut);
    let m4 = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    for g in (0..nw).step_by(8) {
        let width = (nw - g).min(8);
        // A short last group repeats its last row (results dropped).
        let rows: [&[u8]; 8] = core::array::from_fn(|k| ws[g + k.min(width - 1)]);
        for t0 in (0..nt).step_by(ROWS) {
            let n = (nt - t0).min(ROWS);
            let mut acc = [_mm256_setzero_ps(); ROWS];
            for b in 0..nb {
                let o = BLOCK * b;
                // Row k's 32 weights as signed bytes (elements 0-15 from the low
                // nibbles, 16-31 from the high ones) and their magnitudes.
                let w: [__m256i; 8] = core::array::from_fn(|k| {
                    // SAFETY: block `b` (18 bytes at `o`) lies in every row (`nb`).
                    let q = unsafe { _mm_loadu_si128(rows[k][o + 2..].as_ptr().cast()) };
                    let q = _mm256_set_m128i(_mm_srli_epi16::<4>(q), q);
                    _mm256_shuffle_epi8(lut, _mm256_and_si256(q, m4))
                });
                let aw: [__m256i; 8] = core::array::from_fn(|k| _mm256_abs_epi8(w[k]));
                let dw = _mm256_cvtph_ps(_mm_set_epi16(
                    scale(rows[7], o),
                    scale(rows[6], o),
                    scale(rows[5], o),
                    scale(rows[4], o),
                    scale(rows[3], o),
                    scale(rows[2], o),
                    scale(rows[1], o),
                    scale(rows[0], o),
                ));
                for (t, acc) in acc[..n].iter_mut().enumerate() {
                    let y = &acts[(t0 + t) * stride + ACT_BLOCK * b..][..ACT_BLOCK];
                    // SAFETY: `y` holds the 34-byte block: 32 quant bytes at 2.
                    let a = unsafe { _mm256_loadu_si256(y[2..].as_ptr().cast()) };
                    let p: [__m256i; 8] = core::array::from_fn(|k| {
                        let prod = _mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(a, w[k]));
                        _mm256_madd_epi16(prod, ones)
                    });
                    let s = reduce8(&p);
                    let da = _mm256_set1_ps(crate::formats::f16_at(y, 0));
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, da), *acc);
                }
            }
            let mut lanes = [0f32; 8];
            for (t, acc) in acc[..n].iter().enumerate() {
                // SAFETY: `lanes` is 32 writable bytes; `storeu` needs no alignment.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), *acc) };
                let at = (t0 + t) * nw + g;
                out[at..at + width].copy_from_slice(&lanes[..width]);
            }
        }
    }
}

/// The f16 scale of the block at `o` of `row`, as `_mm_set_epi16` takes it.
#[inline]
fn scale(row: &[u8], o: usize) -> i16 {
    i16::from_le_bytes([row[o], row[o + 1]])
}
