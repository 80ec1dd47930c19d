//! AVX-512 (VNNI) multi-row (GEMM) block kernels: tiles of 4 weight rows × 8 activation
//! rows for the Q8_0-activation types (two weight rows per 512-bit register), 8
//! activation rows per weight row for K-quants (AVX-512VL gives 32 vector registers);
//! integer dots with `vpdpbusd` / `vpdpwssd`; bitwise equal to `avx512`'s single-row
//! kernels.

use super::gemm_blocks::gemm_kernels;
use crate::formats::kquants::k_scale_min;

gemm_kernels!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    4,
    8,
    8
);

tile_entry!(q4_0_tiles, q4_0_tile);
tile_entry!(q5_0_tiles, q5_0_tile);
tile_entry!(q8_0_tiles, q8_0_tile);

// Row-major Q4_0 / Q5_0 / Q8_0 weights with several activation rows: decoded 8 rows at a
// time (the tiles' own block decoders) into the packed Q8_0 layout and multiplied by its
// GEMM (bitwise the same dots, about twice the tiles' throughput); the tiles take the rest.
macro_rules! legacy_entry {
    ($name:ident, $tiles:ident, $ts:literal, $quants:ident) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
        fn $name(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
            // The closure inherits `$name`'s features (`$tiles`'), and `legacy_gemm`,
            // which has them too, is its only caller.
            let tiles: crate::gemm::TileFn = |ws, acts, stride, out| $tiles(ws, acts, stride, out);
            super::q8_0_x8::legacy_gemm(ws, acts, stride, out, $ts, |x| $quants(x), tiles)
        }
    };
}
legacy_entry!(q4_0_q8_0, q4_0_tiles, 18, q4_0_quants);
legacy_entry!(q5_0_q8_0, q5_0_tiles, 22, q5_0_quants_bw);
legacy_entry!(q8_0_q8_0, q8_0_tiles, 34, q8_0_quants);

/// A Q5_0 block's 32 signed quants (`q5_0_quants`' values), the high bits spread by one
/// AVX-512BW mask move instead of a shuffle and a compare: the decoding GEMM's Q5_0
/// matrices ran 5-7% slower at 5-8 rows with the shared decoder (`matmul_rows`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q5_0_quants_bw(x: &[u8]) -> __m256i {
    let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
    let hb = _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10));
    _mm256_sub_epi8(
        _mm256_or_si256(nibbles(&x[6..22]), hb),
        _mm256_set1_epi8(16),
    )
}

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
        if N < R {
            prefetch_next_tile(w, ts, b);
        }
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

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn load_i512(b: &[u8]) -> __m512i {
    let b = &b[..64];
    // SAFETY: `b` has 64 readable bytes and `loadu` needs no alignment.
    unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
}

/// Q4_K rows on 512-bit registers. The single-row kernel reduces each super-block to
/// exact integer totals (Σ scale·q·a and Σ min·bsum) before its scalar float steps, so
/// any exact way to reach those totals gives the same floats: here two sub-blocks per
/// register (low nibbles | high nibbles against 64 contiguous activation bytes) and
/// the min term from one `madd` of the block sums.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q4_k_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    if let Ok(a8) = <&[&[u8]; 8]>::try_from(a.as_slice()) {
        let mut out = [0f32; N];
        out.copy_from_slice(&q4_k_rows8(w, a8));
        return out;
    }
    if N < 4 {
        return q4_k_rows_ymm(w, a);
    }
    let mut acc = [0f32; N];
    let mut accm = [0f32; N];
    let nb = a.iter().fold(w.len() / 144, |n, y| n.min(y.len() / 292));
    for b in 0..nb {
        let x = &w[b * 144..(b + 1) * 144];
        let (q, s, mins) = q4_k_decode(x);
        let dw = _mm256_cvtss_f32(f16x8(x, 0));
        let dmin = _mm256_cvtss_f32(f16x8(x, 2));
        for r in 0..N {
            let y = &a[r][292 * b..292 * b + 292];
            let total = _mm512_reduce_add_epi32(q4_k_sumi(&q, &s, y));
            let summs = hsum_i32(_mm256_madd_epi16(load_i256(&y[260..292]), mins));
            let da = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
            acc[r] = (total as f32).mul_add(dw * da, acc[r]);
            accm[r] = (summs as f32).mul_add(dmin * da, accm[r]);
        }
    }
    let mut out = [0f32; N];
    for r in 0..N {
        out[r] = acc[r] - accm[r];
    }
    out
}

/// A Q4_K super-block's quants (pair j: sub-block 2j | 2j+1), their scales as i16
/// lanes, and each block sum's min (block sum g belongs to sub-block g / 2).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q4_k_decode(x: &[u8]) -> ([__m512i; 4], [__m512i; 4], __m256i) {
    let (sc, mn) = k_scale_min(&x[4..16]);
    let mut q = [_mm512_setzero_si512(); 4];
    let mut s = [_mm512_setzero_si512(); 4];
    for j in 0..4 {
        let q4 = load_i256(&x[16 + 32 * j..48 + 32 * j]);
        let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q4), _mm256_srli_epi16::<4>(q4));
        q[j] = _mm512_and_si512(both, _mm512_set1_epi8(0x0f));
        s[j] = _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(i16::from(sc[2 * j]))),
            _mm256_set1_epi16(i16::from(sc[2 * j + 1])),
        );
    }
    let m: [i16; 16] = core::array::from_fn(|g| i16::from(mn[g / 2]));
    let mins = _mm256_setr_epi16(
        m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9], m[10], m[11], m[12], m[13],
        m[14], m[15],
    );
    (q, s, mins)
}

/// Σ scale·q·a of one super-block as i32 lanes (`y`: the Q8_K activation block).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q4_k_sumi(q: &[__m512i; 4], s: &[__m512i; 4], y: &[u8]) -> __m512i {
    let mut sumi = _mm512_setzero_si512();
    for j in 0..4 {
        let yv = load_i512(&y[4 + 64 * j..68 + 64 * j]);
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[j], yv), s[j]);
    }
    sumi
}

/// Totals of eight i32 vectors, vector r's total in lane r.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn totals8(p: &[__m256i; 8]) -> __m256i {
    let b0 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    let b1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(b0, b1),
        _mm256_permute2x128_si256::<0x31>(b0, b1),
    )
}

/// [`q4_k_rows`] for 8 rows with the float steps in 8 lanes (lane r = row r, each
/// lane running row r's FMA sequence); the 8 rows' integer vectors are reduced to
/// their totals in one `hadd` tree.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q4_k_rows8(w: &[u8], a: &[&[u8]; 8]) -> [f32; 8] {
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    let nb = a.iter().fold(w.len() / 144, |n, y| n.min(y.len() / 292));
    for b in 0..nb {
        let x = &w[b * 144..(b + 1) * 144];
        let (q, s, mins) = q4_k_decode(x);
        let mut p = [_mm256_setzero_si256(); 8];
        let mut ms = [_mm256_setzero_si256(); 8];
        let mut da = [0f32; 8];
        for r in 0..8 {
            let y = &a[r][292 * b..292 * b + 292];
            let v = q4_k_sumi(&q, &s, y);
            p[r] = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
            ms[r] = _mm256_madd_epi16(load_i256(&y[260..292]), mins);
            da[r] = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        }
        // SAFETY: `da` is 32 readable bytes and `loadu` needs no alignment.
        let dav = unsafe { _mm256_loadu_ps(da.as_ptr()) };
        let dd = _mm256_mul_ps(_mm256_set1_ps(_mm256_cvtss_f32(f16x8(x, 0))), dav);
        let dm = _mm256_mul_ps(_mm256_set1_ps(_mm256_cvtss_f32(f16x8(x, 2))), dav);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(totals8(&p)), dd, acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(totals8(&ms)), dm, accm);
    }
    let mut out = [0f32; 8];
    // SAFETY: `out` is 32 writable bytes and `storeu` needs no alignment.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_sub_ps(acc, accm)) };
    out
}

// ---- Q6_K on 512-bit registers ----------------------------------------------------
//
// The single-row Q6_K kernel (`blocks.rs`) keeps eight i32 lanes per super-block, lane
// l holding the exact sum over its 4-byte column of every 32-quant chunk of
// `scale·(q+32)·a`, minus `32·(scale·bsum)` of groups 2l and 2l+1; then one FMA per
// lane. Here two chunks share a register (chunk pair j: chunks 2j | 2j+1 of the
// super-block, one per 256-bit half, their 64 activation bytes contiguous), and the
// two halves are added at the end: the same exact lane sums, hence the same floats.
// Lanes of two outputs share the float steps (one output per 256-bit half).

/// One Q6_K super-block decoded for [`q6_k_sumi`]: the unsigned quants of chunk pair j,
/// the i16 scales of its four 16-quant groups (one per 128-bit lane), the 16 scales
/// widened to i16 (for the offset term) and the f16 scale widened.
struct Q6kBlock {
    q: [__m512i; 4],
    s: [__m512i; 4],
    sc16: __m256i,
    d: __m256,
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q6_k_decode(x: &[u8]) -> Q6kBlock {
    let x = &x[..210];
    let sc16 = _mm256_cvtepi8_epi16(load_i128(&x[192..208]));
    let scz = _mm512_castsi256_si512(sc16);
    let m4 = _mm512_set1_epi8(0x0f);
    let m2 = _mm512_set1_epi8(0x30);
    let mut q = [_mm512_setzero_si512(); 4];
    let mut s = [_mm512_setzero_si512(); 4];
    for h in 0..2 {
        // Bytes 0..32: ql of chunks 4h and 4h+2 (low | high nibbles), 32..64: of 4h+1
        // and 4h+3; the two high bits of chunk 4h+k are bits 2k..2k+2 of `qh`.
        let ql = load_i512(&x[64 * h..64 * h + 64]);
        let qh = load_i256(&x[128 + 32 * h..160 + 32 * h]);
        let qh2 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), _mm256_srli_epi16::<2>(qh));
        // Pair 2h: chunks 4h (low nibbles, qh bits 0..2) | 4h+1 (low nibbles, bits 2..4).
        q[2 * h] = _mm512_or_si512(
            _mm512_and_si512(ql, m4),
            _mm512_and_si512(_mm512_slli_epi16::<4>(qh2), m2),
        );
        // Pair 2h+1: chunks 4h+2 (high nibbles, bits 4..6) | 4h+3 (high nibbles, 6..8).
        q[2 * h + 1] = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
            _mm512_and_si512(qh2, m2),
        );
    }
    for (j, s) in s.iter_mut().enumerate() {
        // 128-bit lane k of pair j multiplies group 4j + k.
        let g = 4 * j as i16;
        let idx = _mm512_set_epi16(
            g + 3,
            g + 3,
            g + 3,
            g + 3,
            g + 3,
            g + 3,
            g + 3,
            g + 3,
            g + 2,
            g + 2,
            g + 2,
            g + 2,
            g + 2,
            g + 2,
            g + 2,
            g + 2,
            g + 1,
            g + 1,
            g + 1,
            g + 1,
            g + 1,
            g + 1,
            g + 1,
            g + 1,
            g,
            g,
            g,
            g,
            g,
            g,
            g,
            g,
        );
        *s = _mm512_permutexvar_epi16(idx, scz);
    }
    Q6kBlock {
        q,
        s,
        sc16,
        d: f16x8(x, 208),
    }
}

/// Σ scale·(q+32)·a of one super-block against the Q8_K block `y`, before folding:
/// lane l of the low half plus lane l of the high half is the single-row lane l.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q6_k_sumi(blk: &Q6kBlock, y: &[u8]) -> __m512i {
    let mut sumi = _mm512_setzero_si512();
    for j in 0..4 {
        let yv = load_i512(&y[4 + 64 * j..68 + 64 * j]);
        // maddubs pairs ≤ 2·63·127: no saturation; vpdpwssd is exact.
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(blk.q[j], yv), blk.s[j]);
    }
    sumi
}

/// The single-row kernel's lane values of one output: folded sums minus the offset.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q6_k_lanes1(sumi: __m512i, sc16: __m256i, y: &[u8]) -> __m256i {
    let lanes = _mm256_add_epi32(
        _mm512_castsi512_si256(sumi),
        _mm512_extracti64x4_epi64::<1>(sumi),
    );
    let sub = _mm256_slli_epi32::<5>(_mm256_madd_epi16(load_i256(&y[260..292]), sc16));
    _mm256_sub_epi32(lanes, sub)
}

/// [`q6_k_lanes1`] of two outputs: output 0 in the low half, output 1 in the high.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q6_k_lanes2(s0: __m512i, s1: __m512i, sc16: __m512i, bsums: __m512i) -> __m512i {
    let lanes = _mm512_add_epi32(
        _mm512_shuffle_i64x2::<0x44>(s0, s1),
        _mm512_shuffle_i64x2::<0xee>(s0, s1),
    );
    _mm512_sub_epi32(
        lanes,
        _mm512_slli_epi32::<5>(_mm512_madd_epi16(bsums, sc16)),
    )
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn join256i(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn join256(lo: __m256, hi: __m256) -> __m512 {
    _mm512_insertf32x8::<1>(_mm512_castps256_ps512(lo), hi)
}

/// Horizontal sums of both halves (the single-row `hsum` of each output's lanes).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn hsum2(acc: __m512) -> (f32, f32) {
    (
        hsum(_mm512_castps512_ps256(acc)),
        hsum(_mm512_extractf32x8_ps::<1>(acc)),
    )
}

/// Q6_K: one weight row `w` against `N` activation rows (prefill). Each super-block is
/// decoded once for all rows; activation rows go two per register for the float steps.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn q6_k_rows<const N: usize>(w: &[u8], a: &[&[u8]; N]) -> [f32; N] {
    let mut acc2 = [_mm512_setzero_ps(); N];
    let mut acc1 = _mm256_setzero_ps();
    let nb = a.iter().fold(w.len() / 210, |n, y| n.min(y.len() / 292));
    for b in 0..nb {
        let blk = q6_k_decode(&w[b * 210..(b + 1) * 210]);
        let sc2 = join256i(blk.sc16, blk.sc16);
        let d2 = join256(blk.d, blk.d);
        for p in 0..N / 2 {
            let y0 = &a[2 * p][292 * b..292 * b + 292];
            let y1 = &a[2 * p + 1][292 * b..292 * b + 292];
            let (s0, s1) = (q6_k_sumi(&blk, y0), q6_k_sumi(&blk, y1));
            let bs = join256i(load_i256(&y0[260..292]), load_i256(&y1[260..292]));
            let lanes = q6_k_lanes2(s0, s1, sc2, bs);
            let da = join256(f32x8(y0, 0), f32x8(y1, 0));
            acc2[p] = _mm512_fmadd_ps(_mm512_mul_ps(d2, da), _mm512_cvtepi32_ps(lanes), acc2[p]);
        }
        if N % 2 == 1 {
            let y = &a[N - 1][292 * b..292 * b + 292];
            let lanes = q6_k_lanes1(q6_k_sumi(&blk, y), blk.sc16, y);
            acc1 = _mm256_fmadd_ps(
                _mm256_mul_ps(blk.d, f32x8(y, 0)),
                _mm256_cvtepi32_ps(lanes),
                acc1,
            );
        }
    }
    let mut out = [0f32; N];
    for p in 0..N / 2 {
        (out[2 * p], out[2 * p + 1]) = hsum2(acc2[p]);
    }
    if N % 2 == 1 {
        out[N - 1] = hsum(acc1);
    }
    out
}

/// The Q6_K single-row dot on 512-bit registers (what `avx512` installs; bitwise the
/// shared 256-bit kernel's result, and the tile kernels' by construction).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline(never)]
pub(super) fn q6_k_dot(w: &[u8], a: &[u8]) -> f32 {
    q6_k_rows::<1>(w, &[a])[0]
}

/// The Q6_K tile kernel: one weight row × 8 activation rows at a time ([`q6_k_rows`]),
/// remainders of activation rows one at a time.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
fn q6_k_q8_k(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    drive_tiles(
        ws,
        acts,
        stride,
        out,
        |w: &[&[u8]; 8], a: &[&[u8]; 8]| {
            let mut o = [[0f32; 8]; 8];
            for (i, x) in w.iter().enumerate() {
                for (o, v) in o.iter_mut().zip(q6_k_rows(x, a)) {
                    o[i] = v;
                }
            }
            o
        },
        // One activation row: the single-row form per weight row measures faster than
        // the 8-row `q6_k_cols` (67 vs 72 GMAC/s single-thread, L2-resident rows).
        |w: &[&[u8]; 8], a, out| match a {
            [a] => out[..8].copy_from_slice(&w.map(|x| q6_k_dot(x, a))),
            _ => super::gemm_blocks::part_rows!(a, out, |aa| rows_tile(w, &aa, |x, a| q6_k_rows(
                x, a
            ))),
        },
        |w, a| q6_k_rows(w[0], a).map(|v| [v]),
        |w: &[&[u8]; 1], a, out| {
            super::gemm_blocks::part_rows!(a, out, |aa| rows_tile(w, &aa, |x, a| q6_k_rows(x, a)))
        },
    )
}
