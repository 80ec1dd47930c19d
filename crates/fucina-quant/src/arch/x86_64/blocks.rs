//! Block dot kernels shared by the AVX2 and AVX-512 variants, written once as a
//! macro and stamped into each ISA module with that module's `#[target_feature]`
//! set and its integer-dot primitives:
//!
//! * `dot_i8(x, y)`: 8 × i32 sums of 4 adjacent `x·y` (x any i8, y in −127..=127);
//! * `dot_u8(x, y)`: the same for x unsigned;
//! * `madd_acc(acc, p16, s16)`: `acc + madd_epi16(p16, s16)` (i16 pair sums × scales).
//!
//! All integer work is exact (no saturation is reachable with the bounds in each
//! kernel's comment); float work is one FMA per block per lane, summed at the end,
//! so results differ from the scalar reference only by summation order.

macro_rules! block_kernels {
    ($feat:literal) => {
        use core::arch::x86_64::*;

        use crate::formats::iq::{iq4_xs_scales, KVALUES_IQ4NL};
        use crate::formats::kquants::{bsum, q3_k_scales};

        crate::arch::x86_64::primitives::simd_primitives!($feat);

        // Q4_0 (−8..=7) · Q8_0.
        #[target_feature(enable = $feat)]
        fn q4_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
                let q = _mm256_sub_epi8(nibbles(&x[2..18]), _mm256_set1_epi8(8));
                let p = dot_i8(q, load_i256(&y[2..34]));
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 0), f16x8(y, 0)),
                    _mm256_cvtepi32_ps(p),
                    acc,
                );
            }
            hsum(acc)
        }

        // Q4_1 (0..=15) · Q8_1, plus m·s per block.
        #[target_feature(enable = $feat)]
        fn q4_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut summ = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(20).zip(a.chunks_exact(36)) {
                let p = dot_u8(nibbles(&x[4..20]), load_i256(&y[4..36]));
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 0), f16x8(y, 0)),
                    _mm256_cvtepi32_ps(p),
                    acc,
                );
                summ = _mm256_add_ps(summ, _mm256_mul_ps(f16x8(x, 2), f16x8(y, 2)));
            }
            hsum(acc) + _mm256_cvtss_f32(summ)
        }

        // Q5_0 (−16..=15) · Q8_0.
        #[target_feature(enable = $feat)]
        fn q5_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(22).zip(a.chunks_exact(34)) {
                let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
                let hb = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
                let q = _mm256_sub_epi8(
                    _mm256_or_si256(nibbles(&x[6..22]), hb),
                    _mm256_set1_epi8(16),
                );
                let p = dot_i8(q, load_i256(&y[2..34]));
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 0), f16x8(y, 0)),
                    _mm256_cvtepi32_ps(p),
                    acc,
                );
            }
            hsum(acc)
        }

        // Q5_1 (0..=31) · Q8_1, plus m·s per block.
        #[target_feature(enable = $feat)]
        fn q5_1_q8_1(w: &[u8], a: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut summ = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(24).zip(a.chunks_exact(36)) {
                let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
                let hb = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
                let q = _mm256_or_si256(nibbles(&x[8..24]), hb);
                let p = dot_u8(q, load_i256(&y[4..36]));
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 0), f16x8(y, 0)),
                    _mm256_cvtepi32_ps(p),
                    acc,
                );
                summ = _mm256_add_ps(summ, _mm256_mul_ps(f16x8(x, 2), f16x8(y, 2)));
            }
            hsum(acc) + _mm256_cvtss_f32(summ)
        }

        // Q8_0 (any i8) · Q8_0.
        #[target_feature(enable = $feat)]
        fn q8_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(34).zip(a.chunks_exact(34)) {
                let p = dot_i8(load_i256(&x[2..34]), load_i256(&y[2..34]));
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 0), f16x8(y, 0)),
                    _mm256_cvtepi32_ps(p),
                    acc,
                );
            }
            hsum(acc)
        }

        // IQ4_NL (code book −127..=113) · Q8_0.
        #[target_feature(enable = $feat)]
        fn iq4_nl_q8_0(w: &[u8], a: &[u8]) -> f32 {
            let table = _mm256_broadcastsi128_si256(load_i128(&KVALUES_IQ4NL.map(|v| v as u8)));
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
                let q = _mm256_shuffle_epi8(table, nibbles(&x[2..18]));
                let p = dot_i8(q, load_i256(&y[2..34]));
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 0), f16x8(y, 0)),
                    _mm256_cvtepi32_ps(p),
                    acc,
                );
            }
            hsum(acc)
        }

        // Q2_K (0..=3, 4-bit scales and mins) · Q8_K. maddubs pairs ≤ 2·3·127.
        #[target_feature(enable = $feat)]
        fn q2_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut accm = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(84).zip(a.chunks_exact(292)) {
                let da = f32x8(y, 0);
                let sc = &x[0..16];
                let summs: i32 = (0..16).map(|g| i32::from(sc[g] >> 4) * bsum(y, g)).sum();
                let mut sumi = _mm256_setzero_si256();
                for half in 0..2 {
                    let q2 = load_i256(&x[16 + 32 * half..48 + 32 * half]);
                    for j in 0..4 {
                        let c = 4 * half + j;
                        let q = _mm256_and_si256(srl16(q2, 2 * j as u32), _mm256_set1_epi8(3));
                        let p16 = _mm256_maddubs_epi16(q, load_i256(&y[4 + 32 * c..36 + 32 * c]));
                        let s = scales2(i16::from(sc[2 * c] & 15), i16::from(sc[2 * c + 1] & 15));
                        sumi = madd_acc(sumi, p16, s);
                    }
                }
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 80), da),
                    _mm256_cvtepi32_ps(sumi),
                    acc,
                );
                accm = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 82), da),
                    _mm256_set1_ps(summs as f32),
                    accm,
                );
            }
            hsum(acc) - _mm256_cvtss_f32(accm)
        }

        // Q3_K (u = 0..=7 stands for u − 4; signed 6-bit scales) · Q8_K. The offset is
        // removed per pair: maddubs(u, a) − maddubs(4, a) ∈ ±(2·7·127 + 2·4·127).
        #[target_feature(enable = $feat)]
        fn q3_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(110).zip(a.chunks_exact(292)) {
                let sc = q3_k_scales(&x[96..108]);
                let hmask = load_i256(&x[0..32]);
                let mut sumi = _mm256_setzero_si256();
                for c in 0..8 {
                    let q2 = load_i256(&x[32 + 32 * (c / 4)..64 + 32 * (c / 4)]);
                    let low = _mm256_and_si256(srl16(q2, 2 * (c % 4) as u32), _mm256_set1_epi8(3));
                    let high = _mm256_and_si256(srl16(hmask, c as u32), _mm256_set1_epi8(1));
                    let q = _mm256_or_si256(low, _mm256_slli_epi16::<2>(high));
                    let yv = load_i256(&y[4 + 32 * c..36 + 32 * c]);
                    let p16 = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(q, yv),
                        _mm256_maddubs_epi16(_mm256_set1_epi8(4), yv),
                    );
                    sumi = madd_acc(
                        sumi,
                        p16,
                        scales2(i16::from(sc[2 * c]), i16::from(sc[2 * c + 1])),
                    );
                }
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 108), f32x8(y, 0)),
                    _mm256_cvtepi32_ps(sumi),
                    acc,
                );
            }
            hsum(acc)
        }

        /// Q4_K/Q5_K super-block: Σ scale·(q·a) over 8 sub-blocks, `q(j, hi)` giving the
        /// unsigned quants of sub-block `2j + hi`, `scales` from [`k_scales_mins`].
        #[target_feature(enable = $feat)]
        #[inline]
        fn k_block(y: &[u8], scales: __m256i, q: impl Fn(usize, bool) -> __m256i) -> __m256i {
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let p0 = _mm256_maddubs_epi16(q(j, false), load_i256(&y[4 + 64 * j..36 + 64 * j]));
                let p1 = _mm256_maddubs_epi16(q(j, true), load_i256(&y[36 + 64 * j..68 + 64 * j]));
                // A partial per sub-block pair: the chain across pairs is then adds,
                // not multiply-adds (5 cycles each as AVX-512's `vpdpwssd`).
                let t = madd_acc(_mm256_setzero_si256(), p0, words_at(scales, 2 * j, 2 * j));
                let t = madd_acc(t, p1, words_at(scales, 2 * j + 1, 2 * j + 1));
                sumi = _mm256_add_epi32(sumi, t);
            }
            sumi
        }

        /// Exact sum of the eight i32 lanes.
        #[target_feature(enable = $feat)]
        #[inline]
        fn hsum_i32(v: __m256i) -> i32 {
            let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
            _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
        }

        // Q4_K (0..=15, 6-bit scales and mins) · Q8_K. Pairs ≤ 2·15·127. The float
        // steps are scalar, as the oracle's (ggml's repacked Q4_K gemv): one FMA per
        // super-block into each of two accumulators.
        #[target_feature(enable = $feat)]
        fn q4_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
            let (mut acc, mut accm) = (0f32, 0f32);
            for (x, y) in w.chunks_exact(144).zip(a.chunks_exact(292)) {
                let da = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
                let (sc, mn) = k_scales_mins(&x[4..16]);
                let summs = k_mins_dot(mn, y);
                let qs = &x[16..144];
                let sumi = k_block(y, sc, |j, hi| {
                    let q4 = load_i256(&qs[32 * j..32 * j + 32]);
                    let q4 = if hi { _mm256_srli_epi16::<4>(q4) } else { q4 };
                    _mm256_and_si256(q4, _mm256_set1_epi8(0x0f))
                });
                let dw = _mm256_cvtss_f32(f16x8(x, 0));
                let dmin = _mm256_cvtss_f32(f16x8(x, 2));
                acc = (hsum_i32(sumi) as f32).mul_add(dw * da, acc);
                accm = (summs as f32).mul_add(dmin * da, accm);
            }
            acc - accm
        }

        // Q5_K (0..=31) · Q8_K. Pairs ≤ 2·31·127.
        #[target_feature(enable = $feat)]
        fn q5_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let mut accm = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(176).zip(a.chunks_exact(292)) {
                let da = f32x8(y, 0);
                let (sc, mn) = k_scales_mins(&x[4..16]);
                let summs = k_mins_dot(mn, y);
                let qh = load_i256(&x[16..48]);
                let qs = &x[48..176];
                let sumi = k_block(y, sc, |j, hi| {
                    let q4 = load_i256(&qs[32 * j..32 * j + 32]);
                    let q4 = if hi { _mm256_srli_epi16::<4>(q4) } else { q4 };
                    let bit = (2 * j + usize::from(hi)) as u32;
                    let h = _mm256_and_si256(srl16(qh, bit), _mm256_set1_epi8(1));
                    _mm256_or_si256(
                        _mm256_and_si256(q4, _mm256_set1_epi8(0x0f)),
                        _mm256_slli_epi16::<4>(h),
                    )
                });
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 0), da),
                    _mm256_cvtepi32_ps(sumi),
                    acc,
                );
                accm = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 2), da),
                    _mm256_set1_ps(summs as f32),
                    accm,
                );
            }
            hsum(acc) - _mm256_cvtss_f32(accm)
        }

        // Q6_K (u = 0..=63 stands for u − 32; i8 scales) · Q8_K. Pairs ≤ 2·63·127; the
        // offset comes off after the loop through the group sums (as ggml's AVX2 kernel,
        // which fixes each lane's integer sum and hence its float rounding).
        #[target_feature(enable = $feat)]
        #[allow(dead_code)] // AVX-512 installs a 512-bit form (`gemm_avx512::q6_k_dot`)
        fn q6_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(210).zip(a.chunks_exact(292)) {
                let mut sumi = _mm256_setzero_si256();
                let sc16 = q6_k_chunks(x, |c, q, s| {
                    let yv = load_i256(&y[4 + 32 * c..36 + 32 * c]);
                    sumi = madd_acc(sumi, _mm256_maddubs_epi16(q, yv), s);
                });
                // The −32 offset, per lane as ggml applies it: lane l subtracts
                // 32·(scale·bsum) of groups 2l and 2l+1.
                let sub = _mm256_slli_epi32::<5>(_mm256_madd_epi16(load_i256(&y[260..292]), sc16));
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 208), f32x8(y, 0)),
                    _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, sub)),
                    acc,
                );
            }
            hsum(acc)
        }

        // IQ4_XS (code book, signed 6-bit scales) · Q8_K. |q|,|a| ≤ 127: pairs ≤ 2·127·127.
        #[target_feature(enable = $feat)]
        fn iq4_xs_q8_k(w: &[u8], a: &[u8]) -> f32 {
            let table = _mm256_broadcastsi128_si256(load_i128(&KVALUES_IQ4NL.map(|v| v as u8)));
            let mut acc = _mm256_setzero_ps();
            for (x, y) in w.chunks_exact(136).zip(a.chunks_exact(292)) {
                let sc = iq4_xs_scales(x);
                let mut sumi = _mm256_setzero_si256();
                for g in 0..8 {
                    let q = _mm256_shuffle_epi8(table, nibbles(&x[8 + 16 * g..24 + 16 * g]));
                    let yv = load_i256(&y[4 + 32 * g..36 + 32 * g]);
                    let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(yv, q));
                    sumi = madd_acc(sumi, p16, _mm256_set1_epi16(i16::from(sc[g])));
                }
                acc = _mm256_fmadd_ps(
                    _mm256_mul_ps(f16x8(x, 0), f32x8(y, 0)),
                    _mm256_cvtepi32_ps(sumi),
                    acc,
                );
            }
            hsum(acc)
        }
    };
}

/// Safe entry points for the dispatch table, one per listed kernel of the invoking ISA module.
macro_rules! safe_entries {
    ($($name:ident),* $(,)?) => {
        /// The kernels of this ISA as safe function pointers.
        pub(crate) mod entry {
            $(
                pub(crate) fn $name(w: &[u8], a: &[u8]) -> f32 {
                    // SAFETY: `dispatch` installs these entries only for this ISA, and an ISA
                    // is selectable only after run-time detection of every feature in its
                    // `#[target_feature]` set.
                    unsafe { super::$name(w, a) }
                }
            )*
        }
    };
}

pub(crate) use block_kernels;
pub(crate) use safe_entries;
