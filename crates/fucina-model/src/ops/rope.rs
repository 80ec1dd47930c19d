//! Rotary position embedding as ggml's `ggml_rope_ext` computes it on CPU:
//! θ advances by repeated f32 multiplication with `base^(-2/n_rot)`, divided by the
//! optional per-pair frequency factors (llama3's `rope_freqs.weight`), then scaled
//! by `freq_scale` (linear scaling) with YaRN's ramp mix when `ext_factor != 0`.

use crate::config::{RopeConfig, RopeKind};

/// cos/sin of one position for every rotated pair: `cs[2i] = cos`, `cs[2i+1] = sin`.
pub fn rope_cache(rope: &RopeConfig, freq_factors: Option<&[f32]>, pos: i64, cs: &mut [f32]) {
    let n_dims = rope.n_rot;
    let theta_scale = rope.freq_base.powf(-2.0 / n_dims as f32);
    let corr = yarn_corr_dims(
        n_dims,
        rope.n_ctx_orig,
        rope.freq_base,
        rope.beta_fast,
        rope.beta_slow,
    );
    let mut theta = pos as f32;
    for i0 in (0..n_dims).step_by(2) {
        let ff = freq_factors
            .and_then(|f| f.get(i0 / 2))
            .copied()
            .unwrap_or(1.0);
        let (c, s) = rope_yarn(
            theta / ff,
            rope.freq_scale,
            corr,
            i0,
            rope.ext_factor,
            rope.attn_factor,
        );
        cs[i0] = c;
        cs[i0 + 1] = s;
        theta *= theta_scale;
    }
}

/// Rotate the first `n_rot` dims of every head in `x` (`n_head × head_dim`).
///
/// The rotations use the fused multiply-adds GCC contracts ggml's `rotate_pairs`
/// into on FMA machines (read from llama.cpp's x86-64 build: the NeoX loop is
/// `fma(x0, c, −x1·s)`, `fma(x0, s, x1·c)`; the vectorized normal loop is
/// `fma(x0, c, −x1·s)`, `fma(x1, c, x0·s)`), so positions > 0 match llama.cpp
/// bit for bit rather than within a rounding.
pub fn apply_rope(kind: RopeKind, x: &mut [f32], head_dim: usize, n_rot: usize, cs: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::f16dot::has_fma() {
        // SAFETY: the CPU supports FMA (checked at run time just above).
        return unsafe { apply_rope_fma(kind, x, head_dim, n_rot, cs) };
    }
    apply_rope_body(kind, x, head_dim, n_rot, cs)
}

/// [`apply_rope`] with its `mul_add`s as FMA instructions instead of calls to the
/// software `fmaf` (the same single rounding).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn apply_rope_fma(kind: RopeKind, x: &mut [f32], head_dim: usize, n_rot: usize, cs: &[f32]) {
    apply_rope_body(kind, x, head_dim, n_rot, cs)
}

#[inline(always)]
fn apply_rope_body(kind: RopeKind, x: &mut [f32], head_dim: usize, n_rot: usize, cs: &[f32]) {
    for head in x.chunks_exact_mut(head_dim) {
        match kind {
            RopeKind::Normal => {
                for i0 in (0..n_rot).step_by(2) {
                    let (c, s) = (cs[i0], cs[i0 + 1]);
                    let (x0, x1) = (head[i0], head[i0 + 1]);
                    head[i0] = x0.mul_add(c, -(x1 * s));
                    head[i0 + 1] = x1.mul_add(c, x0 * s);
                }
            }
            RopeKind::Neox => {
                let half = n_rot / 2;
                for i0 in (0..n_rot).step_by(2) {
                    let ic = i0 / 2;
                    let (c, s) = (cs[i0], cs[i0 + 1]);
                    let (x0, x1) = (head[ic], head[ic + half]);
                    head[ic] = x0.mul_add(c, -(x1 * s));
                    head[ic + half] = x0.mul_add(s, x1 * c);
                }
            }
        }
    }
}

fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

fn rope_yarn(
    theta_extrap: f32,
    freq_scale: f32,
    corr: [f32; 2],
    i0: usize,
    ext_factor: f32,
    mscale: f32,
) -> (f32, f32) {
    let theta_interp = freq_scale * theta_extrap;
    let mut theta = theta_interp;
    let mut mscale = mscale;
    if ext_factor != 0.0 {
        let ramp_mix = yarn_ramp(corr[0], corr[1], i0) * ext_factor;
        theta = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
    }
    (theta.cos() * mscale, theta.sin() * mscale)
}

fn yarn_corr_dim(n_dims: usize, n_ctx_orig: usize, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

fn yarn_corr_dims(
    n_dims: usize,
    n_ctx_orig: usize,
    base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let start = yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, base).floor();
    let end = yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, base).ceil();
    [start.max(0.0), end.min(n_dims as f32 - 1.0)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: RopeKind) -> RopeConfig {
        RopeConfig {
            kind,
            n_rot: 8,
            freq_base: 10_000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: 4096,
        }
    }

    #[test]
    fn rotation_preserves_norm_and_matches_closed_form() {
        for kind in [RopeKind::Normal, RopeKind::Neox] {
            let r = cfg(kind);
            let mut cs = vec![0f32; 8];
            rope_cache(&r, None, 7, &mut cs);
            let x: Vec<f32> = (0..8).map(|i| i as f32 * 0.5 - 1.0).collect();
            let mut y = x.clone();
            apply_rope(kind, &mut y, 8, 8, &cs);
            let n0: f32 = x.iter().map(|v| v * v).sum();
            let n1: f32 = y.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-4);
            // pair 1 rotates by 7 · 10000^(-2/8)
            let th = 7.0f64 * 10_000f64.powf(-0.25);
            let (a, b) = match kind {
                RopeKind::Normal => (2, 3),
                RopeKind::Neox => (1, 5),
            };
            let e0 = x[a] as f64 * th.cos() - x[b] as f64 * th.sin();
            assert!((y[a] as f64 - e0).abs() < 1e-5, "{kind:?}");
        }
    }

    #[test]
    fn position_zero_is_identity_and_factors_slow_rotation() {
        let r = cfg(RopeKind::Neox);
        let mut cs = vec![0f32; 8];
        rope_cache(&r, None, 0, &mut cs);
        assert!(cs.chunks(2).all(|p| p[0] == 1.0 && p[1] == 0.0));
        let mut a = vec![0f32; 8];
        let mut b = vec![0f32; 8];
        rope_cache(&r, None, 100, &mut a);
        rope_cache(&r, Some(&[1.0, 1.0, 1.0, 2.0]), 100, &mut b);
        assert_eq!(a[..6], b[..6]);
        assert_ne!(a[6], b[6]);
    }
}
