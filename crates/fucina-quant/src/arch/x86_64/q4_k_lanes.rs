//! Q4_K in ggml's unrepacked single-row order (`ggml_vec_dot_q4_K_q8_K`, AVX2 body) for
//! [`crate::TileDot::new_unpacked`]: the float steps of `kquants::dot_q4_k_q8_k_lanes`
//! (eight f32 lanes of scaled sub-block sums, four lanes of mins), the integer lanes as
//! ggml builds them. AVX2 + FMA is a subset of the AVX-512 set, so one body serves both
//! ISAs and gives their (and the scalar reference's) bits.

// The shared primitives are stamped in whole; this kernel uses a few of them.
#![allow(dead_code)]

use core::arch::x86_64::*;

use crate::formats::kquants::{Q4_K_BYTES, Q8_K_BYTES};

crate::arch::x86_64::primitives::simd_primitives!("avx2,fma,f16c");

#[target_feature(enable = "avx2,fma,f16c")]
fn dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    let m4 = _mm256_set1_epi8(0x0f);
    for (x, y) in w.chunks_exact(Q4_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let da = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let d = da * _mm256_cvtss_f32(f16x8(x, 0));
        let dmin = -(da * _mm256_cvtss_f32(f16x8(x, 2)));
        let (sc, mn) = k_scales_mins(&x[4..16]);
        let bs = load_i256(&y[260..292]);
        let q8s = _mm_hadd_epi16(
            _mm256_castsi256_si128(bs),
            _mm256_extracti128_si256::<1>(bs),
        );
        let prod = _mm_madd_epi16(mn, q8s);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let q4 = load_i256(&x[16 + 32 * j..48 + 32 * j]);
            let lo = _mm256_and_si256(q4, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q4), m4);
            let pl = _mm256_maddubs_epi16(lo, load_i256(&y[4 + 64 * j..36 + 64 * j]));
            let ph = _mm256_maddubs_epi16(hi, load_i256(&y[36 + 64 * j..68 + 64 * j]));
            let pl = _mm256_madd_epi16(words_at(sc, 2 * j, 2 * j), pl);
            let ph = _mm256_madd_epi16(words_at(sc, 2 * j + 1, 2 * j + 1), ph);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    let m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    let m = _mm_add_ss(m, _mm_movehdup_ps(m));
    hsum(acc) + _mm_cvtss_f32(m)
}

/// `out[t * ws.len() + i]` = the unrepacked-order dot of `ws[i]` with activation row `t`.
#[target_feature(enable = "avx2,fma,f16c")]
fn tile_impl(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    let nw = ws.len();
    if nw == 0 || stride == 0 {
        return;
    }
    for (o, a) in out.chunks_exact_mut(nw).zip(acts.chunks_exact(stride)) {
        for (o, w) in o.iter_mut().zip(ws) {
            *o = dot(w, a);
        }
    }
}

/// The unrepacked-order Q4_K tile kernel (a [`crate::gemm::TileFn`]).
pub(crate) fn tile(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    // SAFETY: `TileDot::new_unpacked` installs this kernel only for AVX2 / AVX-512
    // entries, which `Kernels` hands out only where the CPU has AVX2, FMA and F16C.
    unsafe { tile_impl(ws, acts, stride, out) }
}
