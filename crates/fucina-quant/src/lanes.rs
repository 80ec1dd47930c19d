//! 16-lane tests over f32 chunks that return a bitmask of the lanes that pass,
//! and a row's max/NaN scan: the full-vocabulary passes of `fucina-sample`'s
//! filters (kept here with the other kernels, so the aarch64 CI step tests the
//! portable bodies too).
//!
//! Full-vocabulary passes spend their time asking "does any of these 16
//! logits matter?"; the compiler's auto-vectoriser turns such bit-gathering
//! loops into scalar gathers, so on x86-64 they use SSE2 (part of the
//! x86-64 baseline: no runtime dispatch, every x86-64 CPU runs it). Other
//! targets get the portable loops, which are also the reference the tests
//! compare against.

/// Chunk width of every mask.
pub const LANES: usize = 16;

#[cfg(target_arch = "x86_64")]
// Before Rust 1.87 every SSE2 intrinsic is an `unsafe fn`; from 1.87 the
// register-only ones are safe. The crate builds on both, so blocks that
// only need `unsafe` on older compilers are allowed to look unused.
#[allow(unused_unsafe)]
mod imp {
    use super::LANES;
    use std::arch::x86_64::*;

    #[inline(always)]
    fn load4(c: &[f32; LANES], i: usize) -> __m128 {
        debug_assert!(i + 4 <= LANES);
        // SAFETY: `c` holds LANES floats and i + 4 <= LANES, so the unaligned
        // 16-byte load stays inside it.
        unsafe { _mm_loadu_ps(c.as_ptr().add(i)) }
    }

    #[inline(always)]
    fn bits(m: [__m128; 4]) -> u32 {
        // SAFETY: SSE2 is enabled on every x86-64 target (baseline feature).
        unsafe {
            (_mm_movemask_ps(m[0])
                | (_mm_movemask_ps(m[1]) << 4)
                | (_mm_movemask_ps(m[2]) << 8)
                | (_mm_movemask_ps(m[3]) << 12)) as u32
        }
    }

    /// Bit `j` set where `c[j] - sub >= bound`.
    #[inline(always)]
    pub fn sub_ge(c: &[f32; LANES], sub: f32, bound: f32) -> u32 {
        // SAFETY: SSE2 is enabled on every x86-64 target (baseline feature).
        unsafe {
            let (s, b) = (_mm_set1_ps(sub), _mm_set1_ps(bound));
            let t = |i| _mm_cmpge_ps(_mm_sub_ps(load4(c, i), s), b);
            bits([t(0), t(4), t(8), t(12)])
        }
    }

    /// Bit `j` set where `c[j] > bound`.
    #[inline(always)]
    pub fn gt(c: &[f32; LANES], bound: f32) -> u32 {
        // SAFETY: SSE2 is enabled on every x86-64 target (baseline feature).
        unsafe {
            let b = _mm_set1_ps(bound);
            let t = |i| _mm_cmpgt_ps(load4(c, i), b);
            bits([t(0), t(4), t(8), t(12)])
        }
    }

    /// Bit `j` set where `c[j] >= bound`.
    #[inline(always)]
    pub fn ge(c: &[f32; LANES], bound: f32) -> u32 {
        // SAFETY: SSE2 is enabled on every x86-64 target (baseline feature).
        unsafe {
            let b = _mm_set1_ps(bound);
            let t = |i| _mm_cmpge_ps(load4(c, i), b);
            bits([t(0), t(4), t(8), t(12)])
        }
    }

    /// Bit `j` set where `lo <= c[j] < hi` or `c[j] >= above`.
    #[inline(always)]
    pub fn range_or_above(c: &[f32; LANES], lo: f32, hi: f32, above: f32) -> u32 {
        // SAFETY: SSE2 is enabled on every x86-64 target (baseline feature).
        unsafe {
            let (l, h, a) = (_mm_set1_ps(lo), _mm_set1_ps(hi), _mm_set1_ps(above));
            let t = |i| {
                let v = load4(c, i);
                _mm_or_ps(
                    _mm_and_ps(_mm_cmpge_ps(v, l), _mm_cmplt_ps(v, h)),
                    _mm_cmpge_ps(v, a),
                )
            };
            bits([t(0), t(4), t(8), t(12)])
        }
    }

    /// (max, any NaN or +inf) of a row; NaN never becomes the max.
    /// The row's maximum (NaN ignored) and whether it holds a NaN or +inf.
    #[inline(always)]
    pub fn max_and_bad(row: &[f32]) -> (f32, bool) {
        let chunks = row.chunks_exact(LANES);
        let tail = chunks.remainder();
        // SAFETY: SSE2 is enabled on every x86-64 target (baseline feature).
        let (mut max, mut bad) = unsafe {
            let inf = _mm_set1_ps(f32::INFINITY);
            let mut mx = [_mm_set1_ps(f32::NEG_INFINITY); 4];
            let mut bad = _mm_setzero_ps();
            for c in chunks {
                let Ok(c) = <&[f32; LANES]>::try_from(c) else {
                    continue;
                };
                for (k, m) in mx.iter_mut().enumerate() {
                    let v = load4(c, 4 * k);
                    // maxps(v, m) returns m when v is NaN.
                    *m = _mm_max_ps(v, *m);
                    bad = _mm_or_ps(bad, _mm_or_ps(_mm_cmpunord_ps(v, v), _mm_cmpeq_ps(v, inf)));
                }
            }
            let mut lanes = [f32::NEG_INFINITY; LANES];
            for (k, m) in mx.iter().enumerate() {
                let mut four = [0f32; 4];
                _mm_storeu_ps(four.as_mut_ptr(), *m);
                lanes[4 * k..4 * k + 4].copy_from_slice(&four);
            }
            let max = lanes
                .iter()
                .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
            (max, _mm_movemask_ps(bad) != 0)
        };
        for &v in tail {
            if v > max {
                max = v;
            }
            bad |= v.is_nan() || v == f32::INFINITY;
        }
        (max, bad)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    pub use super::portable::*;
}

/// Portable versions: the semantics of every mask.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
mod portable {
    use super::LANES;

    fn mask(c: &[f32; LANES], f: impl Fn(f32) -> bool) -> u32 {
        c.iter()
            .enumerate()
            .fold(0, |m, (j, &v)| m | (u32::from(f(v)) << j))
    }

    /// Bit `j` set where `c[j] - sub >= bound`.
    pub fn sub_ge(c: &[f32; LANES], sub: f32, bound: f32) -> u32 {
        mask(c, |v| v - sub >= bound)
    }

    /// Bit `j` set where `c[j] > bound`.
    pub fn gt(c: &[f32; LANES], bound: f32) -> u32 {
        mask(c, |v| v > bound)
    }

    /// Bit `j` set where `c[j] >= bound`.
    pub fn ge(c: &[f32; LANES], bound: f32) -> u32 {
        mask(c, |v| v >= bound)
    }

    /// Bit `j` set where `lo <= c[j] < hi` or `c[j] >= above`.
    pub fn range_or_above(c: &[f32; LANES], lo: f32, hi: f32, above: f32) -> u32 {
        mask(c, |v| (v >= lo && v < hi) || v >= above)
    }

    /// The row's maximum (NaN ignored) and whether it holds a NaN or +inf.
    pub fn max_and_bad(row: &[f32]) -> (f32, bool) {
        let mut max = f32::NEG_INFINITY;
        let mut bad = false;
        for &v in row {
            if v > max {
                max = v;
            }
            bad |= v.is_nan() || v == f32::INFINITY;
        }
        (max, bad)
    }
}

pub use imp::{ge, gt, max_and_bad, range_or_above, sub_ge};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_match_the_portable_reference() {
        let vals = [
            -1.0,
            0.0,
            1.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            2.5,
            -2.5,
            3.0,
            1e9,
            -0.0,
            0.5,
            7.0,
            -7.0,
            2.0,
            f32::MAX,
        ];
        let c: [f32; LANES] = vals;
        for &(a, b) in &[
            (0.0f32, 1.0f32),
            (-3.0, 2.5),
            (1.0, 1e10),
            (f32::NEG_INFINITY, 0.0),
        ] {
            assert_eq!(sub_ge(&c, a, b), portable::sub_ge(&c, a, b));
            assert_eq!(gt(&c, b), portable::gt(&c, b));
            assert_eq!(ge(&c, b), portable::ge(&c, b));
            assert_eq!(
                range_or_above(&c, a, b, 5.0),
                portable::range_or_above(&c, a, b, 5.0)
            );
        }
        let mut long = c.to_vec();
        long.extend_from_slice(&c[..5]);
        assert_eq!(max_and_bad(&long), portable::max_and_bad(&long));
        let mut clean = vec![1.0f32; 20];
        clean.extend([f32::NEG_INFINITY; 19]);
        assert_eq!(max_and_bad(&clean), (1.0, false));
        clean.push(f32::INFINITY);
        assert_eq!(max_and_bad(&clean), (f32::INFINITY, true));
    }
}
