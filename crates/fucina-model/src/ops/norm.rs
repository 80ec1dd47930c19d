//! RMSNorm as ggml computes it: Σx² accumulated in f64, `scale = 1/√(mean + ε)`
//! in f32, then `(x · scale) · w`.
//!
//! Gemma's `(1 + w)` convention needs no special case: llama.cpp's converter
//! (`Gemma3Model.norm_shift`) stores `1 + w` in the GGUF, so every family's norm
//! here is the plain `x̂ · w`. Tiny-model generators must apply the same shift.

/// `out = rms_norm(x) · w`; `x`, `w` and `out` have the same length.
#[inline]
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let scale = rms_scale(x, eps);
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = (xi * scale) * wi;
    }
}

/// In-place `x = rms_norm(x) · w`.
#[inline]
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    for (xi, &wi) in x.iter_mut().zip(w) {
        *xi = (*xi * scale) * wi;
    }
}

/// In-place `x = rms_norm(x)` without a weight (ggml's bare `ggml_rms_norm`).
#[inline]
pub fn rms_norm_unit_inplace(x: &mut [f32], eps: f32) {
    let scale = rms_scale(x, eps);
    x.iter_mut().for_each(|v| *v *= scale);
}

/// `1/√(mean(x²) + ε)`, the scale [`rms_norm`] multiplies by.
#[inline]
pub fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (sum / x.len().max(1) as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_rms_after_norm() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.37).collect();
        let w = vec![1.0f32; 64];
        let mut y = vec![0f32; 64];
        rms_norm(&x, &w, 0.0, &mut y);
        let ms: f32 = y.iter().map(|v| v * v).sum::<f32>() / 64.0;
        assert!((ms - 1.0).abs() < 1e-5, "{ms}");
        let mut z = x.clone();
        let w2: Vec<f32> = (0..64).map(|i| i as f32).collect();
        rms_norm_inplace(&mut z, &w2, 1e-6);
        rms_norm(&x, &w2, 1e-6, &mut y);
        assert_eq!(y, z);
    }
}
