//! Scalar IEEE half (f16) and bfloat16 conversions, bit-compatible with numpy.
//!
//! `f16_to_f32` keeps NaN payloads (signalling NaNs stay signalling) exactly as
//! numpy's `astype(np.float32)` does; `f32_to_f16` rounds to nearest-even like
//! numpy's `astype(np.float16)` and ggml's `GGML_FP32_TO_FP16`.

/// Widen f16 bits to f32 (exact; NaN payload and signalling bit preserved).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x03ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalise the mantissa into an f32 normal number.
            let shift = man.leading_zeros() - 21; // bring the top set bit to bit 10
            let man = (man << shift) & 0x03ff;
            let exp = 127 - 15 + 1 - shift;
            sign | (exp << 23) | (man << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Narrow an f32 to f16 bits, rounding to nearest-even; overflow gives ±inf.
/// A NaN stays a NaN with its sign and top payload bits (numpy's rule).
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = (b >> 23) & 0xff;
    let man = b & 0x007f_ffff;
    if exp == 0xff {
        if man == 0 {
            return sign | 0x7c00;
        }
        let m = (man >> 13) as u16;
        return sign | 0x7c00 | if m == 0 { 1 } else { m };
    }
    let e = exp as i32 - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x0080_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1u32 << shift) - 1);
        let mut hm = m >> shift;
        if rest > half || (rest == half && hm & 1 == 1) {
            hm += 1;
        }
        return sign | hm as u16;
    }
    let mut h = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        h += 1; // may carry into the exponent, up to inf: that is the correct rounding
    }
    sign | h as u16
}

/// Widen bfloat16 bits to f32 (exact).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Narrow an f32 to bfloat16 bits, rounding to nearest-even; NaNs are quieted
/// (`ggml_compute_fp32_to_bf16`, gguf-py's `BF16.quantize_blocks`).
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let n = x.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        return ((n >> 16) | 64) as u16;
    }
    ((u64::from(n) + 0x7fff + u64::from((n >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widen_f16_into_equals_scalar_on_every_half() {
        let is_snan = |h: u16| (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0 && (h & 0x0200) == 0;
        let src: Vec<u8> = (0..=u16::MAX)
            .filter(|&h| !is_snan(h))
            .flat_map(u16::to_le_bytes)
            .collect();
        // An odd length exercises the scalar tail after the F16C groups.
        let n = src.len() / 2 - 3;
        let mut got = vec![0f32; n];
        widen_f16_into(&src, &mut got);
        for (i, g) in got.iter().enumerate() {
            let want = f16_to_f32(u16::from_le_bytes([src[2 * i], src[2 * i + 1]]));
            assert_eq!(g.to_bits(), want.to_bits(), "element {i}");
        }
    }

    #[test]
    fn f16_round_trips_every_finite_value() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f32_to_f16(f) & 0x7c00 == 0x7c00 && f32_to_f16(f) & 0x3ff != 0);
            } else {
                assert_eq!(f32_to_f16(f), h, "{h:#06x}");
            }
        }
    }

    #[test]
    fn f16_rounding_is_nearest_even() {
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even wins.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0);
        assert_eq!(f32_to_f16(2f32.powi(-25) * 1.5), 1);
    }

    #[test]
    fn bf16_rounds_and_quiets() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
    }
}

/// Widen little-endian f16 values from `src` (2 bytes each) into `dst`, as many as
/// both hold. Exact (every f16 is an f32): bitwise equal to [`f16_to_f32`] per
/// element, except that a signalling NaN may come back quiet (F16C, used 8 at a time
/// where the CPU has it, quiets them).
pub fn widen_f16_into(src: &[u8], dst: &mut [f32]) {
    let n = (src.len() / 2).min(dst.len());
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: F16C and AVX were detected at run time just above.
        done = unsafe { widen_f16_f16c(&src[..2 * n], &mut dst[..n]) };
    }
    for (o, b) in dst[done..n].iter_mut().zip(src[2 * done..].chunks_exact(2)) {
        *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// The F16C body of [`widen_f16_into`]: whole groups of 8; returns how many it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn widen_f16_f16c(src: &[u8], dst: &mut [f32]) -> usize {
    use core::arch::x86_64::{_mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let mut n = 0;
    for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(8)) {
        // SAFETY: `s` has 16 readable bytes, `d` 8 writable f32; unaligned
        // loads/stores need no alignment.
        unsafe {
            _mm256_storeu_ps(
                d.as_mut_ptr(),
                _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast())),
            )
        };
        n += 8;
    }
    n
}
