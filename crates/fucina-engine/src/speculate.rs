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

use std::collections::VecDeque;
use std::time::Instant;

use fucina_sample::LogitProcessor;
use fucina_spec::{CostGate, DraftSource, SpecOptions, SpeculationIndex, Stats, TopKRow};

use crate::error::{EngineError, Result};
use crate::generation::{Generation, Step};
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
    /// Steps committed by the last verify, not yet handed out.
    pub(crate) ready: VecDeque<Step>,
    /// An error after the first committed step of a verify, surfaced once the
    /// committed steps before it are out (as a plain run would have).
    pub(crate) deferred: Option<EngineError>,
}

impl Speculator {
    pub(crate) fn new(opts: SpecOptions, n_vocab: usize, prompt: &[u32]) -> Speculator {
        let mut index = SpeculationIndex::new(n_vocab);
        index.accounting_min_draft = opts.min_draft;
        index.observe(prompt);
        Speculator {
            index,
            gate: CostGate::new(opts),
            stats: Stats::default(),
            draft: Vec::new(),
            ready: VecDeque::new(),
            deferred: None,
        }
    }

    pub(crate) fn observe(&mut self, token: u32) {
        self.index.observe(&[token]);
    }

    pub(crate) fn add_reference(&mut self, tokens: &[u32]) {
        self.index.add_reference(tokens);
    }

    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    pub(crate) fn summary(&self) -> String {
        format!(
            "gate {:?} (estimated speedup {:.2}, budget {}); {}",
            self.gate.state(),
            self.gate.est_speedup(),
            self.gate.budget(),
            self.index.summary()
        )
    }
}

/// Ids of the `k` largest logits of `row`, best first (ties: the lower id).
pub(crate) fn top_k(row: &[f32], k: usize, out: &mut Vec<u32>) {
    out.clear();
    if k == 0 {
        return;
    }
    let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
    let mut floor = f32::NEG_INFINITY;
    for (i, &x) in row.iter().enumerate() {
        if best.len() == k && x <= floor {
            continue;
        }
        if x.is_nan() {
            continue;
        }
        let at = best.iter().position(|&(v, _)| x > v).unwrap_or(best.len());
        best.insert(at, (x, i as u32));
        best.truncate(k);
        if best.len() == k {
            floor = best[k - 1].0;
        }
    }
    out.extend(best.iter().map(|&(_, i)| i));
}

impl Generation {
    /// One decode step with speculation on: a verify when the source drafts enough, a
    /// plain step otherwise. `self` carries exactly one pending token.
    pub(crate) fn speculative_step(
        &mut self,
        pool: &mut SeqPool,
        extra: &mut [&mut dyn LogitProcessor],
    ) -> Result<Step> {
        let room = self
            .remaining()
            .saturating_sub(1)
            .min(pool.n_ctx().saturating_sub(self.history.len()));
        let mut draft = {
            let Some(spec) = self.spec.as_deref_mut() else {
                return Err(crate::error::invalid("speculation", "is off"));
            };
            let mut draft = std::mem::take(&mut spec.draft);
            draft.clear();
            let strong = spec.index.best_match() >= STRONG_MATCH;
            if spec.gate.allows(strong) {
                let min = spec.gate.options().min_draft;
                let budget = spec.gate.budget().min(room);
                if budget >= min {
                    let (min_match, guesses) = (spec.gate.min_match(), spec.gate.guesses_pay());
                    spec.index
                        .suggest_with(&self.history, budget, min_match, guesses, &mut draft);
                    draft.truncate(budget);
                }
                if draft.len() < min {
                    draft.clear();
                    spec.stats.fallback_steps += 1;
                }
            } else {
                spec.stats.disabled_steps += 1;
            }
            draft
        };
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
        let seq = self.seq();
        let logits = pool.eval(seq, &[carried], &mut |_, _| {})?;
        let mut ids = Vec::new();
        if wants {
            top_k(logits, k, &mut ids);
        }
        self.set_evaluated(self.history.len());
        let step = self.decide_inner(logits, extra)?;
        let dt = t0.elapsed().as_secs_f64();
        let spec = self.spec_mut();
        spec.gate.record_plain(dt);
        spec.stats.steps += 1;
        spec.stats.committed += 1;
        if wants {
            spec.index.observe_topk(&[TopKRow {
                token: carried,
                topk: &ids,
            }]);
        }
        spec.index.observe(&[step.token]);
        Ok(step)
    }

    fn verify(
        &mut self,
        pool: &mut SeqPool,
        extra: &mut [&mut dyn LogitProcessor],
        draft: &[u32],
    ) -> Result<Step> {
        let t0 = Instant::now();
        let n = self.history.len();
        let mut rows = Vec::with_capacity(draft.len() + 1);
        rows.push(self.history[n - 1]);
        rows.extend_from_slice(draft);
        let seq = self.seq();
        let (wants, k) = {
            let spec = self.spec_mut();
            let wants = spec.index.wants_topk() && spec.gate.guesses_pay();
            (wants, spec.gate.options().topk_feedback)
        };
        let logits = pool.eval_verify(seq, &rows)?;
        let vocab = logits.len() / rows.len();
        let mut topk: Vec<Vec<u32>> = Vec::new();
        let (mut committed, mut accepted, mut rejected) = (0usize, 0usize, false);
        let mut failure = None;
        for (i, row) in logits.chunks_exact_mut(vocab).enumerate() {
            if wants {
                let mut ids = Vec::new();
                top_k(row, k, &mut ids);
                topk.push(ids);
            }
            match self.decide_inner(row, extra) {
                Ok(step) => {
                    committed += 1;
                    let (token, finished) = (step.token, step.finish.is_some());
                    self.spec_mut().ready.push_back(step);
                    if finished {
                        break;
                    }
                    if i < draft.len() {
                        if token != draft[i] {
                            rejected = true;
                            break;
                        }
                        accepted += 1;
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        // The cache keeps the carried token and every committed token but the last
        // (a hybrid model's cache may land earlier: the next step evaluates the rest).
        pool.truncate(seq, n - 1 + committed)?;
        self.set_evaluated(pool.len(seq)?);
        let dt = t0.elapsed().as_secs_f64();
        let spec = self.spec_mut();
        spec.stats.steps += 1;
        spec.stats.spec_steps += 1;
        spec.stats.drafted += draft.len();
        spec.stats.accepted += accepted;
        spec.stats.rejected_steps += usize::from(rejected);
        spec.stats.bonus += usize::from(accepted == draft.len() && committed == draft.len() + 1);
        spec.stats.committed += committed;
        spec.gate
            .record_verify(rows.len(), draft.len(), accepted, committed, dt);
        if wants {
            let fed: Vec<TopKRow<'_>> = rows
                .iter()
                .zip(&topk)
                .map(|(&token, ids)| TopKRow { token, topk: ids })
                .collect();
            spec.index.observe_topk(&fed);
        }
        let Some(spec) = self.spec.as_deref_mut() else {
            return Err(crate::error::invalid("speculation", "is off"));
        };
        spec.index.observe(&self.history[n..]);
        match (spec.ready.pop_front(), failure) {
            (Some(step), failure) => {
                spec.deferred = failure;
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
