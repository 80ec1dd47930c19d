//! AVX-512 (VBMI, VNNI) Q6_K GEMV over interleaved 8-row groups (`repack::q6_k`'s
//! layout): one activation row against every row of the packed matrix.
//!
//! Per chunk `c` (32 elements) and row pair `k` of a group super-block: one 64-byte
//! load holds both rows' 6-bit fields (plus 16 bytes that are not used), `vpermb`
//! moves each 6-byte field to the low bytes of its own qword, `vpmultishiftqb` (shift
//! controls 0, 6, .., 42) and an AND with 0x3f give the 64 unsigned quants: row `2k`'s
//! 32 in the low 256 bits, row `2k+1`'s in the high 256 bits, in element order. The
//! chunk's 32 activation bytes go to both halves; `vpmaddubsw` (u8 0..=63 × i8 pairs:
//! no saturation) and `vpdpwssd` with the chunk's scales (`sc[2c]` on words 0..8,
//! `sc[2c+1]` on words 8..16 of each half) then add to dword `l` of each half exactly
//! the contribution of elements `32c + 4l .. 32c + 4l + 4`, i.e. lane `l` of ggml's
//! AVX2 `vec_dot_q6_K_q8_K` (lane `l` = elements with `(e mod 32) / 4 = l`). After the 8
//! chunks the `32·(sc·bsum)` offset of groups `2l`, `2l+1` is subtracted and each lane
//! takes its FMA `acc = fma(d_w·d_a, lane, acc)`; the 8 lanes of a row are summed in
//! `hsum_float_8` order at the end: bitwise the single-row kernels' results.

use core::arch::x86_64::*;

use crate::formats::kquants::hsum_lanes8;
use crate::repack::q6_k::{Q6_K_X8_BLOCK_BYTES, Q8_K_BLOCK, X8_D, X8_SCALES};

/// The GEMV signature: `groups` whole groups of `nb` super-blocks, `act` one Q8_K row
/// (at least `nb` blocks), `out[8g + r]` = dot of row `r` of group `g`.
#[allow(dead_code)] // wired into `Packed` by the integration commit
pub(crate) type GemvFn = fn(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]);

/// Whether this CPU has every feature [`gemv`] needs.
#[allow(dead_code)] // wired into `Packed` by the integration commit
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
#[allow(dead_code)] // wired into `Packed` by the integration commit
pub(crate) fn kernel() -> Option<GemvFn> {
    available().then_some(gemv as GemvFn)
}

/// Q6_K GEMV over interleaved groups (see [`GemvFn`]); bitwise the single-row dot of
/// every row.
///
/// # Panics
/// If the CPU lacks a feature ([`available`]) or the lengths disagree: `groups` must
/// be `out.len() / 8` groups of `nb` super-blocks, `act` at least `nb` Q8_K blocks
/// (internal contract, checked: never undefined behaviour).
#[allow(dead_code)] // wired into `Packed` by the integration commit
pub(crate) fn gemv(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]) {
    assert!(
        available(),
        "packed Q6_K GEMV needs AVX-512 F/BW/VL/DQ/VNNI/VBMI"
    );
    assert!(
        out.len().is_multiple_of(8)
            && groups.len() == out.len() / 8 * nb * Q6_K_X8_BLOCK_BYTES
            && act.len() >= nb * Q8_K_BLOCK,
        "packed Q6_K GEMV: {} bytes, nb {nb}, {} outputs, {} activation bytes",
        groups.len(),
        out.len(),
        act.len()
    );
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

/// The kernel body: `act` is exactly `nb` Q8_K blocks, the lengths checked by [`gemv`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
fn gemv_x8(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]) {
    let gb = nb * Q6_K_X8_BLOCK_BYTES;
    // `vpermb` index: qword t takes bytes 6t..6t + 8 (t < 4: field t of the low row;
    // t ≥ 4: 24 + 6(t − 4) = 6t, field t − 4 of the high row). Bytes 6 and 7 of each
    // qword are don't-cares: the shifts below read at most bits 42..50, masked to 6.
    let mut perm = [0u8; 64];
    for (i, p) in perm.iter_mut().enumerate() {
        *p = (6 * (i / 8) + i % 8) as u8;
    }
    let perm = load_i512(&perm);
    // Byte j of each qword: the 8 bits at 6j (quant j of the field).
    let shifts = _mm512_set1_epi64(0x2a24_1e18_120c_0600);
    let m6 = _mm512_set1_epi8(0x3f);
    // Pair scales reordered to [low row even, low odd, high even, high odd] groups
    // (bytes), so that after widening 128-bit lane m holds the 8 scales that lane m
    // of a chunk needs: lane 0 → sc_lo[2c], 1 → sc_lo[2c + 1], 2 → sc_hi[2c],
    // 3 → sc_hi[2c + 1], picked for chunk c by one in-lane `vpshufb` (word c).
    let mut sperm = [0u8; 32];
    for (i, p) in sperm.iter_mut().enumerate() {
        *p = (16 * (i / 16) + 2 * (i % 8) + (i / 8) % 2) as u8;
    }
    let sperm = load_i256(&sperm);
    let mut widx = [0u8; 64];
    for (i, w) in widx.iter_mut().enumerate() {
        *w = (i % 2) as u8;
    }
    let widx0 = load_i512(&widx);
    for (grp, out) in groups.chunks_exact(gb).zip(out.chunks_exact_mut(8)) {
        let mut facc = [_mm512_setzero_ps(); 4];
        for (blk, y) in grp
            .chunks_exact(Q6_K_X8_BLOCK_BYTES)
            .zip(act.chunks_exact(Q8_K_BLOCK))
        {
            let blk: &[u8; Q6_K_X8_BLOCK_BYTES] = blk.try_into().expect("whole block");
            let y: &[u8; Q8_K_BLOCK] = y.try_into().expect("whole block");
            let bs = _mm512_broadcast_i64x4(load_i256(&y[260..292]));
            let mut sc = [_mm512_setzero_si512(); 4];
            let mut isum = [_mm512_setzero_si512(); 4];
            for k in 0..4 {
                let raw = load_i256(&blk[X8_SCALES + 32 * k..]);
                // Each lane starts at −32·(sc[2l]·bsum[2l] + sc[2l+1]·bsum[2l+1]):
                // scales in natural order, row 2k's in the low half.
                let off = _mm512_madd_epi16(bs, _mm512_cvtepi8_epi16(raw));
                isum[k] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<5>(off));
                sc[k] = _mm512_cvtepi8_epi16(_mm256_permutexvar_epi8(sperm, raw));
            }
            for c in 0..8 {
                let yv = _mm512_broadcast_i64x4(load_i256(&y[4 + 32 * c..]));
                let wi = opaque(_mm512_add_epi8(widx0, _mm512_set1_epi8(2 * c as i8)));
                for k in 0..4 {
                    // The 48 bytes of pair k plus 16 more: at most 48·31 + 64 = 1552
                    // bytes into the super-block.
                    let w = load_i512(&blk[48 * (4 * c + k)..]);
                    let f = _mm512_permutexvar_epi8(perm, w);
                    let q = _mm512_and_si512(_mm512_multishift_epi64_epi8(shifts, f), m6);
                    let s = _mm512_shuffle_epi8(sc[k], wi);
                    isum[k] = dpwssd(isum[k], _mm512_maddubs_epi16(q, yv), s);
                }
            }
            let da = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
            // d_w·d_a of the 8 rows (one f32 product each, as the single-row kernel).
            let dd = _mm256_mul_ps(_mm256_cvtph_ps(load_i128(&blk[X8_D..])), _mm256_set1_ps(da));
            let dd = _mm512_castps256_ps512(dd);
            for k in 0..4 {
                let r = 2 * k as i32;
                let di = _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(_mm256_set1_epi32(r)),
                    _mm256_set1_epi32(r + 1),
                );
                let d2 = _mm512_permutexvar_ps(di, dd);
                facc[k] = _mm512_fmadd_ps(d2, _mm512_cvtepi32_ps(isum[k]), facc[k]);
            }
        }
        for (k, acc) in facc.iter().enumerate() {
            let mut lanes = [0f32; 16];
            // SAFETY: `lanes` is 64 writable bytes and `storeu` needs no alignment.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *acc) };
            let (lo, hi) = lanes.split_at(8);
            out[2 * k] = hsum_lanes8(lo.try_into().expect("8 lanes"));
            out[2 * k + 1] = hsum_lanes8(hi.try_into().expect("8 lanes"));
        }
    }
}

/// `v`, hidden from the optimiser: keeps the per-chunk `vpshufb` a `vpshufb` (with a
/// constant index LLVM splits it into `vpshuflw`/`vpshufhw` + `vpshufd`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")]
#[inline]
fn opaque(mut v: __m512i) -> __m512i {
    // SAFETY: an empty instruction string: no memory access, no effect on `v`.
    unsafe { core::arch::asm!("/* {0} */", inout(zmm_reg) v, options(pure, nomem, nostack)) };
    v
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
