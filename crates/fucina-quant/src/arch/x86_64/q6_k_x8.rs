//! AVX-512 (VBMI, VNNI) Q6_K GEMV over interleaved 8-row groups (`repack::q6_k`'s
//! layout): one Q8_K activation row against every row of the packed matrix, bitwise
//! the single-row dots (`formats::kquants::dot_q6_k_q8_k`, `gemm_avx512::q6_k_dot`).
//!
//! The single-row kernels keep, per super-block, eight exact i32 lanes per row (lane
//! `l` = Σ over elements `e` with `(e mod 32) / 4 = l` of `sc[e / 16]·q[e]·a[e]`, `q`
//! unsigned, minus `32·(sc·bsum)` of sub-blocks `2l` and `2l + 1`), then one
//! `acc_l = fma(d_w·d_a, lane_l, acc_l)` each and ggml's `hsum_float_8` at the end.
//! Any exact way to the same lanes gives the same floats. Here, per row pair `k` and
//! chunk pair `j` (elements `64j..64j + 64`) of a group super-block:
//! * each side's 48 bytes of 6-bit fields: one 64-byte load, `vpermb` (each 6-byte
//!   field to its own qword), `vpmultishiftqb` (shifts 0, 6, .., 42) and an AND with
//!   0x3f: 64 unsigned quants in the layout's order;
//! * `vpdpbusd` against the chunk pair's 64 activations in the same order (one
//!   `vpermb` per `j`, shared by the 8 rows): 16 dwords of 4 products, each one lane
//!   of one chunk (|sum| ≤ 4·63·127 < 2^15);
//! * `vpackssdw` of the two sides (exact) and one `vpdpwssd` with both chunks' scales:
//!   dword `4m + 2s + h` of the pair's accumulator gains exactly lane `4h + m` of
//!   side `s`'s row for chunks `2j` and `2j + 1`.
//!
//! The accumulators start at the `−32·(sc·bsum)` offsets (one `vpmaddwd` per pair),
//! and per super-block each dword takes its row's FMA. Per 64 weights that is 4.5
//! instructions on the shuffle and multiply ports (`vpermb`, `vpmultishiftqb`,
//! `vpdpbusd`, half a `vpackssdw`, `vpermw` and `vpdpwssd`) plus an AND; the matrix
//! streams front to back with software prefetch ahead. Several activation rows (a
//! verify batch) share each unpacked register ([`stream_rows`], up to [`STREAM_MAX`]
//! rows) or, past that, each super-block unpacked once into memory ([`gemm_rows`]).

use core::arch::x86_64::*;

use crate::formats::kquants::hsum_lanes8;
use crate::formats::kquants::Q8_K_BYTES as Q8_K_BLOCK;
use crate::repack::q6_k::{Q6_K_X8_BLOCK_BYTES, X8_D, X8_SCALES};

use crate::repack::{GemmFn, GemvFn};

/// Whether this CPU has every feature [`gemv`] needs.
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx512vbmi")
}

/// The kernel, if this CPU can run it.
pub(crate) fn kernel() -> Option<GemvFn> {
    available().then_some(gemv as GemvFn)
}

/// The multi-row kernel ([`GemmFn`]), if this CPU can run it.
pub(crate) fn gemm_kernel() -> Option<GemmFn> {
    available().then_some(gemm as GemmFn)
}

/// Activation rows per pass of [`gemm_rows`] over an unpacked super-block.
const GEMM_ROWS: usize = 8;

/// `out[t * n + i]` = dot of packed row `i` with activation row `t` (`acts[t *
/// stride..]`), `n = 8 · groups`: per output exactly [`gemv`]'s arithmetic, with each
/// super-block's 6-bit fields unpacked (and its scales put in order) once for every
/// activation row instead of once per row.
///
/// # Panics
/// As [`gemv`], for every activation row.
fn gemm(groups: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [f32]) {
    assert!(
        available(),
        "packed Q6_K GEMM needs AVX-512 F/BW/VL/DQ/VNNI/VBMI"
    );
    let gb = nb.checked_mul(Q6_K_X8_BLOCK_BYTES).unwrap_or(0);
    assert!(
        gb > 0 && !groups.is_empty() && groups.len().is_multiple_of(gb),
        "packed Q6_K GEMM: {} bytes of groups of {nb} super-blocks",
        groups.len()
    );
    let n = groups.len() / gb * 8;
    let nt = out.len() / n;
    assert!(
        out.len() == nt * n
            && stride >= nb * Q8_K_BLOCK
            && (nt == 0 || acts.len() >= (nt - 1) * stride + nb * Q8_K_BLOCK),
        "packed Q6_K GEMM: {} outputs for {n} rows, {} activation bytes of stride {stride}",
        out.len(),
        acts.len()
    );
    if nt <= STREAM_MAX {
        // SAFETY: every feature `stream_rows` enables was detected just above (`available`).
        return unsafe { stream_rows(groups, nb, acts, stride, nt, out) };
    }
    // SAFETY: every feature `gemm_rows` enables was detected just above (`available`).
    unsafe { gemm_rows(groups, nb, acts, stride, nt, out) }
}

/// Most activation rows [`gemm`] streams ([`stream_rows`]: every verify batch, 1 + 16
/// drafts at most); more go through [`gemm_rows`], which unpacks each super-block once
/// into memory (48 registers' worth, through the stack) for all of them. Measured on
/// a 2-core Zen 5, 2 threads: Qwen3-4B's 2560 x 9728 `ffn_down` at 2 / 3 / 5 / 8 / 17
/// rows 218-238 / 258-302 / 437-511 / 630-803 / 1331-1546 us streaming against
/// 302-325 / 360-456 / 500-583 / 696-772 / 1462-1703 us (one row: ~170 us), its
/// 151,936-row head 30% faster at 2-8 rows (memory-bound below); a pinned forward of
/// the whole model, alternated in one process, 1 + k rows, k = 1 / 2 / 4 / 8 / 16:
/// 61.6 / 66.9 / 89.0 / 127.4 / 198.2 ms against 66.8 / 73.3 / 92.4 / 137.1 / 209.4 ms
/// (one row 45 ms).
const STREAM_MAX: usize = 20;
/// Most activation rows per pass of [`stream_block`].
const STREAM_ROWS: usize = 4;

/// A few activation rows against every group, streaming: each quant register is
/// unpacked as it is loaded and multiplied into every row of the pass at once (nothing
/// of the block goes back to memory), passes of at most [`STREAM_ROWS`] rows as even as
/// they go. Per row exactly [`gemv_x8`]'s integer lanes and float steps.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
fn stream_rows(groups: &[u8], nb: usize, acts: &[u8], stride: usize, nt: usize, out: &mut [f32]) {
    let gb = nb * Q6_K_X8_BLOCK_BYTES;
    let n = groups.len() / gb * 8;
    let c = consts();
    let mode = GEMV_PREFETCH.get();
    for (g, grp) in groups.chunks_exact(gb).enumerate() {
        let mut facc = [[_mm512_setzero_ps(); 4]; STREAM_MAX];
        for (b, blk) in grp.chunks_exact(Q6_K_X8_BLOCK_BYTES).enumerate() {
            let blk: &[u8; Q6_K_X8_BLOCK_BYTES] = blk.try_into().expect("whole block");
            super::prefetch_stream(
                blk.as_ptr(),
                Q6_K_X8_BLOCK_BYTES.div_ceil(64),
                mode,
                PF_DIST,
            );
            let y = |t: usize| -> &[u8; Q8_K_BLOCK] {
                acts[t * stride + Q8_K_BLOCK * b..][..Q8_K_BLOCK]
                    .try_into()
                    .expect("whole block")
            };
            let mut t = 0;
            while t < nt {
                let left = nt - t;
                let pass = left.div_ceil(left.div_ceil(STREAM_ROWS));
                let f = &mut facc[t..];
                match pass {
                    1 => stream_block::<1>(blk, [y(t)], &c, f),
                    2 => stream_block::<2>(blk, [y(t), y(t + 1)], &c, f),
                    3 => stream_block::<3>(blk, [y(t), y(t + 1), y(t + 2)], &c, f),
                    _ => stream_block::<4>(blk, [y(t), y(t + 1), y(t + 2), y(t + 3)], &c, f),
                }
                t += pass;
            }
        }
        for (t, facc) in facc.iter().take(nt).enumerate() {
            store_group(facc, &mut out[t * n + 8 * g..][..8]);
        }
    }
}

/// One super-block of a group against `N` activation blocks ([`stream_rows`]): the
/// block's scales and each pair's unpacked quants shared by the `N` rows, each row's
/// lanes and FMAs those of [`gemv_x8`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn stream_block<const N: usize>(
    blk: &[u8; Q6_K_X8_BLOCK_BYTES],
    ys: [&[u8; Q8_K_BLOCK]; N],
    c: &Consts,
    facc: &mut [[__m512; 4]],
) {
    let zero = _mm512_setzero_si512();
    let mut sc = [zero; 4];
    for k in 0..4 {
        sc[k] = _mm512_cvtepi8_epi16(load_i256(&blk[X8_SCALES + 32 * k..]));
    }
    let mut isum = [[zero; 4]; N];
    for (isum, y) in isum.iter_mut().zip(ys) {
        // −bsums (|bsum| ≤ 16·127: no overflow) in the scale order; each dword starts
        // at −32·(sc·bsum) of its lane's two sub-blocks.
        let bs = _mm512_castsi256_si512(load_i256(&y[260..292]));
        let nbs = _mm512_sub_epi16(zero, _mm512_permutexvar_epi16(c.bidx, bs));
        for k in 0..4 {
            isum[k] = _mm512_slli_epi32::<5>(_mm512_madd_epi16(nbs, sc[k]));
        }
    }
    for (j, si) in c.sidx.iter().enumerate() {
        let mut yv = [zero; N];
        for (yv, y) in yv.iter_mut().zip(ys) {
            *yv = _mm512_permutexvar_epi8(c.yperm, load_i512(&y[4 + 64 * j..]));
        }
        for k in 0..4 {
            // Sides 0 and 1 of pair k, 48 bytes each plus 16 more: at most
            // 96·15 + 48 + 64 = 1552 bytes into the super-block.
            let o = 96 * (4 * j + k);
            let qa = unpack(load_i512(&blk[o..]), c.perm, c.shifts, c.m6);
            let qb = unpack(load_i512(&blk[o + 48..]), c.perm, c.shifts, c.m6);
            let s = _mm512_permutexvar_epi16(*si, sc[k]);
            for r in 0..N {
                let pa = _mm512_dpbusd_epi32(zero, qa, yv[r]);
                let pb = _mm512_dpbusd_epi32(zero, qb, yv[r]);
                isum[r][k] = dpwssd(isum[r][k], _mm512_packs_epi32(pa, pb), s);
            }
        }
    }
    let dw = _mm256_cvtph_ps(load_i128(&blk[X8_D..]));
    for r in 0..N {
        let y = ys[r];
        let da = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        // d_w·d_a of the 8 rows (one f32 product each, as the single-row kernel).
        let dd = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_set1_ps(da)));
        for k in 0..4 {
            let d2 = _mm512_permutexvar_ps(c.dis[k], dd);
            facc[r][k] = _mm512_fmadd_ps(d2, _mm512_cvtepi32_ps(isum[r][k]), facc[r][k]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
fn gemm_rows(groups: &[u8], nb: usize, acts: &[u8], stride: usize, nt: usize, out: &mut [f32]) {
    let gb = nb * Q6_K_X8_BLOCK_BYTES;
    let n = groups.len() / gb * 8;
    let c = consts();
    let zero = _mm512_setzero_si512();
    for (g, grp) in groups.chunks_exact(gb).enumerate() {
        for t0 in (0..nt).step_by(GEMM_ROWS) {
            let rows = (nt - t0).min(GEMM_ROWS);
            let mut facc = [[_mm512_setzero_ps(); 4]; GEMM_ROWS];
            for (b, blk) in grp.chunks_exact(Q6_K_X8_BLOCK_BYTES).enumerate() {
                let blk: &[u8; Q6_K_X8_BLOCK_BYTES] = blk.try_into().expect("whole block");
                let ahead = blk.as_ptr().wrapping_add(PF_DIST);
                for l in 0..Q6_K_X8_BLOCK_BYTES.div_ceil(64) {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * l).cast());
                }
                // The block's quants and ordered scales, once for all rows.
                let mut q = [[[zero; 2]; 4]; 4];
                let mut sc = [zero; 4];
                let mut sp = [[zero; 4]; 4];
                for k in 0..4 {
                    sc[k] = _mm512_cvtepi8_epi16(load_i256(&blk[X8_SCALES + 32 * k..]));
                }
                for j in 0..4 {
                    for k in 0..4 {
                        let o = 96 * (4 * j + k);
                        q[j][k][0] = unpack(load_i512(&blk[o..]), c.perm, c.shifts, c.m6);
                        q[j][k][1] = unpack(load_i512(&blk[o + 48..]), c.perm, c.shifts, c.m6);
                        sp[j][k] = _mm512_permutexvar_epi16(c.sidx[j], sc[k]);
                    }
                }
                let dw = _mm256_cvtph_ps(load_i128(&blk[X8_D..]));
                for (r, facc) in facc.iter_mut().take(rows).enumerate() {
                    let t = t0 + r;
                    let y: &[u8; Q8_K_BLOCK] = acts[t * stride + Q8_K_BLOCK * b..][..Q8_K_BLOCK]
                        .try_into()
                        .expect("whole block");
                    let bs = _mm512_castsi256_si512(load_i256(&y[260..292]));
                    let nbs = _mm512_sub_epi16(zero, _mm512_permutexvar_epi16(c.bidx, bs));
                    let mut isum = [zero; 4];
                    for k in 0..4 {
                        isum[k] = _mm512_slli_epi32::<5>(_mm512_madd_epi16(nbs, sc[k]));
                    }
                    for j in 0..4 {
                        let yv = _mm512_permutexvar_epi8(c.yperm, load_i512(&y[4 + 64 * j..]));
                        for k in 0..4 {
                            let pa = _mm512_dpbusd_epi32(zero, q[j][k][0], yv);
                            let pb = _mm512_dpbusd_epi32(zero, q[j][k][1], yv);
                            isum[k] = dpwssd(isum[k], _mm512_packs_epi32(pa, pb), sp[j][k]);
                        }
                    }
                    let da = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                    let dd = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_set1_ps(da)));
                    for k in 0..4 {
                        let d2 = _mm512_permutexvar_ps(c.dis[k], dd);
                        facc[k] = _mm512_fmadd_ps(d2, _mm512_cvtepi32_ps(isum[k]), facc[k]);
                    }
                }
            }
            for (r, facc) in facc.iter().take(rows).enumerate() {
                store_group(facc, &mut out[(t0 + r) * n + 8 * g..][..8]);
            }
        }
    }
}

/// Q6_K GEMV over interleaved groups (see [`GemvFn`]: `act` one Q8_K row); bitwise the single-row dot of
/// every row.
///
/// # Panics
/// If the CPU lacks a feature ([`available`]) or the lengths disagree: `groups` must
/// be `out.len() / 8` groups of `nb` super-blocks, `act` at least `nb` Q8_K blocks
/// (internal contract, checked: never undefined behaviour).
pub(crate) fn gemv(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]) {
    assert!(
        available(),
        "packed Q6_K GEMV needs AVX-512 F/BW/VL/DQ/VNNI/VBMI"
    );
    let group_bytes = nb.checked_mul(Q6_K_X8_BLOCK_BYTES);
    assert!(
        out.len().is_multiple_of(8)
            && group_bytes.and_then(|gb| gb.checked_mul(out.len() / 8)) == Some(groups.len())
            && nb.checked_mul(Q8_K_BLOCK).is_some_and(|n| act.len() >= n),
        "packed Q6_K GEMV: {} bytes, nb {nb}, {} outputs, {} activation bytes",
        groups.len(),
        out.len(),
        act.len()
    );
    if nb == 0 {
        // Empty rows: the single-row dots sum nothing.
        out.fill(0.0);
        return;
    }
    // SAFETY: every feature `gemv_x8` enables was detected just above (`available`).
    unsafe { gemv_x8(groups, nb, &act[..nb * Q8_K_BLOCK], out) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn load_i512(b: &[u8]) -> __m512i {
    let b = &b[..64];
    // SAFETY: `b` has 64 readable bytes and `loadu` needs no alignment.
    unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn load_i256(b: &[u8]) -> __m256i {
    let b = &b[..32];
    // SAFETY: `b` has 32 readable bytes and `loadu` needs no alignment.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn load_i128(b: &[u8]) -> __m128i {
    let b = &b[..16];
    // SAFETY: `b` has 16 readable bytes and `loadu` needs no alignment.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// Software prefetch distance (bytes ahead of the current super-block): the hardware
/// prefetchers alone left a 4096 × 4096 GEMV at ~44 GB/s on one Zen 5 core; ~10
/// super-blocks ahead measured best (~65 GB/s), with no clear cost on L2-resident ones.
const PF_DIST: usize = 10 * Q6_K_X8_BLOCK_BYTES;

/// Where [`gemv`] prefetches its stream (into L1 [`PF_DIST`] ahead by default; the
/// repacking's calibration picks L2 where that streams faster: an Intel Xeon's
/// 248k-row head, 2 threads, 24.2 against 19.3 GB/s).
pub(crate) static GEMV_PREFETCH: crate::repack::PrefetchCell =
    crate::repack::PrefetchCell::new(crate::repack::Prefetch::L1);

/// 64 index bytes, byte `p` = `f(p)`.
fn index_bytes(f: impl Fn(usize) -> usize) -> [u8; 64] {
    let mut b = [0u8; 64];
    for (p, b) in b.iter_mut().enumerate() {
        *b = f(p) as u8;
    }
    b
}

/// 32 index words (as 64 bytes), word `w` = `f(w)`.
fn index_words(f: impl Fn(usize) -> usize) -> [u8; 64] {
    let mut b = [0u8; 64];
    for (w, b) in b.chunks_exact_mut(2).enumerate() {
        b.copy_from_slice(&(f(w) as u16).to_le_bytes());
    }
    b
}

/// Word of sub-block `g`'s scale of side `s` in a pair's 32 widened scales (the
/// layout's order: `8m + 4s + i` holds sub-block `[2m, 2m+1, 8+2m, 9+2m][i]`).
fn scale_word(s: usize, g: usize) -> usize {
    let (m, i) = if g < 8 {
        (g / 2, g % 2)
    } else {
        ((g - 8) / 2, 2 + g % 2)
    };
    8 * m + 4 * s + i
}

/// The kernels' constant registers (permute indices, shifts, masks).
#[derive(Clone, Copy)]
struct Consts {
    perm: __m512i,
    shifts: __m512i,
    m6: __m512i,
    yperm: __m512i,
    bidx: __m512i,
    sidx: [__m512i; 4],
    dis: [__m512i; 4],
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn consts() -> Consts {
    // `vpermb` index: qword t takes bytes 6t..6t + 8 (field t). Bytes 6 and 7 of each
    // qword are don't-cares: the shifts below read at most bits 42..50, masked to 6.
    let perm = load_i512(&index_bytes(|p| 6 * (p / 8) + p % 8));
    // Byte i of each qword: the 8 bits at 6i (quant i of the field).
    let shifts = _mm512_set1_epi64(0x2a24_1e18_120c_0600);
    let m6 = _mm512_set1_epi8(0x3f);
    // Activation order: register byte 16m + 4i + e is element
    // 32·(i % 2) + 16·(i / 2) + 4m + e of the chunk pair.
    let yperm = load_i512(&index_bytes(|p| {
        let (m, i, e) = (p / 16, (p / 4) % 4, p % 4);
        32 * (i % 2) + 16 * (i / 2) + 4 * m + e
    }));
    // Block sums as words, lane m = [2m, 2m+1, 8+2m, 9+2m] twice (the scale order).
    let bidx = load_i512(&index_words(|w| {
        let (m, i) = (w / 8, w % 4);
        [2 * m, 2 * m + 1, 8 + 2 * m, 9 + 2 * m][i]
    }));
    // Scale words of chunk pair j, every lane: dword (s, h) = (sc_s[4j + h],
    // sc_s[4j + 2 + h]). Opaque: kept as `vpermw` operands, hoisted.
    let mut sidx = [_mm512_setzero_si512(); 4];
    for (j, si) in sidx.iter_mut().enumerate() {
        *si = opaque(load_i512(&index_words(|w| {
            let e = w % 8;
            let (s, h, second) = (e / 4, (e / 2) % 2, e % 2);
            scale_word(s, 4 * j + h + 2 * second)
        })));
    }
    // `vpermps` indices of pair k's d: [d_2k, d_2k, d_2k+1, d_2k+1] in every lane.
    let mut dis = [_mm512_setzero_si512(); 4];
    for (k, di) in dis.iter_mut().enumerate() {
        *di = load_i512(&index_bytes(|p| {
            if p % 4 == 0 {
                2 * k + (p / 8) % 2
            } else {
                0
            }
        }));
    }
    Consts {
        perm,
        shifts,
        m6,
        yperm,
        bidx,
        sidx,
        dis,
    }
}

/// The kernel body: `act` is exactly `nb` Q8_K blocks, the lengths checked by [`gemv`].
///
/// Per pair `k` and chunk pair `j`: registers `A` (side 0) and `B` (side 1) of 64
/// quants each, against the 64 activations of chunks `2j`, `2j + 1` put in the same
/// order (one `vpermb` per `j`, shared by the 8 rows). `vpdpbusd` gives 16 dword sums
/// of 4 products each (|sum| ≤ 4·63·127 < 2^15); in 128-bit lane `m` they are, per
/// side, lane `m` of chunk `2j`, lane `m` of chunk `2j + 1`, lane `4 + m` of `2j`,
/// lane `4 + m` of `2j + 1`. `vpackssdw` (exact: no saturation) packs `A`'s and `B`'s
/// into words, and one `vpdpwssd` with the scales
/// `[(sa[4j], sa[4j+2]), (sa[4j+1], sa[4j+3]), (sb[4j], sb[4j+2]), (sb[4j+1], sb[4j+3])]`
/// (every lane) adds both chunks' scaled sums: dword `4m + 2s + h` of the pair's
/// accumulator is lane `4h + m` of side `s`'s row, exactly.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
fn gemv_x8(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]) {
    let gb = nb * Q6_K_X8_BLOCK_BYTES;
    let mode = GEMV_PREFETCH.get();
    let c = consts();
    for (grp, out) in groups.chunks_exact(gb).zip(out.chunks_exact_mut(8)) {
        let mut facc = [_mm512_setzero_ps(); 4];
        for (blk, y) in grp
            .chunks_exact(Q6_K_X8_BLOCK_BYTES)
            .zip(act.chunks_exact(Q8_K_BLOCK))
        {
            let blk: &[u8; Q6_K_X8_BLOCK_BYTES] = blk.try_into().expect("whole block");
            let y: &[u8; Q8_K_BLOCK] = y.try_into().expect("whole block");
            // Every cache line of the super-block ahead, as `GEMV_PREFETCH` says.
            super::prefetch_stream(
                blk.as_ptr(),
                Q6_K_X8_BLOCK_BYTES.div_ceil(64),
                mode,
                PF_DIST,
            );
            stream_block::<1>(blk, [y], &c, core::slice::from_mut(&mut facc));
        }
        store_group(&facc, out);
    }
}

/// A group's 8 results from its four pair accumulators: each row's 8 lanes reduced in
/// ggml's `hsum_float_8` order.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn store_group(facc: &[__m512; 4], out: &mut [f32]) {
    for (k, acc) in facc.iter().enumerate() {
        let mut v = [0f32; 16];
        // SAFETY: `v` is 64 writable bytes and `storeu` needs no alignment.
        unsafe { _mm512_storeu_ps(v.as_mut_ptr(), *acc) };
        for s in 0..2 {
            // Lane l of side s: dword 4·(l % 4) + 2s + l / 4.
            let mut lanes = [0f32; 8];
            for (l, lane) in lanes.iter_mut().enumerate() {
                *lane = v[4 * (l % 4) + 2 * s + l / 4];
            }
            out[2 * k + s] = hsum_lanes8(&lanes);
        }
    }
}

/// The 64 unsigned quants of 8 fields (`w`'s first 48 bytes), field t in qword t.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn unpack(w: __m512i, perm: __m512i, shifts: __m512i, m6: __m512i) -> __m512i {
    let f = _mm512_permutexvar_epi8(perm, w);
    _mm512_and_si512(_mm512_multishift_epi64_epi8(shifts, f), m6)
}

/// `acc + Σ a·b` over word pairs (`vpdpwssd`), kept as one instruction (LLVM's machine
/// combiner otherwise splits it into `vpmaddwd` + `vpaddd`: more uops on a kernel that
/// is throughput-bound, not latency-bound).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn dpwssd(mut acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    // SAFETY: a register-only AVX512-VNNI instruction (enabled on this function) that
    // writes only `acc`.
    unsafe {
        core::arch::asm!(
            "vpdpwssd {0}, {1}, {2}",
            inout(zmm_reg) acc,
            in(zmm_reg) a,
            in(zmm_reg) b,
            options(pure, nomem, nostack)
        )
    };
    acc
}

/// `v`, hidden from the optimiser: keeps a permute with this index the instruction
/// written, hoisted out of the loops (with a known index LLVM may rewrite it as
/// several in-lane shuffles).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn opaque(mut v: __m512i) -> __m512i {
    // SAFETY: an empty instruction string: no memory access, no effect on `v`.
    unsafe { core::arch::asm!("/* {0} */", inout(zmm_reg) v, options(pure, nomem, nostack)) };
    v
}
