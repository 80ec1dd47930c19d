//! Multi-head Latent Attention (DeepSeek-V2/V3) inside the batched forward, in the
//! absorbed form llama.cpp runs (`llama_model_deepseek2::graph`, `build_attn` with
//! `v_mla`):
//!
//! 1. the query: `attn_q`, or `attn_q_a` → RMSNorm (`attn_q_a_norm`) → `attn_q_b`;
//!    per head `qk_nope` dims without RoPE, then `qk_rope` dims with it;
//! 2. the latent: `attn_kv_a_mqa` gives `kv_lora_rank` compressed dims (RMSNorm'd by
//!    `attn_kv_a_norm`) and a `qk_rope`-dim key shared by every head (RoPE'd);
//!    their concatenation is the layer's cache row (one kv head of
//!    `kv_lora_rank + qk_rope`), its first `kv_lora_rank` dims the value;
//! 3. absorption: each head's non-RoPE query goes through that head's `attn_k_b`
//!    (`kv_lora_rank × qk_nope`) into latent space, so q·k is a dot of the
//!    `[q_nope·K_b, q_pe]` row with the cache row — multi-query attention with one
//!    kv head and `n_head` query heads, run by the shared attention kernels
//!    ([`attend_group`]) with their f16 numerics;
//! 4. each head's latent output goes through its `attn_v_b` (`v_head ×
//!    kv_lora_rank`), then `attn_output`.
//!
//! As llama.cpp, the last layer computes every row and keeps the output rows only
//! after `attn_output`. The per-head products run through [`matmul_heads`], one
//! parallel section for all heads.
//!
//! The cache keeps the latent rows as keys and the first `kv_lora_rank` dims again
//! as transposed values (the layout the f16 weighted-sum kernels read), so a row
//! costs `2·kv_lora_rank + qk_rope` values where llama.cpp's K-only view costs
//! `kv_lora_rank + qk_rope`.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use fucina_gguf::GgufFile;

use super::attention::plan_attention;
use crate::config::{LayerConfig, MlaGeometry};
use crate::forward::{grow, par_rows, BatchRow, Scratch};
use crate::kv_cache::KvCache;
use crate::matmul::{matmul, matmul_heads, matmul_many, GroupedProduct};
use crate::model::Model;
use crate::ops::attention::{attend_group, AttnParams, AttnScratch};
use crate::ops::norm::rms_norm_inplace;
use crate::ops::rope::apply_rope;
use crate::parallel::SharedMut;
use crate::weights::{layer_name, load_vector, Linear};
use crate::{ModelError, Result};

/// The query projection of an MLA layer.
#[derive(Clone, Debug)]
pub enum MlaQuery {
    /// `attn_q` (`n_head·(qk_nope + qk_rope) × n_embd`; DeepSeek-V2-Lite).
    Plain(Linear),
    /// `attn_q_a` (`q_lora_rank × n_embd`), `attn_q_a_norm`, `attn_q_b`
    /// (`n_head·(qk_nope + qk_rope) × q_lora_rank`).
    LowRank {
        /// Down projection.
        a: Linear,
        /// RMSNorm weight of the compressed query.
        norm: Vec<f32>,
        /// Up projection.
        b: Linear,
    },
}

/// Weights of a Multi-head Latent Attention layer.
#[derive(Clone, Debug)]
pub struct MlaWeights {
    /// Query projection.
    pub q: MlaQuery,
    /// `attn_kv_a_mqa` (`(kv_lora_rank + qk_rope) × n_embd`).
    pub kv_a: Linear,
    /// `attn_kv_a_norm` (`kv_lora_rank`).
    pub kv_a_norm: Vec<f32>,
    /// Per head, `attn_k_b` (`kv_lora_rank × qk_nope`): non-RoPE query → latent.
    pub k_b: Vec<Linear>,
    /// Per head, `attn_v_b` (`v_head × kv_lora_rank`): latent output → value.
    pub v_b: Vec<Linear>,
    /// `attn_output` (`n_embd × n_head·v_head`).
    pub wo: Linear,
}

impl MlaWeights {
    /// Bind layer `il`'s MLA tensors; a missing or misshapen one is an error naming
    /// it.
    pub fn bind(
        file: &Arc<GgufFile>,
        il: usize,
        n_embd: usize,
        n_head: usize,
        g: &MlaGeometry,
    ) -> Result<MlaWeights> {
        let n = |s: &str| layer_name(il, s);
        let dk = g.qk_nope + g.qk_rope;
        let q = match g.q_lora_rank {
            0 => MlaQuery::Plain(Linear::bind(
                file,
                &n("attn_q.weight"),
                n_head * dk,
                n_embd,
            )?),
            r => MlaQuery::LowRank {
                a: Linear::bind(file, &n("attn_q_a.weight"), r, n_embd)?,
                norm: load_vector(file, &n("attn_q_a_norm.weight"), r)?,
                b: Linear::bind(file, &n("attn_q_b.weight"), n_head * dk, r)?,
            },
        };
        let r = g.kv_lora_rank;
        Ok(MlaWeights {
            q,
            kv_a: Linear::bind(file, &n("attn_kv_a_mqa.weight"), r + g.qk_rope, n_embd)?,
            kv_a_norm: load_vector(file, &n("attn_kv_a_norm.weight"), r)?,
            k_b: Linear::bind_stack(file, &n("attn_k_b.weight"), n_head, r, g.qk_nope)?,
            v_b: Linear::bind_stack(file, &n("attn_v_b.weight"), n_head, g.v_head, r)?,
            wo: Linear::bind(file, &n("attn_output.weight"), n_embd, n_head * g.v_head)?,
        })
    }

    /// Every matrix a decode step multiplies with in full.
    pub fn matrices(&self) -> Vec<&Linear> {
        let mut v: Vec<&Linear> = match &self.q {
            MlaQuery::Plain(q) => vec![q],
            MlaQuery::LowRank { a, b, .. } => vec![a, b],
        };
        v.push(&self.kv_a);
        v.extend(&self.k_b);
        v.extend(&self.v_b);
        v.push(&self.wo);
        v
    }
}

/// Reusable buffers of the MLA forward.
#[derive(Default, Debug)]
pub struct MlaScratch {
    qa: Vec<f32>,
    q: Vec<f32>,
    kv: Vec<f32>,
    heads_in: Vec<f32>,
    heads_out: Vec<f32>,
    qk: Vec<f32>,
    latent: Vec<f32>,
    vo: Vec<f32>,
}

thread_local! {
    static MLA_SCRATCH: RefCell<(AttnScratch, Vec<f32>)> = RefCell::new(Default::default());
}

/// `out[h][r][..] = x[r][h·stride + off..][..width]` for `n_head` heads and `m`
/// rows: each head's slice of every row, head-major (the rows of one per-head
/// product).
fn gather_heads(
    x: &[f32],
    m: usize,
    n_head: usize,
    stride: usize,
    off: usize,
    width: usize,
    out: &mut [f32],
) {
    for h in 0..n_head {
        for r in 0..m {
            let src = &x[r * n_head * stride + h * stride + off..][..width];
            out[(h * m + r) * width..][..width].copy_from_slice(src);
        }
    }
}

/// `y = x_h · w_hᵀ` for every head `h` (`x` head-major, `m` rows per head), one
/// parallel section.
fn per_head_products(
    model: &Model,
    ws: &[Linear],
    x: &[f32],
    m: usize,
    y: &mut [f32],
    s: &mut crate::matmul::MatmulScratch,
) -> Result<()> {
    let width = ws.first().map_or(0, Linear::rows);
    let mut rest = &mut y[..ws.len() * m * width];
    let mut products: Vec<GroupedProduct<'_>> = Vec::with_capacity(ws.len());
    for (h, w) in ws.iter().enumerate() {
        let (yh, tail) = std::mem::take(&mut rest).split_at_mut(m * width);
        rest = tail;
        products.push(GroupedProduct {
            w,
            rows: h * m..(h + 1) * m,
            y: yh,
        });
    }
    matmul_heads(&model.pool, x, &mut products, s)
}

/// Run layer `il`'s MLA on the normed rows in `s.xn` (`rows.len()` of them): writes
/// every row's latent into its cache and the output projection of the rows that
/// continue (all, or the output rows at the last layer, compacted) into `s.o`;
/// returns how many continue.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_layer(
    model: &Model,
    il: usize,
    lc: &LayerConfig,
    g: &MlaGeometry,
    lw: &MlaWeights,
    rows: &[BatchRow],
    caches: &mut [KvCache],
    s: &mut Scratch,
    last: bool,
    n_rot_max: usize,
) -> Result<usize> {
    let cfg = &model.config;
    let pool = &*model.pool;
    let (m, e, nh) = (rows.len(), cfg.n_embd, lc.n_head);
    let (r, rope, nope, dv) = (g.kv_lora_rank, g.qk_rope, g.qk_nope, g.v_head);
    let (dk, dc) = (nope + rope, r + rope);
    if lw.k_b.len() != nh || lw.v_b.len() != nh {
        return Err(ModelError::InvalidConfig(format!(
            "layer {il}: {} / {} absorbed head matrices for {nh} heads",
            lw.k_b.len(),
            lw.v_b.len()
        )));
    }
    let ms = &mut s.mla;
    let xn: &[f32] = &s.xn[..m * e];

    // Query and latent projections of the same rows.
    let q = grow(&mut ms.q, m * nh * dk);
    let kv = grow(&mut ms.kv, m * dc);
    match &lw.q {
        MlaQuery::Plain(wq) => {
            matmul_many(
                pool,
                &[wq, &lw.kv_a],
                xn,
                m,
                &mut [&mut *q, &mut *kv],
                &mut s.mm,
            )?;
        }
        MlaQuery::LowRank { a, norm, b } => {
            let qa = grow(&mut ms.qa, m * a.rows());
            matmul_many(
                pool,
                &[a, &lw.kv_a],
                xn,
                m,
                &mut [&mut *qa, &mut *kv],
                &mut s.mm,
            )?;
            let w = a.rows();
            par_rows(pool, qa, w, &|_, qa| {
                qa.chunks_exact_mut(w)
                    .for_each(|row| rms_norm_inplace(row, norm, cfg.rms_eps));
            });
            matmul(pool, b, qa, m, q, &mut s.mm)?;
        }
    }

    // RoPE on each head's last `rope` query dims and on the shared key; the
    // compressed dims normed. Then every row's latent goes into its cache.
    let grp = s.rope_group[il];
    let cs: &[f32] = &s.cs;
    par_rows(pool, q, nh * dk, &|rr, q| {
        for (row, qr) in rr.zip(q.chunks_exact_mut(nh * dk)) {
            let o = (grp * m + row) * n_rot_max;
            for head in qr.chunks_exact_mut(dk) {
                apply_rope(
                    lc.rope.kind,
                    &mut head[nope..],
                    rope,
                    rope,
                    &cs[o..o + rope],
                );
            }
        }
    });
    par_rows(pool, kv, dc, &|rr, kv| {
        for (row, kr) in rr.zip(kv.chunks_exact_mut(dc)) {
            let o = (grp * m + row) * n_rot_max;
            let (c, pe) = kr.split_at_mut(r);
            apply_rope(lc.rope.kind, pe, rope, rope, &cs[o..o + rope]);
            rms_norm_inplace(c, &lw.kv_a_norm, cfg.rms_eps);
        }
    });
    for (i, row) in rows.iter().enumerate() {
        let kr = &kv[i * dc..(i + 1) * dc];
        caches[row.seq].write(il, row.pos, kr, &kr[..r])?;
    }
    if last && s.out_rows.is_empty() {
        return Ok(0);
    }

    // Absorb K_b: per head, q_nope (nope) → latent (r); the attention query of a
    // head is [q_nope·K_bᵀ, q_pe].
    let heads_in = grow(&mut ms.heads_in, nh * m * nope.max(r));
    gather_heads(q, m, nh, dk, 0, nope, heads_in);
    let heads_out = grow(&mut ms.heads_out, nh * m * r.max(dv));
    per_head_products(
        model,
        &lw.k_b,
        &heads_in[..nh * m * nope],
        m,
        heads_out,
        &mut s.mm,
    )?;
    let qk = grow(&mut ms.qk, m * nh * dc);
    for row in 0..m {
        for h in 0..nh {
            let dst = &mut qk[(row * nh + h) * dc..][..dc];
            dst[..r].copy_from_slice(&heads_out[(h * m + row) * r..][..r]);
            dst[r..].copy_from_slice(&q[(row * nh + h) * dk + nope..][..rope]);
        }
    }

    // Multi-query attention over the latent cache, every row (llama.cpp drops rows
    // only after the output projection).
    let latent = grow(&mut ms.latent, m * nh * r);
    let params = AttnParams {
        group: nh,
        head_dim_k: dc,
        head_dim_v: r,
        window: None,
        kq_scale: cfg.kq_scale,
        softcap: None,
        decode_order: m == 1 || s.mm.pinned(),
    };
    plan_attention(
        rows,
        &s.all_rows,
        1,
        nh,
        None,
        pool.n_threads(),
        &mut s.attn_order,
        &mut s.attn_rows,
        &mut s.attn_tasks,
    );
    {
        let caches_ro: &[KvCache] = caches;
        let qk_ro: &[f32] = qk;
        let out = SharedMut::new(latent);
        let err: Mutex<Option<ModelError>> = Mutex::new(None);
        let (order, qrows, tasks) = (&s.attn_order, &s.attn_rows, &s.attn_tasks);
        let qd = nh * dc;
        pool.run(tasks.len(), &|t| {
            let task = tasks[t];
            let (r0, r1) = task.rows;
            let seq = rows[qrows[r0].q_row].seq;
            let gh = task.h1 - task.h0;
            let res = MLA_SCRATCH.with(|sc| {
                let (sc, buf) = &mut *sc.borrow_mut();
                buf.resize((r1 - r0) * gh * r, 0.0);
                attend_group(
                    &caches_ro[seq],
                    il,
                    0,
                    task.h0..task.h1,
                    qk_ro,
                    qd,
                    &qrows[r0..r1],
                    &params,
                    buf,
                    sc,
                )?;
                for (k, src) in buf.chunks_exact(gh * r).enumerate() {
                    let i = order[r0 + k].1;
                    // SAFETY: row i appears in one task row range only (order is a
                    // permutation) and heads h0..h1 of it belong to this task alone,
                    // so the slices never overlap.
                    let dst = unsafe { out.slice(i * nh * r + task.h0 * r, gh * r) };
                    dst.copy_from_slice(src);
                }
                Ok(())
            });
            if let Err(e) = res {
                *err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
        });
        if let Some(e) = err.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
    }

    // Decompress with V_b per head, then the output projection of every row.
    gather_heads(latent, m, nh, r, 0, r, heads_in);
    per_head_products(
        model,
        &lw.v_b,
        &heads_in[..nh * m * r],
        m,
        heads_out,
        &mut s.mm,
    )?;
    let vo = grow(&mut ms.vo, m * nh * dv);
    for row in 0..m {
        for h in 0..nh {
            vo[(row * nh + h) * dv..][..dv].copy_from_slice(&heads_out[(h * m + row) * dv..][..dv]);
        }
    }
    let o = grow(&mut s.o, m * e);
    matmul(pool, &lw.wo, vo, m, o, &mut s.mm)?;
    if !last {
        return Ok(m);
    }
    for (i, &row) in s.out_rows.iter().enumerate() {
        s.o.copy_within(row * e..(row + 1) * e, i * e);
    }
    Ok(s.out_rows.len())
}
