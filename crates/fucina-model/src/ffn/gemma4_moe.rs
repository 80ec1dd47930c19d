//! Gemma 4's mixture-of-experts FFN block (26B-A4B; the MoE branch of
//! `llm_build_gemma4`): a dense GeGLU MLP and routed experts side by side, each
//! with its own norms, summed:
//!
//! `post_ffw_norm_1(mlp(ffn_norm(x))) + post_ffw_norm_2(experts(pre_ffw_norm_2(x)))`,
//!
//! where the router reads `rmsnorm(x) / √n_embd · ffn_gate_inp.scale` (no weight
//! on the norm), softmax over the experts, top-k renormalised, each selected
//! weight times the expert's `ffn_down_exps.scale`, and the experts are GeGLU
//! (`ffn_gate_up_exps` fused, gate rows first). The block's input `x` is the
//! residual stream after attention; [`crate::forward`] applies `post_ffw_norm`.

use std::sync::Arc;

use fucina_gguf::GgufFile;

use super::dense::DenseFfn;
use super::moe::{MoeFfn, MoeScratch};
use super::MoeConfig;
use crate::config::Activation;
use crate::forward::{grow, par_rows};
use crate::matmul::MatmulScratch;
use crate::ops::norm::{rms_norm, rms_norm_inplace, rms_norm_unit_inplace, rms_scale};
use crate::parallel::ThreadPool;
use crate::weights::{layer_name, load_vector, load_vector_opt, Linear};
use crate::Result;

/// Weights of a Gemma 4 MoE block.
#[derive(Clone, Debug)]
pub struct Gemma4MoeFfn {
    /// The dense GeGLU MLP (`ffn_{gate,up,down}`).
    pub mlp: DenseFfn,
    /// `post_ffw_norm_1`, on the MLP's output.
    pub post_norm_1: Vec<f32>,
    /// The router and experts.
    pub moe: MoeFfn,
    /// `ffn_gate_inp.scale`: the router input's per-channel scale.
    pub router_scale: Vec<f32>,
    /// `ffn_down_exps.scale`: each expert's output scale (ones when absent).
    pub expert_scale: Option<Vec<f32>>,
    /// `pre_ffw_norm_2`, on the experts' input.
    pub pre_norm_2: Vec<f32>,
    /// `post_ffw_norm_2`, on the experts' output.
    pub post_norm_2: Vec<f32>,
}

/// Buffers of [`Gemma4MoeFfn::forward`].
#[derive(Default, Debug)]
pub struct Gemma4MoeScratch {
    router_x: Vec<f32>,
    moe_x: Vec<f32>,
    moe_out: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    moe: MoeScratch,
}

impl Gemma4MoeFfn {
    /// Bind layer `il`'s block: a dense MLP of width `n_ff` and the experts of `moe`.
    pub fn bind(
        file: &Arc<GgufFile>,
        il: usize,
        moe: &MoeConfig,
        n_embd: usize,
        n_ff: usize,
    ) -> Result<Gemma4MoeFfn> {
        let n = |s: &str| layer_name(il, s);
        let plain = MoeConfig {
            shared: None,
            ..*moe
        };
        Ok(Gemma4MoeFfn {
            mlp: DenseFfn::bind(file, il, "", n_embd, n_ff, &|_, _| Ok(None))?,
            post_norm_1: load_vector(file, &n("post_ffw_norm_1.weight"), n_embd)?,
            moe: MoeFfn::bind(file, il, &plain, n_embd, false)?,
            router_scale: load_vector(file, &n("ffn_gate_inp.scale"), n_embd)?,
            expert_scale: load_vector_opt(file, &n("ffn_down_exps.scale"), moe.n_expert)?,
            pre_norm_2: load_vector(file, &n("pre_ffw_norm_2.weight"), n_embd)?,
            post_norm_2: load_vector(file, &n("post_ffw_norm_2.weight"), n_embd)?,
        })
    }

    /// The matrices every token reads in full (the MLP and the router).
    pub fn resident_matrices(&self) -> Vec<&Linear> {
        vec![
            &self.mlp.gate,
            &self.mlp.up,
            &self.mlp.down,
            &self.moe.gate_inp,
        ]
    }

    /// Bytes one decode token reads.
    pub fn bytes_per_token(&self) -> usize {
        let mlp: usize = [&self.mlp.gate, &self.mlp.up, &self.mlp.down]
            .iter()
            .map(|w| w.stream_bytes())
            .sum();
        mlp + self.moe.bytes_per_token()
    }

    /// `out = block(x)` for `m` rows: `x` the residual stream, `xn` its `ffn_norm`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        pool: &ThreadPool,
        act: Activation,
        x: &[f32],
        xn: &[f32],
        m: usize,
        out: &mut [f32],
        eps: f32,
        s: &mut Gemma4MoeScratch,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let e = self.moe.gate_inp.cols();
        let x = &x[..m * e];
        let router_x = grow(&mut s.router_x, m * e);
        let moe_x = grow(&mut s.moe_x, m * e);
        let inv = 1.0 / (e as f32).sqrt();
        let (rs, pn) = (&self.router_scale, &self.pre_norm_2);
        router_x.copy_from_slice(x);
        par_rows(pool, router_x, e, &|_, rows| {
            for r in rows.chunks_exact_mut(e) {
                rms_norm_unit_inplace(r, eps);
                for (v, &w) in r.iter_mut().zip(rs) {
                    *v = *v * inv * w;
                }
            }
        });
        par_rows(pool, moe_x, e, &|rr, rows| {
            for (r, o) in rr.zip(rows.chunks_exact_mut(e)) {
                rms_norm(&x[r * e..(r + 1) * e], pn, eps, o);
            }
        });
        let moe_out = grow(&mut s.moe_out, m * e);
        self.moe.forward_routed(
            pool,
            act,
            router_x,
            moe_x,
            self.expert_scale.as_deref(),
            m,
            moe_out,
            &mut s.moe,
            mm,
        )?;
        let out = &mut out[..m * e];
        self.mlp
            .forward(pool, act, xn, m, out, &mut s.gate, &mut s.up, mm)?;
        let (p1, p2, mo) = (&self.post_norm_1, &self.post_norm_2, &s.moe_out);
        par_rows(pool, out, e, &|rr, rows| {
            for (r, o) in rr.zip(rows.chunks_exact_mut(e)) {
                rms_norm_inplace(o, p1, eps);
                let src = &mo[r * e..(r + 1) * e];
                let scale = rms_scale(src, eps);
                for ((v, &y), &w) in o.iter_mut().zip(src).zip(p2) {
                    *v += (y * scale) * w;
                }
            }
        });
        Ok(())
    }
}
