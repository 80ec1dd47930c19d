//! The sequence pool: every live sequence's state (its per-layer KV cache and the
//! tokens it holds) over one model, and the forward that appends to them.
//!
//! A generation, a session, a Conversation or a server slot owns one [`SeqId`].
//! Sequences can be truncated (speculative rewind, prefix reuse), forked (the whole
//! state copied into a new sequence) and seeded with another's prefix
//! (cross-sequence prefix sharing). Removed sequences keep their buffers for the
//! next [`SeqPool::alloc`], so a server cycling through requests allocates nothing
//! in steady state. The pool's caches are one dense slice, the layout the batched
//! forward takes (`BatchRow::seq` is a slot index), so a scheduler can later step
//! many sequences in one forward.

use std::sync::Arc;

use fucina_model::{BatchRow, KvCache, KvDtype, Model, Scratch};

use crate::error::{invalid, EngineError, Result};

/// Rows per forward when evaluating a long input (bounds scratch memory, and is the
/// granularity of prefill progress reports).
pub const DEFAULT_N_BATCH: usize = 512;

/// A sequence in a [`SeqPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(usize);

impl SeqId {
    /// The slot index (the `seq` of the forward's batch rows).
    pub fn index(self) -> usize {
        self.0
    }
}

/// How an embedding pools a text's final hidden states (llama.cpp's `pooling_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over the text's tokens (llama.cpp's `LLAMA_POOLING_TYPE_MEAN`).
    Mean,
    /// The first token's state (`LLAMA_POOLING_TYPE_CLS`).
    Cls,
    /// The last token's state (`LLAMA_POOLING_TYPE_LAST`: Qwen3-Embedding and other
    /// decoder embedding models).
    Last,
}

impl Pooling {
    /// The pooling the model's GGUF declares in `{arch}.pooling_type` (1 mean, 2 CLS,
    /// 3 last); the mean for a model that declares none, or one that gives no single
    /// vector per text (0 none, 4 rank).
    pub fn of_model(model: &Model) -> Pooling {
        let md = model.file().metadata();
        let key = format!("{}.pooling_type", md.architecture().unwrap_or_default());
        match md.get_u64(&key) {
            Ok(Some(2)) => Pooling::Cls,
            Ok(Some(3)) => Pooling::Last,
            _ => Pooling::Mean,
        }
    }

    /// `"mean"`, `"cls"` or `"last"`.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }

    /// The pooling [`Pooling::name`] calls `name`.
    pub fn from_name(name: &str) -> Option<Pooling> {
        [Pooling::Mean, Pooling::Cls, Pooling::Last]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

/// Live sequences over one model.
#[derive(Debug)]
pub struct SeqPool {
    model: Arc<Model>,
    n_ctx: usize,
    dtype: KvDtype,
    caches: Vec<KvCache>,
    tokens: Vec<Vec<u32>>,
    live: Vec<bool>,
    scratch: Scratch,
    rows: Vec<BatchRow>,
    /// Logits of the last evaluated row. Allocated once with `n_vocab` values and
    /// never resized, so its address is stable for the pool's lifetime (bindings hand
    /// out zero-copy views of it to logit processors).
    row: Box<[f32]>,
    /// Logits of every row, for [`SeqPool::eval_all`].
    all: Vec<f32>,
    /// Greedy picks of the rows of [`SeqPool::eval_verify_greedy_from`].
    picks: fucina_model::greedy::Picks,
    n_batch: usize,
    /// The sequence whose next evaluation keeps its rows' hidden states.
    capture_for: Option<SeqId>,
    /// The hidden states of that evaluation (see [`SeqPool::captured`]).
    captured: Captured,
}

/// The trunk's output-normed hidden states of one evaluation of one sequence: the
/// input of a multi-token-prediction head.
#[derive(Debug, Default)]
pub struct Captured {
    /// The sequence evaluated.
    pub seq: Option<SeqId>,
    /// Position of the first row.
    pub start: usize,
    /// Counts the captures, so a reader can tell a new one from one it has seen.
    pub serial: u64,
    /// `rows × n_embd`, in position order.
    pub hidden: Vec<f32>,
}

impl SeqPool {
    /// An empty pool whose sequences hold up to `n_ctx` positions of `dtype` each.
    pub fn new(model: Arc<Model>, n_ctx: usize, dtype: KvDtype) -> Result<SeqPool> {
        if n_ctx == 0 {
            return Err(invalid("n_ctx", "must be positive"));
        }
        let n_vocab = model.config().n_vocab;
        Ok(SeqPool {
            model,
            n_ctx,
            dtype,
            caches: Vec::new(),
            tokens: Vec::new(),
            live: Vec::new(),
            scratch: Scratch::default(),
            rows: Vec::new(),
            row: vec![0.0; n_vocab].into_boxed_slice(),
            all: Vec::new(),
            picks: Default::default(),
            n_batch: DEFAULT_N_BATCH,
            capture_for: None,
            captured: Captured::default(),
        })
    }

    /// Keep the hidden states of every row of `id`'s next evaluation (through
    /// [`SeqPool::eval`], [`SeqPool::eval_all`] or [`SeqPool::eval_verify_from`]) for
    /// [`SeqPool::captured`]; the logits are bitwise the same as without. Applies to
    /// that one evaluation; `None` cancels.
    pub fn capture_next(&mut self, id: Option<SeqId>) {
        self.capture_for = id;
    }

    /// The hidden states of the last capturing evaluation.
    pub fn captured(&self) -> &Captured {
        &self.captured
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Positions each sequence holds.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// The KV cache element type.
    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }

    /// Rows per forward for long inputs (≥ 1).
    pub fn set_n_batch(&mut self, n_batch: usize) {
        self.n_batch = n_batch.max(1);
    }

    /// Pinned numerics (`Scratch::set_pinned`): every row of a batched evaluation
    /// gives bitwise the logits it would get alone.
    pub fn set_pinned(&mut self, pinned: bool) {
        self.scratch.set_pinned(pinned);
    }

    /// Whether pinned numerics are on.
    pub fn pinned(&self) -> bool {
        self.scratch.pinned()
    }

    /// Sequences currently allocated.
    pub fn n_live(&self) -> usize {
        self.live.iter().filter(|&&l| l).count()
    }

    /// Bytes of KV cache memory the pool holds (live and recycled sequences).
    pub fn cache_bytes(&self) -> usize {
        self.caches.iter().map(KvCache::byte_size).sum()
    }

    /// A new, empty sequence (a recycled slot when one is free).
    pub fn alloc(&mut self) -> Result<SeqId> {
        if let Some(i) = self.live.iter().position(|&l| !l) {
            self.live[i] = true;
            self.caches[i].reset();
            self.tokens[i].clear();
            return Ok(SeqId(i));
        }
        self.caches
            .push(self.model.new_cache(self.n_ctx, self.dtype)?);
        self.tokens.push(Vec::new());
        self.live.push(true);
        Ok(SeqId(self.live.len() - 1))
    }

    fn check(&self, id: SeqId) -> Result<usize> {
        match self.live.get(id.0) {
            Some(true) => Ok(id.0),
            _ => Err(EngineError::UnknownSequence(id.0)),
        }
    }

    /// Release `id` (its buffers are kept for reuse). Removing twice is a no-op.
    pub fn remove(&mut self, id: SeqId) {
        if let Some(l) = self.live.get_mut(id.0) {
            *l = false;
        }
    }

    /// Tokens `id` holds, in position order.
    pub fn tokens(&self, id: SeqId) -> Result<&[u32]> {
        Ok(&self.tokens[self.check(id)?])
    }

    /// Positions `id` holds.
    pub fn len(&self, id: SeqId) -> Result<usize> {
        Ok(self.tokens(id)?.len())
    }

    /// The KV cache of `id`.
    pub fn cache(&self, id: SeqId) -> Result<&KvCache> {
        Ok(&self.caches[self.check(id)?])
    }

    /// Keep the first `n` positions of `id` (no-op when it holds fewer). A hybrid
    /// model's recurrent state may only be restorable at an earlier position: the
    /// sequence then holds fewer, and [`SeqPool::len`] says how many.
    pub fn truncate(&mut self, id: SeqId, n: usize) -> Result<()> {
        let i = self.check(id)?;
        self.caches[i].truncate(n);
        self.tokens[i].truncate(self.caches[i].len());
        Ok(())
    }

    /// Forget every position of `id`.
    pub fn clear(&mut self, id: SeqId) -> Result<()> {
        self.truncate(id, 0)
    }

    /// A new sequence holding a copy of `id`'s whole state.
    pub fn fork(&mut self, id: SeqId) -> Result<SeqId> {
        let n = self.len(id)?;
        let dst = self.alloc()?;
        if let Err(e) = self.copy_prefix(id, dst, n) {
            self.remove(dst);
            return Err(e);
        }
        Ok(dst)
    }

    /// Make `dst` hold the first `n` positions of `src` (its own state is replaced):
    /// prefix sharing between sequences. With a hybrid model `dst` may hold fewer
    /// (see [`SeqPool::truncate`]; [`SeqPool::len`] says how many).
    pub fn copy_prefix(&mut self, src: SeqId, dst: SeqId, n: usize) -> Result<()> {
        let (s, d) = (self.check(src)?, self.check(dst)?);
        if n > self.tokens[s].len() {
            return Err(invalid(
                "n",
                format!(
                    "prefix of {n} positions but the source holds {}",
                    self.tokens[s].len()
                ),
            ));
        }
        if s == d {
            return self.truncate(src, n);
        }
        let (src_cache, dst_cache) = if s < d {
            let (a, b) = self.caches.split_at_mut(d);
            (&a[s], &mut b[0])
        } else {
            let (a, b) = self.caches.split_at_mut(s);
            (&b[0], &mut a[d])
        };
        dst_cache.reset();
        dst_cache.copy_rows(src_cache, 0, n)?;
        let prefix = self.tokens[s][..dst_cache.len()].to_vec();
        self.tokens[d] = prefix;
        Ok(())
    }

    /// Keep the longest common prefix of `id`'s tokens and `tokens`, capped at
    /// `tokens.len() - 1` (logits are not cached state: the last token is always
    /// evaluated again), and drop the rest; returns the positions kept (with a
    /// hybrid model possibly fewer: see [`SeqPool::truncate`]). The reconcile behind
    /// prefix reuse: an edited history, a stripped reasoning block or another
    /// client's request simply reuses less.
    pub fn reuse_prefix(&mut self, id: SeqId, tokens: &[u32]) -> Result<usize> {
        let i = self.check(id)?;
        let held = &self.tokens[i];
        let common = held.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        let keep = common.min(tokens.len().saturating_sub(1));
        self.truncate(id, keep)?;
        Ok(self.tokens[i].len())
    }

    /// Append one token to each of several distinct sequences in ONE forward (a
    /// decode step of a batch of streams) and return their logits, one `n_vocab` row
    /// per item in order. The forward runs with pinned numerics, so each row is
    /// bitwise what a single-row [`SeqPool::eval`] of it gives.
    pub fn eval_batch(&mut self, items: &[(SeqId, u32)]) -> Result<&mut [f32]> {
        if items.is_empty() {
            return Err(invalid("items", "nothing to evaluate"));
        }
        self.rows.clear();
        for (r, &(id, token)) in items.iter().enumerate() {
            let i = self.check(id)?;
            if items[..r].iter().any(|&(other, _)| other == id) {
                return Err(invalid(
                    "items",
                    format!("sequence {i} appears twice in one batch"),
                ));
            }
            let pos = self.caches[i].len();
            if pos + 1 > self.n_ctx {
                return Err(fucina_model::ModelError::KvCacheOverflow {
                    needed: pos + 1,
                    capacity: self.n_ctx,
                }
                .into());
            }
            self.rows.push(BatchRow {
                seq: i,
                pos,
                token,
                logits: true,
            });
        }
        self.all.clear();
        let pinned = self.scratch.pinned();
        self.scratch.set_pinned(true);
        let out = self
            .model
            .forward(&self.rows, &mut self.caches, &mut self.scratch)
            .map(|out| self.all.extend_from_slice(out));
        self.scratch.set_pinned(pinned);
        out?;
        for &(id, token) in items {
            self.tokens[id.0].push(token);
        }
        Ok(&mut self.all)
    }

    /// Append a run of tokens to each of several distinct sequences in ONE forward
    /// (a scheduler step: one-token decode rows and prefill chunks side by side) and
    /// return the logits of the last token of each item flagged `true`, one `n_vocab`
    /// row per flagged item in order. Numerics follow the pool's pinned setting: with
    /// it on, every row is bitwise what it gives alone. Nothing is appended on error.
    pub fn eval_mixed(&mut self, items: &[(SeqId, &[u32], bool)]) -> Result<&mut [f32]> {
        self.eval_mixed_from(&last_rows(items))
    }

    /// [`SeqPool::eval_mixed`] returning each flagged row's greedy pick instead of its
    /// logits (as [`SeqPool::eval_verify_greedy_from`] does, with no top ids).
    pub fn eval_mixed_greedy(&mut self, items: &[(SeqId, &[u32], bool)]) -> Result<&[Option<u32>]> {
        self.eval_mixed_greedy_from(&last_rows(items))
    }

    /// [`SeqPool::eval_mixed`] with the logits of every row `from..` of each item whose
    /// `from` is given (a speculative verify's rows among a batch's decode rows), in
    /// order: item by item, row by row.
    pub fn eval_mixed_from(
        &mut self,
        items: &[(SeqId, &[u32], Option<usize>)],
    ) -> Result<&mut [f32]> {
        self.eval_mixed_rows(items)?;
        Ok(&mut self.all)
    }

    /// [`SeqPool::eval_mixed_from`] returning each of those rows' greedy pick instead
    /// of its logits.
    pub fn eval_mixed_greedy_from(
        &mut self,
        items: &[(SeqId, &[u32], Option<usize>)],
    ) -> Result<&[Option<u32>]> {
        Ok(&self.eval_mixed_top_from(items, 0, 0)?.pick)
    }

    /// [`SeqPool::eval_mixed_from`] returning each of those rows' greedy pick, its `k`
    /// largest logits' ids and values, and, where its first `distinct` values are not
    /// strictly decreasing (or a logit is not finite), its whole row
    /// ([`fucina_model::greedy::Picks`]), instead of every row's logits.
    pub fn eval_mixed_top_from(
        &mut self,
        items: &[(SeqId, &[u32], Option<usize>)],
        k: usize,
        distinct: usize,
    ) -> Result<&fucina_model::greedy::Picks> {
        self.picks = Default::default();
        self.scratch.set_greedy_output(Some(k));
        self.scratch.set_distinct_top(distinct);
        let r = self.eval_mixed_rows(items);
        self.scratch.set_greedy_output(None);
        self.scratch.set_distinct_top(0);
        r?;
        Ok(&self.picks)
    }

    fn eval_mixed_rows(&mut self, items: &[(SeqId, &[u32], Option<usize>)]) -> Result<()> {
        if items.is_empty() || items.iter().all(|(_, t, _)| t.is_empty()) {
            return Err(invalid("items", "nothing to evaluate"));
        }
        self.rows.clear();
        for (r, &(id, tokens, logits)) in items.iter().enumerate() {
            let i = self.check(id)?;
            if items[..r].iter().any(|&(other, _, _)| other == id) {
                return Err(invalid(
                    "items",
                    format!("sequence {i} appears twice in one batch"),
                ));
            }
            if tokens.is_empty() {
                return Err(invalid("items", format!("no tokens for sequence {i}")));
            }
            let start = self.caches[i].len();
            if start + tokens.len() > self.n_ctx {
                return Err(fucina_model::ModelError::KvCacheOverflow {
                    needed: start + tokens.len(),
                    capacity: self.n_ctx,
                }
                .into());
            }
            self.rows
                .extend(tokens.iter().enumerate().map(|(k, &token)| BatchRow {
                    seq: i,
                    pos: start + k,
                    token,
                    logits: logits.is_some_and(|from| k >= from),
                }));
        }
        self.all.clear();
        let greedy = self.scratch.greedy_output().is_some();
        if self.rows.iter().any(|r| r.logits) {
            let out = self
                .model
                .forward(&self.rows, &mut self.caches, &mut self.scratch)?;
            if greedy {
                self.picks.extend_from(self.scratch.picks());
            } else {
                self.all.extend_from_slice(out);
            }
        } else {
            self.model
                .forward(&self.rows, &mut self.caches, &mut self.scratch)?;
        }
        for &(id, tokens, _) in items {
            self.tokens[id.0].extend_from_slice(tokens);
        }
        Ok(())
    }

    /// The embedding of `tokens`: their hidden states after the model's final norm,
    /// pooled as the model declares ([`Pooling::of_model`]: the mean unless its GGUF
    /// says CLS or last token, as embedding models such as Qwen3-Embedding do) and
    /// scaled to unit length (llama.cpp's pooling with Euclidean normalisation),
    /// evaluated on a temporary sequence in forwards of `n_batch` rows without the
    /// output head. No other sequence is touched.
    pub fn embed(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let pooling = Pooling::of_model(&self.model);
        self.embed_pooled(tokens, pooling, true)
    }

    /// [`SeqPool::embed`] with the given `pooling`, scaled to unit length only with
    /// `normalize` (else the pooled vector as llama.cpp's pooling outputs it). The
    /// forwards run in llama.cpp's batch numerics even in pinned mode: they hold this
    /// input's rows alone, so nothing else can move its result, and it equals llama.cpp's.
    pub fn embed_pooled(
        &mut self,
        tokens: &[u32],
        pooling: Pooling,
        normalize: bool,
    ) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(invalid("tokens", "nothing to embed"));
        }
        if tokens.len() > self.n_ctx {
            return Err(EngineError::PromptTooLong {
                prompt: tokens.len(),
                n_ctx: self.n_ctx,
            });
        }
        let n_vocab = self.row.len();
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(invalid(
                "tokens",
                format!("token id {bad} is outside the vocabulary of {n_vocab}"),
            ));
        }
        let e = self.model.config().n_embd;
        let seq = self.alloc()?;
        let i = seq.0;
        let mut sum = vec![0.0f64; e];
        // The one position CLS / last-token pooling keeps (the mean keeps them all).
        let keep = match pooling {
            Pooling::Mean => None,
            Pooling::Cls => Some(0),
            Pooling::Last => Some(tokens.len() - 1),
        };
        let pinned = self.scratch.pinned();
        self.scratch.set_pinned(false);
        self.scratch.set_hidden_output(true);
        let mut result: Result<()> = Ok(());
        let mut done = 0;
        for chunk in tokens.chunks(self.n_batch) {
            self.rows.clear();
            self.rows
                .extend(chunk.iter().enumerate().map(|(r, &token)| BatchRow {
                    seq: i,
                    pos: done + r,
                    token,
                    logits: true,
                }));
            match self
                .model
                .forward(&self.rows, &mut self.caches, &mut self.scratch)
            {
                Ok(hidden) => {
                    for (r, row) in hidden.chunks_exact(e).enumerate() {
                        if keep.is_none_or(|k| k == done + r) {
                            for (s, &v) in sum.iter_mut().zip(row) {
                                *s += f64::from(v);
                            }
                        }
                    }
                }
                Err(err) => {
                    result = Err(err.into());
                    break;
                }
            }
            self.tokens[i].extend_from_slice(chunk);
            done += chunk.len();
        }
        self.scratch.set_hidden_output(false);
        self.scratch.set_pinned(pinned);
        self.remove(seq);
        result?;
        let n = if keep.is_some() {
            1.0
        } else {
            tokens.len() as f64
        };
        if !normalize {
            return Ok(sum.iter().map(|s| (s / n) as f32).collect());
        }
        let norm = sum.iter().map(|s| (s / n) * (s / n)).sum::<f64>().sqrt();
        let scale = if norm > 0.0 { 1.0 / (n * norm) } else { 0.0 };
        Ok(sum.iter().map(|s| (s * scale) as f32).collect())
    }

    /// Replace `id`'s state with `tokens` and their KV records (one
    /// [`KvCache::read_record`] per token, in order): a resumed sequence. A hybrid
    /// model's sequence also needs its recurrent state: [`SeqPool::restore_with_state`].
    pub fn restore<'a>(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        records: impl ExactSizeIterator<Item = &'a [u8]>,
    ) -> Result<()> {
        self.restore_with_state(id, tokens, records, &[])
    }

    /// [`SeqPool::restore`] with the recurrent state at the end of `tokens`
    /// ([`KvCache::read_recurrent_state`]; empty for a model without recurrent layers).
    pub fn restore_with_state<'a>(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        records: impl ExactSizeIterator<Item = &'a [u8]>,
        state: &[u8],
    ) -> Result<()> {
        let i = self.check(id)?;
        if records.len() != tokens.len() {
            return Err(invalid(
                "records",
                format!("{} records for {} tokens", records.len(), tokens.len()),
            ));
        }
        if tokens.len() > self.n_ctx {
            return Err(fucina_model::ModelError::KvCacheOverflow {
                needed: tokens.len(),
                capacity: self.n_ctx,
            }
            .into());
        }
        let records: Vec<&[u8]> = records.collect();
        let cache = &mut self.caches[i];
        cache.reset();
        self.tokens[i].clear();
        let restored = cache.push_records(&records).and_then(|()| {
            if tokens.is_empty() {
                Ok(())
            } else {
                cache.set_recurrent_state(state)
            }
        });
        if let Err(e) = restored {
            cache.reset();
            return Err(e.into());
        }
        self.tokens[i].extend_from_slice(tokens);
        Ok(())
    }

    /// Append `tokens` to `id` and return the last one's logits (`n_vocab` values,
    /// mutable: samplers and processors work on them in place). Long inputs run in
    /// forwards of `n_batch` rows; `progress(done, total)` follows each one. On error
    /// the sequence keeps the rows of the forwards that completed.
    pub fn eval(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<&mut [f32]> {
        self.eval_rows(id, tokens, None, progress)?;
        Ok(&mut self.row)
    }

    /// Append `tokens` to `id` and return the logits of every one
    /// (`tokens.len() × n_vocab`, row-major).
    pub fn eval_all(&mut self, id: SeqId, tokens: &[u32]) -> Result<&[f32]> {
        self.all.clear();
        self.eval_rows(id, tokens, Some(0), &mut |_, _| {})?;
        Ok(&self.all)
    }

    /// Append `tokens` to `id` in one forward with pinned numerics (each row bitwise
    /// a one-row decode step's) and return every row's logits, mutable: the
    /// speculative decoder's verify batch.
    pub fn eval_verify(&mut self, id: SeqId, tokens: &[u32]) -> Result<&mut [f32]> {
        self.eval_verify_from(id, tokens, 0)
    }

    /// [`SeqPool::eval_verify`] returning only the logits of rows `from..` (rows whose
    /// successor is already known, such as grammar-forced tokens, skip the output
    /// layer).
    pub fn eval_verify_from(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        from: usize,
    ) -> Result<&mut [f32]> {
        self.all.clear();
        self.picks = Default::default();
        if from >= tokens.len() {
            return Err(invalid(
                "from",
                format!("{from} is past the {} rows", tokens.len()),
            ));
        }
        let pinned = self.scratch.pinned();
        self.scratch.set_pinned(true);
        let r = self.eval_rows(id, tokens, Some(from), &mut |_, _| {});
        self.scratch.set_pinned(pinned);
        r?;
        Ok(&mut self.all)
    }

    /// [`SeqPool::eval_verify_from`] returning, instead of the logits of rows
    /// `from..`, each one's greedy pick (the first index of its largest logit, NaN
    /// ignored; `None` where none exceeds −∞: what the greedy sampler picks from those
    /// logits, with no bias, penalty or processor) and the ids of its `k` largest logits
    /// (best first, ties to the lower id). The head computes few logits exactly where it
    /// can ([`fucina_model::greedy`]); [`SeqPool::last_logits`] is not updated.
    pub fn eval_verify_greedy_from(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        from: usize,
        k: usize,
    ) -> Result<&fucina_model::greedy::Picks> {
        self.eval_verify_top_from(id, tokens, from, k, 0)
    }

    /// [`SeqPool::eval_verify_greedy_from`] with the values of each row's `k` largest
    /// logits too, and, where its first `distinct` values are not strictly decreasing
    /// (or a logit is not finite), its whole row ([`fucina_model::greedy::Picks::full`]):
    /// what a sampler deciding from a row's top-k needs.
    pub fn eval_verify_top_from(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        from: usize,
        k: usize,
        distinct: usize,
    ) -> Result<&fucina_model::greedy::Picks> {
        self.scratch.set_greedy_output(Some(k));
        self.scratch.set_distinct_top(distinct);
        let r = self.eval_verify_from(id, tokens, from).map(|_| ());
        self.scratch.set_greedy_output(None);
        self.scratch.set_distinct_top(0);
        r?;
        Ok(&self.picks)
    }

    /// The logits of the last row [`SeqPool::eval`] produced (zeros before any).
    pub fn last_logits(&mut self) -> &mut [f32] {
        &mut self.row
    }

    fn eval_rows(
        &mut self,
        id: SeqId,
        tokens: &[u32],
        collect_from: Option<usize>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<()> {
        let i = self.check(id)?;
        if tokens.is_empty() {
            return Err(invalid("tokens", "nothing to evaluate"));
        }
        let start = self.caches[i].len();
        if start + tokens.len() > self.n_ctx {
            return Err(fucina_model::ModelError::KvCacheOverflow {
                needed: start + tokens.len(),
                capacity: self.n_ctx,
            }
            .into());
        }
        let capture = self.capture_for.take() == Some(id);
        if capture {
            self.captured.seq = Some(id);
            self.captured.start = start;
            self.captured.serial += 1;
            self.captured.hidden.clear();
        }
        self.scratch.set_capture_hidden(capture);
        let result = self.eval_chunks(i, tokens, start, collect_from, capture, progress);
        self.scratch.set_capture_hidden(false);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_chunks(
        &mut self,
        i: usize,
        tokens: &[u32],
        start: usize,
        collect_from: Option<usize>,
        capture: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<()> {
        let vocab = self.row.len();
        let total = tokens.len();
        let mut done = 0;
        for chunk in tokens.chunks(self.n_batch) {
            let at = start + done;
            let last_chunk = done + chunk.len() == total;
            let n = chunk.len();
            self.rows.clear();
            self.rows
                .extend(chunk.iter().enumerate().map(|(r, &token)| BatchRow {
                    seq: i,
                    pos: at + r,
                    token,
                    logits: collect_from.is_some_and(|f| done + r >= f)
                        || (last_chunk && r + 1 == n),
                }));
            let greedy = self.scratch.greedy_output().is_some();
            let out = self
                .model
                .forward(&self.rows, &mut self.caches, &mut self.scratch)?;
            if greedy {
                self.picks.extend_from(self.scratch.picks());
            } else {
                if collect_from.is_some() {
                    // `out` holds the rows with logits, in order: exactly rows `from..`.
                    self.all.extend_from_slice(out);
                }
                if last_chunk {
                    self.row.copy_from_slice(&out[out.len() - vocab..]);
                }
            }
            if capture {
                self.captured
                    .hidden
                    .extend_from_slice(self.scratch.captured_hidden());
            }
            self.tokens[i].extend_from_slice(chunk);
            done += n;
            progress(done, total);
        }
        Ok(())
    }
}

/// `eval_mixed`'s items as `eval_mixed_from`'s: a flagged item's last row only.
fn last_rows<'a>(items: &[(SeqId, &'a [u32], bool)]) -> Vec<(SeqId, &'a [u32], Option<usize>)> {
    items
        .iter()
        .map(|&(id, tokens, logits)| (id, tokens, logits.then(|| tokens.len().saturating_sub(1))))
        .collect()
}
