//! The softmax-attention mixer of one layer inside the batched forward: q/k/v
//! projections, per-head q/k norms, RoPE, the K/V write into each row's cache, the
//! attention of the rows that continue (all, or the output rows at the last layer),
//! the optional per-head output gate (Qwen3.5's `sigmoid(gate)`) and the output
//! projection into `Scratch::o`.

use std::cell::RefCell;
use std::sync::Mutex;

use super::AttnWeights;
use crate::config::{LayerConfig, Mixer};
use crate::forward::{add_bias, grow, par_rows, BatchRow, Scratch};
use crate::kv_cache::KvCache;
use crate::matmul::{matmul_many, matmul_split};
use crate::model::Model;
use crate::ops::attention::{attend_group, AttnParams, AttnScratch, QueryRow};
use crate::ops::deltanet::sigmoid;
use crate::ops::norm::{rms_norm_inplace, rms_norm_unit_inplace};
use crate::ops::rope::apply_rope;
use crate::parallel::SharedMut;
use crate::weights::Linear;
use crate::{ModelError, Result};

/// One attention task: the query heads `h0..h1` (within the GQA group) of kv head
/// `kvh`, for the rows `rows` of `Scratch::attn_rows` (all of one sequence).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttnTask {
    pub(crate) kvh: usize,
    pub(crate) h0: usize,
    pub(crate) h1: usize,
    pub(crate) rows: (usize, usize),
}

/// Budget of one task's score (and probability) buffer, in floats: the number of
/// rows per task shrinks as the context grows so both stay in L2.
const ATTN_TASK_FLOATS: usize = 1 << 16;
/// Most rows per attention task.
const ATTN_MAX_ROWS: usize = 16;

thread_local! {
    static ATTN_SCRATCH: RefCell<(AttnScratch, Vec<f32>)> = RefCell::new(Default::default());
}

/// Split the attention of `act_rows` into tasks: rows grouped by sequence (rows
/// of one sequence are in position order), in blocks of consecutive rows, per kv
/// head; when that gives fewer tasks than threads (decode), also split each GQA
/// group's query heads. Heaviest blocks (latest positions) come first.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_attention(
    rows: &[BatchRow],
    act_rows: &[usize],
    n_head_kv: usize,
    group: usize,
    window: Option<usize>,
    n_threads: usize,
    order: &mut Vec<(usize, usize)>,
    qrows: &mut Vec<QueryRow>,
    tasks: &mut Vec<AttnTask>,
) {
    order.clear();
    order.extend(act_rows.iter().enumerate().map(|(i, &r)| (rows[r].seq, i)));
    order.sort_unstable();
    qrows.clear();
    qrows.extend(order.iter().map(|&(_, i)| QueryRow {
        q_row: act_rows[i],
        pos: rows[act_rows[i]].pos,
    }));
    tasks.clear();
    let want_blocks = (2 * n_threads).div_ceil(n_head_kv.max(1)).max(1);
    let mut a = 0;
    while a < order.len() {
        let seq = order[a].0;
        let b = a + order[a..].iter().take_while(|o| o.0 == seq).count();
        let first = crate::ops::attention::window_start(qrows[a].pos, window);
        let span = qrows[b - 1].pos + 1 - first;
        let by_mem = (ATTN_TASK_FLOATS / (group.max(1) * span)).clamp(1, ATTN_MAX_ROWS);
        let rb = (b - a).div_ceil(want_blocks).clamp(1, by_mem);
        let mut e = b;
        while e > a {
            let s0 = e.saturating_sub(rb).max(a);
            for kvh in 0..n_head_kv {
                tasks.push(AttnTask {
                    kvh,
                    h0: 0,
                    h1: group,
                    rows: (s0, e),
                });
            }
            e = s0;
        }
        a = b;
    }
    if tasks.len() < n_threads && group > 1 {
        let parts = n_threads.div_ceil(tasks.len().max(1)).min(group);
        let whole = std::mem::take(tasks);
        for t in whole {
            for k in 0..parts {
                let (h0, h1) = (group * k / parts, group * (k + 1) / parts);
                tasks.push(AttnTask { h0, h1, ..t });
            }
        }
    }
}

/// Split `[q, gate]`-per-head rows (`m × 2·q_dim`) into queries and gates.
fn split_gate(qg: &[f32], q: &mut [f32], gate: &mut [f32], hd: usize) {
    for ((src, q), g) in qg
        .chunks_exact(2 * hd)
        .zip(q.chunks_exact_mut(hd))
        .zip(gate.chunks_exact_mut(hd))
    {
        q.copy_from_slice(&src[..hd]);
        g.copy_from_slice(&src[hd..]);
    }
}

/// Run layer `il`'s attention on the normed rows in `s.xn` (`rows.len()` of them):
/// writes every row's K/V into its cache and the output projection of the rows
/// that continue into `s.o`; returns how many continue (0: the last layer with no
/// output row, nothing computed past the cache write).
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_layer(
    model: &Model,
    il: usize,
    lc: &LayerConfig,
    lw: &AttnWeights,
    rows: &[BatchRow],
    caches: &mut [KvCache],
    s: &mut Scratch,
    last: bool,
    n_rot_max: usize,
) -> Result<usize> {
    let cfg = &model.config;
    let pool = &*model.pool;
    let (m, e) = (rows.len(), cfg.n_embd);
    let (qd, kd, vd, ad) = (lc.q_dim(), lc.k_dim(), lc.v_dim(), lc.attn_out_dim());
    let gated = matches!(lc.mixer, Mixer::Attention { gated: true });
    let xn: &[f32] = &s.xn[..m * e];
    // A shared-KV layer projects queries only; without `attn_v` the values are the
    // keys (before the key norm and RoPE).
    let own_kv = lc.kv_source.is_none();
    let wk = match (own_kv, lw.wk.as_ref()) {
        (true, None) => {
            return Err(ModelError::InvalidConfig(format!(
                "layer {il}: no key projection"
            )))
        }
        (_, wk) => wk,
    };
    let v_is_k = own_kv && lw.wv.is_none();
    if v_is_k && kd != vd {
        return Err(ModelError::InvalidConfig(format!(
            "layer {il}: values taken from keys of another width ({kd} / {vd})"
        )));
    }
    {
        let qp = lc.q_proj_dim();
        let q_out = if gated {
            grow(&mut s.qg, m * qp)
        } else {
            grow(&mut s.q, m * qp)
        };
        let k_out = grow(&mut s.k, if own_kv { m * kd } else { 0 });
        let v_out = grow(&mut s.v, if own_kv && !v_is_k { m * vd } else { 0 });
        let n_w = 1 + usize::from(own_kv) + usize::from(own_kv && !v_is_k);
        let ws: [&Linear; 3] = [
            &lw.wq,
            wk.unwrap_or(&lw.wq),
            lw.wv.as_ref().unwrap_or(&lw.wq),
        ];
        let mut outs: [&mut [f32]; 3] = [q_out, k_out, v_out];
        matmul_many(pool, &ws[..n_w], xn, m, &mut outs[..n_w], &mut s.mm)?;
    }
    if gated {
        let (q, gate) = (grow(&mut s.q, m * qd), grow(&mut s.gate, m * qd));
        split_gate(&s.qg[..m * 2 * qd], q, gate, lc.head_dim_k);
    }
    let q = &mut s.q[..m * qd];
    add_bias(q, lw.bq.as_ref(), qd);
    let g = s.rope_group[il];
    let (cs_ro, n_rot) = (&s.cs, lc.rope.n_rot);
    let hdk = lc.head_dim_k;
    par_rows(pool, q, qd, &|rr, q| {
        for (r, qr) in rr.zip(q.chunks_exact_mut(qd)) {
            if let Some(w) = &lw.q_norm {
                qr.chunks_exact_mut(hdk)
                    .for_each(|h| rms_norm_inplace(h, w, cfg.rms_eps));
            }
            let o = (g * m + r) * n_rot_max;
            apply_rope(lc.rope.kind, qr, hdk, n_rot, &cs_ro[o..o + n_rot]);
            if cfg.q_scale != 1.0 {
                qr.iter_mut().for_each(|x| *x *= cfg.q_scale);
            }
        }
    });
    if own_kv {
        let (k, v) = (&mut s.k[..m * kd], grow(&mut s.v, m * vd));
        if v_is_k {
            v.copy_from_slice(k);
        }
        add_bias(k, lw.bk.as_ref(), kd);
        add_bias(v, lw.bv.as_ref(), vd);
        par_rows(pool, k, kd, &|rr, k| {
            for (r, kr) in rr.zip(k.chunks_exact_mut(kd)) {
                if let Some(w) = &lw.k_norm {
                    kr.chunks_exact_mut(hdk)
                        .for_each(|h| rms_norm_inplace(h, w, cfg.rms_eps));
                }
                let o = (g * m + r) * n_rot_max;
                apply_rope(lc.rope.kind, kr, hdk, n_rot, &cs_ro[o..o + n_rot]);
            }
        });
        if cfg.v_norm {
            let hdv = lc.head_dim_v;
            par_rows(pool, v, vd, &|_, v| {
                v.chunks_exact_mut(hdv)
                    .for_each(|h| rms_norm_unit_inplace(h, cfg.rms_eps));
            });
        }
        crate::forward::trace_layer("Qcur_pos", il, q, qd);
        crate::forward::trace_layer("Kcur_pos", il, k, kd);
        crate::forward::trace_layer("Vcur_normed", il, v, vd);
        for (r, row) in rows.iter().enumerate() {
            let kr = &k[r * kd..(r + 1) * kd];
            caches[row.seq].write(il, row.pos, kr, &v[r * vd..(r + 1) * vd])?;
        }
    }
    let il_kv = lc.kv_source.unwrap_or(il);

    // Attention for the rows that continue (all, or the output rows at the last layer).
    let act_rows: &[usize] = if last { &s.out_rows } else { &s.all_rows };
    let n_act = act_rows.len();
    if n_act == 0 {
        return Ok(0);
    }
    let attn = grow(&mut s.attn, n_act * ad);
    let params = AttnParams {
        group: lc.n_head / lc.n_head_kv,
        head_dim_k: lc.head_dim_k,
        head_dim_v: lc.head_dim_v,
        window: lc.sliding_window,
        kq_scale: cfg.kq_scale,
        softcap: cfg.attn_softcap,
        // llama.cpp's f16 attention order depends on the batch: tinyBLAS
        // for >= 2 tokens, ggml_vec_dot_f16 for one (pinned: always the latter).
        decode_order: m == 1 || s.mm.pinned(),
    };
    let caches_ro: &[KvCache] = caches;
    let q_ro: &[f32] = q;
    let out = SharedMut::new(attn);
    let err: Mutex<Option<ModelError>> = Mutex::new(None);
    plan_attention(
        rows,
        act_rows,
        lc.n_head_kv,
        params.group,
        lc.sliding_window,
        pool.n_threads(),
        &mut s.attn_order,
        &mut s.attn_rows,
        &mut s.attn_tasks,
    );
    let (order, qrows, tasks) = (&s.attn_order, &s.attn_rows, &s.attn_tasks);
    let hdv = lc.head_dim_v;
    pool.run(tasks.len(), &|t| {
        let task = tasks[t];
        let (r0, r1) = task.rows;
        let seq = rows[qrows[r0].q_row].seq;
        let gh = task.h1 - task.h0;
        let h_abs = task.kvh * params.group + task.h0;
        let res = ATTN_SCRATCH.with(|sc| {
            let (sc, buf) = &mut *sc.borrow_mut();
            buf.resize((r1 - r0) * gh * hdv, 0.0);
            attend_group(
                &caches_ro[seq],
                il_kv,
                task.kvh,
                h_abs..h_abs + gh,
                q_ro,
                qd,
                &qrows[r0..r1],
                &params,
                buf,
                sc,
            )?;
            for (k, src) in buf.chunks_exact(gh * hdv).enumerate() {
                let i = order[r0 + k].1;
                // SAFETY: compact row i appears in one task row range only
                // (order is a permutation), and heads h_abs..h_abs+gh of it
                // belong to this task alone (tasks of a row block split
                // the heads disjointly), so the slices never overlap.
                let dst = unsafe { out.slice(i * ad + h_abs * hdv, gh * hdv) };
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
    if gated {
        // Gated layers have head_dim_v == head_dim_k (checked at load), so the
        // gate lines up with the attention output element for element.
        let gate_ro: &[f32] = &s.gate;
        let act_ro: &[usize] = act_rows;
        par_rows(pool, attn, ad, &|rr, a| {
            for (i, row) in rr.zip(a.chunks_exact_mut(ad)) {
                let gr = &gate_ro[act_ro[i] * qd..act_ro[i] * qd + ad];
                for (x, &gv) in row.iter_mut().zip(gr) {
                    *x *= sigmoid(gv);
                }
            }
        });
    }

    crate::forward::trace_layer("kqv_out", il, &s.attn[..n_act * ad], ad);
    let o = grow(&mut s.o, n_act * e);
    // llama.cpp projects all m rows before dropping the non-output ones at the
    // last layer: keep each kept row's place in its GEMM / GEMV split.
    let gemm_rows = if last {
        s.out_rows.iter().filter(|&&r| r < m - m % 4).count()
    } else {
        n_act - n_act % 4
    };
    let attn_rows = &s.attn[..n_act * ad];
    matmul_split(pool, &lw.wo, attn_rows, n_act, gemm_rows, o, &mut s.mm)?;
    add_bias(o, lw.bo.as_ref(), e);
    Ok(n_act)
}
