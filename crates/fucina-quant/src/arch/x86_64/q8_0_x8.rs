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

fn features() -> bool {
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
    let dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    let offset = _mm512_set1_epi8(-128);
    // The activation-only work of the GEMV, once per call instead of once per group.
    let mut prep = Vec::with_capacity(nt * nb);
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
    let n = out.len() / nt;
    let mut t0 = 0;
    while t0 < nt {
        let rows = (nt - t0).min(GEMM_ROWS);
        let p = &prep[t0 * nb..(t0 + rows) * nb];
        let o = &mut out[t0 * n..(t0 + rows) * n];
        match rows {
            4 => gemm_tile::<4>(groups, nb, p, o),
            3 => gemm_tile::<3>(groups, nb, p, o),
            2 => gemm_tile::<2>(groups, nb, p, o),
            _ => gemm_tile::<1>(groups, nb, p, o),
        }
        t0 += rows;
    }
}

/// [`gemm_rows`] for `N` activation rows (`prep[r * nb + b]`: row `r`, block `b`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
fn gemm_tile<const N: usize>(groups: &[u8], nb: usize, prep: &[ActBlock], out: &mut [f32]) {
    let pair_d = pair_scales();
    let n = out.len() / N;
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
            let wd = _mm512_castps256_ps512(wd);
            // SAFETY: `q[64k..64k + 64]` is readable (k < 4); `loadu` needs no alignment.
            let w: [__m512i; 4] = core::array::from_fn(|k| unsafe {
                _mm512_loadu_si512(q[64 * k..].as_ptr().cast())
            });
            let wdk: [__m512; 4] = core::array::from_fn(|k| _mm512_permutexvar_ps(pair_d[k], wd));
            for (r, acc) in acc.iter_mut().enumerate() {
                let y = prep[r * nb + b];
                let yd = _mm512_set1_ps(y.d);
                for k in 0..4 {
                    let sum = _mm512_dpbusd_epi32(y.start, w[k], y.ydup);
                    // `d_w · d_a` per row, as the GEMV's `wd · yd` then permute.
                    let dk = _mm512_mul_ps(wdk[k], yd);
                    acc[k] = _mm512_fmadd_ps(dk, _mm512_cvtepi32_ps(sum), acc[k]);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            let o = &mut out[r * n + GROUP_ROWS * g..r * n + GROUP_ROWS * (g + 1)];
            for (k, acc) in acc.iter().enumerate() {
                let (a, b) = hsum_pair(*acc);
                o[2 * k] = a;
                o[2 * k + 1] = b;
            }
        }
    }
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
