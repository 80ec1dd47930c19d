//! The f16 attention dots in the float order llama.cpp executes for single-token
//! decode: `ggml_vec_dot_f16` (llamafile's tinyBLAS, whose order [`super::f16dot`]
//! follows, declines batches of one row). On AVX-512 machines that is four
//! 16-lane accumulators: element `e` of each 64-element step goes to accumulator
//! `(e / 16) % 4`, lane `e % 16`, one FMA each; the accumulators are folded as
//! `(a0 + a2) + (a1 + a3)` lane by lane and reduced with `_mm512_reduce_add_ps`
//! ([`reduce16`]); elements past the last whole step are added afterwards in f64
//! (each product rounded to f32 first), and the sum is rounded to f32.
//!
//! fucina follows the AVX-512 build's order on every ISA (as for the prompt
//! order), so results do not depend on the machine.
//!
//! Same shapes and masking contract as [`super::f16dot::dots`]; the `y` vectors'
//! element 0 must sit at a multiple of 64 of llama.cpp's element index (a cache
//! cell or head-dim offset aligned to [`super::f16dot::F16_PAD`]) so the
//! accumulator of each element is llama.cpp's.

use super::f16dot::{reduce16, DotsShape};

const STEP: usize = 64;

/// Whether the AVX-512 body runs: the CPU has AVX-512F and the kernels' ISA
/// (`FUCINA_ISA`, else the best detected) is AVX-512.
#[cfg(target_arch = "x86_64")]
fn use_avx512() -> bool {
    use std::sync::OnceLock;
    static B: OnceLock<bool> = OnceLock::new();
    *B.get_or_init(|| {
        let isa = fucina_quant::Kernels::from_env()
            .map_or_else(|_| fucina_quant::Isa::best(), |k| k.isa());
        isa == fucina_quant::Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512f")
    })
}

/// The masked value of element `e` of `y_i` (zero outside the first / last chunk masks).
#[inline(always)]
fn masked(yi: &[f32], sh: &DotsShape, e: usize) -> f32 {
    let (c, l) = (e / 16, e % 16);
    let nc = sh.len / 16;
    let mut m = u16::MAX;
    if c == 0 {
        m &= sh.first_mask;
    }
    if c + 1 == nc {
        m &= sh.last_mask;
    }
    if m >> l & 1 == 1 {
        yi[e]
    } else {
        0.0
    }
}

#[inline(always)]
fn dots_portable<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    let np = sh.len / STEP * STEP;
    for i in 0..sh.ny {
        let yi = &y[i * sh.y_stride..];
        let mut acc = [[[0f32; 16]; 4]; N];
        for e in 0..np {
            let yv = masked(yi, sh, e);
            for (h, a) in acc.iter_mut().enumerate() {
                let xv = x[h * sh.x_stride + e];
                let slot = &mut a[(e / 16) % 4][e % 16];
                *slot = xv.mul_add(yv, *slot);
            }
        }
        for (h, a) in acc.iter().enumerate() {
            out[h * sh.out_stride + i] = finish(
                a,
                |e| x[h * sh.x_stride + e] * masked(yi, sh, e),
                np,
                sh.len,
            );
        }
    }
}

/// Fold the four accumulators, reduce, add the leftovers `np..len` in f64.
#[inline(always)]
fn finish(a: &[[f32; 16]; 4], prod: impl Fn(usize) -> f32, np: usize, len: usize) -> f32 {
    let v: [f32; 16] = core::array::from_fn(|l| (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]));
    let mut s = f64::from(reduce16(&v));
    for e in np..len {
        s += f64::from(prod(e));
    }
    s as f32
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn dots_fma<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    dots_portable::<N>(x, y, sh, out)
}

/// # Safety
/// The CPU supports AVX-512F; [`dots_vec`]'s bounds contract holds.
// The AVX-512 intrinsics are stable since Rust 1.89, which fucina-quant (a
// dependency of this crate) already requires.
#[allow(clippy::incompatible_msrv)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn dots_avx512<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    use core::arch::x86_64::*;
    let nc = sh.len / 16;
    let np = sh.len / STEP * STEP;
    let xp = x.as_ptr();
    for i in 0..sh.ny {
        let yi = &y[i * sh.y_stride..];
        let yp = yi.as_ptr();
        let mut acc = [[_mm512_setzero_ps(); 4]; N];
        for c in 0..np / 16 {
            let mut m = u16::MAX;
            if c == 0 {
                m &= sh.first_mask;
            }
            if c + 1 == nc {
                m &= sh.last_mask;
            }
            // SAFETY: chunk c of y_i and of every x_h lies inside `y` / `x` (asserted
            // by `dots_vec`); a masked load reads only the kept lanes.
            let yc = unsafe {
                if m == u16::MAX {
                    _mm512_loadu_ps(yp.add(16 * c))
                } else {
                    _mm512_maskz_loadu_ps(m, yp.add(16 * c))
                }
            };
            for (h, a) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let xh = unsafe { _mm512_loadu_ps(xp.add(h * sh.x_stride + 16 * c)) };
                a[c % 4] = _mm512_fmadd_ps(xh, yc, a[c % 4]);
            }
        }
        for (h, a) in acc.iter().enumerate() {
            let mut lanes = [[0f32; 16]; 4];
            for (d, s) in lanes.iter_mut().zip(a) {
                // SAFETY: `d` holds 16 floats.
                unsafe { _mm512_storeu_ps(d.as_mut_ptr(), *s) };
            }
            out[h * sh.out_stride + i] = finish(
                &lanes,
                |e| x[h * sh.x_stride + e] * masked(yi, sh, e),
                np,
                sh.len,
            );
        }
    }
}

/// `out[h·out_stride + i] = Σ x_h·(masked y_i)` in `ggml_vec_dot_f16`'s order (see
/// the module doc) for `N` vectors `x_h` and `sh.ny` vectors `y_i`; `sh.len` need
/// only be a multiple of 16.
pub fn dots_vec<const N: usize>(x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    assert!(
        N > 0 && sh.len % 16 == 0 && out.len() >= (N - 1) * sh.out_stride + sh.ny,
        "dots_vec shape"
    );
    assert!(
        x.len() >= (N - 1) * sh.x_stride + sh.len,
        "dots_vec x bounds"
    );
    assert!(
        sh.ny == 0 || y.len() >= (sh.ny - 1) * sh.y_stride + sh.len,
        "dots_vec y bounds"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if use_avx512() {
            // SAFETY: AVX-512F and FMA were detected at run time; bounds asserted above.
            return unsafe { dots_avx512::<N>(x, y, sh, out) };
        }
        if super::f16dot::has_fma() {
            // SAFETY: the CPU supports FMA (checked at run time).
            return unsafe { dots_fma::<N>(x, y, sh, out) };
        }
    }
    dots_portable::<N>(x, y, sh, out)
}

/// [`dots_vec`] for a run-time number `n` of `x` vectors, four at a time.
pub fn dots_vec_n(n: usize, x: &[f32], y: &[f32], sh: &DotsShape, out: &mut [f32]) {
    let kernels = [dots_vec::<1>, dots_vec::<2>, dots_vec::<3>, dots_vec::<4>];
    super::f16dot::dots_by_four(&kernels, n, x, y, sh, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ggml_vec_dot_f16 transcribed literally (AVX-512 lane layout, scalar FMAs).
    #[allow(clippy::needless_range_loop)]
    fn ggml_vec_dot(x: &[f32], y: &[f32]) -> f32 {
        let n = x.len();
        let np = n & !(STEP - 1);
        let mut sum = [[0f32; 16]; 4];
        for i in (0..np).step_by(STEP) {
            for (j, s) in sum.iter_mut().enumerate() {
                for l in 0..16 {
                    let e = i + 16 * j + l;
                    s[l] = x[e].mul_add(y[e], s[l]);
                }
            }
        }
        for l in 0..16 {
            sum[0][l] += sum[2][l];
            sum[1][l] += sum[3][l];
        }
        for l in 0..16 {
            sum[0][l] += sum[1][l];
        }
        let mut sumf = f64::from(reduce16(&sum[0]));
        for e in np..n {
            sumf += f64::from(x[e] * y[e]);
        }
        sumf as f32
    }

    fn vals(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) as f32 * 1e-9).sin() * 3.0)
            .collect()
    }

    #[test]
    fn equals_literal_ggml_vec_dot_with_masks_and_leftovers() {
        for len in [16, 48, 64, 80, 128, 144, 256, 320] {
            for (first, last) in [
                (u16::MAX, u16::MAX),
                (0xfff0, u16::MAX),
                (u16::MAX, 0x00ff),
                (0xff00, 0x0fff),
            ] {
                let x = vals(4 * len, 7);
                let y = vals(3 * len, 11);
                let sh = DotsShape {
                    x_stride: len,
                    ny: 3,
                    y_stride: len,
                    len,
                    first_mask: first,
                    last_mask: last,
                    out_stride: 3,
                };
                let mut out = [0f32; 12];
                dots_vec_n(4, &x, &y, &sh, &mut out);
                let mut portable = [0f32; 12];
                for h in 0..4 {
                    dots_portable::<1>(&x[h * len..], &y, &sh, &mut portable[h * 3..]);
                }
                for h in 0..4 {
                    for i in 0..3 {
                        let mut yi = y[i * len..(i + 1) * len].to_vec();
                        let nc = len / 16;
                        for (e, v) in yi.iter_mut().enumerate() {
                            let (c, l) = (e / 16, e % 16);
                            let mut m = u16::MAX;
                            if c == 0 {
                                m &= first;
                            }
                            if c + 1 == nc {
                                m &= last;
                            }
                            if m >> l & 1 == 0 {
                                *v = 0.0;
                            }
                        }
                        let want = ggml_vec_dot(&x[h * len..(h + 1) * len], &yi);
                        assert_eq!(
                            out[h * 3 + i].to_bits(),
                            want.to_bits(),
                            "len {len} h {h} i {i}"
                        );
                        assert_eq!(
                            portable[h * 3 + i].to_bits(),
                            want.to_bits(),
                            "portable len {len}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn differs_from_the_prompt_order_somewhere() {
        // The two orders are different functions: over many random vectors at
        // least one result differs in the last bits (else this module is moot).
        let len = 256;
        let x = vals(len, 3);
        let mut differ = 0;
        for s in 0..64 {
            let y = vals(len, 1000 + s);
            let sh = DotsShape::single(len);
            let mut a = [0f32];
            let mut b = [0f32];
            dots_vec::<1>(&x, &y, &sh, &mut a);
            super::super::f16dot::dots::<1>(&x, &y, &sh, &mut b);
            differ += usize::from(a[0].to_bits() != b[0].to_bits());
        }
        assert!(differ > 0);
    }
}
