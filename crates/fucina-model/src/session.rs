//! A single-sequence session: one model, one KV cache, one scratch — the
//! low-level `eval` / `reset` / greedy loop the Python binding and the engine use.

use std::sync::Arc;

use crate::forward::{BatchRow, Scratch};
use crate::kv_cache::{KvCache, KvDtype};
use crate::model::Model;
use crate::{ModelError, Result};

/// Rows per forward call when evaluating a long prompt (bounds scratch memory).
pub const DEFAULT_N_BATCH: usize = 512;

/// One conversation's state over a shared model.
#[derive(Debug)]
pub struct Session {
    model: Arc<Model>,
    cache: Vec<KvCache>,
    scratch: Scratch,
    tokens: Vec<u32>,
    logits: Vec<f32>,
    rows: Vec<BatchRow>,
    n_batch: usize,
}

impl Session {
    /// A session with a cache of `n_ctx` positions of `dtype`.
    pub fn new(model: Arc<Model>, n_ctx: usize, dtype: KvDtype) -> Result<Session> {
        if n_ctx == 0 {
            return Err(ModelError::InvalidConfig("n_ctx must be positive".into()));
        }
        let cache = model.new_cache(n_ctx, dtype)?;
        Ok(Session {
            model,
            cache: vec![cache],
            scratch: Scratch::default(),
            tokens: Vec::new(),
            logits: Vec::new(),
            rows: Vec::new(),
            n_batch: DEFAULT_N_BATCH,
        })
    }

    /// Rows per forward call for long inputs (≥ 1).
    pub fn set_n_batch(&mut self, n_batch: usize) {
        self.n_batch = n_batch.max(1);
    }

    /// Pinned numerics ([`Scratch::set_pinned`]): every row of a batched `eval` gives
    /// bitwise the logits it would get alone. Off by default (llama.cpp's prompt-batch
    /// arithmetic for Q4_K matrices).
    pub fn set_pinned(&mut self, pinned: bool) {
        self.scratch.set_pinned(pinned);
    }

    /// Whether pinned numerics are on.
    pub fn pinned(&self) -> bool {
        self.scratch.pinned()
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }
    /// Tokens evaluated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    /// The KV cache.
    pub fn cache(&self) -> &KvCache {
        &self.cache[0]
    }
    /// Context capacity.
    pub fn n_ctx(&self) -> usize {
        self.cache[0].capacity()
    }

    /// Append `tokens` and return logits: of the last token (`n_vocab` values) or,
    /// with `all`, of every appended token (`tokens.len() × n_vocab`).
    pub fn eval(&mut self, tokens: &[u32], all: bool) -> Result<&[f32]> {
        if tokens.is_empty() {
            return Err(ModelError::InvalidBatch("no tokens to evaluate".into()));
        }
        let start = self.cache[0].len();
        if start + tokens.len() > self.n_ctx() {
            return Err(ModelError::KvCacheOverflow {
                needed: start + tokens.len(),
                capacity: self.n_ctx(),
            });
        }
        let vocab = self.model.config().n_vocab;
        self.logits.clear();
        for (ci, chunk) in tokens.chunks(self.n_batch).enumerate() {
            let at = start + ci * self.n_batch;
            let last_chunk = at + chunk.len() == start + tokens.len();
            let n = chunk.len();
            self.rows.clear();
            self.rows
                .extend(chunk.iter().enumerate().map(|(i, &token)| BatchRow {
                    seq: 0,
                    pos: at + i,
                    token,
                    logits: all || (last_chunk && i + 1 == n),
                }));
            let out = self
                .model
                .forward(&self.rows, &mut self.cache, &mut self.scratch)?;
            self.logits.extend_from_slice(out);
            self.tokens.extend_from_slice(chunk);
        }
        debug_assert_eq!(
            self.logits.len(),
            if all { tokens.len() * vocab } else { vocab }
        );
        Ok(&self.logits)
    }

    /// Forget everything (the cache keeps its buffers).
    pub fn reset(&mut self) {
        self.cache[0].reset();
        self.tokens.clear();
    }

    /// Keep the first `n` tokens.
    pub fn truncate(&mut self, n: usize) {
        self.cache[0].truncate(n);
        self.tokens.truncate(self.cache[0].len());
    }

    /// Greedy decoding: evaluate `prompt`, then emit up to `max_tokens` argmax tokens,
    /// stopping after a token for which `stop` is true (that token is included).
    pub fn generate_greedy(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        stop: impl Fn(u32) -> bool,
    ) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(max_tokens);
        if max_tokens == 0 {
            return Ok(out);
        }
        let mut next = argmax(self.eval(prompt, false)?);
        loop {
            out.push(next);
            if out.len() == max_tokens || stop(next) {
                return Ok(out);
            }
            next = argmax(self.eval(&[next], false)?);
        }
    }
}

/// Index of the largest value (first on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() {
            best = i;
        }
    }
    best as u32
}
