//! Activation row formats for dot products: a row of f32 activations is converted
//! once (per matmul call) into the form the weight type's kernel multiplies with,
//! as llama.cpp does (`vec_dot_type`).
//!
//! Invariant the SIMD kernels rely on: Q8_0 / Q8_1 / Q8_K quants are in −127..=127
//! (never −128); the quantizers here guarantee it.

use std::sync::OnceLock;

use crate::dispatch::{Isa, Kernels};
use crate::formats::{float, kquants, legacy};
use crate::{QuantError, Result};

/// The format an activation row is converted to before a dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // ggml's spelling, like `GgmlType`
pub enum ActType {
    /// Plain f32 (F32 weights, and the generic dequantizing path).
    F32,
    /// IEEE half (F16 weights).
    F16,
    /// bfloat16 (BF16 weights).
    BF16,
    /// 32-element blocks, f16 scale, i8 quants.
    Q8_0,
    /// Q8_0 plus the f16 block sum `d·Σq` (weights with a min: Q4_1, Q5_1).
    Q8_1,
    /// 256-element blocks, f32 scale, i8 quants, i16 sums of 16 (K-quants, IQ4_XS).
    Q8_K,
}

impl ActType {
    /// Elements per block.
    pub const fn block_size(self) -> usize {
        match self {
            ActType::F32 | ActType::F16 | ActType::BF16 => 1,
            ActType::Q8_0 | ActType::Q8_1 => legacy::QK,
            ActType::Q8_K => kquants::QK_K,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            ActType::F32 => 4,
            ActType::F16 | ActType::BF16 => 2,
            ActType::Q8_0 => legacy::Q8_0_BYTES,
            ActType::Q8_1 => legacy::Q8_1_BYTES,
            ActType::Q8_K => kquants::Q8_K_BYTES,
        }
    }

    /// Bytes of a row of `n` elements (`n` a multiple of the block size).
    pub const fn row_bytes(self, n: usize) -> usize {
        n / self.block_size() * self.block_bytes()
    }

    /// Convert `src` into activation blocks appended to `out`; `src.len()` must be a
    /// multiple of the block size.
    pub fn quantize_row(self, src: &[f32], out: &mut Vec<u8>) -> Result<()> {
        if !src.len().is_multiple_of(self.block_size()) {
            return Err(QuantError::Shape(format!(
                "{self:?} activations: {} elements is not a multiple of {}",
                src.len(),
                self.block_size()
            )));
        }
        let start = out.len();
        out.resize(start + self.row_bytes(src.len()), 0);
        self.quantize_into(src, &mut out[start..]);
        Ok(())
    }

    /// [`ActType::quantize_row`] with the quantizer of instruction set `isa` (an error
    /// if this CPU cannot run it). Every ISA's quantizer gives bitwise the same bytes
    /// as the scalar one; this entry exists so tests can check that for each of them.
    pub fn quantize_row_isa(self, isa: Isa, src: &[f32], out: &mut Vec<u8>) -> Result<()> {
        let isa = Isa::parse_available(isa.name())?;
        if !src.len().is_multiple_of(self.block_size()) {
            return Err(QuantError::Shape(format!(
                "{self:?} activations: {} elements is not a multiple of {}",
                src.len(),
                self.block_size()
            )));
        }
        let start = out.len();
        out.resize(start + self.row_bytes(src.len()), 0);
        self.quantize_with(isa, src, &mut out[start..]);
        Ok(())
    }

    /// Convert `src` (length a multiple of the block size) into `out` (exactly `row_bytes`).
    pub(crate) fn quantize_into(self, src: &[f32], out: &mut [u8]) {
        self.quantize_with(act_isa(), src, out);
    }

    /// [`ActType::quantize_into`] on `isa`, which the caller has checked is available.
    fn quantize_with(self, isa: Isa, src: &[f32], out: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        if isa != Isa::Scalar {
            let wide = isa == Isa::Avx512;
            match self {
                ActType::Q8_0 => return x86::q8_0(wide, src, out, false),
                ActType::Q8_1 => return x86::q8_0(wide, src, out, true),
                ActType::Q8_K => return x86::q8_k(wide, src, out),
                _ => {}
            }
        }
        let _ = isa;
        match self {
            ActType::F32 => float::quantize_f32(src, out),
            ActType::F16 => float::quantize_f16(src, out),
            ActType::BF16 => float::quantize_bf16(src, out),
            ActType::Q8_0 => legacy::quantize_q8_0_act(src, out),
            ActType::Q8_1 => legacy::quantize_q8_1(src, out),
            ActType::Q8_K => kquants::quantize_q8_k(src, out),
        }
    }
}

/// The ISA whose activation quantizers run: the one the process-wide kernel table
/// uses (`FUCINA_ISA`, else the best available), so a forced variant is what runs.
fn act_isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| Kernels::from_env().map_or(Isa::Scalar, |k| k.isa()))
}

/// SIMD forms of the Q8 activation quantizers (`legacy::quantize_q8_0_act`,
/// `legacy::quantize_q8_1`, `kquants::quantize_q8_k`), bitwise equal to them on every
/// input: the same float operations per element (one multiply, then ties-to-even
/// rounding or ggml's `nearest_int` bit trick, emulated exactly), maxima that skip
/// NaNs as `f32::max` does, and exact integer sums.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use crate::formats::kquants::{Q8_K_BYTES, QK_K};
    use crate::formats::legacy::{Q8_0_BYTES, Q8_1_BYTES, QK};
    use crate::half::f32_to_f16;

    /// Q8_0 (or, with `q8_1`, Q8_1) activation blocks of `src` into `out`.
    pub(super) fn q8_0(wide: bool, src: &[f32], out: &mut [u8], q8_1: bool) {
        let bs = if q8_1 { Q8_1_BYTES } else { Q8_0_BYTES };
        for (x, b) in src.chunks_exact(QK).zip(out.chunks_exact_mut(bs)) {
            let x: &[f32; QK] = x.try_into().expect("chunks_exact(QK)");
            let (q, sum, d) = if wide {
                // SAFETY: `wide` is set only for `Isa::Avx512`, whose features the
                // caller has detected (`Isa::parse_available` / the kernel table).
                unsafe { block_q8_512(x) }
            } else {
                // SAFETY: any non-scalar x86 ISA includes AVX2, FMA and F16C, detected
                // by the caller as above.
                unsafe { block_q8_256(x) }
            };
            let Some(q) = q else {
                // 127/amax overflowed (amax below ~3.7e-37): the scalar path saturates.
                if q8_1 {
                    crate::formats::legacy::quantize_q8_1(x, b);
                } else {
                    crate::formats::legacy::quantize_q8_0_act(x, b);
                }
                continue;
            };
            b[0..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
            let qo = if q8_1 {
                b[2..4].copy_from_slice(&f32_to_f16(sum as f32 * d).to_le_bytes());
                4
            } else {
                2
            };
            b[qo..qo + QK].copy_from_slice(&q);
        }
    }

    /// One Q8_0 block: quants, their sum and the unrounded scale `amax/127`; `None`
    /// when `127/amax` is not finite.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
    fn block_q8_512(x: &[f32; QK]) -> (Option<[u8; QK]>, i32, f32) {
        // SAFETY: `x` holds 32 f32, two 16-lane loads; `loadu` needs no alignment.
        let (x0, x1) = unsafe {
            (
                _mm512_loadu_ps(x.as_ptr()),
                _mm512_loadu_ps(x.as_ptr().add(16)),
            )
        };
        // `max_ps(a, m)` returns `m` when `a` is NaN: NaNs are skipped, as `f32::max` does.
        let m = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps());
        let m = _mm512_max_ps(_mm512_abs_ps(x1), m);
        let amax = _mm512_reduce_max_ps(m);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        if !id.is_finite() {
            return (None, 0, d);
        }
        let idv = _mm512_set1_ps(id);
        let mut q = [0u8; QK];
        let mut sum = _mm512_setzero_si512();
        for (k, xv) in [x0, x1].into_iter().enumerate() {
            let v = _mm512_mul_ps(xv, idv);
            // Ties to even, NaN lanes (which `as i8` maps to 0) zeroed.
            let ord = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v);
            let qi = _mm512_maskz_cvt_roundps_epi32::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(ord, v);
            sum = _mm512_add_epi32(sum, qi);
            let bytes = _mm512_cvtsepi32_epi8(qi);
            // SAFETY: `q[16k..16k + 16]` is 16 writable bytes; `storeu` needs no alignment.
            unsafe { _mm_storeu_si128(q.as_mut_ptr().add(16 * k).cast(), bytes) };
        }
        (Some(q), _mm512_reduce_add_epi32(sum), d)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn block_q8_256(x: &[f32; QK]) -> (Option<[u8; QK]>, i32, f32) {
        // Loops, not `array::from_fn`: closures do not inherit target features.
        let mut xv = [_mm256_setzero_ps(); 4];
        for (k, v) in xv.iter_mut().enumerate() {
            // SAFETY: `x` holds 32 f32, four 8-lane loads; `loadu` needs no alignment.
            *v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * k)) };
        }
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let mut m = _mm256_setzero_ps();
        for v in xv {
            // NaN lanes keep `m` (see `block_q8_512`).
            m = _mm256_max_ps(_mm256_and_ps(v, abs_mask), m);
        }
        let amax = hmax256(m);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        if !id.is_finite() {
            return (None, 0, d);
        }
        let idv = _mm256_set1_ps(id);
        let mut qi = [_mm256_setzero_si256(); 4];
        for (q, x) in qi.iter_mut().zip(xv) {
            let v = _mm256_mul_ps(x, idv);
            // `cvtps` rounds to nearest-even (Rust runs with the default MXCSR).
            let ord = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_ORD_Q>(v, v));
            *q = _mm256_and_si256(_mm256_cvtps_epi32(v), ord);
        }
        let sum = _mm256_add_epi32(
            _mm256_add_epi32(qi[0], qi[1]),
            _mm256_add_epi32(qi[2], qi[3]),
        );
        let mut q = [0u8; QK];
        // SAFETY: `q` is 32 writable bytes; `storeu` needs no alignment.
        unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), pack_i32x32(&qi)) };
        (Some(q), hsum_i32_256(sum), d)
    }

    /// 32 i32 lanes (each already in −128..=127) → 32 bytes in order.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn pack_i32x32(q: &[__m256i; 4]) -> __m256i {
        let p = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn hmax256(v: __m256) -> f32 {
        let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn hsum_i32_256(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
    }

    /// Q8_K blocks of `src` into `out`.
    pub(super) fn q8_k(wide: bool, src: &[f32], out: &mut [u8]) {
        for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
            let x: &[f32; QK_K] = x.try_into().expect("chunks_exact(QK_K)");
            let b: &mut [u8; Q8_K_BYTES] = b.try_into().expect("chunks_exact_mut(Q8_K_BYTES)");
            if wide {
                // SAFETY: as in `q8_0`.
                unsafe { block_q8_k_512(x, b) }
            } else {
                // SAFETY: as in `q8_0`.
                unsafe { block_q8_k_256(x, b) }
            }
        }
    }

    /// `nearest_int(v).min(127) as i8` (sign-extended back to i32) per lane, exactly
    /// as `kquants::nearest_int`: add 1.5·2^23, keep the mantissa, remove the bias.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
    #[inline]
    fn nearest_i8_512(v: __m512) -> __m512i {
        let t = _mm512_castps_si512(_mm512_add_ps(v, _mm512_set1_ps(12_582_912.0)));
        let n = _mm512_sub_epi32(
            _mm512_and_si512(t, _mm512_set1_epi32(0x007f_ffff)),
            _mm512_set1_epi32(0x0040_0000),
        );
        let n = _mm512_min_epi32(n, _mm512_set1_epi32(127));
        _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(n))
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
    fn block_q8_k_512(x: &[f32; QK_K], b: &mut [u8; Q8_K_BYTES]) {
        let mut xv = [_mm512_setzero_ps(); 16];
        for (k, v) in xv.iter_mut().enumerate() {
            // SAFETY: `x` holds 256 f32: sixteen 16-lane loads; `loadu` needs no alignment.
            *v = unsafe { _mm512_loadu_ps(x.as_ptr().add(16 * k)) };
        }
        let mut m = _mm512_setzero_ps();
        for v in xv {
            m = _mm512_max_ps(_mm512_abs_ps(v), m);
        }
        let amax = _mm512_reduce_max_ps(m);
        b.fill(0);
        if amax == 0.0 {
            return;
        }
        // The first element of that magnitude (the scalar loop keeps the first).
        let am = _mm512_set1_ps(amax);
        let first = (0..16)
            .find_map(|k| {
                let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(xv[k]), am);
                (hit != 0).then(|| 16 * k + hit.trailing_zeros() as usize)
            })
            .unwrap_or(0);
        let iscale = -127.0 / x[first];
        let is = _mm512_set1_ps(iscale);
        b[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
        for (g, v) in xv.into_iter().enumerate() {
            let q = nearest_i8_512(_mm512_mul_ps(is, v));
            let s = _mm512_reduce_add_epi32(q) as i16;
            b[260 + 2 * g..262 + 2 * g].copy_from_slice(&s.to_le_bytes());
            let bytes = _mm512_cvtepi32_epi8(q);
            // SAFETY: `b[4 + 16g..20 + 16g]` is in bounds (g < 16, 260 ≤ 292); `storeu`
            // needs no alignment.
            unsafe { _mm_storeu_si128(b.as_mut_ptr().add(4 + 16 * g).cast(), bytes) };
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn nearest_i8_256(v: __m256) -> __m256i {
        let t = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12_582_912.0)));
        let n = _mm256_sub_epi32(
            _mm256_and_si256(t, _mm256_set1_epi32(0x007f_ffff)),
            _mm256_set1_epi32(0x0040_0000),
        );
        let n = _mm256_min_epi32(n, _mm256_set1_epi32(127));
        _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(n))
    }

    /// Floats `8k..8k + 8` of `x` (a target-feature fn, not a closure: closures do
    /// not inherit the features, and uninlined they turn intrinsics into calls).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn load8(x: &[f32; QK_K], k: usize) -> __m256 {
        let v = &x[8 * k..8 * k + 8];
        // SAFETY: `v` holds 8 readable f32; `loadu` needs no alignment.
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn block_q8_k_256(x: &[f32; QK_K], b: &mut [u8; Q8_K_BYTES]) {
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let mut m = _mm256_setzero_ps();
        for k in 0..32 {
            m = _mm256_max_ps(_mm256_and_ps(load8(x, k), abs_mask), m);
        }
        let amax = hmax256(m);
        b.fill(0);
        if amax == 0.0 {
            return;
        }
        let am = _mm256_set1_ps(amax);
        let mut first = 0;
        for k in 0..32 {
            let eq = _mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_and_ps(load8(x, k), abs_mask), am);
            let hit = _mm256_movemask_ps(eq) as u32;
            if hit != 0 {
                first = 8 * k + hit.trailing_zeros() as usize;
                break;
            }
        }
        let iscale = -127.0 / x[first];
        let is = _mm256_set1_ps(iscale);
        b[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
        for c in 0..8 {
            let mut q = [_mm256_setzero_si256(); 4];
            for (k, q) in q.iter_mut().enumerate() {
                *q = nearest_i8_256(_mm256_mul_ps(is, load8(x, 4 * c + k)));
            }
            for h in 0..2 {
                let s = hsum_i32_256(_mm256_add_epi32(q[2 * h], q[2 * h + 1])) as i16;
                let g = 2 * c + h;
                b[260 + 2 * g..262 + 2 * g].copy_from_slice(&s.to_le_bytes());
            }
            // SAFETY: `b[4 + 32c..36 + 32c]` is in bounds (c < 8); `storeu` needs no
            // alignment.
            unsafe { _mm256_storeu_si256(b.as_mut_ptr().add(4 + 32 * c).cast(), pack_i32x32(&q)) };
        }
    }
}
