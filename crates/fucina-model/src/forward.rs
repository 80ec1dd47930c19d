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

use crate::config::Mixer;
use crate::ffn::FfnScratch;
use crate::kv_cache::KvCache;
use crate::matmul::{matmul, MatmulScratch};
use crate::mixer::attention::{self, AttnTask};
use crate::mixer::{mla, DeltaNetScratch, MixerWeights, MlaScratch};
use crate::model::Model;
use crate::ops::attention::QueryRow;
use crate::ops::norm::{rms_norm, rms_norm_inplace};
use crate::ops::rope::rope_cache;
use crate::ops::softmax::soft_cap;
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
    pub(crate) x: Vec<f32>,
    pub(crate) xn: Vec<f32>,
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) attn: Vec<f32>,
    pub(crate) o: Vec<f32>,
    pub(crate) ffn: FfnScratch,
    pub(crate) cs: Vec<f32>,
    pub(crate) logits: Vec<f32>,
    pub(crate) mm: MatmulScratch,
    pub(crate) out_rows: Vec<usize>,
    pub(crate) all_rows: Vec<usize>,
    pub(crate) rope_group: Vec<usize>,
    pub(crate) rope_reps: Vec<usize>,
    pub(crate) counts: Vec<usize>,
    pub(crate) attn_order: Vec<(usize, usize)>,
    pub(crate) attn_rows: Vec<QueryRow>,
    pub(crate) attn_tasks: Vec<AttnTask>,
    pub(crate) qg: Vec<f32>,
    pub(crate) gate: Vec<f32>,
    pub(crate) delta: DeltaNetScratch,
    pub(crate) mla: MlaScratch,
    pub(crate) ple_in: Vec<f32>,
    pub(crate) ple_tok: Vec<f32>,
    pub(crate) ple_g: Vec<f32>,
    pub(crate) ple_p: Vec<f32>,
    /// Return the flagged rows' final-normed hidden states instead of their logits.
    pub(crate) hidden: bool,
    /// Return only each flagged row's greedy pick and this many top ids
    /// ([`Scratch::set_greedy_output`]).
    pub(crate) greedy: Option<usize>,
    /// Top values that must be distinct in greedy mode ([`Scratch::set_distinct_top`]).
    pub(crate) distinct: usize,
    /// The greedy picks of the last forward in greedy mode.
    pub(crate) picks: crate::greedy::Picks,
    /// Also keep every row's final-normed hidden state ([`Scratch::captured_hidden`]).
    pub(crate) capture: bool,
    /// The captured hidden states (`m × n_embd` of the last forward).
    pub(crate) hidden_all: Vec<f32>,
    /// Floats of `hidden_all` the last forward captured.
    pub(crate) captured_len: usize,
    /// The multi-token-prediction head's buffers ([`crate::mtp`]).
    pub(crate) mtp: crate::mtp::MtpScratch,
}

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

    /// Greedy output: with `Some(k)` the forward returns no logits (an empty slice) and
    /// [`Scratch::picks`] holds each flagged row's greedy pick instead (the first index
    /// of its largest logit, NaN ignored, `None` where no logit exceeds −∞:
    /// fucina-sample's greedy choice over the logits the forward would have returned)
    /// and the ids of its `k` largest logits ([`crate::greedy::top_k`]). Where the head
    /// has a whole-block kernel ([`crate::greedy`]) most logits are then never computed
    /// exactly. `None` (the default): logits.
    pub fn set_greedy_output(&mut self, greedy: Option<usize>) {
        self.greedy = greedy;
    }

    /// The greedy output setting ([`Scratch::set_greedy_output`]).
    pub fn greedy_output(&self) -> Option<usize> {
        self.greedy
    }

    /// In greedy output mode, the number of top values a decision needs distinct (a
    /// sampler that decides from the row's top-k, which needs `k + 1`): a row whose
    /// first `distinct` values are not strictly decreasing, or that has a non-finite
    /// logit, also gets its whole logits row in [`crate::greedy::Picks::full`]. 0 (the
    /// default): none.
    pub fn set_distinct_top(&mut self, distinct: usize) {
        self.distinct = distinct;
    }

    /// The picks of the last forward with [`Scratch::set_greedy_output`] on, one per
    /// flagged row.
    pub fn picks(&self) -> &crate::greedy::Picks {
        &self.picks
    }

    /// Hidden-state capture: the forward also keeps the final-normed hidden state of
    /// EVERY row (`rows × n_embd`, [`Scratch::captured_hidden`]) beside the flagged
    /// rows' logits, which stay bitwise those of a forward without capture (the input
    /// of a multi-token-prediction head). A forward whose rows are not all flagged
    /// runs its last layer twice. Off by default.
    pub fn set_capture_hidden(&mut self, capture: bool) {
        self.capture = capture;
    }

    /// Whether hidden-state capture is on.
    pub fn capture_hidden(&self) -> bool {
        self.capture
    }

    /// The hidden states the last forward captured (every row with
    /// [`Scratch::set_capture_hidden`], in row order; the flagged rows' after
    /// [`Model::mtp_forward`]); empty before any.
    pub fn captured_hidden(&self) -> &[f32] {
        &self.hidden_all[..self.captured_len]
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
pub(crate) fn residual(
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
        for r in rows {
            caches[r.seq].begin_forward();
        }
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
        if let Some(ple) = &self.ple {
            ple.inputs(
                &self.pool,
                rows,
                &s.x[..m * e],
                cfg.rms_eps,
                &mut s.ple_in,
                &mut s.ple_tok,
                &mut s.mm,
            )?;
        }

        // RoPE cos/sin per distinct layer RoPE config, per row.
        s.rope_group.clear();
        s.rope_reps.clear(); // representative layer of each group
        for (il, l) in cfg.layers.iter().enumerate() {
            let same = |r: usize| {
                let o = &cfg.layers[r];
                o.rope == l.rope && self.layers[r].rope_freqs == self.layers[il].rope_freqs
            };
            let g = match s.rope_reps.iter().position(|&r| same(r)) {
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
        let capture = s.capture;
        s.captured_len = 0;
        if capture {
            grow(&mut s.hidden_all, m * e);
        }
        for il in 0..cfg.n_layer {
            let last = il + 1 == cfg.n_layer;
            if last && capture && s.out_rows.len() != m {
                if matches!(cfg.layers[il].mixer, Mixer::DeltaNet(_)) {
                    return Err(ModelError::InvalidConfig(
                        "hidden-state capture needs an attention last layer".into(),
                    ));
                }
                // Every row's hidden state: the last layer once over all rows, then
                // again from the same input as the plain forward runs it (its K/V
                // writes repeat the same values), so the flagged rows' logits are
                // bitwise a forward's without capture.
                let x_in = s.x[..m * e].to_vec();
                self.layer_step(il, rows, caches, s, false, n_rot_max, m)?;
                self.final_norm_into_hidden(s, m);
                s.captured_len = m * e;
                s.x[..m * e].copy_from_slice(&x_in);
            }
            m_cur = self.layer_step(il, rows, caches, s, last, n_rot_max, m_cur)?;
            if m_cur == 0 {
                break;
            }
        }

        // Publish the new positions.
        s.counts.clear();
        s.counts.resize(caches.len(), 0);
        for r in rows {
            s.counts[r.seq] += 1;
        }
        let pinned = s.mm.pinned();
        for (c, &n) in caches.iter_mut().zip(&s.counts) {
            c.commit(n, pinned)?;
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
        if capture && s.captured_len == 0 {
            // Every row is an output row: its hidden state is the normed row.
            s.hidden_all[..n_out * e].copy_from_slice(xn);
            s.captured_len = n_out * e;
        }
        if s.hidden {
            return Ok(&s.xn[..n_out * e]);
        }
        if let Some(k) = s.greedy {
            if self.output_bias.is_none()
                && cfg.final_softcap.is_none()
                && crate::greedy::top_rows(
                    &self.pool,
                    &self.output,
                    &s.xn[..n_out * e],
                    n_out,
                    k,
                    s.distinct,
                    &mut s.mm,
                    &mut s.picks,
                )?
            {
                return Ok(&s.logits[..0]);
            }
        }
        let logits = grow(&mut s.logits, n_out * vsz);
        matmul(
            &self.pool,
            &self.output,
            &s.xn[..n_out * e],
            n_out,
            logits,
            &mut s.mm,
        )?;
        add_bias(logits, self.output_bias.as_ref(), vsz);
        if let Some(c) = cfg.final_softcap {
            // Element-wise (libm's tanhf, 262k of them a row on Gemma 4): split as
            // rows of one element, so every thread takes a share, also of a decode
            // step's single row.
            par_rows(&self.pool, logits, 1, &|_, l| soft_cap(l, c));
        }
        if let Some(k) = s.greedy {
            let picks = &mut s.picks;
            picks.pick.clear();
            picks.top.clear();
            picks.vals.clear();
            picks.full.clear();
            for row in s.logits[..n_out * vsz].chunks_exact(vsz) {
                picks.pick.push(crate::greedy::first_argmax(row));
                if k > 0 {
                    let mut ids = Vec::new();
                    crate::greedy::top_k(row, k, &mut ids);
                    picks
                        .vals
                        .push(ids.iter().map(|&i| row[i as usize]).collect());
                    picks.top.push(ids);
                }
                // Every logit was computed here: a decision needing distinct top values
                // reads the row itself.
                picks.full.push((s.distinct > 0).then(|| row.to_vec()));
            }
            return Ok(&s.logits[..0]);
        }
        Ok(&s.logits[..n_out * vsz])
    }

    /// Layer `il` over the residual stream in `s.x` (`m_cur` rows continue into it;
    /// the last layer keeps only the output rows): returns how many rows continue
    /// (0: the last layer with no output row).
    #[allow(clippy::too_many_arguments)]
    fn layer_step(
        &self,
        il: usize,
        rows: &[BatchRow],
        caches: &mut [KvCache],
        s: &mut Scratch,
        last: bool,
        n_rot_max: usize,
        m_cur: usize,
    ) -> Result<usize> {
        let cfg = &self.config;
        let (m, e) = (rows.len(), cfg.n_embd);
        let (lc, lw) = (&cfg.layers[il], &self.layers[il]);

        // Mixer block: norm, attention or DeltaNet, output projection into s.o.
        let xn = grow(&mut s.xn, m * e);
        let x_ro: &[f32] = &s.x;
        par_rows(&self.pool, xn, e, &|rr, xn| {
            for (r, o) in rr.zip(xn.chunks_exact_mut(e)) {
                rms_norm(&x_ro[r * e..(r + 1) * e], &lw.attn_norm, cfg.rms_eps, o);
            }
        });
        let n_act = match (&lw.mixer, lc.mixer) {
            (MixerWeights::Attention(aw), Mixer::Attention { .. }) => {
                attention::forward_layer(self, il, lc, aw, rows, caches, s, last, n_rot_max)?
            }
            (MixerWeights::Mla(mw), Mixer::Mla(g)) => {
                mla::forward_layer(self, il, lc, &g, mw, rows, caches, s, last, n_rot_max)?
            }
            (MixerWeights::DeltaNet(dw), Mixer::DeltaNet(g)) => {
                let o = grow(&mut s.o, m * e);
                dw.forward(
                    &self.pool,
                    il,
                    &g,
                    cfg.rms_eps,
                    rows,
                    caches,
                    &s.xn[..m * e],
                    o,
                    &mut s.delta,
                    &mut s.mm,
                )?;
                if last {
                    // Every row advanced the state; only the output rows go on.
                    for (i, &r) in s.out_rows.iter().enumerate() {
                        s.o.copy_within(r * e..(r + 1) * e, i * e);
                    }
                    s.out_rows.len()
                } else {
                    m
                }
            }
            _ => {
                return Err(ModelError::InvalidConfig(format!(
                    "layer {il}: weights of another mixer kind than its config"
                )))
            }
        };
        if n_act == 0 {
            return Ok(0);
        }

        // Keep only the continuing rows of the residual stream.
        if last && n_act != m_cur {
            for (i, &r) in s.out_rows.iter().enumerate() {
                s.x.copy_within(r * e..(r + 1) * e, i * e);
            }
        }
        let mc = n_act;
        let o = &mut s.o[..mc * e];
        residual(
            &self.pool,
            &mut s.x[..mc * e],
            o,
            e,
            lw.post_attn_norm.as_deref(),
            cfg.rms_eps,
        );
        trace_layer("attn_out", il, &s.x[..mc * e], e);

        // FFN block.
        let xn = grow(&mut s.xn, mc * e);
        let x_ro: &[f32] = &s.x;
        par_rows(&self.pool, xn, e, &|rr, xn| {
            for (r, o) in rr.zip(xn.chunks_exact_mut(e)) {
                rms_norm(&x_ro[r * e..(r + 1) * e], &lw.ffn_norm, cfg.rms_eps, o);
            }
        });
        let o = grow(&mut s.o, mc * e);
        lw.ffn.forward(
            &self.pool,
            cfg.activation,
            &s.x[..mc * e],
            xn,
            mc,
            o,
            cfg.rms_eps,
            &mut s.ffn,
            &mut s.mm,
        )?;
        residual(
            &self.pool,
            &mut s.x[..mc * e],
            o,
            e,
            lw.post_ffn_norm.as_deref(),
            cfg.rms_eps,
        );
        trace_layer("pe_in", il, &s.x[..mc * e], e);

        // Per-layer embedding block and output scale (Gemma 4).
        if let (Some(pl), Some(ple)) = (&lw.ple, &self.ple) {
            let width = cfg.n_layer * ple.n_pl();
            let kept = (mc != m).then_some(s.out_rows.as_slice());
            pl.apply(
                &self.pool,
                &mut s.x,
                mc,
                &s.ple_in,
                width,
                il * ple.n_pl(),
                kept,
                cfg.activation,
                cfg.rms_eps,
                &mut s.ple_g,
                &mut s.ple_p,
                &mut s.mm,
            )?;
        }
        if let Some(scale) = lw.out_scale {
            s.x[..mc * e].iter_mut().for_each(|v| *v *= scale);
        }
        trace_layer("l_out", il, &s.x[..mc * e], e);
        Ok(mc)
    }

    /// The final norm of `m` rows of `s.x` into `s.hidden_all`.
    fn final_norm_into_hidden(&self, s: &mut Scratch, m: usize) {
        let e = self.config.n_embd;
        let x_ro: &[f32] = &s.x;
        let eps = self.config.rms_eps;
        par_rows(&self.pool, &mut s.hidden_all[..m * e], e, &|rr, h| {
            for (r, o) in rr.zip(h.chunks_exact_mut(e)) {
                rms_norm(&x_ro[r * e..(r + 1) * e], &self.output_norm, eps, o);
            }
        });
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
                && cfg
                    .layers
                    .iter()
                    .enumerate()
                    .all(|(il, l)| c.state(il).spec() == l.cache_spec());
            if !ok {
                return Err(ModelError::KvCacheShapeMismatch(format!(
                    "cache {si} was not made for this model"
                )));
            }
        }
        Ok(())
    }
}

/// Developer trace for numerical comparisons against other engines: with
/// `FUCINA_TRACE_LAYERS=FILE` in the environment, every layer of every forward appends
/// residual rows after its mixer, its FFN and its end to FILE, as records `u32 tag
/// length, tag, u32 layer, u32 rows, u32 width` then `rows × width` f32, all
/// little-endian; the tags are llama.cpp's tensor names (`attn_out`, `pe_in`,
/// `l_out`, with `-<il>` there). Off (one cached check per point) otherwise.
pub(crate) fn trace_layer(tag: &str, il: usize, x: &[f32], e: usize) {
    use std::io::Write;
    use std::sync::{Mutex, OnceLock};
    static TRACE: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    let Some(file) = TRACE.get_or_init(|| {
        let path = std::env::var_os("FUCINA_TRACE_LAYERS")?;
        std::fs::File::create(path).ok().map(Mutex::new)
    }) else {
        return;
    };
    let mut rec = Vec::with_capacity(16 + tag.len() + 4 * x.len());
    rec.extend_from_slice(&(tag.len() as u32).to_le_bytes());
    rec.extend_from_slice(tag.as_bytes());
    for v in [il, x.len() / e.max(1), e] {
        rec.extend_from_slice(&(v as u32).to_le_bytes());
    }
    rec.extend(x.iter().flat_map(|v| v.to_le_bytes()));
    if let Ok(mut f) = file.lock() {
        // A diagnostic: a failed write loses the trace, never the forward.
        let _ = f.write_all(&rec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An element-wise op split across the pool as one-element rows (the soft cap)
    /// gives the serial op's values, the last, shorter piece included, and covers
    /// every element exactly once.
    #[test]
    fn one_element_rows_split_an_elementwise_op_exactly() {
        let pool = ThreadPool::new(3).expect("pool");
        let n = 3 * ROW_TASK_FLOATS + 1234;
        let src: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 40.0).collect();
        let mut want = src.clone();
        soft_cap(&mut want, 30.0);
        let mut got = src.clone();
        par_rows(&pool, &mut got, 1, &|_, l| soft_cap(l, 30.0));
        assert_eq!(got, want);
        let mut counts = vec![0f32; n];
        par_rows(&pool, &mut counts, 1, &|_, l| {
            l.iter_mut().for_each(|x| *x += 1.0)
        });
        assert!(counts.iter().all(|&c| c == 1.0));
    }
}
