//! Per-layer embeddings (Gemma 4 E2B/E4B, spec §13.2.2): a second, packed token
//! table (`per_layer_token_embd`, `n_layer · n_pl` values per token) read one row
//! at a time straight from the mapping, mixed with a projection of the scaled
//! token embedding into one `n_pl`-wide input per layer:
//!
//! `inp[l] = (rmsnorm(proj · x / √n_embd)[l] · w + table[token][l] · √n_pl) / √2`,
//!
//! and, in every layer after its FFN residual, `x += rmsnorm(proj_l ·
//! (gelu(gate_l · x) ⊙ inp[l])) · w_l` (llama.cpp's `project_per_layer_inputs` and
//! the block at the end of `llm_build_gemma4`).

use std::sync::Arc;

use fucina_gguf::GgufFile;

use crate::config::Activation;
use crate::forward::{grow, par_rows, BatchRow};
use crate::matmul::{matmul, MatmulScratch};
use crate::ops::act::{geglu_f32_inplace, geglu_inplace};
use crate::ops::norm::rms_norm_inplace;
use crate::parallel::ThreadPool;
use crate::weights::{layer_name, load_vector, Linear};
use crate::{ModelError, Result};

/// The model-level per-layer-embedding weights.
#[derive(Clone, Debug)]
pub struct PleWeights {
    /// `per_layer_token_embd`: one `n_layer · n_pl` row per token.
    pub table: Linear,
    /// `per_layer_model_proj`: `n_layer · n_pl × n_embd`.
    pub proj: Linear,
    /// `per_layer_proj_norm`: `n_pl`.
    pub norm: Vec<f32>,
    n_pl: usize,
}

impl PleWeights {
    /// Bind the tables of a model of `n_layer` layers and `n_pl`-wide per-layer inputs.
    pub fn bind(
        file: &Arc<GgufFile>,
        n_layer: usize,
        n_embd: usize,
        n_pl: usize,
    ) -> Result<PleWeights> {
        let width = n_layer.checked_mul(n_pl).ok_or_else(|| {
            ModelError::InvalidConfig(format!("{n_layer} × {n_pl} per-layer inputs"))
        })?;
        let name = "per_layer_token_embd.weight";
        let info = file
            .tensors()
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        let rows = match info.dims.as_slice() {
            [w, r] if *w == width as u64 => usize::try_from(*r).ok(),
            _ => None,
        }
        .ok_or_else(|| ModelError::WeightShape {
            name: name.into(),
            found: info.dims.clone(),
            expected: vec![width as u64, 0],
        })?;
        Ok(PleWeights {
            table: Linear::bind(file, name, rows, width)?,
            proj: Linear::bind(file, "per_layer_model_proj.weight", width, n_embd)?,
            norm: load_vector(file, "per_layer_proj_norm.weight", n_pl)?,
            n_pl,
        })
    }

    /// Width of one layer's input.
    pub fn n_pl(&self) -> usize {
        self.n_pl
    }

    /// Every row's per-layer inputs (`rows.len() × n_layer · n_pl`) into `out`, from
    /// the scaled token embeddings `x` (`rows.len() × n_embd`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn inputs(
        &self,
        pool: &ThreadPool,
        rows: &[BatchRow],
        x: &[f32],
        eps: f32,
        out: &mut Vec<f32>,
        tok: &mut Vec<f32>,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let (m, width, e) = (rows.len(), self.proj.rows(), self.proj.cols());
        let out = grow(out, m * width);
        matmul(pool, &self.proj, x, m, out, mm)?;
        let tok = grow(tok, m * width);
        for (r, row) in rows.iter().enumerate() {
            let t = row.token as usize;
            if t >= self.table.rows() {
                return Err(ModelError::InvalidBatch(format!(
                    "token {t} outside the per-layer embedding table of {} rows",
                    self.table.rows()
                )));
            }
            self.table
                .dequantize_row(t, &mut tok[r * width..(r + 1) * width])?;
        }
        let (n_pl, norm, tok_ro) = (self.n_pl, &self.norm, &*tok);
        let proj_scale = 1.0 / (e as f32).sqrt();
        let tok_scale = (n_pl as f32).sqrt();
        let input_scale = std::f32::consts::FRAC_1_SQRT_2;
        par_rows(pool, out, width, &|rr, o| {
            for (r, row) in rr.zip(o.chunks_exact_mut(width)) {
                let t = &tok_ro[r * width..(r + 1) * width];
                for (chunk, tc) in row.chunks_exact_mut(n_pl).zip(t.chunks_exact(n_pl)) {
                    chunk.iter_mut().for_each(|v| *v *= proj_scale);
                    rms_norm_inplace(chunk, norm, eps);
                    for (v, &tv) in chunk.iter_mut().zip(tc) {
                        *v = (*v + tv * tok_scale) * input_scale;
                    }
                }
            }
        });
        Ok(())
    }
}

/// One layer's per-layer-embedding block.
#[derive(Clone, Debug)]
pub struct PleLayer {
    /// `inp_gate`: `n_pl × n_embd`.
    pub gate: Linear,
    /// `proj`: `n_embd × n_pl`.
    pub proj: Linear,
    /// `post_norm`: `n_embd`.
    pub post_norm: Vec<f32>,
}

impl PleLayer {
    /// Bind layer `il`'s block.
    pub fn bind(file: &Arc<GgufFile>, il: usize, n_embd: usize, n_pl: usize) -> Result<PleLayer> {
        let n = |s: &str| layer_name(il, s);
        Ok(PleLayer {
            gate: Linear::bind(file, &n("inp_gate.weight"), n_pl, n_embd)?,
            proj: Linear::bind(file, &n("proj.weight"), n_embd, n_pl)?,
            post_norm: load_vector(file, &n("post_norm.weight"), n_embd)?,
        })
    }

    /// `x += rmsnorm(proj · (gelu(gate · x) ⊙ inp)) · w` for `mc` rows; row `i`'s
    /// input is `inputs[src(i) · stride + offset ..][..n_pl]`, `src(i)` being
    /// `rows[i]` when given (the output rows kept at the last layer), else `i`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        &self,
        pool: &ThreadPool,
        x: &mut [f32],
        mc: usize,
        inputs: &[f32],
        stride: usize,
        offset: usize,
        rows: Option<&[usize]>,
        act: Activation,
        eps: f32,
        g: &mut Vec<f32>,
        p: &mut Vec<f32>,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let (n_pl, e) = (self.gate.rows(), self.proj.rows());
        let g = grow(g, mc * n_pl);
        matmul(pool, &self.gate, &x[..mc * e], mc, g, mm)?;
        for (i, gr) in g.chunks_exact_mut(n_pl).enumerate() {
            let src = rows.map_or(i, |r| r[i]);
            let inp = &inputs[src * stride + offset..src * stride + offset + n_pl];
            // The family's GELU (its FFN's), without the `· up` of a GLU.
            match act {
                Activation::GeluTanhF32 => geglu_f32_inplace(gr, inp),
                _ => geglu_inplace(gr, inp),
            }
        }
        let p = grow(p, mc * e);
        matmul(pool, &self.proj, g, mc, p, mm)?;
        let w = &self.post_norm;
        par_rows(pool, p, e, &|_, ps| {
            ps.chunks_exact_mut(e)
                .for_each(|r| rms_norm_inplace(r, w, eps));
        });
        for (xv, &pv) in x[..mc * e].iter_mut().zip(p.iter()) {
            *xv += pv;
        }
        Ok(())
    }
}
