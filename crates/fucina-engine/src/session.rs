//! A single-sequence session: one model, one sequence of a private pool — the
//! low-level `eval` / `truncate` / greedy loop for callers that manage tokens
//! themselves (parity tests, benchmarks, the Python `Session`).

use std::sync::Arc;

use fucina_model::{KvCache, KvDtype, Model};

use crate::error::{invalid, Result};
use crate::pool::{SeqId, SeqPool};

/// One sequence's state over a shared model.
#[derive(Debug)]
pub struct Session {
    pool: SeqPool,
    seq: SeqId,
}

impl Session {
    /// A session whose cache holds `n_ctx` positions of `dtype`.
    pub fn new(model: Arc<Model>, n_ctx: usize, dtype: KvDtype) -> Result<Session> {
        let mut pool = SeqPool::new(model, n_ctx, dtype)?;
        let seq = pool.alloc()?;
        Ok(Session { pool, seq })
    }

    /// Rows per forward call for long inputs (≥ 1).
    pub fn set_n_batch(&mut self, n_batch: usize) {
        self.pool.set_n_batch(n_batch);
    }

    /// Pinned numerics: every row of a batched `eval` gives bitwise the logits it
    /// would get alone. Off by default (llama.cpp's prompt-batch arithmetic).
    pub fn set_pinned(&mut self, pinned: bool) {
        self.pool.set_pinned(pinned);
    }

    /// Whether pinned numerics are on.
    pub fn pinned(&self) -> bool {
        self.pool.pinned()
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        self.pool.model()
    }

    /// Tokens evaluated so far.
    pub fn tokens(&self) -> &[u32] {
        self.pool.tokens(self.seq).unwrap_or_default()
    }

    /// The KV cache.
    pub fn cache(&self) -> &KvCache {
        self.pool
            .cache(self.seq)
            .expect("a session's sequence lives as long as the session")
    }

    /// Context capacity.
    pub fn n_ctx(&self) -> usize {
        self.pool.n_ctx()
    }

    /// Append `tokens` and return logits: of the last token (`n_vocab` values) or,
    /// with `all`, of every appended token (`tokens.len() × n_vocab`).
    pub fn eval(&mut self, tokens: &[u32], all: bool) -> Result<&[f32]> {
        if all {
            self.pool.eval_all(self.seq, tokens)
        } else {
            Ok(self.pool.eval(self.seq, tokens, &mut |_, _| {})?)
        }
    }

    /// Forget everything (the cache keeps its buffers).
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    /// Keep the first `n` tokens.
    pub fn truncate(&mut self, n: usize) {
        // The session's own sequence is always live.
        let _ = self.pool.truncate(self.seq, n);
    }

    /// The whole state (tokens and KV rows) as bytes ([`crate::persist::encode_state`]).
    pub fn save_state(&self) -> Result<Vec<u8>> {
        let fingerprint = crate::persist::model_fingerprint(self.model());
        crate::persist::encode_state(self.cache(), self.tokens(), fingerprint)
    }

    /// Replace the state with one [`Session::save_state`] produced (for this model
    /// and cache shape; anything else is an error naming the mismatch).
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        let fingerprint = crate::persist::model_fingerprint(self.model());
        let (tokens, records, state) =
            crate::persist::decode_state_full(bytes, self.cache(), fingerprint)?;
        self.pool
            .restore_with_state(self.seq, &tokens, records.into_iter(), state)
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
        if prompt.is_empty() {
            return Err(invalid("prompt", "is empty"));
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

/// Index of the largest value (first on ties; NaN never wins; 0 for a row with
/// nothing above -inf): the greedy sampler's vectorised scan (a branchy
/// compare-and-track loop costs about a millisecond a token on a 262k vocabulary).
pub fn argmax(logits: &[f32]) -> u32 {
    fucina_sample::argmax(logits).unwrap_or(0) as u32
}

#[cfg(test)]
mod tests {
    use super::argmax;

    #[test]
    fn argmax_first_on_ties_and_never_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, f32::NAN, 0.7]), 3);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
        assert_eq!(argmax(&[f32::NAN]), 0);
        let mut row = vec![0.0f32; 262_144];
        row[200_001] = 1.0;
        row[250_000] = 1.0;
        assert_eq!(argmax(&row), 200_001);
    }
}
