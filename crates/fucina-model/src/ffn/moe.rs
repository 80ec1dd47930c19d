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
//! With an expert store ([`MoeFfn::stream`]) the experts a call uses are read on
//! demand instead ([`super::moe_stream`]) and multiplied a chunk at a time (what the
//! store's slots hold at once) by the same grouped kernels on the same bytes:
//! bitwise the resident results.
//!
//! Sum order is ggml's: each expert output times its weight (one f32 rounding), then
//! added slot by slot, best expert first; a shared expert's output (times its
//! sigmoid gate, where it has one) is added last.

use std::ops::Range;
use std::sync::Arc;

use fucina_gguf::GgufFile;

use super::dense::{apply_glu, DenseFfn};
use super::moe_stream::MoeStream;
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
    /// The expert store the experts stream from (`None`: borrowed from the mapping).
    pub stream: Option<MoeStream>,
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
    lookahead: Vec<f32>,
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
            stream: None,
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
            .map(|w| w.stream_bytes())
            .sum();
        let shared: usize = self.shared.as_ref().map_or(0, |sh| {
            let gate = sh.gate.as_ref().map_or(0, |g| g.stream_bytes());
            [&sh.ffn.gate, &sh.ffn.up, &sh.ffn.down]
                .iter()
                .map(|w| w.stream_bytes())
                .sum::<usize>()
                + gate
        });
        self.gate_inp.stream_bytes() + self.config.n_expert_used * expert + shared
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
        let used: Vec<(usize, Range<usize>)> = (0..n)
            .filter(|&x| s.offsets[x + 1] > s.offsets[x])
            .map(|x| (x, s.offsets[x]..s.offsets[x + 1]))
            .collect();

        grow(&mut s.gate, n_assign * ff);
        grow(&mut s.up, n_assign * ff);
        grow(&mut s.down, n_assign * e);
        match &self.stream {
            None => {
                let w: Vec<[&Linear; 3]> = used
                    .iter()
                    .map(|&(x, _)| [&self.gate[x], &self.up[x], &self.down[x]])
                    .collect();
                let rows: Vec<Range<usize>> = used.iter().map(|u| u.1.clone()).collect();
                self.experts(pool, act, xn, &w, &rows, s, mm)?;
            }
            Some(st) => {
                st.lookahead(pool, router_x, m, &mut s.lookahead, mm)?;
                let req: Vec<(u32, u32)> = used
                    .iter()
                    .map(|(x, r)| (*x as u32, r.len() as u32))
                    .collect();
                st.store.with_experts(st.layer, &req, |chunk| {
                    let mats = chunk
                        .experts
                        .iter()
                        .zip(chunk.bytes)
                        .map(|(&(x, _), b)| st.matrices(self, x as usize, b))
                        .collect::<Result<Vec<_>>>()?;
                    let w: Vec<[&Linear; 3]> = mats.iter().map(|[g, u, d]| [g, u, d]).collect();
                    let rows: Vec<Range<usize>> = chunk
                        .experts
                        .iter()
                        .map(|&(x, _)| s.offsets[x as usize]..s.offsets[x as usize + 1])
                        .collect();
                    self.experts(pool, act, xn, &w, &rows, s, mm)
                })?;
            }
        }

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

    /// Gate, up, activation and down of some used experts (`w[i]`: gate, up, down of
    /// the expert whose grouped rows are `rows[i]`, ascending): every used expert at
    /// once when resident, a chunk at a time when streamed. Each product depends only
    /// on its own weights and rows, so chunking never changes a bit.
    #[allow(clippy::too_many_arguments)]
    fn experts(
        &self,
        pool: &ThreadPool,
        act: Activation,
        xn: &[f32],
        w: &[[&Linear; 3]],
        rows: &[Range<usize>],
        s: &mut MoeScratch,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            return Ok(());
        };
        let (ff, e) = (self.config.n_ff_exp, self.gate_inp.cols());
        let span = first.start..last.end;
        let gather = &s.gather[span.clone()];
        let g = &mut s.gate[span.start * ff..span.end * ff];
        let u = &mut s.up[span.start * ff..span.end * ff];
        let same_act = w[0][0].dot().act == w[0][1].dot().act;
        let mut gp = products(w.iter().map(|x| x[0]), rows, span.start, g, ff);
        let mut up = products(w.iter().map(|x| x[1]), rows, span.start, u, ff);
        if same_act {
            gp.append(&mut up);
            matmul_grouped(pool, xn, Some(gather), &mut gp, mm)?;
        } else {
            matmul_grouped(pool, xn, Some(gather), &mut gp, mm)?;
            matmul_grouped(pool, xn, Some(gather), &mut up, mm)?;
        }
        drop(gp);
        drop(up);
        // The activation over each run of consecutive rows (one run when resident).
        let mut i = 0;
        while i < rows.len() {
            let mut j = i + 1;
            while j < rows.len() && rows[j].start == rows[j - 1].end {
                j += 1;
            }
            let run = rows[i].start * ff..rows[j - 1].end * ff;
            apply_glu(pool, act, &mut s.gate[run.clone()], &s.up[run], ff);
            i = j;
        }
        let x = &s.gate[span.start * ff..span.end * ff];
        let d = &mut s.down[span.start * e..span.end * e];
        let mut dp = products(w.iter().map(|x| x[2]), rows, span.start, d, e);
        matmul_grouped(pool, x, None, &mut dp, mm)
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

/// One grouped product per expert: its matrix, its rows (relative to `base`, the
/// first row of the call), and its block of `buf` (rows of `width` outputs; the
/// experts' row ranges ascend and do not overlap, so the blocks are carved from
/// `buf` in order, skipping the rows of experts not in the call).
fn products<'a>(
    ws: impl Iterator<Item = &'a Linear>,
    rows: &[Range<usize>],
    base: usize,
    buf: &'a mut [f32],
    width: usize,
) -> Vec<GroupedProduct<'a>> {
    let mut rest = buf;
    let mut at = base;
    ws.zip(rows)
        .map(|(w, rows)| {
            let skip = std::mem::take(&mut rest)
                .split_at_mut((rows.start - at) * width)
                .1;
            let (y, tail) = skip.split_at_mut(rows.len() * width);
            rest = tail;
            at = rows.end;
            GroupedProduct {
                w,
                rows: rows.start - base..rows.end - base,
                y,
            }
        })
        .collect()
}
