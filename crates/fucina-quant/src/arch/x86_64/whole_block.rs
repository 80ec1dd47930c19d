//! The whole-block order of Q4_0 / IQ4_NL (`crate::whole_block`) on AVX2, and on
//! AVX-512 VNNI ([`vnni`]; other AVX-512 CPUs run the AVX2 form): eight weight rows at
//! a time, as ggml's repacked GEMV does. Per block each row's 32 nibbles become bytes
//! through the type's table (`vpshufb`), each row's exact integer sum with the
//! activation block is reduced into lane `k` = row `k` of one register, and one FMA by
//! `d_w · d_a` accumulates the eight rows. Bitwise `crate::whole_block::dot_blocks`.

use core::arch::x86_64::*;

use crate::formats::iq::KVALUES_IQ4NL;
use crate::whole_block::{BLOCK, Q4_0_VALUES};

/// Bytes of one Q8_0 activation block.
const ACT_BLOCK: usize = 34;
/// Activation rows whose accumulators one pass over a weight group keeps.
const ROWS: usize = 16;

/// The eight rows' f16 scales of the block at byte `o`, as f32, for the AVX2 form (a
/// macro, inlined for certain; the VNNI form loads words with AVX-512 masks).
macro_rules! block_scales {
    ($rows:expr, $o:expr) => {{
        // Dword k from row k by a masked load each (bytes o..o + 4: the scale and two
        // quant bytes), or'd together, then each dword's low word: the load and ALU
        // ports do what eight inserts did on the shuffle port (a quarter of a one-row
        // pass).
        let mut v = _mm256_setzero_si256();
        for (k, row) in $rows.iter().enumerate() {
            assert!(row.len() >= $o + 4, "scale past a row");
            let m = _mm256_cmpeq_epi32(
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                _mm256_set1_epi32(k as i32),
            );
            // SAFETY: only dword k is read (masked load: the other lanes are neither
            // read nor faulted), at rows[k][o..o + 4].
            v = _mm256_or_si256(v, unsafe {
                _mm256_maskload_epi32(row.as_ptr().wrapping_add($o).wrapping_sub(4 * k).cast(), m)
            });
        }
        let words = _mm256_shuffle_epi8(
            v,
            _mm256_setr_epi8(
                0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13,
                -1, -1, -1, -1, -1, -1, -1, -1,
            ),
        );
        _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64::<0b1000>(
            words,
        )))
    }};
}

/// The Q4_0 whole-block tile kernel (a [`crate::gemm::TileFn`]).
pub(crate) fn q4_0(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: `whole_block::tile` hands this kernel out only for AVX2 / AVX-512
    // entries, which `Kernels` builds only where the CPU has AVX2, FMA and F16C.
    unsafe { tile::<true>(&Q4_0_VALUES, ws, acts, stride, out) }
}

/// The IQ4_NL whole-block tile kernel (a [`crate::gemm::TileFn`]).
pub(crate) fn iq4_nl(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: as in `q4_0`.
    unsafe { tile::<false>(&KVALUES_IQ4NL, ws, acts, stride, out) }
}

/// Lane `k` = the sum of the sixteen 16-bit lanes of `p[k]`, each of them within
/// ±2048 (so every partial sum of up to 16 fits 16 bits: exact).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn reduce8_i16(p: &[__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi16(p[0], p[1]);
    let h23 = _mm256_hadd_epi16(p[2], p[3]);
    let h45 = _mm256_hadd_epi16(p[4], p[5]);
    let h67 = _mm256_hadd_epi16(p[6], p[7]);
    let h0123 = _mm256_hadd_epi16(h01, h23);
    let h4567 = _mm256_hadd_epi16(h45, h67);
    // Per 128-bit half: word k = row k's sum over that half's 16 products.
    let h = _mm256_hadd_epi16(h0123, h4567);
    _mm256_add_epi32(
        _mm256_cvtepi16_epi32(_mm256_castsi256_si128(h)),
        _mm256_cvtepi16_epi32(_mm256_extracti128_si256::<1>(h)),
    )
}

/// Weight rows, activation rows and whole blocks of a call (the whole blocks every
/// row and the activations hold: the single-row kernels' rule); `None` for no work.
fn shape(ws: &[&[u8]], acts: &[u8], stride: usize, out: &[f32]) -> Option<(usize, usize, usize)> {
    let nw = ws.len();
    if nw == 0 || stride == 0 {
        return None;
    }
    let nt = (out.len() / nw).min(acts.len() / stride);
    let nb = ws
        .iter()
        .map(|w| w.len() / BLOCK)
        .min()
        .unwrap_or(0)
        .min(stride / ACT_BLOCK);
    Some((nw, nt, nb))
}

/// Rows `g..g + width` of `ws` as a group of eight, a short last group repeating its
/// last row (those results are dropped).
fn group<'a>(ws: &[&'a [u8]], g: usize, width: usize) -> [&'a [u8]; 8] {
    core::array::from_fn(|k| ws[g + k.min(width - 1)])
}

/// Lanes `0..width` of each accumulator (activation row `t`) to `out[t·nw + g..]`.
#[target_feature(enable = "avx2,fma,f16c")]
fn store(acc: &[__m256], out: &mut [f32], nw: usize, g: usize, width: usize) {
    let mut lanes = [0f32; 8];
    for (t, acc) in acc.iter().enumerate() {
        // SAFETY: `lanes` is 32 writable bytes; `storeu` needs no alignment.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), *acc) };
        let at = t * nw + g;
        out[at..at + width].copy_from_slice(&lanes[..width]);
    }
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

/// `Q4`: the table is Q4_0's `n − 8`, computed as `n·a − 8·a` from the unsigned
/// nibbles (`vpmaddubsw` takes them as they are; pair sums within ±2032), which also
/// lets the 16-bit reduction run; else the signed table values through the sign trick.
#[target_feature(enable = "avx2,fma,f16c")]
fn tile<const Q4: bool>(
    table: &[i8; 16],
    ws: &[&[u8]],
    acts: &[u8],
    stride: usize,
    out: &mut [f32],
) {
    let Some((nw, nt, nb)) = shape(ws, acts, stride, out) else {
        return;
    };
    // SAFETY: `table` is 16 readable bytes.
    let lut = unsafe { _mm_loadu_si128(table.as_ptr().cast()) };
    let lut = _mm256_broadcastsi128_si256(lut);
    let m4 = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let ones8 = _mm256_set1_epi8(1);
    for g in (0..nw).step_by(8) {
        let width = (nw - g).min(8);
        // A short last group repeats its last row (results dropped).
        let rows = group(ws, g, width);
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
                    let q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(q), q), m4);
                    if Q4 {
                        q
                    } else {
                        _mm256_shuffle_epi8(lut, q)
                    }
                });
                let aw: [__m256i; 8] = if Q4 {
                    w
                } else {
                    core::array::from_fn(|k| _mm256_abs_epi8(w[k]))
                };
                let dw = block_scales!(rows, o);
                for (t, acc) in acc[..n].iter_mut().enumerate() {
                    let y = &acts[(t0 + t) * stride + ACT_BLOCK * b..][..ACT_BLOCK];
                    // SAFETY: `y` holds the 34-byte block: 32 quant bytes at 2.
                    let a = unsafe { _mm256_loadu_si256(y[2..].as_ptr().cast()) };
                    let s = if Q4 {
                        // 8·(a_2i + a_2i+1), subtracted from each row's pair sums.
                        let a8 = _mm256_slli_epi16::<3>(_mm256_maddubs_epi16(ones8, a));
                        let p: [__m256i; 8] = core::array::from_fn(|k| {
                            _mm256_sub_epi16(_mm256_maddubs_epi16(w[k], a), a8)
                        });
                        reduce8_i16(&p)
                    } else {
                        let p: [__m256i; 8] = core::array::from_fn(|k| {
                            let prod = _mm256_maddubs_epi16(aw[k], _mm256_sign_epi8(a, w[k]));
                            _mm256_madd_epi16(prod, ones)
                        });
                        reduce8(&p)
                    };
                    let da = _mm256_set1_ps(crate::formats::f16_at(y, 0));
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, da), *acc);
                }
            }
            store(&acc[..n], &mut out[t0 * nw..], nw, g, width);
        }
    }
}

/// The AVX-512 VNNI forms of [`q4_0`] / [`iq4_nl`], if this CPU has their features
/// (AVX-512 F/BW/VL/DQ + VNNI, AVX2, FMA, F16C).
pub(crate) fn vnni(ty: fucina_gguf::GgmlType) -> Option<crate::gemm::TileFn> {
    // The packed Q8_0 kernels' feature set, the same as this one's.
    let f: crate::gemm::TileFn = match ty {
        fucina_gguf::GgmlType::Q4_0 => q4_0_vnni,
        _ => iq4_nl_vnni,
    };
    super::q8_0_x8::features().then_some(f)
}

fn q4_0_vnni(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: `vnni` hands this kernel out only after detecting every feature in
    // `tile_vnni`'s `#[target_feature]` set.
    unsafe { tile_vnni(&Q4_0_VALUES, ws, acts, stride, out) }
}

fn iq4_nl_vnni(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: as in `q4_0_vnni`.
    unsafe { tile_vnni(&KVALUES_IQ4NL, ws, acts, stride, out) }
}

/// Eight rows a pass, two per 512-bit register: row `2k`'s 16 nibble bytes and row
/// `2k + 1`'s in the low 256 bits, the same shifted right by 4 in the high ones, each
/// nibble through the table offset by 128 (`vpshufb`: unsigned bytes for `vpdpbusd`).
/// The activation block is laid out to match (`a0-15, a0-15, a16-31, a16-31`) and each
/// dword starts from `−128·Σ` of its activation quad, which cancels the offset
/// exactly. Eight rows' dwords are then folded into one lane per row.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
fn tile_vnni(table: &[i8; 16], ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    let Some((nw, nt, nb)) = shape(ws, acts, stride, out) else {
        return;
    };
    let offset: [u8; 16] = core::array::from_fn(|i| (table[i] as u8) ^ 0x80);
    // SAFETY: `offset` is 16 readable bytes.
    let lut = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(offset.as_ptr().cast()) });
    let m4 = _mm512_set1_epi8(0x0f);
    let ones = _mm512_set1_epi8(1);
    // Final gather of the per-row totals (see the fold below).
    let gather = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 13, 9, 5, 1, 12, 8, 4, 0);
    for g in (0..nw).step_by(8) {
        let width = (nw - g).min(8);
        let rows = group(ws, g, width);
        for t0 in (0..nt).step_by(ROWS) {
            let n = (nt - t0).min(ROWS);
            let mut acc = [_mm256_setzero_ps(); ROWS];
            for b in 0..nb {
                let o = BLOCK * b;
                // Broadcast loads and masked shifts (load and ALU ports): the shuffle
                // port is left to the table lookups and the folds.
                let w: [__m512i; 4] = core::array::from_fn(|k| {
                    // SAFETY: block `b` (18 bytes at `o`) lies in every row (`nb`).
                    let (q0, q1) = unsafe {
                        (
                            _mm_loadu_si128(rows[2 * k][o + 2..].as_ptr().cast()),
                            _mm_loadu_si128(rows[2 * k + 1][o + 2..].as_ptr().cast()),
                        )
                    };
                    let q = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(q0), 0xF0F0, q1);
                    let q = _mm512_mask_srli_epi16::<4>(q, 0xFFFF_0000, q);
                    _mm512_shuffle_epi8(lut, _mm512_and_si512(q, m4))
                });
                // Word k from row k by a masked load each (load port and a merge; inserts
                // queued on the shuffle port and took a quarter of a one-row pass).
                let dw = {
                    let mut v = _mm_setzero_si128();
                    for (k, row) in rows.iter().enumerate() {
                        assert!(row.len() >= o + 2, "scale past a row");
                        // SAFETY: only word k is read (masked load: the other
                        // lanes are neither read nor faulted), at rows[k][o..o + 2].
                        v = unsafe {
                            _mm_mask_loadu_epi16(
                                v,
                                1 << k,
                                row.as_ptr().wrapping_add(o).wrapping_sub(2 * k).cast(),
                            )
                        };
                    }
                    _mm256_cvtph_ps(v)
                };
                for (t, acc) in acc[..n].iter_mut().enumerate() {
                    let y = &acts[(t0 + t) * stride + ACT_BLOCK * b..][..ACT_BLOCK];
                    // SAFETY: `y` holds the 34-byte block: 32 quant bytes at 2.
                    let (a0, a1) = unsafe {
                        (
                            _mm_loadu_si128(y[2..].as_ptr().cast()),
                            _mm_loadu_si128(y[18..].as_ptr().cast()),
                        )
                    };
                    let a = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(a0), 0xFF00, a1);
                    let quads = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, a);
                    let start =
                        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(quads));
                    let z: [__m512i; 4] =
                        core::array::from_fn(|k| _mm512_dpbusd_epi32(start, w[k], a));
                    // 128-bit lanes of z[k]: rows 2k, 2k + 1 (elements 0-15), then the
                    // same rows (16-31). Fold to lanes = rows 0-3 (s01), 4-7 (s23).
                    let s01 = _mm512_add_epi32(
                        _mm512_shuffle_i64x2::<0x44>(z[0], z[1]),
                        _mm512_shuffle_i64x2::<0xEE>(z[0], z[1]),
                    );
                    let s23 = _mm512_add_epi32(
                        _mm512_shuffle_i64x2::<0x44>(z[2], z[3]),
                        _mm512_shuffle_i64x2::<0xEE>(z[2], z[3]),
                    );
                    // Per lane L: dwords (row L, row L + 4) totals after two folds.
                    let u = _mm512_add_epi32(
                        _mm512_unpacklo_epi32(s01, s23),
                        _mm512_unpackhi_epi32(s01, s23),
                    );
                    let v = _mm512_add_epi32(u, _mm512_shuffle_epi32::<0x4E>(u));
                    let s = _mm512_castsi512_si256(_mm512_permutexvar_epi32(gather, v));
                    let da = _mm256_set1_ps(crate::formats::f16_at(y, 0));
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, da), *acc);
                }
            }
            store(&acc[..n], &mut out[t0 * nw..], nw, g, width);
        }
    }
}
