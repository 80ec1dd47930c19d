//! The model's own multi-token-prediction head as a draft source (self-speculation
//! on GLM-4.5's `nextn` block, [`fucina_model::mtp`]).
//!
//! The head's K/V rows live in a one-layer cache of their own, one row per trunk
//! position: row p reads the token at p and the trunk's output-normed hidden state at
//! p − 1, which the generation's trunk evaluations capture ([`SeqPool::capture_next`]).
//! Before each draft the source [`MtpDraft::sync`]s with the trunk: takes the hidden
//! states of the last evaluation, and rewinds its cache and hidden states with the
//! trunk's cache (a verify that kept only part of its rows, a truncation), so the head
//! never attends to a row whose input was not committed. A draft then runs ONE head
//! forward over the rows the head has not seen yet plus the carried token's row (its
//! logits give the first draft token), and chains one-row forwards for the rest,
//! each drafted token paired with the head's own normed output in place of the
//! trunk's hidden state (llama.cpp's single-head MTP drafting); the chained rows are
//! dropped again, the carried token's row (whose inputs are committed) kept.
//!
//! Drafts are the argmax of the head's logits (deterministic: the head runs with
//! pinned numerics). Positions whose hidden state the trunk did not capture (a step
//! another path evaluated, a reused prefix) get a zero hidden state, as llama.cpp
//! pairs the first row of a batch: drafts may suffer, the output never does, since
//! the verify decides every token.

use std::sync::Arc;

use fucina_model::{BatchRow, KvCache, KvDtype, Model, Scratch};
use fucina_spec::DraftSource;

use crate::pool::{SeqId, SeqPool};

/// A generation's MTP draft state.
#[derive(Debug)]
pub(crate) struct MtpDraft {
    model: Arc<Model>,
    /// The head's K/V (one cache; a slice for the forward).
    cache: Vec<KvCache>,
    scratch: Scratch,
    /// Trunk hidden states of positions `h_start..trunk_len`.
    hidden: Vec<f32>,
    h_start: usize,
    /// Positions the trunk's sequence holds, as of the last sync.
    trunk_len: usize,
    /// Serial of the last capture taken.
    serial: u64,
    rows: Vec<BatchRow>,
    h_in: Vec<f32>,
    /// Rows the head has computed (catch-up and draft), for the summary.
    pub(crate) head_rows: usize,
}

impl MtpDraft {
    /// The draft source of `model`'s head, or `None` when it has none.
    pub(crate) fn new(model: &Arc<Model>, n_ctx: usize, dtype: KvDtype) -> Option<MtpDraft> {
        model.mtp()?;
        let cache = model.new_mtp_cache(n_ctx, dtype).ok()?;
        let mut scratch = Scratch::default();
        scratch.set_pinned(true);
        Some(MtpDraft {
            model: Arc::clone(model),
            cache: vec![cache],
            scratch,
            hidden: Vec::new(),
            h_start: 0,
            trunk_len: 0,
            serial: 0,
            rows: Vec::new(),
            h_in: Vec::new(),
            head_rows: 0,
        })
    }

    fn n_embd(&self) -> usize {
        self.model.config().n_embd
    }

    /// Ask the pool to capture the hidden states of `seq`'s next evaluation.
    pub(crate) fn request_capture(pool: &mut SeqPool, seq: SeqId) {
        pool.capture_next(Some(seq));
    }

    /// Catch up with the trunk of `seq`: take the last capture if it is new and
    /// `seq`'s, then rewind to the positions the trunk holds.
    pub(crate) fn sync(&mut self, pool: &SeqPool, seq: SeqId) {
        let c = pool.captured();
        if c.seq == Some(seq) && c.serial != self.serial {
            self.serial = c.serial;
            let e = self.n_embd();
            if c.hidden.len() % e == 0 {
                self.record(c.start, &c.hidden);
            }
        }
        let n = pool.len(seq).unwrap_or(0);
        self.rewind(n);
    }

    /// The trunk evaluated positions `start..` with hidden states `h` (rows × n_embd).
    fn record(&mut self, start: usize, h: &[f32]) {
        let e = self.n_embd();
        self.rewind(start);
        // Positions the trunk evaluated without capture: zero hidden states.
        if self.hidden.is_empty() {
            self.h_start = self.trunk_len;
        }
        let have = self.h_start + self.hidden.len() / e;
        self.hidden
            .resize((start.max(have) - self.h_start) * e, 0.0);
        self.hidden.extend_from_slice(h);
        self.trunk_len = start + h.len() / e;
    }

    /// The trunk holds `n` positions: drop what lies past them.
    fn rewind(&mut self, n: usize) {
        let e = self.n_embd();
        if n < self.trunk_len {
            self.trunk_len = n;
        }
        let keep = self.trunk_len.saturating_sub(self.h_start) * e;
        self.hidden.truncate(keep);
        if n > self.trunk_len {
            // Evaluated without capture: the trunk moved on.
            self.trunk_len = n;
        }
        if self.cache[0].len() > self.trunk_len {
            self.cache[0].truncate(self.trunk_len);
        }
    }

    /// The trunk's hidden state at `pos`, or zeros where none was captured.
    fn h_at(&self, pos: Option<usize>, out: &mut Vec<f32>) {
        let e = self.n_embd();
        let row = pos
            .filter(|&p| p >= self.h_start && (p - self.h_start + 1) * e <= self.hidden.len())
            .map(|p| &self.hidden[(p - self.h_start) * e..(p - self.h_start + 1) * e]);
        match row {
            Some(r) => out.extend_from_slice(r),
            None => out.resize(out.len() + e, 0.0),
        }
    }

    fn draft(
        &mut self,
        context: &[u32],
        max: usize,
        out: &mut Vec<u32>,
    ) -> fucina_model::Result<()> {
        let n = self.trunk_len;
        let e = self.n_embd();
        // Only the carried token may be pending: the head needs the trunk's hidden
        // state of every earlier position.
        if max == 0 || context.len() != n + 1 {
            return Ok(());
        }
        let cap = self.cache[0].capacity();
        let max = max.min(cap.saturating_sub(n + 1));
        if max == 0 {
            return Ok(());
        }
        let from = self.cache[0].len().min(n);
        self.cache[0].truncate(from);
        self.rows.clear();
        let mut h_in = std::mem::take(&mut self.h_in);
        h_in.clear();
        for (p, &token) in context.iter().enumerate().skip(from) {
            self.rows.push(BatchRow {
                seq: 0,
                pos: p,
                token,
                logits: p == n,
            });
            self.h_at(p.checked_sub(1), &mut h_in);
        }
        let mut tok;
        {
            let logits =
                self.model
                    .mtp_forward(&self.rows, &h_in, &mut self.cache, &mut self.scratch)?;
            tok = crate::session::argmax(logits);
        }
        self.head_rows += self.rows.len();
        out.push(tok);
        for k in 1..max {
            h_in.clear();
            h_in.extend_from_slice(self.scratch.captured_hidden());
            let row = BatchRow {
                seq: 0,
                pos: n + k,
                token: tok,
                logits: true,
            };
            let logits =
                self.model
                    .mtp_forward(&[row], &h_in, &mut self.cache, &mut self.scratch)?;
            tok = crate::session::argmax(logits);
            self.head_rows += 1;
            out.push(tok);
        }
        debug_assert_eq!(h_in.len() % e, 0);
        self.h_in = h_in;
        // Keep the carried token's row (committed inputs); drop the chained ones.
        self.cache[0].truncate(n + 1);
        // Hidden states before the carried token's row's input are no longer needed
        // (the trunk re-evaluating from the carried token drops that row: its input,
        // position n - 1, stays).
        let drop = n
            .saturating_sub(1)
            .saturating_sub(self.h_start)
            .min(self.hidden.len() / e);
        self.hidden.drain(..drop * e);
        self.h_start += drop;
        Ok(())
    }

    /// Positions the head's cache holds (tests: it never runs ahead of the trunk by
    /// more than the carried token's row).
    pub(crate) fn cache_len(&self) -> usize {
        self.cache[0].len()
    }
}

impl DraftSource for MtpDraft {
    /// Up to `max` drafts continuing `context` (the history; its last token is the
    /// carried one, the trunk holds the rest). A failed head forward drafts nothing.
    fn suggest(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>) {
        let before = out.len();
        if self.draft(context, max, out).is_err() {
            out.truncate(before);
        }
    }

    /// The head learns the committed tokens from the context of each draft.
    fn observe(&mut self, _committed: &[u32]) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use fucina_model::ModelOptions;

    fn model() -> Arc<Model> {
        let path = fucina_testdata::repo_root().join("tests/goldens/model/tiny/glm4moe-q8_0.gguf");
        Arc::new(Model::load(path, ModelOptions::with_threads(1)).expect("tiny model"))
    }

    /// Hidden states for `n` positions, distinct per position.
    fn fake_hidden(e: usize, start: usize, n: usize) -> Vec<f32> {
        (0..n * e)
            .map(|i| (((start * e + i) as f32) * 0.37).sin())
            .collect()
    }

    #[test]
    fn rewound_state_drafts_like_a_fresh_one() {
        let m = model();
        let e = m.config().n_embd;
        let ctx: Vec<u32> = (0..20).map(|i| (i * 37 + 5) % 128).collect();
        let mut a = MtpDraft::new(&m, 64, KvDtype::F16).expect("head");
        a.record(0, &fake_hidden(e, 0, 12));
        let mut d = Vec::new();
        a.suggest(&ctx[..13], 3, &mut d);
        assert_eq!(d.len(), 3);
        assert_eq!(a.cache_len(), 13, "the carried token's row is kept");
        // A verify evaluated the carried token and 3 drafts (12..16) and kept 2 rows.
        a.record(12, &fake_hidden(e, 12, 4));
        a.rewind(14);
        assert_eq!((a.cache_len(), a.trunk_len), (12, 14));
        let mut da = Vec::new();
        a.suggest(&ctx[..15], 4, &mut da);
        let mut b = MtpDraft::new(&m, 64, KvDtype::F16).expect("head");
        b.record(0, &fake_hidden(e, 0, 14));
        let mut db = Vec::new();
        b.suggest(&ctx[..15], 4, &mut db);
        assert_eq!(da, db, "drafts after a verify's rewind = a fresh head's");
        assert_eq!(a.cache_len(), 15);
        // A deeper rewind (a truncated conversation) drops the head's rows with the
        // trunk's; positions whose hidden state is gone read zeros.
        a.rewind(5);
        assert_eq!((a.cache_len(), a.trunk_len), (5, 5));
        a.record(5, &fake_hidden(e, 5, 3));
        let mut dc = Vec::new();
        a.suggest(&ctx[..9], 2, &mut dc);
        assert_eq!((dc.len(), a.cache_len()), (2, 9));
        // A context that is not "trunk + carried token" drafts nothing.
        let mut none = Vec::new();
        b.suggest(&ctx[..18], 4, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn uncaptured_positions_get_zero_hidden_states() {
        let m = model();
        let e = m.config().n_embd;
        let mut a = MtpDraft::new(&m, 64, KvDtype::F16).expect("head");
        a.record(0, &fake_hidden(e, 0, 3));
        // Positions 3..5 evaluated elsewhere, then 5..7 captured.
        a.record(5, &fake_hidden(e, 5, 2));
        assert_eq!(a.trunk_len, 7);
        let mut row = Vec::new();
        a.h_at(Some(4), &mut row);
        assert!(row.iter().all(|&v| v == 0.0));
        row.clear();
        a.h_at(Some(6), &mut row);
        assert_eq!(row, fake_hidden(e, 5, 2)[e..]);
        row.clear();
        a.h_at(None, &mut row);
        assert_eq!(row, vec![0.0; e]);
    }
}
