//! The AVX-512 VNNI Q8_0 GEMV over interleaved 8-row groups (`repack::q8_0`'s layout).
//!
//! Per block of a group: one activation block, its dwords duplicated (`[a0, a0, a1, a1,
//! ..]`) to face the dword-interleaved row pairs; per pair one `vpdpbusd` of the
//! offset quants (`q + 128`) started from `−128·Σ` of each activation quad, so the
//! 16 dword lanes are exactly ggml's 8 lanes of both rows; one conversion and one FMA
//! by `d_w·d_a` per pair. At the end each pair's accumulator is reduced in ggml's
//! `hsum_float_8` order for both rows at once. Every step is the single-row kernel's
//! (`q8_0_q8_0`, the scalar `dot_q8_0_q8_0`) on the same values, so the results are
//! bitwise equal; the work per weight byte is about a third (one thread, L2-resident
//! rows: 105 GB/s against the row dots' 33).

use core::arch::x86_64::*;

use crate::repack::q8_0::{BLOCK, GROUP_BLOCK, GROUP_ROWS};

/// How far ahead of the block being read the kernel prefetches its stream. The
/// hardware prefetchers alone left the packed GEMV slower than the row dots when
/// streaming from memory (21 vs 29 GB/s, one thread, Zen 5); 8 KiB ahead gave 40 GB/s
/// (4 KiB: 36, 16 KiB: 36).
const PREFETCH: usize = 8192;

/// Where [`gemv`] prefetches its stream (into L1 [`PREFETCH`] ahead by default; the
/// repacking's calibration picks L2 where that streams faster).
pub(crate) static GEMV_PREFETCH: crate::repack::PrefetchCell =
    crate::repack::PrefetchCell::new(crate::repack::Prefetch::L1);

use crate::repack::{GemmFn, GemvFn};

/// The kernel, if this CPU has its features (AVX-512 F/BW/VL/DQ + VNNI, F16C, FMA).
pub(crate) fn kernel() -> Option<GemvFn> {
    features().then_some(gemv as GemvFn)
}

/// The multi-row kernel ([`GemmFn`]), if this CPU has its features (those of [`kernel`]).
pub(crate) fn gemm_kernel() -> Option<GemmFn> {
    features().then_some(gemm as GemmFn)
}

/// Whether this CPU has the kernels' features (also those of `whole_block`'s VNNI form).
pub(crate) fn features() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

fn gemv(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]) {
    let gs = nb * GROUP_BLOCK;
    assert!(
        nb > 0
            && groups.len() == out.len() / GROUP_ROWS * gs
            && out.len().is_multiple_of(GROUP_ROWS),
        "packed Q8_0 GEMV: {} bytes for {} rows of {nb} blocks",
        groups.len(),
        out.len()
    );
    assert!(
        act.len() >= nb * BLOCK,
        "packed Q8_0 GEMV: {} activation bytes",
        act.len()
    );
    // SAFETY: `kernel` hands this function out only after detecting every feature in
    // `gemv_groups`' `#[target_feature]` set.
    unsafe { gemv_groups(groups, nb, act, out) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
fn gemv_groups(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]) {
    let dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    let pair_d = pair_scales();
    let offset = _mm512_set1_epi8(-128); // 0x80: the unsigned 128 of `q + 128`
    let mode = GEMV_PREFETCH.get();
    for (grp, out) in groups
        .chunks_exact(nb * GROUP_BLOCK)
        .zip(out.chunks_exact_mut(GROUP_ROWS))
    {
        let (quants, scales) = grp.split_at(256 * nb);
        let mut acc = [_mm512_setzero_ps(); 4];
        for b in 0..nb {
            let y: &[u8; BLOCK] = act[BLOCK * b..BLOCK * (b + 1)].try_into().expect("block");
            let q: &[u8; 256] = quants[256 * b..256 * (b + 1)].try_into().expect("block");
            let s: &[u8; 16] = scales[16 * b..16 * (b + 1)].try_into().expect("block");
            // The group's bytes from `GROUP_BLOCK · b` on, ahead as `GEMV_PREFETCH`
            // says (a linear walk through both the quants and the scales).
            super::prefetch_stream(
                grp.as_ptr().wrapping_add(GROUP_BLOCK * b),
                5,
                mode,
                PREFETCH,
            );
            // SAFETY: `y[2..34]` is 32 readable bytes; `loadu` needs no alignment.
            let yq = unsafe { _mm256_loadu_si256(y[2..].as_ptr().cast()) };
            let ydup = _mm512_permutexvar_epi32(dup, _mm512_castsi256_si512(yq));
            // −128·Σ of each activation quad: `vpdpbusd` of the offset quants from here
            // leaves exactly Σ q·a per quad.
            let start = _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, ydup),
            );
            let yd = crate::half::f16_to_f32(u16::from_le_bytes([y[0], y[1]]));
            // SAFETY: `s` is 16 readable bytes; `loadu` needs no alignment.
            let wd = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(s.as_ptr().cast()) });
            let d = _mm512_castps256_ps512(_mm256_mul_ps(wd, _mm256_set1_ps(yd)));
            for (k, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `q[64k..64k + 64]` is readable (k < 4); `loadu` needs no alignment.
                let w = unsafe { _mm512_loadu_si512(q[64 * k..].as_ptr().cast()) };
                let sum = _mm512_dpbusd_epi32(start, w, ydup);
                let dk = _mm512_permutexvar_ps(pair_d[k], d);
                *acc = _mm512_fmadd_ps(dk, _mm512_cvtepi32_ps(sum), *acc);
            }
        }
        for (k, acc) in acc.iter().enumerate() {
            // Dword 2i / 2i + 1 = lane i of row 2k / 2k + 1: `hsum_float_8`'s three
            // steps (i + (i + 4), then (0 + 2) + (1 + 3)) for both rows side by side.
            let h = _mm256_add_ps(
                _mm512_castps512_ps256(*acc),
                _mm512_extractf32x8_ps::<1>(*acc),
            );
            let x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
            let r = _mm_add_ps(x, _mm_movehl_ps(x, x));
            let mut two = [0f32; 4];
            // SAFETY: `two` is 16 writable bytes; `storeu` needs no alignment.
            unsafe { _mm_storeu_ps(two.as_mut_ptr(), r) };
            out[2 * k] = two[0];
            out[2 * k + 1] = two[1];
        }
    }
}

/// `vpermps` indices putting the scales of rows `2k`, `2k + 1` (of 8) on the dwords of
/// row pair `k`'s interleaved lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn pair_scales() -> [__m512i; 4] {
    core::array::from_fn(|k| {
        let (a, b) = (2 * k as i32, 2 * k as i32 + 1);
        _mm512_set_epi32(b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, a)
    })
}

/// Activation rows per register tile of [`gemm_tile`] (4 accumulators each).
const GEMM_ROWS: usize = 4;

/// `out[t * n + i]` = dot of packed row `i` with activation row `t`
/// (`acts[t * stride..]`), `n = 8 · groups`: the GEMV's arithmetic per output, with
/// each weight block loaded once per [`GEMM_ROWS`] activation rows.
fn gemm(groups: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [f32]) {
    let gs = nb * GROUP_BLOCK;
    assert!(
        nb > 0 && !groups.is_empty() && groups.len().is_multiple_of(gs),
        "packed Q8_0 GEMM: {} bytes of groups of {nb} blocks",
        groups.len()
    );
    let n = groups.len() / gs * GROUP_ROWS;
    let nt = out.len() / n;
    assert!(
        out.len() == nt * n && stride >= nb * BLOCK && acts.len() >= nt * stride,
        "packed Q8_0 GEMM: {} outputs for {n} rows, {} activation bytes of stride {stride}",
        out.len(),
        acts.len()
    );
    // SAFETY: `gemm_kernel` hands this function out only after detecting every feature
    // in `gemm_rows`' `#[target_feature]` set.
    unsafe { gemm_rows(groups, nb, acts, stride, nt, out) }
}

/// One activation block as every weight block of the GEMV meets it: its dwords
/// duplicated, `−128·Σ` of each quad, and its scale.
#[derive(Clone, Copy)]
struct ActBlock {
    ydup: __m512i,
    start: __m512i,
    d: f32,
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
fn gemm_rows(groups: &[u8], nb: usize, acts: &[u8], stride: usize, nt: usize, out: &mut [f32]) {
    // The activation-only work of the GEMV, once per call instead of once per group.
    let mut prep = Vec::with_capacity(nt * nb);
    prepare(acts, stride, nt, nb, &mut prep);
    let n = out.len() / nt;
    gemm_prepared(groups, nb, &prep, nt, out, n);
}

/// The activation-only work of the GEMV for `nt` rows of `nb` blocks (`acts[t * stride..]`),
/// appended to `prep` (row `t`, block `b` at `t * nb + b`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn prepare(acts: &[u8], stride: usize, nt: usize, nb: usize, prep: &mut Vec<ActBlock>) {
    let dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    let offset = _mm512_set1_epi8(-128);
    for t in 0..nt {
        for b in 0..nb {
            let y = &acts[t * stride + BLOCK * b..t * stride + BLOCK * (b + 1)];
            // SAFETY: `y[2..34]` is 32 readable bytes; `loadu` needs no alignment.
            let yq = unsafe { _mm256_loadu_si256(y[2..].as_ptr().cast()) };
            let ydup = _mm512_permutexvar_epi32(dup, _mm512_castsi256_si512(yq));
            let start = _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, ydup),
            );
            let d = crate::half::f16_to_f32(u16::from_le_bytes([y[0], y[1]]));
            prep.push(ActBlock { ydup, start, d });
        }
    }
}

/// `out[t * ld + i]` = dot of packed row `i` with prepared activation row `t < nt`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn gemm_prepared(
    groups: &[u8],
    nb: usize,
    prep: &[ActBlock],
    nt: usize,
    out: &mut [f32],
    ld: usize,
) {
    // Tiles of nearly equal height (17 rows: 4, 4, 3, 3, 3 rather than 4, 4, 4, 4, 1):
    // each tile reads every weight block once, so a one-row tile costs almost as much
    // as a full one.
    let tiles = nt.div_ceil(GEMM_ROWS);
    let mut t0 = 0;
    for i in 0..tiles {
        let rows = (nt - t0).div_ceil(tiles - i);
        let p = &prep[t0 * nb..(t0 + rows) * nb];
        let o = &mut out[t0 * ld..];
        match rows {
            4 => gemm_tile::<4>(groups, nb, p, o, ld),
            3 => gemm_tile::<3>(groups, nb, p, o, ld),
            2 => gemm_tile::<2>(groups, nb, p, o, ld),
            _ => gemm_tile::<1>(groups, nb, p, o, ld),
        }
        t0 += rows;
    }
}

/// [`gemm_rows`] for `N` activation rows (`prep[r * nb + b]`: row `r`, block `b`),
/// output row `r` at `out[r * ld..]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn gemm_tile<const N: usize>(
    groups: &[u8],
    nb: usize,
    prep: &[ActBlock],
    out: &mut [f32],
    ld: usize,
) {
    let pair_d = pair_scales();
    for (g, grp) in groups.chunks_exact(nb * GROUP_BLOCK).enumerate() {
        let (quants, scales) = grp.split_at(256 * nb);
        let mut acc = [[_mm512_setzero_ps(); 4]; N];
        for b in 0..nb {
            let q: &[u8; 256] = quants[256 * b..256 * (b + 1)].try_into().expect("block");
            let s: &[u8; 16] = scales[16 * b..16 * (b + 1)].try_into().expect("block");
            let ahead = grp.as_ptr().wrapping_add(GROUP_BLOCK * b + PREFETCH);
            for l in 0..5 {
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * l).cast());
            }
            // SAFETY: `s` is 16 readable bytes; `loadu` needs no alignment.
            let wd = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(s.as_ptr().cast()) });
            // SAFETY: `q[64k..64k + 64]` is readable (k < 4); `loadu` needs no alignment.
            let w: [__m512i; 4] = core::array::from_fn(|k| unsafe {
                _mm512_loadu_si512(q[64 * k..].as_ptr().cast())
            });
            for (r, acc) in acc.iter_mut().enumerate() {
                let y = prep[r * nb + b];
                // `d_w · d_a` of the 8 rows at once, then spread per pair (as the GEMV):
                // one multiply instead of four, the spreading on the shuffle port.
                let d = _mm512_castps256_ps512(_mm256_mul_ps(wd, _mm256_set1_ps(y.d)));
                for k in 0..4 {
                    let sum = _mm512_dpbusd_epi32(y.start, w[k], y.ydup);
                    let dk = _mm512_permutexvar_ps(pair_d[k], d);
                    acc[k] = _mm512_fmadd_ps(dk, _mm512_cvtepi32_ps(sum), acc[k]);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let o = &mut out[r * ld + GROUP_ROWS * g..r * ld + GROUP_ROWS * (g + 1)];
            for (k, acc) in acc.iter().enumerate() {
                let (a, b) = hsum_pair(*acc);
                o[2 * k] = a;
                o[2 * k + 1] = b;
            }
        }
    }
}

/// Fewest activation rows for which [`legacy_gemm`] decodes. Fewer rows stay on the
/// register tiles: with weights streamed from memory (a model's forward, not a hot
/// matrix) decoding costs more than it saves there. Gemma 3 270M's Q5_0 matrices
/// (Xeon, AVX-512, 2 threads): greedy verify of 2 / 3 / 5 / 9 / 17 rows 1.08 / 1.25 /
/// 1.52 / 2.12 / 3.32 plain steps on the tiles, 1.18 / 1.29 / 1.51 / 1.99 / 3.01
/// decoded.
pub(crate) const LEGACY_MIN_ROWS: usize = 5;

/// Scratch of [`legacy_gemm`], reused by each thread across calls.
struct LegacyScratch {
    groups: Vec<u8>,
    prep: Vec<ActBlock>,
    rest: Vec<f32>,
}

std::thread_local! {
    static LEGACY_SCRATCH: std::cell::RefCell<LegacyScratch> =
        const { std::cell::RefCell::new(LegacyScratch { groups: Vec::new(), prep: Vec::new(), rest: Vec::new() }) };
}

/// The multi-row kernel (a [`crate::gemm::TileFn`]) for row-major weight rows `ws` of a
/// block type whose ggml dot has Q8_0's float structure (Q4_0, Q5_0, Q8_0: an f16 scale
/// first in each block of `ts` bytes, lane `i` the exact sum of quants `4i..4i + 4` times
/// the activation's, one FMA by `d_w·d_a` a block); `decode` gives a block's 32 signed
/// quants. With at least [`LEGACY_MIN_ROWS`] activation rows, each 8 weight rows are
/// decoded into one packed group (the Q8_0 quants and scales of the same values) and go
/// through the packed GEMM, whose every output is bitwise the single-row Q8_0 dot of
/// those values, i.e. the single-row dot of the type (same integer lanes, same
/// `d_w·d_a`, same FMA and horizontal-sum order). The last `ws.len() % 8` rows, and calls
/// with fewer activation rows, go to `tiles` (the register-tiled kernel).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(crate) fn legacy_gemm(
    ws: &[&[u8]],
    acts: &[u8],
    stride: usize,
    out: &mut [f32],
    ts: usize,
    decode: impl Fn(&[u8]) -> __m256i,
    tiles: crate::gemm::TileFn,
) {
    let nw = ws.len();
    let nt = out.len().checked_div(nw).unwrap_or(0);
    let full = nw - nw % GROUP_ROWS;
    // Blocks per dot: as the single-row kernels, the shorter of the two rows.
    let nb = ws.iter().fold(stride / BLOCK, |n, x| n.min(x.len() / ts));
    if nt < LEGACY_MIN_ROWS || full == 0 || nb == 0 || acts.len() < nt * stride {
        return tiles(ws, acts, stride, out);
    }
    LEGACY_SCRATCH.with_borrow_mut(|s| {
        let LegacyScratch { groups, prep, rest } = s;
        let gs = nb * GROUP_BLOCK;
        // Every byte is written below: grow, never clear.
        let need = full / GROUP_ROWS * gs;
        if groups.len() < need {
            groups.resize(need, 0);
        }
        let groups = &mut groups[..need];
        let idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        let offset = _mm256_set1_epi8(-128);
        // The row-major weights stream from memory: the rows of the group after next
        // into L1 while this one decodes (past the last row, the rows that follow it in
        // memory: the next call's of a row-major matrix). Without, the decode waited on
        // its loads (Gemma 3 270M's Q5_0 matrices in a 17-row verify).
        let row_bytes = nb * ts;
        let last = ws[nw - 1];
        let prefetch_group = |g: usize| {
            for r in g * GROUP_ROWS..(g + 1) * GROUP_ROWS {
                let at = match ws.get(r) {
                    Some(w) => w.as_ptr(),
                    None => last.as_ptr().wrapping_add((r + 1 - nw) * last.len()),
                };
                for l in (0..row_bytes + 63).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(l).cast());
                }
            }
        };
        prefetch_group(1);
        for (g, grp) in groups.chunks_exact_mut(gs).enumerate() {
            prefetch_group(g + 2);
            let rows = &ws[g * GROUP_ROWS..(g + 1) * GROUP_ROWS];
            let (quants, scales) = grp.split_at_mut(256 * nb);
            for k in 0..GROUP_ROWS / 2 {
                let blocks = rows[2 * k]
                    .chunks_exact(ts)
                    .zip(rows[2 * k + 1].chunks_exact(ts))
                    .zip(
                        quants
                            .chunks_exact_mut(256)
                            .zip(scales.chunks_exact_mut(16)),
                    );
                for ((x0, x1), (q, sc)) in blocks {
                    // The packed layout's bytes: the quants offset to unsigned (`q + 128`).
                    let q0 = _mm512_castsi256_si512(_mm256_xor_si256(decode(x0), offset));
                    let q1 = _mm512_castsi256_si512(_mm256_xor_si256(decode(x1), offset));
                    let pair = _mm512_permutex2var_epi32(q0, idx, q1);
                    // SAFETY: `q[64k..64k + 64]` is writable (k < 4); `storeu` needs no
                    // alignment.
                    unsafe { _mm512_storeu_si512(q[64 * k..].as_mut_ptr().cast(), pair) };
                    sc[4 * k..4 * k + 4].copy_from_slice(&[x0[0], x0[1], x1[0], x1[1]]);
                }
            }
        }
        prep.clear();
        prepare(acts, stride, nt, nb, prep);
        gemm_prepared(groups, nb, prep, nt, out, nw);
        if full < nw {
            let nr = nw - full;
            if rest.len() < nt * nr {
                rest.resize(nt * nr, 0.0);
            }
            let rest = &mut rest[..nt * nr];
            tiles(&ws[full..], acts, stride, rest);
            for (o, r) in out.chunks_exact_mut(nw).zip(rest.chunks_exact(nr)) {
                o[full..].copy_from_slice(r);
            }
        }
    });
}

/// `hsum_float_8` of the two rows interleaved in `acc` (dword 2i / 2i + 1 = lane i of
/// the first / second row), as the GEMV reduces them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn hsum_pair(acc: __m512) -> (f32, f32) {
    let h = _mm256_add_ps(
        _mm512_castps512_ps256(acc),
        _mm512_extractf32x8_ps::<1>(acc),
    );
    let x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
    let r = _mm_add_ps(x, _mm_movehl_ps(x, x));
    let mut two = [0f32; 4];
    // SAFETY: `two` is 16 writable bytes; `storeu` needs no alignment.
    unsafe { _mm_storeu_ps(two.as_mut_ptr(), r) };
    (two[0], two[1])
}

/// The whole-block kernel ([`ApproxFn`]), if this CPU has its features (those of
/// [`kernel`]).
pub(crate) fn approx_kernel() -> Option<crate::repack::ApproxFn> {
    features().then_some(approx as crate::repack::ApproxFn)
}

/// Most activation rows per [`approx`] call (its accumulators).
pub(crate) const APPROX_ROWS: usize = 32;

/// Cache lines [`approx_tile`] prefetches per block: a tile of two groups is
/// `2 · GROUP_BLOCK` bytes a block, 8.5 lines.
const NEXT_TILE_LINES: usize = (2 * GROUP_BLOCK).div_ceil(64);

/// One activation block as [`approx_tile`] meets it: `−128·Σ q`, its scale and its
/// eight quads (each broadcast to all 16 rows of a tile).
#[derive(Clone, Copy)]
struct WholeBlock {
    start: i32,
    d: f32,
    quads: [i32; 8],
}

/// `out[t * n + i]` ≈ dot of packed row `i` with activation row `t`, and `dmax[i]` =
/// the largest `|d|` of row `i`'s blocks (`n = 8 · groups`, at most [`APPROX_ROWS`]
/// activation rows). Not the single-row order: each block's 32 products are summed
/// as one exact integer (16 rows per register, eight `vpdpbusd` a block), scaled by
/// `d_w·d_a` and accumulated in one f32 lane per row, a third of the single-row
/// kernel's work per product. See [`crate::repack::Packed::approx_dots`] for how far
/// from the single-row order's result it can be.
fn approx(groups: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [f32], dmax: &mut [f32]) {
    let gs = nb * GROUP_BLOCK;
    assert!(
        nb > 0 && !groups.is_empty() && groups.len().is_multiple_of(gs),
        "packed Q8_0 bounds: {} bytes of groups of {nb} blocks",
        groups.len()
    );
    let n = groups.len() / gs * GROUP_ROWS;
    let nt = out.len() / n;
    assert!(
        out.len() == nt * n
            && (1..=APPROX_ROWS).contains(&nt)
            && dmax.len() == n
            && stride >= nb * BLOCK
            && acts.len() >= (nt - 1) * stride + nb * BLOCK,
        "packed Q8_0 bounds: {} outputs for {n} rows, {} activation bytes of stride {stride}",
        out.len(),
        acts.len()
    );
    let mut prep = Vec::with_capacity(nt * nb);
    for t in 0..nt {
        for y in acts[t * stride..t * stride + nb * BLOCK].chunks_exact(BLOCK) {
            let q = &y[2..];
            let sum: i32 = q.iter().map(|&v| i32::from(v as i8)).sum();
            prep.push(WholeBlock {
                start: -128 * sum,
                d: crate::half::f16_to_f32(u16::from_le_bytes([y[0], y[1]])),
                quads: core::array::from_fn(|i| {
                    i32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]])
                }),
            });
        }
    }
    // SAFETY: `approx_kernel` hands this function out only after detecting every
    // feature in `approx_tile`'s `#[target_feature]` set.
    unsafe { approx_groups(groups, nb, &prep, nt, out, dmax) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
fn approx_groups(
    groups: &[u8],
    nb: usize,
    prep: &[WholeBlock],
    nt: usize,
    out: &mut [f32],
    dmax: &mut [f32],
) {
    let gs = nb * GROUP_BLOCK;
    let ng = groups.len() / gs;
    let n = ng * GROUP_ROWS;
    // The tiles' accumulators, `nt` of them zeroed per tile (not returned by value:
    // a 2 KiB array copied and cleared per tile took 2% of a batched step).
    let mut acc = [_mm512_setzero_ps(); APPROX_ROWS];
    let acc = &mut acc[..nt];
    let mut g = 0;
    while g < ng {
        // Two groups (16 rows) per tile; a last odd group pairs with itself.
        let g1 = (g + 1).min(ng - 1);
        let width = if g1 > g { 16 } else { 8 };
        acc.fill(_mm512_setzero_ps());
        let dm = approx_tile(
            &groups[g * gs..(g + 1) * gs],
            &groups[g1 * gs..(g1 + 1) * gs],
            nb,
            prep,
            acc,
        );
        let mut lanes = [0f32; 16];
        for (t, acc) in acc.iter().enumerate() {
            // SAFETY: `lanes` is 64 writable bytes; `storeu` needs no alignment.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *acc) };
            out[t * n + 8 * g..t * n + 8 * g + width].copy_from_slice(&lanes[..width]);
        }
        // SAFETY: as above.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), dm) };
        dmax[8 * g..8 * g + width].copy_from_slice(&lanes[..width]);
        g += 2;
    }
}

/// One tile of 16 rows (groups `a` and `b`): per block, the eight 64-byte row-pair
/// registers transposed (an 8 × 8 transpose of 64-bit elements) into one register per
/// activation quad, lane `j` = row `j`; then per activation row eight `vpdpbusd` from
/// `−128·Σ`, one conversion and one FMA by `d_w·d_a` into its accumulator in `acc`
/// (one per activation row). Returns the rows' largest `|d_w|`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn approx_tile(a: &[u8], b: &[u8], nb: usize, prep: &[WholeBlock], acc: &mut [__m512]) -> __m512 {
    let mut dm = _mm512_setzero_ps();
    let (qa, sa) = a.split_at(256 * nb);
    let (qb, sb) = b.split_at(256 * nb);
    for blk in 0..nb {
        // The next tile (the two groups after `b`, contiguous with `a` and `b`) into
        // L2, a block's share of its lines per block: one tile ahead of both streams.
        // Measured on Gemma 3's head (2 threads, Zen 4), 1 / 4 / 12 activation rows:
        // 4.3 / 4.4 / 8.6 ms; each group's own stream `PREFETCH` ahead into L1 (which
        // left `b`'s only `PREFETCH − gs` ahead) 7.8 / 7.9 / 10.1; the next tile into
        // L1 5.1 / - / 10.3; no prefetch 7.9 / - / 14.7.
        let ahead = a.as_ptr().wrapping_add(2 * a.len() + 2 * GROUP_BLOCK * blk);
        for l in 0..NEXT_TILE_LINES {
            _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(64 * l).cast());
        }
        // SAFETY: block `blk`'s 256 quant bytes of each group are readable; `loadu`
        // needs no alignment.
        let w: [__m512i; 8] = core::array::from_fn(|k| unsafe {
            let q = if k < 4 { qa } else { qb };
            _mm512_loadu_si512(q[256 * blk + 64 * (k % 4)..].as_ptr().cast())
        });
        // w[k] qword i = quad i of rows (2k, 2k + 1); wanted: t[i] qword k.
        let lo: [__m512i; 4] =
            core::array::from_fn(|k| _mm512_unpacklo_epi64(w[2 * k], w[2 * k + 1]));
        let hi: [__m512i; 4] =
            core::array::from_fn(|k| _mm512_unpackhi_epi64(w[2 * k], w[2 * k + 1]));
        // c[0] = quads 0 | 4 of pairs 0-3 (or 4-7 from the second half), c[1] = 2 | 6,
        // c[2] = 1 | 5, c[3] = 3 | 7.
        let half = |l: &[__m512i; 4], h: &[__m512i; 4], s: usize| -> [__m512i; 4] {
            [
                _mm512_shuffle_i64x2::<0x88>(l[s], l[s + 1]),
                _mm512_shuffle_i64x2::<0xDD>(l[s], l[s + 1]),
                _mm512_shuffle_i64x2::<0x88>(h[s], h[s + 1]),
                _mm512_shuffle_i64x2::<0xDD>(h[s], h[s + 1]),
            ]
        };
        let (c, e) = (half(&lo, &hi, 0), half(&lo, &hi, 2));
        let t = [
            _mm512_shuffle_i64x2::<0x88>(c[0], e[0]), // quad 0
            _mm512_shuffle_i64x2::<0x88>(c[2], e[2]), // quad 1
            _mm512_shuffle_i64x2::<0x88>(c[1], e[1]), // quad 2
            _mm512_shuffle_i64x2::<0x88>(c[3], e[3]), // quad 3
            _mm512_shuffle_i64x2::<0xDD>(c[0], e[0]), // quad 4
            _mm512_shuffle_i64x2::<0xDD>(c[2], e[2]), // quad 5
            _mm512_shuffle_i64x2::<0xDD>(c[1], e[1]), // quad 6
            _mm512_shuffle_i64x2::<0xDD>(c[3], e[3]), // quad 7
        ];
        // SAFETY: each group's 16 scale bytes of block `blk` are readable.
        let dw = unsafe {
            _mm512_cvtph_ps(_mm256_set_m128i(
                _mm_loadu_si128(sb[16 * blk..].as_ptr().cast()),
                _mm_loadu_si128(sa[16 * blk..].as_ptr().cast()),
            ))
        };
        dm = _mm512_max_ps(dm, _mm512_abs_ps(dw));
        for (r, acc) in acc.iter_mut().enumerate() {
            let y = &prep[r * nb + blk];
            // Two chains of four `vpdpbusd` (their latency, not their throughput, was
            // the bound): integer sums, so the same value in any order.
            let mut s0 = _mm512_set1_epi32(y.start);
            let mut s1 = _mm512_setzero_si512();
            for q in 0..4 {
                s0 = _mm512_dpbusd_epi32(s0, t[2 * q], _mm512_set1_epi32(y.quads[2 * q]));
                s1 = _mm512_dpbusd_epi32(s1, t[2 * q + 1], _mm512_set1_epi32(y.quads[2 * q + 1]));
            }
            let s = _mm512_add_epi32(s0, s1);
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(y.d));
            *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), *acc);
        }
    }
    dm
}
