//! Lossless draft-free speculative decoding inside a [`Generation`] (spec §13.9).
//!
//! A decode step with the carried token `t` (committed, not yet forwarded) asks the
//! draft source ([`SpeculationIndex`]) for up to `k` tokens, then runs ONE forward over
//! `[t, d1..dk]` with pinned numerics, so each row's logits (and the K/V rows it
//! leaves) are bitwise what a one-row decode step gives. Row `i` then goes through the
//! generation's full decision — processors, sampler (one RNG draw), stop rules — on a
//! history holding the tokens committed so far: while the sampled token equals the
//! draft the next row is valid; the first mismatch IS the correction token; with every
//! draft accepted, the last row gives a bonus token; a token that ends the generation
//! ends the loop. The rows past the last committed token are dropped from the cache.
//! So the committed tokens, the draws and the cache are exactly a plain run's, only
//! more tokens come per forward. The [`CostGate`] keeps speculation off where verifies
//! cost more than they commit.

use std::time::Instant;

use fucina_sample::LogitProcessor;
use fucina_spec::{CostGate, DraftSource, SpecOptions, SpeculationIndex, Stats, TopKRow};

use crate::error::Result;
use crate::generation::{Generation, HeadRow, Step};
use crate::mtp_draft::MtpDraft;
use crate::pool::SeqPool;

/// An exact match this long drafts before a model's MTP head, and makes a gate that is
/// off probe at once where the head would draft otherwise.
const STRONG_MATCH: usize = 8;

/// Without an MTP head, an exact match this long makes a gate that is off probe at once
/// (a probe is a few verifies, judged as the gate judges). A gate goes off in new text
/// where short matches and guesses miss; a stream that then starts repeating earlier
/// text reaches 4 matched tokens several steps before 8. Measured on Gemma 3 270M, 2
/// cores, `benches/speculative.py`'s tasks alternated in one process: the document
/// answer went off in some runs and resumed drafting only at 8 (2.02 tokens a step,
/// 1.58-1.69x plain) where from 4 every run held 2.40 (1.75-1.79x), the story 2.05 ->
/// 2.19 tokens a step, the other tasks and the Qwen3-4B shape's unchanged.
const REARM_MATCH: usize = 4;

/// Whether an exact match of `best` tokens makes a gate that is off probe at once.
fn rearms(best: usize, mtp: bool) -> bool {
    best >= if mtp { STRONG_MATCH } else { REARM_MATCH }
}

/// A generation's speculative state.
#[derive(Debug)]
pub(crate) struct Speculator {
    index: SpeculationIndex,
    gate: CostGate,
    stats: Stats,
    draft: Vec<u32>,
    /// History tokens the index has observed.
    observed: usize,
    /// The model's multi-token-prediction head, drafting in the index's place (with
    /// [`SpecOptions::mtp`] on a model that has one).
    pub(crate) mtp: Option<MtpDraft>,
    /// Seconds the current step spent drafting (the MTP head's forwards): part of the
    /// verify's cost the gate weighs, or a head that never pays would look free.
    draft_s: f64,
}

impl Speculator {
    pub(crate) fn new(opts: SpecOptions, pool: &SeqPool, prompt: &[u32]) -> Speculator {
        let mut index = SpeculationIndex::new(pool.model().config().n_vocab);
        index.accounting_min_draft = opts.min_draft;
        index.observe(prompt);
        let mtp = if opts.mtp {
            MtpDraft::new(pool.model(), pool.n_ctx(), pool.dtype())
        } else {
            None
        };
        Speculator {
            index,
            gate: CostGate::new(opts),
            stats: Stats::default(),
            draft: Vec::new(),
            observed: prompt.len(),
            mtp,
            draft_s: 0.0,
        }
    }

    pub(crate) fn add_reference(&mut self, tokens: &[u32]) {
        self.index.add_reference(tokens);
    }

    /// Whether guessed drafts pay at the measured row cost and the guesses' record.
    fn guesses_pay(&self) -> bool {
        self.gate.guesses_pay(self.index.guess_hit_rate())
    }

    /// Whether a step should take each row's top ids for the guesses (they feed only
    /// the guessed drafts: where those cannot pay, the pass over the vocabulary is
    /// skipped), and how many.
    fn topk_feedback(&self) -> (bool, usize) {
        let wants = self.index.wants_topk() && self.guesses_pay();
        (wants, self.gate.options().topk_feedback)
    }

    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    pub(crate) fn summary(&self) -> String {
        let source = match &self.mtp {
            Some(m) => format!("MTP head ({} head rows)", m.head_rows),
            None => self.index.summary(),
        };
        format!(
            "gate {:?} (estimated speedup {:.2}, budget {}, row cost {:.2}); {source}",
            self.gate.state(),
            self.gate.est_speedup(),
            self.gate.budget(),
            self.gate.row_cost(),
        )
    }

    /// Positions the MTP head's cache holds (`None` without the head).
    pub(crate) fn mtp_cache_len(&self) -> Option<usize> {
        self.mtp.as_ref().map(MtpDraft::cache_len)
    }
}

impl Generation {
    /// Let the draft index observe every token committed since it last did, at once.
    pub(crate) fn sync_index(&mut self) {
        if let Some(spec) = self.spec.as_deref_mut() {
            if spec.observed < self.history.len() {
                spec.index.observe(&self.history[spec.observed..]);
                spec.observed = self.history.len();
            }
        }
    }

    /// One decode step with speculation on: a verify when the source drafts enough, a
    /// plain step otherwise. `self` carries its pending tokens: the last committed one,
    /// after any tokens a grammar forced.
    pub(crate) fn speculative_step(
        &mut self,
        pool: &mut SeqPool,
        extra: &mut [&mut dyn LogitProcessor],
    ) -> Result<Step> {
        let seq = self.seq();
        if let Some(m) = self.spec.as_deref_mut().and_then(|s| s.mtp.as_mut()) {
            m.sync(pool, seq);
        }
        let draft = self.next_draft(pool.n_ctx(), extra)?;
        let result = if draft.is_empty() {
            self.plain_step(pool, extra)
        } else {
            self.verify(pool, extra, &draft)
        };
        self.recycle_draft(draft);
        result
    }

    /// The draft of this decode step (empty: a plain step), as the gate and the
    /// processors allow; the stats count a step the gate kept plain or a draft too
    /// short to verify. Give it back with [`Generation::recycle_draft`].
    pub(crate) fn next_draft(
        &mut self,
        n_ctx: usize,
        extra: &mut [&mut dyn LogitProcessor],
    ) -> Result<Vec<u32>> {
        // Tokens forced since the last step are part of the context drafts continue.
        self.sync_index();
        let room = self
            .remaining()
            .saturating_sub(1)
            .min(n_ctx.saturating_sub(self.history.len()));
        // `suggested`: the source's draft length, before the cuts below (the index learns of
        // each cut once, at the end).
        let (mut draft, allowed, suggested) = {
            let Some(spec) = self.spec.as_deref_mut() else {
                return Err(crate::error::invalid("speculation", "is off"));
            };
            let mut draft = std::mem::take(&mut spec.draft);
            draft.clear();
            // A long text match drafts (the text sources' drafts are free, and a long
            // match is the likeliest to be accepted, also on a model with an MTP head)
            // and re-arms the gate; otherwise the MTP head drafts where there is one,
            // and since its drafts cost a head forward each, only the gate's own
            // measurements decide for it.
            let best = spec.index.best_match();
            let strong = best >= STRONG_MATCH;
            let allowed = spec.gate.allows(rearms(best, spec.mtp.is_some()));
            let mut suggested = 0;
            if allowed {
                let budget = spec.gate.budget().min(room);
                if budget >= spec.gate.options().min_draft {
                    let min_match = spec.gate.min_match();
                    let guesses = spec.guesses_pay();
                    let t = Instant::now();
                    match spec.mtp.as_mut().filter(|_| !strong) {
                        Some(m) => m.suggest(&self.history, budget, &mut draft),
                        None => spec.index.suggest_with(
                            &self.history,
                            budget,
                            min_match,
                            guesses,
                            &mut draft,
                        ),
                    }
                    spec.draft_s = t.elapsed().as_secs_f64();
                    draft.truncate(budget);
                    suggested = draft.len();
                    // An exact-match draft stops where the stream's recent contexts
                    // have gone on otherwise often enough that the rest would not pay
                    // for its rows.
                    if spec.gate.options().economics {
                        let row_cost = spec.gate.verify_row_cost();
                        draft.truncate(spec.index.confident_len(&draft, row_cost));
                    }
                }
            }
            (draft, allowed, suggested)
        };
        // Constrained drafting: a draft goes only as far as every processor (a grammar)
        // accepts it.
        let history = &self.history;
        let procs = self
            .processors
            .iter_mut()
            .map(|p| &mut **p as &mut dyn LogitProcessor);
        for p in procs.chain(extra.iter_mut().map(|p| &mut **p as _)) {
            if draft.is_empty() {
                break;
            }
            let n = p.valid_prefix_len(history, &draft);
            draft.truncate(n);
        }
        let spec = self.spec_mut();
        if draft.len() < suggested {
            spec.index.truncate_pending(draft.len());
        }
        if !allowed {
            spec.stats.disabled_steps += 1;
        } else if draft.len() < spec.gate.options().min_draft {
            draft.clear();
            spec.stats.fallback_steps += 1;
        }
        Ok(draft)
    }

    /// Hand a draft's buffer back for the next step's.
    pub(crate) fn recycle_draft(&mut self, mut draft: Vec<u32>) {
        if let Some(spec) = self.spec.as_deref_mut() {
            draft.clear();
            spec.draft = draft;
        }
    }

    /// A batched step (the scheduler's) evaluated this generation's pending row without
    /// a draft and took `secs` of the forward's time: what its gate weighs verifies
    /// against, as a plain step's time.
    pub(crate) fn record_batched_plain(&mut self, secs: f64) {
        if let Some(spec) = self.spec.as_deref_mut() {
            // A draft cut to nothing (a grammar, the minimum length) cost its time here.
            spec.draft_s = 0.0;
            spec.gate.record_plain(secs);
            spec.stats.steps += 1;
            spec.stats.committed += 1;
        }
    }

    fn plain_step(
        &mut self,
        pool: &mut SeqPool,
        extra: &mut [&mut dyn LogitProcessor],
    ) -> Result<Step> {
        let t0 = Instant::now();
        let carried = *self.history.last().unwrap_or(&0);
        let (wants, k) = self.spec_mut().topk_feedback();
        let (seq, at) = (self.seq(), self.evaluated());
        if self.spec_mut().mtp.is_some() {
            MtpDraft::request_capture(pool, seq);
        }
        let pending = &self.history[at..];
        let one_row = pending.len() == 1;
        let logits = if one_row {
            pool.eval(seq, pending, &mut |_, _| {})?
        } else {
            pool.eval_verify_from(seq, pending, pending.len() - 1)?
        };
        let mut ids = Vec::new();
        if wants {
            fucina_model::greedy::top_k(logits, k, &mut ids);
        }
        self.set_evaluated(self.history.len());
        let step = self.decide_inner(logits, extra)?;
        let dt = t0.elapsed().as_secs_f64();
        let spec = self.spec_mut();
        // A draft cut to nothing (a grammar, the minimum length) cost its time here.
        spec.draft_s = 0.0;
        if one_row {
            spec.gate.record_plain(dt);
        }
        spec.stats.steps += 1;
        spec.stats.committed += 1;
        if wants {
            spec.index.observe_topk(&[TopKRow {
                token: carried,
                topk: &ids,
            }]);
        }
        self.sync_index();
        Ok(step)
    }

    /// One forward over the pending tokens and `draft`, then the decisions row by row
    /// ([`Generation::accept_verified`]).
    fn verify(
        &mut self,
        pool: &mut SeqPool,
        extra: &mut [&mut dyn LogitProcessor],
        draft: &[u32],
    ) -> Result<Step> {
        let t0 = Instant::now();
        let rows = self.verify_rows(draft);
        let seq = self.seq();
        let (wants, k) = self.spec_mut().topk_feedback();
        // Rows before the last pending one predict tokens already committed.
        let first = self.history.len() - self.evaluated() - 1;
        if self.spec_mut().mtp.is_some() {
            MtpDraft::request_capture(pool, seq);
        }
        // Rows decided by their greedy pick, or by a sampler that reads only the row's
        // top-k, with nothing between the logits and the decision: the head gives the
        // picks, the top values and the top ids the guesses feed on without computing
        // most logits (bitwise the same decisions and ids).
        let head = if extra.is_empty() {
            self.decides_from_head()
        } else {
            None
        };
        let mut picks = fucina_model::greedy::Picks::default();
        let verified = if let Some(top_k) = head {
            let (kk, distinct) = head_request(top_k, wants.then_some(k));
            picks.clone_from(pool.eval_verify_top_from(seq, &rows, first, kk, distinct)?);
            Verified::Head {
                pick: &picks.pick,
                top: &picks.top,
                vals: &picks.vals,
                full: &mut picks.full,
                feedback: wants.then_some(k),
            }
        } else {
            Verified::Logits {
                logits: pool.eval_verify_from(seq, &rows, first)?,
                top_k: wants.then_some(k),
            }
        };
        let result = self.accept_verified(extra, &rows, draft.len(), verified);
        self.finish_verify(pool, &rows, draft.len(), result, Cost::Since(t0))
    }

    /// The rows a verify of `draft` evaluates: the pending tokens, then the draft.
    pub(crate) fn verify_rows(&self, draft: &[u32]) -> Vec<u32> {
        let pending = &self.history[self.evaluated()..];
        let mut rows = Vec::with_capacity(pending.len() + draft.len());
        rows.extend_from_slice(pending);
        rows.extend_from_slice(draft);
        rows
    }

    /// The decisions on a verify's rows, which the caller has appended to the sequence
    /// (`rows`: the pending tokens, then `drafted` draft tokens; `verified`: the rows
    /// from the last pending one on): while each committed token (and the tokens a
    /// grammar forces after it) equals the next row's input, the row after it is valid
    /// and decides the next token. Finish with [`Generation::finish_verify`].
    pub(crate) fn accept_verified(
        &mut self,
        extra: &mut [&mut dyn LogitProcessor],
        rows: &[u32],
        drafted: usize,
        mut verified: Verified<'_>,
    ) -> Accepted {
        let n0 = self.evaluated();
        let p = rows.len() - drafted;
        let first = p - 1;
        let mut top_rows: Vec<Vec<u32>> = Vec::new();
        let (mut committed, mut accepted, mut forced_in, mut rejected) = (0usize, 0, 0, false);
        // Rows whose input is committed history (the cache keeps exactly those).
        let mut valid = p;
        let mut failure = None;
        let mut r = first;
        while r < rows.len() {
            let at = self.history.len();
            let decided = match &mut verified {
                Verified::Head {
                    pick,
                    top,
                    vals,
                    full,
                    feedback,
                } => {
                    let row = HeadRow::at(pick, top, vals, full, r - first);
                    if let Some(fb) = *feedback {
                        top_rows.push(match &row.full {
                            Some(logits) => {
                                let mut ids = Vec::new();
                                fucina_model::greedy::top_k(logits, fb, &mut ids);
                                ids
                            }
                            None => row.top[..fb.min(row.top.len())].to_vec(),
                        });
                    }
                    self.decide_head(row)
                }
                Verified::Logits { logits, top_k } => {
                    let vocab = logits.len() / (rows.len() - first);
                    let row = &mut logits[(r - first) * vocab..(r - first + 1) * vocab];
                    if let Some(k) = *top_k {
                        let mut ids = Vec::new();
                        fucina_model::greedy::top_k(row, k, &mut ids);
                        top_rows.push(ids);
                    }
                    self.decide_inner(row, extra)
                }
            };
            let step = match decided {
                Ok(step) => step,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            committed += 1;
            let finished = step.finish.is_some();
            self.ready.push_back(step);
            if finished {
                break;
            }
            if extra.is_empty() {
                match self.fast_forward() {
                    Ok(_) => {}
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            // The tokens committed since this row: its decision, then any forced.
            let new = &self.history[at..];
            let matched = new
                .iter()
                .zip(&rows[r + 1..])
                .take_while(|(a, b)| a == b)
                .count();
            if matched > 0 {
                accepted += 1;
                forced_in += matched - 1;
            }
            if self.finish_reason().is_some() {
                // Finished by what the grammar forced after this row's decision: a plain
                // run never evaluates those tokens, so their rows leave the cache too.
                break;
            }
            valid += matched;
            if matched < new.len() {
                rejected = r + 1 < rows.len();
                break;
            }
            r += matched;
        }
        Accepted {
            keep: n0 + valid,
            committed,
            accepted: accepted + forced_in,
            forced_in,
            rejected,
            bonus: valid == rows.len() && !rejected,
            failure,
            top_rows,
        }
    }

    /// The end of a verify whose decisions [`Generation::accept_verified`] made: the
    /// cache keeps every row whose input is committed history (a hybrid model's cache
    /// may land earlier: the next step evaluates the rest), the stats and the gate
    /// count it (at `cost`), the index learns the committed tokens; the first step
    /// committed (the others are queued).
    pub(crate) fn finish_verify(
        &mut self,
        pool: &mut SeqPool,
        rows: &[u32],
        drafted: usize,
        a: Accepted,
        cost: Cost,
    ) -> Result<Step> {
        let seq = self.seq();
        let truncated = pool.truncate(seq, a.keep).and_then(|()| pool.len(seq));
        let first = rows.len() - drafted - 1;
        let spec = self.spec_mut();
        let secs = match cost {
            Cost::Since(t0) => t0.elapsed().as_secs_f64(),
            Cost::Secs(s) => s,
        } + std::mem::take(&mut spec.draft_s);
        spec.stats.steps += 1;
        spec.stats.spec_steps += 1;
        spec.stats.drafted += drafted;
        spec.stats.accepted += a.accepted;
        spec.stats.rejected_steps += usize::from(a.rejected);
        spec.stats.bonus += usize::from(a.bonus);
        spec.stats.committed += a.committed;
        spec.gate.record_verify(
            rows.len() - first,
            drafted,
            a.accepted,
            a.committed + a.forced_in,
            secs,
        );
        if !a.top_rows.is_empty() {
            let fed: Vec<TopKRow<'_>> = rows[first..]
                .iter()
                .zip(&a.top_rows)
                .map(|(&token, ids)| TopKRow { token, topk: ids })
                .collect();
            spec.index.observe_topk(&fed);
        }
        // Every token this verify committed reaches the index at once, so the draft's
        // source is credited with its whole accepted run.
        self.sync_index();
        self.set_evaluated(truncated?);
        match (self.ready.pop_front(), a.failure) {
            (Some(step), failure) => {
                self.deferred = failure;
                Ok(step)
            }
            (None, Some(e)) => Err(e),
            (None, None) => Err(crate::error::invalid(
                "speculation",
                "a verify committed nothing",
            )),
        }
    }
}

/// The head's top ids and distinct values to ask for, `(k, distinct)`, for rows decided
/// from the head ([`Generation::decides_from_head`]: `top_k` 0 for the greedy pick) whose
/// guesses want `feedback` top ids: a top-k sampler needs the `top_k + 1` largest, all
/// distinct (its cut, and its order, are then the same whatever the rest of the row is).
pub(crate) fn head_request(top_k: usize, feedback: Option<usize>) -> (usize, usize) {
    let fb = feedback.unwrap_or(0);
    match top_k {
        0 => (fb, 0),
        k => ((k + 1).max(fb), k + 1),
    }
}

/// What a verify's forward gave for its rows from the last pending one on.
pub(crate) enum Verified<'a> {
    /// The head's answer for rows decided from it ([`Generation::decides_from_head`]):
    /// each row's greedy pick, its top ids and values (best first), its whole logits
    /// where those values were not distinct, and how many top ids the guesses want.
    Head {
        pick: &'a [Option<u32>],
        top: &'a [Vec<u32>],
        vals: &'a [Vec<f32>],
        full: &'a mut [Option<Vec<f32>>],
        feedback: Option<usize>,
    },
    /// Every row's logits, and how many top ids to take from each for the guesses.
    Logits {
        logits: &'a mut [f32],
        top_k: Option<usize>,
    },
}

/// A verify's decisions ([`Generation::accept_verified`]).
pub(crate) struct Accepted {
    /// Cache length to keep.
    keep: usize,
    committed: usize,
    /// Drafts accepted, forced tokens that matched the draft included.
    accepted: usize,
    forced_in: usize,
    rejected: bool,
    bonus: bool,
    failure: Option<crate::error::EngineError>,
    top_rows: Vec<Vec<u32>>,
}

/// What a verify cost the gate weighs: the time since it began (a lone step), or a
/// share of a batched forward's.
pub(crate) enum Cost {
    Since(Instant),
    Secs(f64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_medium_match_rearms_an_off_gate_unless_an_mtp_head_would_draft() {
        assert!(!rearms(REARM_MATCH - 1, false));
        assert!(rearms(REARM_MATCH, false), "text repeating: probe now");
        const { assert!(REARM_MATCH < STRONG_MATCH) };
        // With an MTP head a probe below the strong match would judge the head's
        // drafts, not the text's.
        assert!(!rearms(REARM_MATCH, true));
        assert!(rearms(STRONG_MATCH, true));
    }
}
