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
use crate::generation::{Generation, Step};
use crate::mtp_draft::MtpDraft;
use crate::pool::SeqPool;

/// An exact match this long makes a gate that is off probe at once.
const STRONG_MATCH: usize = 8;

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

    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    pub(crate) fn summary(&self) -> String {
        let source = match &self.mtp {
            Some(m) => format!("MTP head ({} head rows)", m.head_rows),
            None => self.index.summary(),
        };
        format!(
            "gate {:?} (estimated speedup {:.2}, budget {}); {source}",
            self.gate.state(),
            self.gate.est_speedup(),
            self.gate.budget(),
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
        // Tokens forced since the last step are part of the context drafts continue.
        self.sync_index();
        let seq = self.seq();
        if let Some(m) = self.spec.as_deref_mut().and_then(|s| s.mtp.as_mut()) {
            m.sync(pool, seq);
        }
        let room = self
            .remaining()
            .saturating_sub(1)
            .min(pool.n_ctx().saturating_sub(self.history.len()));
        let (mut draft, allowed) = {
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
            let strong = spec.index.best_match() >= STRONG_MATCH;
            let allowed = spec.gate.allows(strong);
            if allowed {
                let budget = spec.gate.budget().min(room);
                if budget >= spec.gate.options().min_draft {
                    let (min_match, guesses) = (spec.gate.min_match(), spec.gate.guesses_pay());
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
                }
            }
            (draft, allowed)
        };
        // Constrained drafting: a draft goes only as far as every processor (a grammar)
        // accepts it.
        let suggested = draft.len();
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
        let result = if draft.is_empty() {
            self.plain_step(pool, extra)
        } else {
            self.verify(pool, extra, &draft)
        };
        draft.clear();
        self.spec_mut().draft = draft;
        result
    }

    fn plain_step(
        &mut self,
        pool: &mut SeqPool,
        extra: &mut [&mut dyn LogitProcessor],
    ) -> Result<Step> {
        let t0 = Instant::now();
        let carried = *self.history.last().unwrap_or(&0);
        // Top-K feedback feeds the guessed drafts only; where those cannot pay, skip the
        // pass over the vocabulary.
        let (wants, k) = {
            let spec = self.spec_mut();
            let wants = spec.index.wants_topk() && spec.gate.guesses_pay();
            (wants, spec.gate.options().topk_feedback)
        };
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

    /// One forward over the pending tokens and `draft`, then the decisions row by row:
    /// while each committed token (and the tokens a grammar forces after it) equals the
    /// next row's input, the row after it is valid and decides the next token.
    fn verify(
        &mut self,
        pool: &mut SeqPool,
        extra: &mut [&mut dyn LogitProcessor],
        draft: &[u32],
    ) -> Result<Step> {
        let t0 = Instant::now();
        let n0 = self.evaluated();
        let p = self.history.len() - n0;
        let mut rows = Vec::with_capacity(p + draft.len());
        rows.extend_from_slice(&self.history[n0..]);
        rows.extend_from_slice(draft);
        let seq = self.seq();
        let (wants, k) = {
            let spec = self.spec_mut();
            let wants = spec.index.wants_topk() && spec.gate.guesses_pay();
            (wants, spec.gate.options().topk_feedback)
        };
        // Rows before the last pending one predict tokens already committed.
        let first = p - 1;
        if self.spec_mut().mtp.is_some() {
            MtpDraft::request_capture(pool, seq);
        }
        // Greedy rows with nothing between the logits and the pick: the head gives the
        // picks (and the top ids the guesses feed on) without computing most logits
        // (bitwise the same picks and ids).
        let greedy = extra.is_empty() && self.decides_by_argmax();
        let mut picks = fucina_model::greedy::Picks::default();
        let mut empty = [0f32; 0];
        let logits: &mut [f32] = if greedy {
            let kk = if wants { k } else { 0 };
            picks.clone_from(pool.eval_verify_greedy_from(seq, &rows, first, kk)?);
            &mut empty
        } else {
            pool.eval_verify_from(seq, &rows, first)?
        };
        let vocab = logits.len() / (rows.len() - first);
        let mut topk: Vec<Vec<u32>> = Vec::new();
        let (mut committed, mut accepted, mut forced_in, mut rejected) = (0usize, 0, 0, false);
        // Rows whose input is committed history (the cache keeps exactly those).
        let mut valid = p;
        let mut failure = None;
        let mut r = first;
        while r < rows.len() {
            let at = self.history.len();
            let decided = if greedy {
                if wants {
                    topk.push(std::mem::take(&mut picks.top[r - first]));
                }
                self.decide_pick(picks.pick[r - first])
            } else {
                let row = &mut logits[(r - first) * vocab..(r - first + 1) * vocab];
                if wants {
                    let mut ids = Vec::new();
                    fucina_model::greedy::top_k(row, k, &mut ids);
                    topk.push(ids);
                }
                self.decide_inner(row, extra)
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
        // The cache keeps every row whose input is committed history (a hybrid model's
        // cache may land earlier: the next step evaluates the rest).
        pool.truncate(seq, n0 + valid)?;
        self.set_evaluated(pool.len(seq)?);
        let spec = self.spec_mut();
        let dt = t0.elapsed().as_secs_f64() + std::mem::take(&mut spec.draft_s);
        spec.stats.steps += 1;
        spec.stats.spec_steps += 1;
        spec.stats.drafted += draft.len();
        spec.stats.accepted += accepted + forced_in;
        spec.stats.rejected_steps += usize::from(rejected);
        spec.stats.bonus += usize::from(valid == rows.len() && !rejected);
        spec.stats.committed += committed;
        spec.gate.record_verify(
            rows.len() - first,
            draft.len(),
            accepted + forced_in,
            committed + forced_in,
            dt,
        );
        if wants {
            let fed: Vec<TopKRow<'_>> = rows[first..]
                .iter()
                .zip(&topk)
                .map(|(&token, ids)| TopKRow { token, topk: ids })
                .collect();
            spec.index.observe_topk(&fed);
        }
        // Every token this verify committed reaches the index at once, so the draft's
        // source is credited with its whole accepted run.
        self.sync_index();
        match (self.ready.pop_front(), failure) {
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
