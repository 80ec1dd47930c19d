//! The mixture-of-experts FFN (llama.cpp's `build_moe_ffn`, CPU `mul_mat_id`):
//! a router picks `n_expert_used` experts per token ([`super::router`]), each
//! selected expert runs its gated MLP on the tokens routed to it, and the outputs
//! are summed weighted by the router.
//!
//! Experts are stacked `[in, out, n_expert]` tensors bound per expert as zero-copy
//! row blocks of the mapping ([`Linear::bind_stack`]). Rows are grouped by expert
//! (token order within an expert, as ggml groups them) so each used expert's
//! weights are read once per batch for all its rows: in decode that is each
//! selected expert once; in prefill each expert that any token chose, once.
//! The gate/up products of all used experts run in one parallel section, the down
//! products in another ([`matmul_grouped`]).
//!
//! Sum order is ggml's: each expert output times its weight (one f32 rounding), then
//! added slot by slot, best expert first; a shared expert's output (times its
//! sigmoid gate, where it has one) is added last.

use std::sync::Arc;

use fucina_gguf::GgufFile;

use super::dense::{apply_glu, DenseFfn};
use super::router::{route, RouteScratch};
use super::MoeConfig;
use crate::config::Activation;
use crate::forward::{grow, par_rows};
use crate::matmul::{matmul, matmul_grouped, GroupedProduct, MatmulScratch};
use crate::parallel::ThreadPool;
use crate::weights::{has_tensor, layer_name, load_vector, Linear};
use crate::{ModelError, Result};

/// Weights of a mixture-of-experts FFN.
#[derive(Clone, Debug)]
pub struct MoeFfn {
    /// The layer's routing parameters.
    pub config: MoeConfig,
    /// Router `[n_expert, n_embd]` (`ffn_gate_inp`).
    pub gate_inp: Linear,
    /// Selection bias added to the probabilities before top-k (`exp_probs_b`).
    pub exp_probs_b: Option<Vec<f32>>,
    /// Per-expert gate projections `[n_ff_exp, n_embd]` (`ffn_gate_exps`).
    pub gate: Vec<Linear>,
    /// Per-expert up projections `[n_ff_exp, n_embd]` (`ffn_up_exps`).
    pub up: Vec<Linear>,
    /// Per-expert down projections `[n_embd, n_ff_exp]` (`ffn_down_exps`).
    pub down: Vec<Linear>,
    /// The shared expert, where the family has one (boxed: a whole dense FFN).
    pub shared: Option<Box<SharedFfn>>,
}

/// A shared expert's weights (`ffn_{gate,up,down}_shexp`).
#[derive(Clone, Debug)]
pub struct SharedFfn {
    /// Its SwiGLU FFN.
    pub ffn: DenseFfn,
    /// The per-token gate `ffn_gate_inp_shexp` (`[n_embd]`, one output), where gated.
    pub gate: Option<Linear>,
}

/// Reusable buffers of [`MoeFfn::forward`].
#[derive(Default, Debug)]
pub struct MoeScratch {
    logits: Vec<f32>,
    ids: Vec<u32>,
    weights: Vec<f32>,
    offsets: Vec<usize>,
    fill: Vec<usize>,
    gather: Vec<usize>,
    slot_pos: Vec<usize>,
    gate: Vec<f32>,
    up: Vec<f32>,
    down: Vec<f32>,
    shared: Vec<f32>,
    shared_gate: Vec<f32>,
    route: RouteScratch,
}

impl MoeFfn {
    /// Bind layer `il`'s router and expert stacks (`blk.{il}.ffn_{gate_inp,gate_exps,
    /// up_exps,down_exps}.weight`), with `blk.{il}.exp_probs_b.bias` when
    /// `probs_bias`. Missing stacks, a wrong expert count, a truncated stack or an
    /// expert type without kernels are errors naming the tensor.
    pub fn bind(
        file: &Arc<GgufFile>,
        il: usize,
        config: &MoeConfig,
        n_embd: usize,
        probs_bias: bool,
    ) -> Result<MoeFfn> {
        config.validate(il)?;
        let n = |s: &str| layer_name(il, s);
        let (ne, ff) = (config.n_expert, config.n_ff_exp);
        let exp_probs_b = if probs_bias {
            Some(load_vector(file, &n("exp_probs_b.bias"), ne)?)
        } else {
            None
        };
        let shared = match config.shared {
            Some(sh) => Some(Box::new(SharedFfn {
                ffn: DenseFfn::bind(file, il, "_shexp", n_embd, sh.n_ff, &|_, _| Ok(None))?,
                gate: match sh.gated {
                    true => Some(Linear::bind_row(
                        file,
                        &n("ffn_gate_inp_shexp.weight"),
                        n_embd,
                    )?),
                    false => None,
                },
            })),
            None => None,
        };
        // The router first: a wrong expert count is reported on it.
        let gate_inp = Linear::bind(file, &n("ffn_gate_inp.weight"), ne, n_embd)?;
        let (gate, up) = if has_tensor(file, &n("ffn_gate_up_exps.weight")) {
            // Fused gate/up stacks (Gemma 4): each expert's 2·ff rows, gate first.
            let name = n("ffn_gate_up_exps.weight");
            let fused = Linear::bind_stack(file, &name, ne, 2 * ff, n_embd)?;
            let mut gate = Vec::with_capacity(ne);
            let mut up = Vec::with_capacity(ne);
            for (i, w) in fused.iter().enumerate() {
                let names = [format!("{name}[{i}].gate"), format!("{name}[{i}].up")];
                let (g, u) = w
                    .split_rows(ff, [&names[0], &names[1]])
                    .ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
                gate.push(g);
                up.push(u);
            }
            (gate, up)
        } else {
            (
                Linear::bind_stack(file, &n("ffn_gate_exps.weight"), ne, ff, n_embd)?,
                Linear::bind_stack(file, &n("ffn_up_exps.weight"), ne, ff, n_embd)?,
            )
        };
        let ffn = MoeFfn {
            config: *config,
            shared,
            gate_inp,
            exp_probs_b,
            gate,
            up,
            down: Linear::bind_stack(file, &n("ffn_down_exps.weight"), ne, n_embd, ff)?,
        };
        Ok(ffn)
    }

    /// Bytes one decode token reads: the router, `n_expert_used` experts (of the
    /// first expert's size; every expert of a stack has the same) and the shared
    /// expert.
    pub fn bytes_per_token(&self) -> usize {
        let expert: usize = [&self.gate, &self.up, &self.down]
            .iter()
            .filter_map(|s| s.first())
            .map(|w| w.bytes().len())
            .sum();
        let shared: usize = self.shared.as_ref().map_or(0, |sh| {
            let gate = sh.gate.as_ref().map_or(0, |g| g.bytes().len());
            [&sh.ffn.gate, &sh.ffn.up, &sh.ffn.down]
                .iter()
                .map(|w| w.bytes().len())
                .sum::<usize>()
                + gate
        });
        self.gate_inp.bytes().len() + self.config.n_expert_used * expert + shared
    }

    /// `out = moe(xn)` for `m` normed rows.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        pool: &ThreadPool,
        act: Activation,
        xn: &[f32],
        m: usize,
        out: &mut [f32],
        s: &mut MoeScratch,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        self.forward_routed(pool, act, xn, xn, None, m, out, s, mm)
    }

    /// [`MoeFfn::forward`] with the router reading `router_x` (Gemma 4 routes on
    /// its own normalisation of the block input) and each selected expert's weight
    /// times `expert_scale[expert]` where given.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_routed(
        &self,
        pool: &ThreadPool,
        act: Activation,
        router_x: &[f32],
        xn: &[f32],
        expert_scale: Option<&[f32]>,
        m: usize,
        out: &mut [f32],
        s: &mut MoeScratch,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let cfg = &self.config;
        let (n, k, ff) = (cfg.n_expert, cfg.n_expert_used, cfg.n_ff_exp);
        let e = self.gate_inp.cols();
        let n_assign = m * k;

        let logits = grow(&mut s.logits, m * n);
        matmul(pool, &self.gate_inp, &router_x[..m * e], m, logits, mm)?;
        s.ids.resize(n_assign, 0);
        s.weights.resize(n_assign, 0.0);
        let bias = self.exp_probs_b.as_deref();
        for ((l, ids), w) in logits
            .chunks_exact_mut(n)
            .zip(s.ids.chunks_exact_mut(k))
            .zip(s.weights.chunks_exact_mut(k))
        {
            route(cfg, l, bias, ids, w, &mut s.route);
        }
        if let Some(sc) = expert_scale {
            for (w, &id) in s.weights.iter_mut().zip(&s.ids) {
                *w *= sc.get(id as usize).copied().unwrap_or(1.0);
            }
        }

        // Group the (row, slot) assignments by expert, rows in order within one.
        s.offsets.clear();
        s.offsets.resize(n + 1, 0);
        for &id in &s.ids {
            s.offsets[id as usize + 1] += 1;
        }
        for i in 0..n {
            s.offsets[i + 1] += s.offsets[i];
        }
        s.fill.clear();
        s.fill.extend_from_slice(&s.offsets[..n]);
        s.gather.resize(n_assign, 0);
        s.slot_pos.resize(n_assign, 0);
        for (a, &id) in s.ids.iter().enumerate() {
            let pos = s.fill[id as usize];
            s.fill[id as usize] += 1;
            s.gather[pos] = a / k;
            s.slot_pos[a] = pos;
        }
        let used: Vec<(usize, std::ops::Range<usize>)> = (0..n)
            .filter(|&x| s.offsets[x + 1] > s.offsets[x])
            .map(|x| (x, s.offsets[x]..s.offsets[x + 1]))
            .collect();

        // Gate and up for every used expert, over its rows.
        let (g, u) = (
            grow(&mut s.gate, n_assign * ff),
            grow(&mut s.up, n_assign * ff),
        );
        let same_act = self.gate[0].dot().act == self.up[0].dot().act;
        let mut gp = products(&self.gate, &used, g, ff);
        let mut up = products(&self.up, &used, u, ff);
        if same_act {
            gp.append(&mut up);
            matmul_grouped(pool, xn, Some(&s.gather), &mut gp, mm)?;
        } else {
            matmul_grouped(pool, xn, Some(&s.gather), &mut gp, mm)?;
            matmul_grouped(pool, xn, Some(&s.gather), &mut up, mm)?;
        }
        drop(gp);
        let (g, u) = (&mut s.gate[..n_assign * ff], &s.up[..n_assign * ff]);
        apply_glu(pool, act, g, u, ff);

        // Down, then the weighted sum per token.
        let d = grow(&mut s.down, n_assign * e);
        let mut dp = products(&self.down, &used, d, e);
        matmul_grouped(pool, &s.gate[..n_assign * ff], None, &mut dp, mm)?;
        drop(dp);
        let out = out
            .get_mut(..m * e)
            .ok_or_else(|| ModelError::InvalidBatch(format!("moe output for {m} rows")))?;
        let (d, w, pos) = (&s.down[..n_assign * e], &s.weights, &s.slot_pos);
        par_rows(pool, out, e, &|rr, out| {
            for (r, o) in rr.zip(out.chunks_exact_mut(e)) {
                for slot in 0..k {
                    let a = r * k + slot;
                    let (src, wt) = (&d[pos[a] * e..(pos[a] + 1) * e], w[a]);
                    if slot == 0 {
                        o.iter_mut().zip(src).for_each(|(o, v)| *o = v * wt);
                    } else {
                        o.iter_mut().zip(src).for_each(|(o, v)| *o += v * wt);
                    }
                }
            }
        });
        if let Some(sh) = &self.shared {
            self.add_shared(sh, pool, act, xn, m, out, s, mm)?;
        }
        Ok(())
    }

    /// `out += shared(xn)` (times `sigmoid(gate · xn)` per row where gated; ggml
    /// computes that sigmoid as `silu(x) / x`, with libm's `expf`).
    #[allow(clippy::too_many_arguments)]
    fn add_shared(
        &self,
        sh: &SharedFfn,
        pool: &ThreadPool,
        act: Activation,
        xn: &[f32],
        m: usize,
        out: &mut [f32],
        s: &mut MoeScratch,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let e = self.gate_inp.cols();
        let y = grow(&mut s.shared, m * e);
        sh.ffn
            .forward(pool, act, xn, m, y, &mut s.gate, &mut s.up, mm)?;
        let gates = grow(&mut s.shared_gate, m);
        match &sh.gate {
            Some(g) => {
                matmul(pool, g, &xn[..m * e], m, gates, mm)?;
                gates
                    .iter_mut()
                    .for_each(|x| *x = (*x / (1.0 + (-*x).exp())) / *x);
            }
            None => gates.fill(1.0),
        }
        let (y, gates) = (&s.shared[..m * e], &s.shared_gate[..m]);
        par_rows(pool, out, e, &|rr, out| {
            for (r, o) in rr.zip(out.chunks_exact_mut(e)) {
                let (src, g) = (&y[r * e..(r + 1) * e], gates[r]);
                if sh.gate.is_some() {
                    o.iter_mut().zip(src).for_each(|(o, v)| *o += v * g);
                } else {
                    o.iter_mut().zip(src).for_each(|(o, v)| *o += v);
                }
            }
        });
        Ok(())
    }
}

/// One grouped product per used expert: its matrix of `stack`, its rows, and its
/// block of `buf` (rows of `width` outputs; the used experts' row ranges are
/// consecutive, so the blocks tile `buf` in order).
fn products<'a>(
    stack: &'a [Linear],
    used: &[(usize, std::ops::Range<usize>)],
    buf: &'a mut [f32],
    width: usize,
) -> Vec<GroupedProduct<'a>> {
    let mut rest = buf;
    used.iter()
        .map(|(x, rows)| {
            let (y, tail) = std::mem::take(&mut rest).split_at_mut(rows.len() * width);
            rest = tail;
            GroupedProduct {
                w: &stack[*x],
                rows: rows.clone(),
                y,
            }
        })
        .collect()
}
