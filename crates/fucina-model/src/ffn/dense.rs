//! The dense gated MLP: `down(act(gate·x + b) ⊙ (up·x + b)) + b`.

use std::sync::Arc;

use fucina_gguf::GgufFile;

use crate::config::Activation;
use crate::forward::{add_bias, grow, par_rows};
use crate::matmul::{matmul, matmul_many, MatmulScratch};
use crate::ops::act::{geglu_f32_inplace, geglu_inplace, swiglu_inplace};
use crate::parallel::ThreadPool;
use crate::weights::{layer_name, Linear};
use crate::Result;

/// Binds an optional bias `(name, len)` as the family says.
pub type BindBias<'a> = &'a dyn Fn(&str, usize) -> Result<Option<Vec<f32>>>;

/// Weights of a dense FFN.
#[derive(Clone, Debug)]
pub struct DenseFfn {
    /// Gate projection `[n_ff, n_embd]`.
    pub gate: Linear,
    /// Up projection `[n_ff, n_embd]`.
    pub up: Linear,
    /// Down projection `[n_embd, n_ff]`.
    pub down: Linear,
    /// Gate bias.
    pub b_gate: Option<Vec<f32>>,
    /// Up bias.
    pub b_up: Option<Vec<f32>>,
    /// Down bias.
    pub b_down: Option<Vec<f32>>,
}

impl DenseFfn {
    /// Bind `blk.{il}.ffn_{gate,up,down}{suffix}.weight` (`suffix`: "" for the
    /// layer's FFN, "_shexp" for a MoE layer's shared expert); `bias(name, len)`
    /// binds a bias as the family says.
    pub fn bind(
        file: &Arc<GgufFile>,
        il: usize,
        suffix: &str,
        n_embd: usize,
        n_ff: usize,
        bias: BindBias<'_>,
    ) -> Result<DenseFfn> {
        let n = |p: &str, s: &str| layer_name(il, &format!("ffn_{p}{suffix}.{s}"));
        Ok(DenseFfn {
            gate: Linear::bind(file, &n("gate", "weight"), n_ff, n_embd)?,
            up: Linear::bind(file, &n("up", "weight"), n_ff, n_embd)?,
            down: Linear::bind(file, &n("down", "weight"), n_embd, n_ff)?,
            b_gate: bias(&n("gate", "bias"), n_ff)?,
            b_up: bias(&n("up", "bias"), n_ff)?,
            b_down: bias(&n("down", "bias"), n_embd)?,
        })
    }

    /// `out = ffn(xn)` for `m` rows (`gate` and `up`: buffers for the inner rows).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        pool: &ThreadPool,
        act: Activation,
        xn: &[f32],
        m: usize,
        out: &mut [f32],
        gate: &mut Vec<f32>,
        up: &mut Vec<f32>,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let ff = self.gate.rows();
        let e = self.down.rows();
        let (gate, up) = (grow(gate, m * ff), grow(up, m * ff));
        matmul_many(
            pool,
            &[&self.gate, &self.up],
            xn,
            m,
            &mut [&mut gate[..], &mut up[..]],
            mm,
        )?;
        add_bias(gate, self.b_gate.as_ref(), ff);
        add_bias(up, self.b_up.as_ref(), ff);
        apply_glu(pool, act, gate, up, ff);
        matmul(pool, &self.down, gate, m, &mut out[..m * e], mm)?;
        add_bias(out, self.b_down.as_ref(), e);
        Ok(())
    }
}

/// `gate = act(gate) ⊙ up`, rows of `width` in parallel (each activation row by row:
/// ggml's SwiGLU chunks restart at every row).
pub(crate) fn apply_glu(
    pool: &ThreadPool,
    act: Activation,
    gate: &mut [f32],
    up: &[f32],
    width: usize,
) {
    par_rows(pool, gate, width, &|rr, gate| {
        let up = &up[rr.start * width..rr.end * width];
        for (g, u) in gate.chunks_exact_mut(width).zip(up.chunks_exact(width)) {
            match act {
                Activation::Silu => swiglu_inplace(g, u),
                Activation::GeluTanh => geglu_inplace(g, u),
                Activation::GeluTanhF32 => geglu_f32_inplace(g, u),
            }
        }
    });
}
