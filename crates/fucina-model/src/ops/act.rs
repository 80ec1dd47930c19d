//! Gated FFN activations: SwiGLU (`silu(g) · u`) and GeGLU with the tanh GELU.
//!
//! GELU follows ggml's CPU path (`GGML_GELU_FP16`): the gate is rounded to f16 and
//! looked up in a 65,536-entry table of `f16(gelu_tanh(x))`, with the ±10 clamps.
//! That is what llama.cpp computes for Gemma, and the table also makes GELU cheap.

use std::sync::OnceLock;

use fucina_quant::half::{f16_to_f32, f32_to_f16};

use crate::ops::f16dot::to_f16_bits;

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

/// `gate[i] = silu(gate[i]) · up[i]` (ggml `ggml_vec_swiglu_f32`: x / (1 + e^-x)).
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = x / (1.0 + (-x).exp()) * u;
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
    fn swiglu_values() {
        let mut g = vec![0.0f32, 1.0, -2.0];
        swiglu_inplace(&mut g, &[3.0, 2.0, 1.0]);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 * 0.731_058_6).abs() < 1e-6);
        assert!((g[2] + 0.238_405_84).abs() < 1e-6);
    }
}
