//! The batched forward: rows of (sequence, position, token) in, logits of the
//! flagged rows out, K/V appended to each sequence's cache.
//!
//! One call runs prefill (many rows of one sequence), decode (one row) or a mix of
//! sequences. Every op is row-local except attention, which reads only the row's
//! own sequence up to its own position. In pinned mode ([`Scratch::set_pinned`]) a
//! row's logits do not depend on which other rows share the batch: batched ==
//! single-row, bitwise (the property the speculative decoder relies on); by default
//! Q4_K matmuls follow llama.cpp's prompt-batch arithmetic, which depends on the
//! row's place in the batch (see [`crate::matmul`]). Buffers live in a caller-owned
//! [`Scratch`] and only grow, so steady-state decode allocates nothing.

use std::cell::RefCell;
use std::sync::Mutex;

use crate::ffn::FfnScratch;
use crate::kv_cache::KvCache;
use crate::matmul::{matmul, matmul_many, matmul_split, MatmulScratch};
use crate::model::Model;
use crate::ops::attention::{attend_group, AttnParams, AttnScratch, QueryRow};
use crate::ops::norm::{rms_norm, rms_norm_inplace};
use crate::ops::rope::{apply_rope, rope_cache};
use crate::parallel::{SharedMut, ThreadPool};
use crate::{ModelError, Result};

/// One input row of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRow {
    /// Index of the sequence's cache in the `caches` slice.
    pub seq: usize,
    /// Position of the token in its sequence; must continue the cache (the first
    /// row of a sequence is at `cache.len()`, the next at `+1`, ...).
    pub pos: usize,
    /// Token id.
    pub token: u32,
    /// Whether to return this row's logits.
    pub logits: bool,
}

impl BatchRow {
    /// Rows for `tokens` of sequence `seq` starting at `start`, logits for the last
    /// row only (`all_logits`: for every row).
    pub fn sequence(seq: usize, start: usize, tokens: &[u32], all_logits: bool) -> Vec<BatchRow> {
        let n = tokens.len();
        tokens
            .iter()
            .enumerate()
            .map(|(i, &token)| BatchRow {
                seq,
                pos: start + i,
                token,
                logits: all_logits || i + 1 == n,
            })
            .collect()
    }
}

/// Reusable buffers of the forward (one per concurrent caller).
#[derive(Default, Debug)]
pub struct Scratch {
    x: Vec<f32>,
    xn: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    o: Vec<f32>,
    ffn: FfnScratch,
    cs: Vec<f32>,
    logits: Vec<f32>,
    mm: MatmulScratch,
    out_rows: Vec<usize>,
    all_rows: Vec<usize>,
    rope_group: Vec<usize>,
    rope_reps: Vec<usize>,
    counts: Vec<usize>,
    attn_order: Vec<(usize, usize)>,
    attn_rows: Vec<QueryRow>,
    attn_tasks: Vec<AttnTask>,
    /// Return the flagged rows' final-normed hidden states instead of their logits.
    hidden: bool,
}

/// One attention task: the query heads `h0..h1` (within the GQA group) of kv head
/// `kvh`, for the rows `rows` of `Scratch::attn_rows` (all of one sequence).
#[derive(Clone, Copy, Debug)]
struct AttnTask {
    kvh: usize,
    h0: usize,
    h1: usize,
    rows: (usize, usize),
}

/// Budget of one task's score (and probability) buffer, in floats: the number of
/// rows per task shrinks as the context grows so both stay in L2.
const ATTN_TASK_FLOATS: usize = 1 << 16;
/// Most rows per attention task.
const ATTN_MAX_ROWS: usize = 16;

impl Scratch {
    /// Pinned numerics: every matmul row in the single-row order, so a batch of rows
    /// gives bitwise the logits of single-row forwards (speculative verify). Off (the
    /// default): llama.cpp's prompt-batch order for Q4_K (see [`crate::matmul`]).
    pub fn set_pinned(&mut self, pinned: bool) {
        self.mm.set_pinned(pinned);
    }

    /// Whether pinned numerics are on.
    pub fn pinned(&self) -> bool {
        self.mm.pinned()
    }

    /// Hidden-state output: the forward returns the flagged rows' hidden states after
    /// the final norm (`n_flagged × n_embd`) instead of their logits, skipping the
    /// output head (embeddings). Off by default.
    pub fn set_hidden_output(&mut self, hidden: bool) {
        self.hidden = hidden;
    }
}

pub(crate) fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

pub(crate) fn add_bias(y: &mut [f32], bias: Option<&Vec<f32>>, width: usize) {
    if let Some(b) = bias {
        for row in y.chunks_exact_mut(width) {
            for (v, bb) in row.iter_mut().zip(b) {
                *v += bb;
            }
        }
    }
}

/// Floats per task of the row-local ops (norms, RoPE, activations, residual adds):
/// enough work to outweigh a task hand-off, so decode rows run on the caller.
const ROW_TASK_FLOATS: usize = 16 * 1024;

/// `f(rows, chunk)` for consecutive row ranges of `buf` (rows of `width` floats),
/// `chunk` being those rows, spread over the pool when there is enough work. Each
/// row is computed by exactly the code it would run serially, so results do not
/// depend on the split.
pub(crate) fn par_rows(
    pool: &ThreadPool,
    buf: &mut [f32],
    width: usize,
    f: &(dyn Fn(std::ops::Range<usize>, &mut [f32]) + Sync),
) {
    let m = buf.len() / width.max(1);
    let per = (ROW_TASK_FLOATS / width.max(1)).max(1);
    let n_tasks = m.div_ceil(per);
    if n_tasks <= 1 {
        f(0..m, buf);
        return;
    }
    let sh = SharedMut::new(buf);
    pool.run(n_tasks, &|t| {
        let rows = t * per..((t + 1) * per).min(m);
        // SAFETY: task t alone owns rows t·per..(t+1)·per of the buffer.
        let chunk = unsafe { sh.slice(rows.start * width, rows.len() * width) };
        f(rows, chunk);
    });
}

/// `x += norm(o)` (`norm` the optional post-norm), rows in parallel.
fn residual(
    pool: &ThreadPool,
    x: &mut [f32],
    o: &mut [f32],
    e: usize,
    w: Option<&[f32]>,
    eps: f32,
) {
    let o_sh = SharedMut::new(o);
    par_rows(pool, x, e, &|rr, x| {
        // SAFETY: the rows rr of `o` are touched by this task only (par_rows hands
        // out disjoint row ranges), and `o` outlives the call.
        let o = unsafe { o_sh.slice(rr.start * e, rr.len() * e) };
        if let Some(w) = w {
            o.chunks_exact_mut(e)
                .for_each(|r| rms_norm_inplace(r, w, eps));
        }
        for (xv, ov) in x.iter_mut().zip(o.iter()) {
            *xv += ov;
        }
    });
}

thread_local! {
    static ATTN_SCRATCH: RefCell<(AttnScratch, Vec<f32>)> = RefCell::new(Default::default());
}

/// Split the attention of `act_rows` into tasks: rows grouped by sequence (rows
/// of one sequence are in position order), in blocks of consecutive rows, per kv
/// head; when that gives fewer tasks than threads (decode), also split each GQA
/// group's query heads. Heaviest blocks (latest positions) come first.
#[allow(clippy::too_many_arguments)]
fn plan_attention(
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

impl Model {
    /// Run `rows` through the model, appending their K/V to `caches[row.seq]`, and
    /// return the logits of the rows flagged `logits`, in row order
    /// (`n_flagged × n_vocab`, row-major; `n_flagged × n_embd` hidden states with
    /// [`Scratch::set_hidden_output`]). On error no cache length changes.
    pub fn forward<'s>(
        &self,
        rows: &[BatchRow],
        caches: &mut [KvCache],
        scratch: &'s mut Scratch,
    ) -> Result<&'s [f32]> {
        self.validate(rows, caches)?;
        let cfg = &self.config;
        let (m, e) = (rows.len(), cfg.n_embd);
        let s = scratch;

        s.out_rows.clear();
        s.out_rows.extend(
            rows.iter()
                .enumerate()
                .filter(|(_, r)| r.logits)
                .map(|(i, _)| i),
        );
        s.all_rows.clear();
        s.all_rows.extend(0..m);

        // Embeddings.
        let x = grow(&mut s.x, m * e);
        for (r, row) in rows.iter().enumerate() {
            self.tok_embd
                .dequantize_row(row.token as usize, &mut x[r * e..(r + 1) * e])?;
        }
        if let Some(scale) = cfg.embed_scale {
            x.iter_mut().for_each(|v| *v *= scale);
        }

        // RoPE cos/sin per distinct layer RoPE config, per row.
        s.rope_group.clear();
        s.rope_reps.clear(); // representative layer of each group
        for (il, l) in cfg.layers.iter().enumerate() {
            let g = match s
                .rope_reps
                .iter()
                .position(|&r| cfg.layers[r].rope == l.rope)
            {
                Some(g) => g,
                None => {
                    s.rope_reps.push(il);
                    s.rope_reps.len() - 1
                }
            };
            s.rope_group.push(g);
        }
        let groups = &s.rope_reps;
        let n_rot_max = cfg.layers.iter().map(|l| l.rope.n_rot).max().unwrap_or(0);
        let cs = grow(&mut s.cs, groups.len() * m * n_rot_max);
        if n_rot_max > 0 {
            par_rows(&self.pool, cs, n_rot_max, &|gr, cs| {
                for (gr, c) in gr.zip(cs.chunks_exact_mut(n_rot_max)) {
                    let (g, r) = (gr / m, gr % m);
                    let il = groups[g];
                    let rope = &cfg.layers[il].rope;
                    let ff = self.layers[il].rope_freqs.as_deref().map(|v| v.as_slice());
                    rope_cache(rope, ff, rows[r].pos as i64, &mut c[..rope.n_rot]);
                }
            });
        }

        let mut m_cur = m;
        for (il, (lc, lw)) in cfg.layers.iter().zip(&self.layers).enumerate() {
            let last = il + 1 == cfg.n_layer;
            let (qd, kd, vd, ad) = (lc.q_dim(), lc.k_dim(), lc.v_dim(), lc.attn_out_dim());

            // Attention block: norm, q/k/v, q/k norms, RoPE, cache write.
            let xn = grow(&mut s.xn, m * e);
            let x_ro: &[f32] = &s.x;
            par_rows(&self.pool, xn, e, &|rr, xn| {
                for (r, o) in rr.zip(xn.chunks_exact_mut(e)) {
                    rms_norm(&x_ro[r * e..(r + 1) * e], &lw.attn_norm, cfg.rms_eps, o);
                }
            });
            let (q, k, v) = (
                grow(&mut s.q, m * qd),
                grow(&mut s.k, m * kd),
                grow(&mut s.v, m * vd),
            );
            matmul_many(
                &self.pool,
                &[&lw.wq, &lw.wk, &lw.wv],
                xn,
                m,
                &mut [&mut q[..], &mut k[..], &mut v[..]],
                &mut s.mm,
            )?;
            add_bias(q, lw.bq.as_ref(), qd);
            add_bias(k, lw.bk.as_ref(), kd);
            add_bias(v, lw.bv.as_ref(), vd);
            let g = s.rope_group[il];
            let (cs_ro, n_rot) = (&s.cs, lc.rope.n_rot);
            let hdk = lc.head_dim_k;
            par_rows(&self.pool, q, qd, &|rr, q| {
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
            par_rows(&self.pool, k, kd, &|rr, k| {
                for (r, kr) in rr.zip(k.chunks_exact_mut(kd)) {
                    if let Some(w) = &lw.k_norm {
                        kr.chunks_exact_mut(hdk)
                            .for_each(|h| rms_norm_inplace(h, w, cfg.rms_eps));
                    }
                    let o = (g * m + r) * n_rot_max;
                    apply_rope(lc.rope.kind, kr, hdk, n_rot, &cs_ro[o..o + n_rot]);
                }
            });
            for (r, row) in rows.iter().enumerate() {
                let kr = &k[r * kd..(r + 1) * kd];
                caches[row.seq].write(il, row.pos, kr, &v[r * vd..(r + 1) * vd])?;
            }

            // Attention for the rows that continue (all, or the output rows at the last layer).
            let act_rows: &[usize] = if last { &s.out_rows } else { &s.all_rows };
            let n_act = act_rows.len();
            if n_act == 0 {
                break;
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
                self.pool.n_threads(),
                &mut s.attn_order,
                &mut s.attn_rows,
                &mut s.attn_tasks,
            );
            let (order, qrows, tasks) = (&s.attn_order, &s.attn_rows, &s.attn_tasks);
            let hdv = lc.head_dim_v;
            self.pool.run(tasks.len(), &|t| {
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
                        il,
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

            // Keep only the continuing rows of the residual stream.
            if last && n_act != m_cur {
                for (i, &r) in s.out_rows.iter().enumerate() {
                    s.x.copy_within(r * e..(r + 1) * e, i * e);
                }
            }
            m_cur = n_act;
            let mc = m_cur;

            let o = grow(&mut s.o, mc * e);
            // llama.cpp projects all m rows before dropping the non-output ones at the
            // last layer: keep each kept row's place in its GEMM / GEMV split.
            let gemm_rows = if last {
                s.out_rows.iter().filter(|&&r| r < m - m % 4).count()
            } else {
                mc - mc % 4
            };
            let attn_rows = &s.attn[..mc * ad];
            matmul_split(&self.pool, &lw.wo, attn_rows, mc, gemm_rows, o, &mut s.mm)?;
            add_bias(o, lw.bo.as_ref(), e);
            residual(
                &self.pool,
                &mut s.x[..mc * e],
                o,
                e,
                lw.post_attn_norm.as_deref(),
                cfg.rms_eps,
            );

            // FFN block.
            let xn = grow(&mut s.xn, mc * e);
            let x_ro: &[f32] = &s.x;
            par_rows(&self.pool, xn, e, &|rr, xn| {
                for (r, o) in rr.zip(xn.chunks_exact_mut(e)) {
                    rms_norm(&x_ro[r * e..(r + 1) * e], &lw.ffn_norm, cfg.rms_eps, o);
                }
            });
            let o = grow(&mut s.o, mc * e);
            lw.ffn
                .forward(&self.pool, cfg.activation, xn, mc, o, &mut s.ffn, &mut s.mm)?;
            residual(
                &self.pool,
                &mut s.x[..mc * e],
                o,
                e,
                lw.post_ffn_norm.as_deref(),
                cfg.rms_eps,
            );
        }

        // Publish the new positions.
        s.counts.clear();
        s.counts.resize(caches.len(), 0);
        for r in rows {
            s.counts[r.seq] += 1;
        }
        for (c, &n) in caches.iter_mut().zip(&s.counts) {
            c.advance(n)?;
        }

        // Output head for the flagged rows (already compacted at the last layer).
        let n_out = s.out_rows.len();
        let vsz = cfg.n_vocab;
        if n_out == 0 {
            return Ok(&s.logits[..0]);
        }
        let xn = grow(&mut s.xn, n_out * e);
        let x_ro: &[f32] = &s.x;
        par_rows(&self.pool, xn, e, &|rr, xn| {
            for (r, o) in rr.zip(xn.chunks_exact_mut(e)) {
                rms_norm(&x_ro[r * e..(r + 1) * e], &self.output_norm, cfg.rms_eps, o);
            }
        });
        if s.hidden {
            return Ok(&s.xn[..n_out * e]);
        }
        let logits = grow(&mut s.logits, n_out * vsz);
        matmul(&self.pool, &self.output, xn, n_out, logits, &mut s.mm)?;
        add_bias(logits, self.output_bias.as_ref(), vsz);
        if let Some(c) = cfg.final_softcap {
            par_rows(&self.pool, logits, vsz, &|_, l| {
                l.iter_mut().for_each(|v| *v = (*v / c).tanh() * c);
            });
        }
        Ok(&s.logits[..n_out * vsz])
    }

    fn validate(&self, rows: &[BatchRow], caches: &[KvCache]) -> Result<()> {
        if rows.is_empty() {
            return Err(ModelError::InvalidBatch("empty batch".into()));
        }
        let cfg = &self.config;
        let mut next: Vec<Option<usize>> = vec![None; caches.len()];
        for (i, r) in rows.iter().enumerate() {
            let cache = caches.get(r.seq).ok_or_else(|| {
                ModelError::InvalidBatch(format!(
                    "row {i}: sequence {} but {} caches",
                    r.seq,
                    caches.len()
                ))
            })?;
            if r.token as usize >= cfg.n_vocab {
                return Err(ModelError::InvalidBatch(format!(
                    "row {i}: token {} outside the vocabulary of {}",
                    r.token, cfg.n_vocab
                )));
            }
            let want = next[r.seq].unwrap_or(cache.len());
            if r.pos != want {
                return Err(ModelError::InvalidBatch(format!(
                    "row {i}: sequence {} continues at position {want}, row says {}",
                    r.seq, r.pos
                )));
            }
            if r.pos >= cache.capacity() {
                return Err(ModelError::KvCacheOverflow {
                    needed: r.pos + 1,
                    capacity: cache.capacity(),
                });
            }
            next[r.seq] = Some(want + 1);
        }
        for (si, c) in caches.iter().enumerate() {
            if next[si].is_none() {
                continue;
            }
            let ok = c.n_layers() == cfg.n_layer
                && cfg.layers.iter().enumerate().all(|(il, l)| {
                    let g = c.layer(il).geometry();
                    g.n_head_kv == l.n_head_kv
                        && g.head_dim_k == l.head_dim_k
                        && g.head_dim_v == l.head_dim_v
                });
            if !ok {
                return Err(ModelError::KvCacheShapeMismatch(format!(
                    "cache {si} was not made for this model"
                )));
            }
        }
        Ok(())
    }
}
