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

        /// Two i16 scales: `lo` for bytes 0..16 of a 32-byte product, `hi` for 16..32.
        #[target_feature(enable = $feat)]
        #[inline]
        fn scales2(lo: i16, hi: i16) -> __m256i {
            _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo))
        }
    };
}

pub(crate) use simd_primitives;
