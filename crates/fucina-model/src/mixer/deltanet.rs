//! The Gated DeltaNet mixer of one layer inside the batched forward (Qwen3.5's
//! `build_layer_attn_linear`): projections of the normed rows, then per sequence
//! the causal convolution continuing its cached state, the prepared delta-rule
//! inputs, the delta rule per value head (chunked for prompt rows, recurrent for
//! decode and pinned rows: see [`crate::ops::deltanet`]), the gated RMSNorm
//! `rmsnorm(o) · w · silu(z)` per head, and the output projection into `out`.
//!
//! Rows of several sequences may share the batch; each sequence's rows are
//! gathered in position order and run one sequence after another (in parallel
//! within it: row blocks of the convolution, value heads of the delta rule), its
//! state moving from the buffer holding the state at the cache's length to the
//! other one (see [`crate::kv_cache::recurrent`]), with its rows logged for
//! rewinds when few. Nothing is allocated in steady state.

use std::sync::Arc;

use fucina_gguf::GgufFile;

use crate::forward::{grow, par_rows, BatchRow};
use crate::kv_cache::{KvCache, RecurrentGeometry};
use crate::matmul::{matmul, matmul_many, MatmulScratch};
use crate::ops::act::silu_inplace;
use crate::ops::deltanet::{
    conv_silu, conv_state_after, conv_taps, delta_rows_from, prepare_row, uses_chunks, DeltaScratch,
};
use crate::ops::norm::rms_norm_inplace;
use crate::parallel::{SharedMut, ThreadPool};
use crate::weights::{has_tensor, layer_name, load_small_matrix, load_vector, Linear};
use crate::{ModelError, Result};

/// The q/k/v and output-gate projections of a DeltaNet layer.
#[derive(Clone, Debug)]
pub enum QkvzProj {
    /// `attn_qkv` (the mixed q/k/v channels, `conv_channels × n_embd`) and
    /// `attn_gate` (z, `n_v_heads · dv × n_embd`).
    Split {
        /// q/k/v.
        qkv: Linear,
        /// z.
        gate: Linear,
    },
    /// Qwen3-Next's older fused `ssm_in`: per key head `[q, k, v, z]`.
    Fused(Linear),
}

/// The β and decay-input projections of a DeltaNet layer.
#[derive(Clone, Debug)]
pub enum BaProj {
    /// `ssm_beta` and `ssm_alpha` (`n_v_heads × n_embd` each; Qwen3.5).
    Split {
        /// β before its sigmoid.
        beta: Linear,
        /// The decay input before the softplus.
        alpha: Linear,
    },
    /// Qwen3-Next's `ssm_ba`: per key head `[β × per, α × per]`.
    Fused(Linear),
}

/// Weights of a Gated DeltaNet layer (llama.cpp's tensor names).
#[derive(Clone, Debug)]
pub struct DeltaNetWeights {
    /// q/k/v and z.
    pub qkvz: QkvzProj,
    /// β and α.
    pub ba: BaProj,
    /// `ssm_conv1d`, f32, tap-major (`conv_kernel × conv_channels`: [`conv_taps`] of
    /// the file's channel-major layout).
    pub conv: Vec<f32>,
    /// `ssm_dt.bias`: added to α before the softplus.
    pub dt_bias: Vec<f32>,
    /// `ssm_a`: `−exp(A_log)` per value head (the converter stores it negated).
    pub a: Vec<f32>,
    /// `ssm_norm`: the gated RMSNorm weight (`dv`, shared by the heads).
    pub norm: Vec<f32>,
    /// `ssm_out`: back to the residual width (`n_embd × n_v_heads · dv`).
    pub out: Linear,
}

impl DeltaNetWeights {
    /// Bind layer `il`'s DeltaNet tensors for geometry `g`; a missing or misshapen
    /// tensor is an error naming it.
    pub fn bind(
        file: &Arc<GgufFile>,
        il: usize,
        n_embd: usize,
        g: &RecurrentGeometry,
    ) -> Result<DeltaNetWeights> {
        let n = |s: &str| layer_name(il, s);
        let sh = g.shape;
        let c = sh.conv_channels();
        let v = sh.n_v_heads * sh.dv;
        let qkvz =
            if has_tensor(file, &n("attn_qkv.weight")) || !has_tensor(file, &n("ssm_in.weight")) {
                QkvzProj::Split {
                    qkv: Linear::bind(file, &n("attn_qkv.weight"), c, n_embd)?,
                    gate: Linear::bind(file, &n("attn_gate.weight"), v, n_embd)?,
                }
            } else {
                QkvzProj::Fused(Linear::bind(file, &n("ssm_in.weight"), c + v, n_embd)?)
            };
        let ba =
            if has_tensor(file, &n("ssm_beta.weight")) || !has_tensor(file, &n("ssm_ba.weight")) {
                BaProj::Split {
                    beta: Linear::bind(file, &n("ssm_beta.weight"), sh.n_v_heads, n_embd)?,
                    alpha: Linear::bind(file, &n("ssm_alpha.weight"), sh.n_v_heads, n_embd)?,
                }
            } else {
                BaProj::Fused(Linear::bind(
                    file,
                    &n("ssm_ba.weight"),
                    2 * sh.n_v_heads,
                    n_embd,
                )?)
            };
        Ok(DeltaNetWeights {
            qkvz,
            ba,
            conv: conv_taps(
                &load_small_matrix(file, &n("ssm_conv1d.weight"), c, g.conv_kernel)?,
                g.conv_kernel,
                c,
            ),
            dt_bias: load_vector(file, &n("ssm_dt.bias"), sh.n_v_heads)?,
            a: load_vector(file, &n("ssm_a"), sh.n_v_heads)?,
            norm: load_vector(file, &n("ssm_norm.weight"), sh.dv)?,
            out: Linear::bind(file, &n("ssm_out.weight"), n_embd, v)?,
        })
    }

    /// Every matrix a decode step multiplies with.
    pub fn matrices(&self) -> Vec<&Linear> {
        let mut v = match &self.qkvz {
            QkvzProj::Split { qkv, gate } => vec![qkv, gate],
            QkvzProj::Fused(w) => vec![w],
        };
        match &self.ba {
            BaProj::Split { beta, alpha } => v.extend([beta, alpha]),
            BaProj::Fused(w) => v.push(w),
        }
        v.push(&self.out);
        v
    }

    /// The projections of `m` normed rows into the canonical q/k/v, z, β and α
    /// buffers (fused projections go through `tmp` and are unpacked per key head).
    #[allow(clippy::too_many_arguments)]
    fn project(
        &self,
        pool: &ThreadPool,
        g: &RecurrentGeometry,
        xn: &[f32],
        m: usize,
        s: &mut DeltaNetScratch,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let sh = g.shape;
        let (c, hv, hk, dk, dv) = (sh.conv_channels(), sh.n_v_heads, sh.n_k_heads, sh.dk, sh.dv);
        let vw = hv * dv;
        let per = hv / hk.max(1);
        let (qkv, z, b, a) = (
            grow(&mut s.qkv, m * c),
            grow(&mut s.z, m * vw),
            grow(&mut s.b, m * hv),
            grow(&mut s.a, m * hv),
        );
        match (&self.qkvz, &self.ba) {
            (QkvzProj::Split { qkv: wq, gate: wg }, BaProj::Split { beta, alpha }) => {
                return matmul_many(
                    pool,
                    &[wq, wg, beta, alpha],
                    xn,
                    m,
                    &mut [&mut qkv[..], &mut z[..], &mut b[..], &mut a[..]],
                    mm,
                );
            }
            (QkvzProj::Split { qkv: wq, gate: wg }, BaProj::Fused(_)) => {
                matmul_many(pool, &[wq, wg], xn, m, &mut [&mut qkv[..], &mut z[..]], mm)?;
            }
            (QkvzProj::Fused(w), _) => {
                let t = grow(&mut s.tmp, m * (c + vw));
                matmul(pool, w, xn, m, t, mm)?;
                let kd = hk * dk;
                let gw = 2 * dk + 2 * per * dv;
                for ((src, q), zr) in t
                    .chunks_exact(c + vw)
                    .zip(qkv.chunks_exact_mut(c))
                    .zip(z.chunks_exact_mut(vw))
                {
                    for kh in 0..hk {
                        let gsrc = &src[kh * gw..(kh + 1) * gw];
                        let (pv, v0) = (per * dv, 2 * dk);
                        q[kh * dk..(kh + 1) * dk].copy_from_slice(&gsrc[..dk]);
                        q[kd + kh * dk..kd + (kh + 1) * dk].copy_from_slice(&gsrc[dk..2 * dk]);
                        q[2 * kd + kh * pv..2 * kd + (kh + 1) * pv]
                            .copy_from_slice(&gsrc[v0..v0 + pv]);
                        zr[kh * pv..(kh + 1) * pv].copy_from_slice(&gsrc[v0 + pv..]);
                    }
                }
            }
        }
        match &self.ba {
            BaProj::Split { beta, alpha } => matmul_many(
                pool,
                &[beta, alpha],
                xn,
                m,
                &mut [&mut b[..], &mut a[..]],
                mm,
            ),
            BaProj::Fused(w) => {
                let t = grow(&mut s.tmp, m * 2 * hv);
                matmul(pool, w, xn, m, t, mm)?;
                for ((src, br), ar) in t
                    .chunks_exact(2 * hv)
                    .zip(b.chunks_exact_mut(hv))
                    .zip(a.chunks_exact_mut(hv))
                {
                    for kh in 0..hk {
                        let gsrc = &src[kh * 2 * per..(kh + 1) * 2 * per];
                        br[kh * per..(kh + 1) * per].copy_from_slice(&gsrc[..per]);
                        ar[kh * per..(kh + 1) * per].copy_from_slice(&gsrc[per..]);
                    }
                }
                Ok(())
            }
        }
    }
}

/// Buffers of the DeltaNet mixer (grown once, reused).
#[derive(Default, Debug)]
pub struct DeltaNetScratch {
    qkv: Vec<f32>,
    z: Vec<f32>,
    /// Output of a fused projection before it is unpacked.
    tmp: Vec<f32>,
    b: Vec<f32>,
    a: Vec<f32>,
    /// Raw q/k/v rows gathered by sequence.
    raw: Vec<f32>,
    conv: Vec<f32>,
    prep: Vec<f32>,
    core: Vec<f32>,
    normed: Vec<f32>,
    /// Batch row of each gathered row.
    order: Vec<usize>,
    /// (sequence, first gathered row, rows) of each sequence in the batch.
    segs: Vec<(usize, usize, usize)>,
}

/// Floats of output per convolution task (enough work to outweigh a hand-off).
const ROW_BLOCK_FLOATS: usize = 16 * 1024;

thread_local! {
    static DELTA_SCRATCH: std::cell::RefCell<(DeltaScratch, Vec<f32>)> =
        std::cell::RefCell::new(Default::default());
}

impl DeltaNetWeights {
    /// Run the layer on the normed rows `xn` (`rows.len()` of them), advancing each
    /// row's sequence state in `caches` (layer `il`), and write the output
    /// projection of every row into `out` (`rows.len() × n_embd`, batch order).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &self,
        pool: &ThreadPool,
        il: usize,
        g: &RecurrentGeometry,
        eps: f32,
        rows: &[BatchRow],
        caches: &mut [KvCache],
        xn: &[f32],
        out: &mut [f32],
        s: &mut DeltaNetScratch,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let m = rows.len();
        let sh = g.shape;
        let (c, hv, dv) = (sh.conv_channels(), sh.n_v_heads, sh.dv);
        let vw = hv * dv;
        let w = sh.row_width();
        let pinned = mm.pinned();
        self.project(pool, g, xn, m, s, mm)?;

        // Gather each sequence's rows (already in position order within the batch).
        s.order.clear();
        s.order.extend(0..m);
        s.order.sort_by_key(|&r| rows[r].seq);
        s.segs.clear();
        let mut i = 0;
        while i < m {
            let seq = rows[s.order[i]].seq;
            let n = s.order[i..]
                .iter()
                .take_while(|&&r| rows[r].seq == seq)
                .count();
            s.segs.push((seq, i, n));
            i += n;
        }
        let raw = grow(&mut s.raw, m * c);
        for (dst, &r) in raw.chunks_exact_mut(c).zip(&s.order) {
            dst.copy_from_slice(&s.qkv[r * c..(r + 1) * c]);
        }

        // Per sequence (one recurrent view at a time, so nothing is allocated):
        // convolution and its new state, prepared rows, the replay log, and the
        // delta rule per value head.
        let (conv, prep, core) = (
            grow(&mut s.conv, m * c),
            grow(&mut s.prep, m * w),
            grow(&mut s.core, m * vw),
        );
        let k = g.conv_kernel;
        let hs = sh.head_state();
        for &(seq, r0, n) in &s.segs {
            let cache = caches
                .get_mut(seq)
                .ok_or_else(|| ModelError::InvalidBatch(format!("sequence {seq} has no cache")))?;
            let io = cache.recurrent_io(il, n)?;
            if io.geom != *g {
                return Err(ModelError::KvCacheShapeMismatch(format!(
                    "cache {seq}, layer {il}: recurrent state of another shape"
                )));
            }
            let raw_seg = &raw[r0 * c..(r0 + n) * c];
            let conv_seg = &mut conv[r0 * c..(r0 + n) * c];
            {
                let per = (ROW_BLOCK_FLOATS / c.max(1)).max(1);
                let conv_sh = SharedMut::new(conv_seg);
                let (wts, state) = (&self.conv, io.conv_src);
                pool.run(n.div_ceil(per), &|ti| {
                    let rr = ti * per..((ti + 1) * per).min(n);
                    // SAFETY: task ti alone writes rows rr of this sequence's block.
                    let dst = unsafe { conv_sh.slice(rr.start * c, rr.len() * c) };
                    conv_silu(wts, k, c, state, raw_seg, rr, dst);
                });
            }
            conv_state_after(k, c, io.conv_src, raw_seg, n, io.conv_dst);

            let prep_seg = &mut prep[r0 * w..(r0 + n) * w];
            {
                let (conv_ro, order, a_ro, b_ro) =
                    (&conv[r0 * c..(r0 + n) * c], &s.order, &s.a, &s.b);
                par_rows(pool, prep_seg, w, &|rr, p| {
                    for (t, row) in rr.zip(p.chunks_exact_mut(w)) {
                        let r = order[r0 + t];
                        prepare_row(
                            &sh,
                            &conv_ro[t * c..(t + 1) * c],
                            &a_ro[r * hv..(r + 1) * hv],
                            &b_ro[r * hv..(r + 1) * hv],
                            &self.dt_bias,
                            &self.a,
                            eps,
                            row,
                        );
                    }
                });
            }
            if let Some((log_raw, log_in)) = io.log {
                log_raw.extend_from_slice(raw_seg);
                log_in.extend_from_slice(prep_seg);
            }

            let core_sh = SharedMut::new(&mut core[r0 * vw..(r0 + n) * vw]);
            let dst_sh = SharedMut::new(io.ssm_dst);
            let (src, prep_ro) = (io.ssm_src, &*prep_seg);
            pool.run(hv, &|h| {
                // SAFETY: task h alone owns value head h of the destination state.
                let st = unsafe { dst_sh.slice(h * hs, hs) };
                let from = Some(&src[h * hs..(h + 1) * hs]);
                DELTA_SCRATCH.with(|cell| {
                    let (sc, o) = &mut *cell.borrow_mut();
                    o.resize(n * dv, 0.0);
                    let chunked = uses_chunks(n, pinned);
                    delta_rows_from(&sh, h, prep_ro, n, chunked, from, st, o, sc);
                    for (j, row) in o.chunks_exact(dv).enumerate() {
                        // SAFETY: row j, head h of this sequence: this task's alone.
                        let dst = unsafe { core_sh.slice(j * vw + h * dv, dv) };
                        dst.copy_from_slice(row);
                    }
                });
            });
        }

        // Gated RMSNorm per head (in place, gathered order), back to batch order; then
        // the output projection.
        {
            let (z_ro, order, nw) = (&s.z, &s.order, &self.norm);
            par_rows(pool, &mut s.core[..m * vw], vw, &|rr, core| {
                // silu(z) per head row, as ggml's `silu` op runs a row (vector chunks).
                let mut gate = vec![0f32; dv];
                for (t, row) in rr.zip(core.chunks_exact_mut(vw)) {
                    let r = order[t];
                    for (h, o) in row.chunks_exact_mut(dv).enumerate() {
                        rms_norm_inplace(o, nw, eps);
                        gate.copy_from_slice(&z_ro[r * vw + h * dv..r * vw + (h + 1) * dv]);
                        silu_inplace(&mut gate);
                        for (x, &g) in o.iter_mut().zip(&gate) {
                            *x *= g;
                        }
                    }
                }
            });
        }
        let normed = grow(&mut s.normed, m * vw);
        for (t, &r) in s.order.iter().enumerate() {
            normed[r * vw..(r + 1) * vw].copy_from_slice(&s.core[t * vw..(t + 1) * vw]);
        }
        matmul(pool, &self.out, &s.normed[..m * vw], m, out, mm)?;
        Ok(())
    }
}
