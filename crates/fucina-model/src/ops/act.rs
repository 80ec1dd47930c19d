//! Gated FFN activations: SwiGLU (`silu(g) · u`) and GeGLU with the tanh GELU.
//!
//! SwiGLU follows ggml's `ggml_vec_swiglu_f32` as the followed llama.cpp build runs
//! it ([`GgmlBuild::host`]), one row at a time: whole vectors from the row's start
//! through `ggml_v_silu` (`x / (1 + ggml_v_expf(0 − x))`, the build's polynomial
//! exponential: 16 lanes and [`ggml_expf`] for AVX-512, 8 lanes and
//! [`ggml_expf_avx2`] for AVX2), the last `len % lanes` values through libm's `expf`.
//!
//! GELU follows ggml's CPU path (`GGML_GELU_FP16`): the gate is rounded to f16 and
//! looked up in a 65,536-entry table of `f16(gelu_tanh(x))`, with the ±10 clamps.
//! That is what llama.cpp computes for Gemma, and the table also makes GELU cheap.

use std::sync::OnceLock;

use fucina_quant::half::{f16_to_f32, f32_to_f16};
use fucina_quant::GgmlBuild;

use crate::ops::f16dot::to_f16_bits;
use crate::ops::softmax::{ggml_expf, ggml_expf_avx2};

const GELU_COEF_A: f32 = 0.044715;
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// The tanh approximation of GELU in f32 (ggml `ggml_gelu_f32`), with the one
/// fused multiply-add GCC contracts it into on FMA machines (read from llama.cpp's
/// x86-64 build): `1 + (a·x)·x` is `fma(a·x, x, 1)`. Without it, some table
/// entries differ from llama.cpp's by an f16 ulp.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (GELU_COEF_A * x).mul_add(x, 1.0)).tanh())
}

fn gelu_table() -> &'static [f32] {
    static T: OnceLock<Vec<f32>> = OnceLock::new();
    T.get_or_init(|| {
        (0..=u16::MAX)
            .map(|h| f16_to_f32(f32_to_f16(gelu_tanh(f16_to_f32(h)))))
            .collect()
    })
}

/// `gate[i] = gelu(gate[i]) · up[i]` with ggml's f16-table GELU.
pub fn geglu_inplace(gate: &mut [f32], up: &[f32]) {
    let t = gelu_table();
    let mut idx = [0u16; 64];
    for (gc, uc) in gate.chunks_mut(64).zip(up.chunks(64)) {
        let idx = &mut idx[..gc.len()];
        to_f16_bits(gc, idx);
        for ((g, &u), &h) in gc.iter_mut().zip(uc).zip(idx.iter()) {
            let x = *g;
            *g = if x <= -10.0 {
                0.0
            } else if x >= 10.0 {
                x * u
            } else {
                t[usize::from(h)] * u
            };
        }
    }
}

/// `gate[i] = gelu_tanh(gate[i]) · up[i]` with GELU in f32 (no table).
pub fn geglu_f32_inplace(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh(*g) * u;
    }
}

/// `gate[i] = silu(gate[i]) · up[i]` over one row (see the module doc for the order).
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    let build = GgmlBuild::host();
    #[cfg(target_arch = "x86_64")]
    if crate::ops::f16dot::has_fma() {
        // SAFETY: the CPU supports FMA (checked at run time just above).
        return unsafe { swiglu_fma(gate, up, build) };
    }
    swiglu_build(gate, up, build)
}

/// [`swiglu_inplace`] with the exponential's `mul_add`s as FMA instructions (the
/// same single rounding as the software `fmaf`, much faster).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn swiglu_fma(gate: &mut [f32], up: &[f32], build: GgmlBuild) {
    swiglu_build(gate, up, build)
}

#[inline(always)]
fn swiglu_build(gate: &mut [f32], up: &[f32], build: GgmlBuild) {
    match build {
        GgmlBuild::Avx512 => swiglu_body::<16>(gate, up, ggml_expf),
        GgmlBuild::Avx2 => swiglu_body::<8>(gate, up, ggml_expf_avx2),
    }
}

#[inline(always)]
fn swiglu_body<const L: usize>(gate: &mut [f32], up: &[f32], expf: impl Fn(f32) -> f32) {
    let n = gate.len().min(up.len());
    let whole = n - n % L;
    for (g, &u) in gate[..whole].iter_mut().zip(&up[..whole]) {
        let x = *g;
        *g = x / (1.0 + expf(0.0 - x)) * u;
    }
    for (g, &u) in gate[whole..n].iter_mut().zip(&up[whole..n]) {
        let x = *g;
        *g = x / (1.0 + (-x).exp()) * u;
    }
}

/// `x[i] = silu(x[i])` over one row, as ggml's `ggml_vec_silu_f32` runs a row of the
/// `silu` op in the followed build: whole vectors through `ggml_v_silu`, the last
/// `len % lanes` values through libm's `expf` (the DeltaNet convolution and gate).
pub fn silu_inplace(x: &mut [f32]) {
    let build = GgmlBuild::host();
    #[cfg(target_arch = "x86_64")]
    if crate::ops::f16dot::has_fma() {
        // SAFETY: the CPU supports FMA (checked at run time just above).
        return unsafe { silu_fma(x, build) };
    }
    silu_build(x, build)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn silu_fma(x: &mut [f32], build: GgmlBuild) {
    silu_build(x, build)
}

#[inline(always)]
fn silu_build(x: &mut [f32], build: GgmlBuild) {
    match build {
        GgmlBuild::Avx512 => silu_body::<16>(x, ggml_expf),
        GgmlBuild::Avx2 => silu_body::<8>(x, ggml_expf_avx2),
    }
}

#[inline(always)]
fn silu_body<const L: usize>(x: &mut [f32], expf: impl Fn(f32) -> f32) {
    let whole = x.len() - x.len() % L;
    for v in &mut x[..whole] {
        *v = *v / (1.0 + expf(0.0 - *v));
    }
    for v in &mut x[whole..] {
        *v = *v / (1.0 + (-*v).exp());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geglu_tracks_exact_gelu() {
        let xs: Vec<f32> = (-1200..1200).map(|i| i as f32 / 100.0).collect();
        let mut g = xs.clone();
        geglu_inplace(&mut g, &vec![1.0; xs.len()]);
        for (&x, &y) in xs.iter().zip(&g) {
            let e = gelu_tanh(x);
            assert!((y - e).abs() <= 2e-3 * e.abs().max(1.0), "{x}: {y} vs {e}");
        }
        assert_eq!(g[0], 0.0); // x = -12 clamps
    }

    #[test]
    fn swiglu_chunks_and_tail_track_exact_silu() {
        for len in [1usize, 7, 8, 9, 15, 16, 17, 40, 768] {
            let xs: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin() * 12.0).collect();
            let up: Vec<f32> = (0..len).map(|i| 1.0 + i as f32 * 0.01).collect();
            for build in [GgmlBuild::Avx512, GgmlBuild::Avx2] {
                let mut g = xs.clone();
                swiglu_build(&mut g, &up, build);
                for ((&x, &u), &y) in xs.iter().zip(&up).zip(&g) {
                    let e = f64::from(x) / (1.0 + (-f64::from(x)).exp()) * f64::from(u);
                    assert!(
                        (f64::from(y) - e).abs() <= 1e-6 * e.abs().max(1.0),
                        "{x}: {y} vs {e}"
                    );
                }
                // The tail is libm's silu, the whole vectors the build's polynomial one.
                let expf = match build {
                    GgmlBuild::Avx512 => ggml_expf,
                    GgmlBuild::Avx2 => ggml_expf_avx2,
                };
                let whole = len - len % build.lanes();
                for (i, (&x, &y)) in xs.iter().zip(&g).enumerate() {
                    let want = if i < whole {
                        x / (1.0 + expf(0.0 - x)) * up[i]
                    } else {
                        x / (1.0 + (-x).exp()) * up[i]
                    };
                    assert_eq!(y.to_bits(), want.to_bits(), "{build:?} {len} {i}");
                }
            }
        }
    }

    #[test]
    fn silu_rows_are_swiglu_with_unit_up() {
        for len in [1usize, 7, 8, 9, 16, 17, 128, 131] {
            let xs: Vec<f32> = (0..len).map(|i| (i as f32 * 0.61).cos() * 9.0).collect();
            for build in [GgmlBuild::Avx512, GgmlBuild::Avx2] {
                let mut a = xs.clone();
                silu_build(&mut a, build);
                let mut b = xs.clone();
                swiglu_build(&mut b, &vec![1.0; len], build);
                let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{build:?} {len}");
            }
        }
    }

    #[test]
    fn swiglu_values() {
        let mut g = vec![0.0f32, 1.0, -2.0];
        swiglu_inplace(&mut g, &[3.0, 2.0, 1.0]);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 * 0.731_058_6).abs() < 1e-6);
        assert!((g[2] + 0.238_405_84).abs() < 1e-6);
    }
}
