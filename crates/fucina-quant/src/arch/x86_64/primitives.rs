//! SIMD load, widen and reduce primitives shared by the single-row (`blocks.rs`) and
//! multi-row (`gemm_blocks.rs`) kernels, written once and stamped into each ISA module
//! with that module's `#[target_feature]` set. Sharing them is also what keeps the two
//! kernel families' float sequences (scale widening, horizontal sums) identical.

macro_rules! simd_primitives {
    ($feat:literal) => {
        #[target_feature(enable = $feat)]
        #[inline]
        fn load_i256(b: &[u8]) -> __m256i {
            let b = &b[..32];
            // SAFETY: `b` has 32 readable bytes and `loadu` needs no alignment.
            unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn load_i128(b: &[u8]) -> __m128i {
            let b = &b[..16];
            // SAFETY: `b` has 16 readable bytes and `loadu` needs no alignment.
            unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
        }

        /// The f16 at `b[off..off + 2]`, widened with F16C into all 8 lanes. Broadcasting
        /// first matters: a scalar conversion lets the compiler merge the f16 into a
        /// register it picks freely (often the accumulator), chaining every block's
        /// scale to the previous block's FMA.
        #[target_feature(enable = $feat)]
        #[inline]
        fn f16x8(b: &[u8], off: usize) -> __m256 {
            let h = u16::from_le_bytes([b[off], b[off + 1]]);
            _mm256_cvtph_ps(_mm_set1_epi16(h as i16))
        }

        /// The f32 at `b[off..off + 4]` in all 8 lanes.
        #[target_feature(enable = $feat)]
        #[inline]
        fn f32x8(b: &[u8], off: usize) -> __m256 {
            _mm256_set1_ps(f32::from_le_bytes([
                b[off],
                b[off + 1],
                b[off + 2],
                b[off + 3],
            ]))
        }

        #[target_feature(enable = $feat)]
        #[inline]
        fn hsum(v: __m256) -> f32 {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
        }

        /// 16 packed bytes → 32 nibbles: low nibbles in bytes 0..16, high in 16..32.
        #[target_feature(enable = $feat)]
        #[inline]
        fn nibbles(b: &[u8]) -> __m256i {
            let t = load_i128(b);
            _mm256_and_si256(
                _mm256_set_m128i(_mm_srli_epi16::<4>(t), t),
                _mm256_set1_epi8(0x0f),
            )
        }

        /// Bit `j` of `bits` → byte `j` = 0xFF or 0x00.
        #[target_feature(enable = $feat)]
        #[inline]
        fn bits_to_bytes(bits: u32) -> __m256i {
            let shuf = _mm256_setr_epi64x(
                0,
                0x0101_0101_0101_0101,
                0x0202_0202_0202_0202,
                0x0303_0303_0303_0303,
            );
            let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
            let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64);
            _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi64x(-1))
        }

        /// `v >> n` per 16-bit lane (the masks applied after keep bytes separate).
        #[target_feature(enable = $feat)]
        #[inline]
        fn srl16(v: __m256i, n: u32) -> __m256i {
            _mm256_srl_epi16(v, _mm_cvtsi32_si128(n as i32))
        }

        /// A Q4_K / Q5_K super-block's 12 packed scale bytes unpacked in registers:
        /// the eight 6-bit scales as i16 words `0..8` of both 128-bit lanes, and the
        /// eight 6-bit mins as the words of an xmm (`k_scale_min`'s values, without the
        /// scalar byte shuffling).
        #[target_feature(enable = $feat)]
        #[inline]
        fn k_scales_mins(s: &[u8]) -> (__m256i, __m128i) {
            let s = &s[..12];
            let u =
                |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
            let (u0, u1, u2) = (u(0), u(1), u(2));
            let (m1, m2, m3) = (0x3f3f_3f3f_u32, 0x0f0f_0f0f_u32, 0x0303_0303_u32);
            // Bytes 0..8: scales 0..4 (low 6 bits of bytes 0..4) and 4..8 (low nibbles
            // of bytes 8..12 with the top two bits of bytes 0..4); bytes 8..16 the same
            // for the mins (bytes 4..8 and the high nibbles of bytes 8..12).
            let sc_lo = u0 & m1;
            let sc_hi = (u2 & m2) | (((u0 >> 6) & m3) << 4);
            let mn_lo = u1 & m1;
            let mn_hi = ((u2 >> 4) & m2) | (((u1 >> 6) & m3) << 4);
            let both = _mm256_cvtepu8_epi16(_mm_setr_epi32(
                sc_lo as i32,
                sc_hi as i32,
                mn_lo as i32,
                mn_hi as i32,
            ));
            (
                _mm256_permute2x128_si256::<0x00>(both, both),
                _mm256_extracti128_si256::<1>(both),
            )
        }

        /// Word `g` (0..8) of each 128-bit lane of `words`, in every word of that lane
        /// (`lo` for the low lane, `hi` for the high one): one `vpshufb`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn words_at(words: __m256i, lo: usize, hi: usize) -> __m256i {
            let pick = |g: usize| (2 * g as i16) | ((2 * g as i16 + 1) << 8);
            _mm256_shuffle_epi8(
                words,
                _mm256_set_m128i(_mm_set1_epi16(pick(hi)), _mm_set1_epi16(pick(lo))),
            )
        }

        /// `Σ_g mins[g] · (bsum(2g) + bsum(2g + 1))` over a Q8_K block `y`'s 16 block
        /// sums (exact: pair sums ≤ 2·16·127 fit an i16, products an i32).
        #[target_feature(enable = $feat)]
        #[inline]
        fn k_mins_dot(mins: __m128i, y: &[u8]) -> i32 {
            let bs = load_i256(&y[260..292]);
            let pairs = _mm_hadd_epi16(
                _mm256_castsi256_si128(bs),
                _mm256_extracti128_si256::<1>(bs),
            );
            let p = _mm_madd_epi16(mins, pairs);
            let p = _mm_add_epi32(p, _mm_unpackhi_epi64(p, p));
            _mm_cvtsi128_si32(_mm_add_epi32(p, _mm_shuffle_epi32::<1>(p)))
        }

        /// The eight 32-quant chunks of a Q6_K block `x` (210 bytes): `f(c, q, s)` for
        /// chunk `c` (elements `32c..32c + 32`) with `q` its unsigned quants (0..=63,
        /// `ql` nibble | `qh` bits << 4) and `s` its two sub-blocks' i16 scales (words
        /// of the low lane: sub-block `2c`; of the high lane: `2c + 1`). Each 6-bit
        /// quant costs a mask, at most two shifts and an OR; each scale pair one
        /// `vpshufb` of the widened scales, which are returned (the 16 `i8` scales as
        /// i16 words, for the caller's −32 offset).
        #[target_feature(enable = $feat)]
        #[inline]
        fn q6_k_chunks(x: &[u8], mut f: impl FnMut(usize, __m256i, __m256i)) -> __m256i {
            let x = &x[..210];
            let sc = _mm256_cvtepi8_epi16(load_i128(&x[192..208]));
            let m4 = _mm256_set1_epi8(0x0f);
            for h in 0..2 {
                // Scales 8h..8h + 8 as words 0..8 of both lanes.
                let s = if h == 0 {
                    _mm256_permute2x128_si256::<0x00>(sc, sc)
                } else {
                    _mm256_permute2x128_si256::<0x11>(sc, sc)
                };
                let ql0 = load_i256(&x[64 * h..64 * h + 32]);
                let ql1 = load_i256(&x[64 * h + 32..64 * h + 64]);
                let qh = load_i256(&x[128 + 32 * h..160 + 32 * h]);
                // Chunk k of the half: low nibbles of ql0, ql1, then high nibbles; the
                // two bits at 2k of qh moved to bits 4..6 (16-bit shifts after the
                // mask: no bit crosses into the neighbouring byte).
                let q = [
                    _mm256_or_si256(
                        _mm256_and_si256(ql0, m4),
                        _mm256_slli_epi16::<4>(_mm256_and_si256(qh, _mm256_set1_epi8(0x03))),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(ql1, m4),
                        _mm256_slli_epi16::<2>(_mm256_and_si256(qh, _mm256_set1_epi8(0x0c))),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                        _mm256_and_si256(qh, _mm256_set1_epi8(0x30)),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                        _mm256_srli_epi16::<2>(_mm256_and_si256(
                            qh,
                            _mm256_set1_epi8(0xc0u8 as i8),
                        )),
                    ),
                ];
                for (k, q) in q.into_iter().enumerate() {
                    f(4 * h + k, q, words_at(s, 2 * k, 2 * k + 1));
                }
            }
            sc
        }

        /// Two i16 scales: `lo` for bytes 0..16 of a 32-byte product, `hi` for 16..32.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(dead_code)] // the GEMM modules' K-quant kernels take scales from `words_at`
        fn scales2(lo: i16, hi: i16) -> __m256i {
            _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
        }
    };
}

pub(crate) use simd_primitives;
