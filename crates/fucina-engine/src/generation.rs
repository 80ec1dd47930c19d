//! One generation: a prompt continued token by token on its own sequence, with its
//! sampler, processors, stop rules and streaming text decoder.
//!
//! Each [`Generation::step`] evaluates what is pending (the prompt on the first
//! step, in chunks with progress reports; the last sampled token after that), runs
//! the logit processors and the sampler on the logits row in place, commits the
//! token and applies the stop rules, in this order:
//! 1. an end-of-generation token (unless `ignore_eos`) or a `stop_ids` token ends
//!    the generation with [`FinishReason::Stop`] and is not part of the text;
//! 2. the token's text goes through the [`StopMatcher`]: a stop string ends the
//!    generation before it (the text up to it is emitted, the string is not);
//! 3. `max_tokens` or a full context ends it with [`FinishReason::Length`].
//!
//! Tokens a processor forces (a grammar's fast-forward span, or its stop token once it
//! is complete) are committed without sampling, their steps queued, and evaluated in
//! one forward with the next pending token on every path (plain, speculative,
//! lockstep), with pinned numerics, so the output is the same whichever path runs.
//!
//! The forward of a sampled token runs at the start of the next step, so a
//! generation that stops (or is dropped, or cancelled between tokens) never pays for
//! a forward whose logits nobody reads. The sampler draws once per committed token,
//! so a seed fixes the tokens whatever the caller's pace.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fucina_sample::{LogitProcessor, Sampler, SamplingParams};
use fucina_spec::{SpecOptions, Stats};
use fucina_tokenizer::{Tokenizer, Utf8Stream};

use crate::error::{invalid, EngineError, Result};
use crate::logprobs::MAX_TOP_LOGPROBS;
use crate::logprobs::{log_probs, TokenLogprobs};
use crate::pool::{SeqId, SeqPool};
use crate::speculate::Speculator;
use crate::stop::StopMatcher;

/// What the head gave for one row in place of its logits ([`fucina_model::greedy::Picks`]):
/// its greedy pick, its largest logits' ids and values best first, and its whole logits
/// where those values were not distinct.
pub(crate) struct HeadRow<'a> {
    pub pick: Option<u32>,
    pub top: &'a [u32],
    pub vals: &'a [f32],
    pub full: Option<&'a mut [f32]>,
}

impl<'a> HeadRow<'a> {
    /// Row `i` of the head's per-row answers (`top` and `vals` empty where no top
    /// values were asked for).
    pub(crate) fn at(
        pick: &[Option<u32>],
        top: &'a [Vec<u32>],
        vals: &'a [Vec<f32>],
        full: &'a mut [Option<Vec<f32>>],
        i: usize,
    ) -> HeadRow<'a> {
        HeadRow {
            pick: pick[i],
            top: top.get(i).map_or(&[], |t| &t[..]),
            vals: vals.get(i).map_or(&[], |v| &v[..]),
            full: full.get_mut(i).and_then(|f| f.as_deref_mut()),
        }
    }
}

/// What a generation does besides sampling.
#[derive(Clone, Debug)]
pub struct GenerationOptions {
    /// Tokens to generate at most (`None`: until the context is full).
    pub max_tokens: Option<usize>,
    /// The sampler's parameters (temperature ≤ 0 is greedy).
    pub sampling: SamplingParams,
    /// Stop strings (the earliest in the text wins; none is emitted).
    pub stop: Vec<String>,
    /// Extra token ids that end the generation like an end-of-generation token.
    pub stop_ids: Vec<u32>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Report each token's log-probability and this many top alternatives, from
    /// the model's own distribution (the raw logits' log-softmax).
    pub logprobs: Option<usize>,
    /// Render control tokens as text.
    pub special: bool,
    /// Lossless speculative decoding with these options (`None`: plain decoding). The
    /// tokens, draws and cache are exactly those of a plain run.
    pub speculation: Option<SpecOptions>,
}

impl Default for GenerationOptions {
    fn default() -> Self {
        GenerationOptions {
            max_tokens: Some(128),
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            stop_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            special: false,
            speculation: None,
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token, a stop id or a stop string.
    Stop,
    /// `max_tokens` or the context's capacity.
    Length,
}

impl FinishReason {
    /// OpenAI's name: `"stop"` or `"length"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// One step's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The token committed by this step.
    pub token: u32,
    /// Whether the token is part of the output (false for the end-of-generation or
    /// stop-id token that ended it).
    pub emitted: bool,
    /// Text that became final with this step (may be empty: an incomplete UTF-8
    /// sequence, or text held back as the possible start of a stop string).
    pub text: String,
    /// With [`GenerationOptions::logprobs`].
    pub logprobs: Option<TokenLogprobs>,
    /// Set on the last step.
    pub finish: Option<FinishReason>,
    /// The stop string that ended the generation (index into `stop`).
    pub stop_index: Option<usize>,
}

/// A prompt being continued on its own sequence of a [`SeqPool`].
pub struct Generation {
    seq: SeqId,
    released: bool,
    /// Whether the sequence is the generation's own (freed on release) or a
    /// Conversation's (kept, holding the turn, for the next one).
    owns_seq: bool,
    /// Prompt positions the sequence already held (not evaluated again).
    reused: usize,
    tokenizer: Arc<Tokenizer>,
    sampler: Sampler,
    pub(crate) processors: Vec<Box<dyn LogitProcessor>>,
    opts: GenerationOptions,
    /// Prompt then generated tokens.
    pub(crate) history: Vec<u32>,
    prompt_len: usize,
    /// `history[evaluated..]` is not in the sequence yet.
    evaluated: usize,
    max_new: usize,
    utf8: Utf8Stream,
    stop: StopMatcher,
    finish: Option<FinishReason>,
    cancel: Arc<AtomicBool>,
    /// Raw logits kept for log-probabilities (only with `logprobs`).
    raw: Vec<f32>,
    /// Speculative decoding's state (with `speculation`).
    pub(crate) spec: Option<Box<Speculator>>,
    /// Steps committed ahead (a verify's, grammar-forced tokens), not yet handed out.
    pub(crate) ready: VecDeque<Step>,
    /// An error after the first of several steps committed at once, surfaced once the
    /// steps before it are out (as a plain run would have).
    pub(crate) deferred: Option<EngineError>,
    /// Tokens committed without sampling because a processor forced them.
    forced: usize,
    n_vocab: usize,
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("seq", &self.seq)
            .field("prompt_tokens", &self.prompt_len)
            .field("generated", &self.generated().len())
            .field("finish", &self.finish)
            .finish_non_exhaustive()
    }
}

impl Generation {
    /// Start continuing `prompt` on a new sequence of `pool`. Everything is checked
    /// here, before any compute: the prompt (non-empty, ids in the vocabulary, fits
    /// the context), the sampling parameters, the stop rules.
    pub fn new(
        pool: &mut SeqPool,
        tokenizer: Arc<Tokenizer>,
        prompt: &[u32],
        opts: GenerationOptions,
        processors: Vec<Box<dyn LogitProcessor>>,
    ) -> Result<Generation> {
        Generation::start(pool, None, tokenizer, prompt, opts, processors)
    }

    /// Continue `prompt` on `seq`, a sequence the caller keeps (a Conversation's):
    /// the longest common prefix of what `seq` holds and `prompt` is kept and only the
    /// rest is evaluated ([`SeqPool::reuse_prefix`]; [`Generation::reused`] says how
    /// much). Releasing the generation leaves the sequence allocated, holding the
    /// prompt and every generated token whose forward ran.
    pub fn on_sequence(
        pool: &mut SeqPool,
        seq: SeqId,
        tokenizer: Arc<Tokenizer>,
        prompt: &[u32],
        opts: GenerationOptions,
        processors: Vec<Box<dyn LogitProcessor>>,
    ) -> Result<Generation> {
        pool.len(seq)?;
        Generation::start(pool, Some(seq), tokenizer, prompt, opts, processors)
    }

    fn start(
        pool: &mut SeqPool,
        seq: Option<SeqId>,
        tokenizer: Arc<Tokenizer>,
        prompt: &[u32],
        opts: GenerationOptions,
        processors: Vec<Box<dyn LogitProcessor>>,
    ) -> Result<Generation> {
        let n_vocab = pool.model().config().n_vocab;
        if prompt.is_empty() {
            return Err(invalid("prompt", "is empty"));
        }
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(invalid(
                "prompt",
                format!("token id {bad} is outside the vocabulary of {n_vocab}"),
            ));
        }
        if prompt.len() >= pool.n_ctx() {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                n_ctx: pool.n_ctx(),
            });
        }
        if let Some(&bad) = opts.stop_ids.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(invalid(
                "stop_ids",
                format!("token id {bad} is outside the vocabulary of {n_vocab}"),
            ));
        }
        if let Some(n) = opts.logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
            return Err(invalid(
                "logprobs",
                format!("{n} alternatives requested; at most {MAX_TOP_LOGPROBS}"),
            ));
        }
        let mut sampler = Sampler::new(opts.sampling.clone(), n_vocab)?;
        // Penalties count the generated tokens only, as llama-cpp-python does (its
        // sampler accepts what it samples, never the prompt).
        sampler.set_penalty_start(prompt.len());
        let stop = StopMatcher::new(opts.stop.clone())?;
        let room = pool.n_ctx() - prompt.len();
        let max_new = opts.max_tokens.map_or(room, |m| m.min(room));
        let spec = opts
            .speculation
            .clone()
            .map(|o| Box::new(Speculator::new(o, pool, prompt)));
        let (seq, owns_seq, reused) = match seq {
            Some(seq) => (seq, false, pool.reuse_prefix(seq, prompt)?),
            None => (pool.alloc()?, true, 0),
        };
        Ok(Generation {
            seq,
            released: false,
            owns_seq,
            reused,
            tokenizer,
            sampler,
            processors,
            opts,
            history: prompt.to_vec(),
            prompt_len: prompt.len(),
            evaluated: reused,
            max_new,
            utf8: Utf8Stream::new(),
            stop,
            finish: if max_new == 0 {
                Some(FinishReason::Length)
            } else {
                None
            },
            cancel: Arc::new(AtomicBool::new(false)),
            raw: Vec::new(),
            spec,
            ready: VecDeque::new(),
            deferred: None,
            forced: 0,
            n_vocab,
        })
    }

    /// The sequence this generation writes.
    pub fn seq(&self) -> SeqId {
        self.seq
    }

    /// Prompt positions its sequence already held, kept instead of evaluated (0 on a
    /// sequence of its own).
    pub fn reused(&self) -> usize {
        self.reused
    }

    /// Tokens of the prompt.
    pub fn prompt_tokens(&self) -> &[u32] {
        &self.history[..self.prompt_len]
    }

    /// Tokens committed so far (including a final end-of-generation token).
    pub fn generated(&self) -> &[u32] {
        &self.history[self.prompt_len..]
    }

    /// Why the generation ended (`None` while it runs).
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    /// Whether [`Generation::step`] will return more steps.
    pub fn is_finished(&self) -> bool {
        self.finish.is_some() && !self.has_queued()
    }

    /// Whether steps committed ahead (a verify's, grammar-forced tokens) are still to be
    /// handed out by [`Generation::step`].
    pub fn has_queued(&self) -> bool {
        !self.ready.is_empty() || self.deferred.is_some()
    }

    /// Tokens committed without sampling because a processor (a grammar) forced them.
    pub fn forced_count(&self) -> usize {
        self.forced
    }

    /// Speculative decoding's counts (`None` without speculation).
    pub fn spec_stats(&self) -> Option<Stats> {
        self.spec.as_ref().map(|s| s.stats())
    }

    /// A line on the cost gate and the draft sources (`None` without speculation).
    pub fn spec_summary(&self) -> Option<String> {
        self.spec.as_ref().map(|s| s.summary())
    }

    /// Whether speculation drafts with the model's multi-token-prediction head.
    pub fn drafts_with_mtp(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| s.mtp.is_some())
    }

    /// Positions the MTP head's own cache holds (`None` unless drafting with it): at
    /// most one more than the sequence (the carried token's row), and rewound with it.
    pub fn mtp_cache_len(&self) -> Option<usize> {
        self.spec.as_ref().and_then(|s| s.mtp_cache_len())
    }

    /// Index `tokens` as a reference document the drafts may quote (RAG); no-op
    /// without speculation.
    pub fn add_reference(&mut self, tokens: &[u32]) {
        if let Some(s) = &mut self.spec {
            s.add_reference(tokens);
        }
    }

    pub(crate) fn spec_mut(&mut self) -> &mut Speculator {
        self.spec
            .as_mut()
            .expect("speculative steps run only with speculation on")
    }

    /// Tokens the generation may still commit.
    pub(crate) fn remaining(&self) -> usize {
        self.max_new.saturating_sub(self.generated().len())
    }

    /// The sequence holds the first `n` history tokens.
    pub(crate) fn set_evaluated(&mut self, n: usize) {
        self.evaluated = n;
    }

    /// History tokens the sequence holds.
    pub(crate) fn evaluated(&self) -> usize {
        self.evaluated
    }

    /// The options it was started with.
    pub fn options(&self) -> &GenerationOptions {
        &self.opts
    }

    /// RNG draws consumed so far (one per sampled token; none when greedy).
    pub fn draws(&self) -> u64 {
        self.sampler.draws()
    }

    /// A flag that, once set (from any thread), ends the generation before its next
    /// token.
    pub fn cancel_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// Give the sequence back to the pool, or to the Conversation that lent it
    /// (idempotent; also ends the generation).
    pub fn release(&mut self, pool: &mut SeqPool) {
        if !self.released {
            if self.owns_seq {
                pool.remove(self.seq);
            }
            self.released = true;
        }
        self.finish.get_or_insert(FinishReason::Stop);
    }

    /// Produce the next token. `extra` processors run after the generation's own
    /// (bindings pass per-call ones, such as Python callables); `progress(done, total)`
    /// follows the prompt's evaluation. `Ok(None)` once finished or cancelled.
    /// On error the generation ends (its sequence stays allocated until
    /// [`Generation::release`]).
    pub fn step(
        &mut self,
        pool: &mut SeqPool,
        extra: &mut [&mut dyn LogitProcessor],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Option<Step>> {
        if self.released {
            return Ok(None);
        }
        if self.cancel.load(Ordering::Relaxed) {
            // Cancelled: no more steps, not even ones already committed ahead.
            self.finish = Some(FinishReason::Stop);
            self.ready.clear();
            self.deferred = None;
            return Ok(None);
        }
        if let Some(step) = self.ready.pop_front() {
            return Ok(Some(step));
        }
        if let Some(e) = self.deferred.take() {
            self.finish = Some(FinishReason::Stop);
            return Err(e);
        }
        if self.finish.is_some() {
            return Ok(None);
        }
        let result = self.step_inner(pool, extra, progress);
        if result.is_err() {
            self.finish = Some(FinishReason::Stop);
        }
        result.map(Some)
    }

    fn step_inner(
        &mut self,
        pool: &mut SeqPool,
        extra: &mut [&mut dyn LogitProcessor],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Step> {
        if extra.is_empty() && self.fast_forward()? {
            if let Some(step) = self.ready.pop_front() {
                return Ok(step);
            }
        }
        let decoding = self.evaluated >= self.prompt_len;
        if self.spec.is_some() && decoding {
            return self.speculative_step(pool, extra);
        }
        if self.spec.as_ref().is_some_and(|s| s.mtp.is_some()) {
            // The prompt's hidden states feed the MTP head's first catch-up.
            pool.capture_next(Some(self.seq));
        }
        let pending = &self.history[self.evaluated..];
        let logits = if decoding && pending.len() > 1 {
            // Forced tokens then the last sampled one: one forward whose rows are
            // bitwise one-row decode steps, as the speculative path evaluates them.
            pool.eval_verify_from(self.seq, pending, pending.len() - 1)?
        } else {
            // Progress reports follow the prompt's evaluation only, not decode steps.
            let mut quiet = |_: usize, _: usize| {};
            let progress = if decoding { &mut quiet } else { progress };
            pool.eval(self.seq, pending, progress)?
        };
        self.evaluated = self.history.len();
        let step = self.decide_inner(logits, extra)?;
        // The draft index mirrors every committed token.
        self.sync_index();
        Ok(step)
    }

    /// End the generation if its cancel flag is set; whether it did (the check
    /// [`Generation::step`] makes first, for loops that call [`Generation::decide`]).
    pub fn check_cancel(&mut self) -> bool {
        if self.finish.is_none() && self.cancel.load(Ordering::Relaxed) {
            self.finish = Some(FinishReason::Stop);
            return true;
        }
        false
    }

    /// Tokens that must be appended to this generation's sequence before its next
    /// decision (the prompt at first, then the last committed token, after any
    /// grammar-forced ones). The seam for a scheduler that evaluates many generations'
    /// pending rows in one batched forward and then calls [`Generation::decide`] on each
    /// with its last row; call [`Generation::fast_forward`] before reading it. Decode-time
    /// rows must be evaluated with pinned numerics for the tokens to be a lone run's.
    pub fn pending(&self) -> &[u32] {
        if self.finish.is_some() {
            &[]
        } else {
            &self.history[self.evaluated..]
        }
    }

    /// Decide the next token from `logits`, the row of the last [`pending`] token
    /// that the caller has appended to this generation's sequence (edited in place
    /// by the processors and the sampler).
    ///
    /// [`pending`]: Generation::pending
    pub fn decide(
        &mut self,
        logits: &mut [f32],
        extra: &mut [&mut dyn LogitProcessor],
    ) -> Result<Option<Step>> {
        self.decide_with(|g| g.decide_inner(logits, extra))
    }

    /// [`Generation::decide`] from what the head gave for the row instead of its logits,
    /// for a generation that [`Generation::decides_from_head`] (see
    /// [`Generation::decide_head`]).
    pub(crate) fn decide_from_head(&mut self, row: HeadRow<'_>) -> Result<Option<Step>> {
        self.decide_with(|g| g.decide_head(row))
    }

    fn decide_with(
        &mut self,
        decide: impl FnOnce(&mut Self) -> Result<Step>,
    ) -> Result<Option<Step>> {
        if self.finish.is_some() || self.released {
            return Ok(None);
        }
        self.evaluated = self.history.len();
        let result = decide(self);
        match &result {
            Ok(_) => self.sync_index(),
            Err(_) => self.finish = Some(FinishReason::Stop),
        }
        result.map(Some)
    }

    /// The decision on one row: processors, sampler, commit, stop rules (also the
    /// speculative verify loop's, row by row).
    pub(crate) fn decide_inner(
        &mut self,
        logits: &mut [f32],
        extra: &mut [&mut dyn LogitProcessor],
    ) -> Result<Step> {
        let top = match self.opts.logprobs {
            Some(n) => {
                self.raw.clear();
                self.raw.extend_from_slice(logits);
                Some(n)
            }
            None => None,
        };
        let token = {
            let mut procs: Vec<&mut dyn LogitProcessor> =
                Vec::with_capacity(self.processors.len() + extra.len());
            procs.extend(self.processors.iter_mut().map(|p| &mut **p as _));
            procs.extend(extra.iter_mut().map(|p| &mut **p as _));
            let token = self.sampler.sample(logits, &self.history, &mut procs)?;
            for p in procs {
                p.commit(token);
            }
            token
        };
        let logprobs = top.map(|n| log_probs(&self.raw, token, n));
        self.commit_token(token, logprobs)
    }

    /// Whether this generation's pick from a row of logits is that row's greedy pick
    /// (first largest logit, NaN ignored) and nothing else reads the row: greedy with
    /// no bias, penalty, processor or log-probabilities.
    pub(crate) fn decides_by_argmax(&self) -> bool {
        self.opts.logprobs.is_none()
            && self.processors.is_empty()
            && self.sampler.decides_by_argmax()
    }

    /// Whether this generation can decide a row from the head's top values instead of
    /// its logits, and from how many (`Some(0)`: the greedy pick alone,
    /// [`Generation::decides_by_argmax`]; `Some(k)`: a sampler whose decision reads only
    /// the row's `k` largest logits, fucina-sample's `Sampler::decides_from_top`, with no
    /// processor or log-probabilities).
    pub(crate) fn decides_from_head(&self) -> Option<usize> {
        if self.decides_by_argmax() {
            return Some(0);
        }
        if self.opts.logprobs.is_some() || !self.processors.is_empty() {
            return None;
        }
        self.sampler.decides_from_top()
    }

    /// [`Generation::decide_inner`] for a generation that [`Generation::decides_from_head`],
    /// from the head's answer for the row: the greedy pick, or the sampler's draw from the
    /// row's top-k values (bitwise the draw from its logits: the head gives the whole row
    /// where those are not distinct).
    pub(crate) fn decide_head(&mut self, row: HeadRow<'_>) -> Result<Step> {
        match self.decides_from_head() {
            Some(0) => self.decide_pick(row.pick),
            Some(k) => match row.full {
                Some(logits) => self.decide_inner(logits, &mut []),
                None if row.top.len() > k && row.vals.len() == row.top.len() => {
                    let cands: Vec<(u32, f32)> = row.top[..k]
                        .iter()
                        .copied()
                        .zip(row.vals[..k].iter().copied())
                        .collect();
                    let token = self.sampler.sample_top(&cands)?;
                    self.commit_token(token, None)
                }
                None => Err(EngineError::Scheduler(format!(
                    "the head gave {} top logits for a top-{k} sampler",
                    row.top.len()
                ))),
            },
            None => Err(EngineError::Scheduler(
                "a row decided from the head for a generation that needs its logits".into(),
            )),
        }
    }

    /// [`Generation::decide_inner`] for a generation that [`Generation::decides_by_argmax`],
    /// from the greedy pick of the row instead of its logits (`None`: no logit exceeded
    /// −∞, which fails as the sampler fails on such a row).
    pub(crate) fn decide_pick(&mut self, pick: Option<u32>) -> Result<Step> {
        match pick {
            Some(token) => self.commit_token(token, None),
            None => {
                let mut row = vec![f32::NAN; self.n_vocab];
                self.decide_inner(&mut row, &mut [])
            }
        }
    }

    /// Commit the tokens the processors force next, without sampling (a grammar's
    /// fast-forward: a span it leaves no choice in, or the stop token once it is
    /// complete), queueing their steps; whether any was. Every processor must agree
    /// on each token; log-probabilities need every row's logits, so with `logprobs`
    /// nothing is forced and each token is sampled under the processors' masks.
    ///
    /// A scheduler that evaluates [`Generation::pending`] rows itself calls this first
    /// (then hands out the queued steps with [`Generation::step`]), so forced tokens are
    /// committed on its path exactly as on [`Generation::step`]'s.
    pub fn fast_forward(&mut self) -> Result<bool> {
        if self.finish.is_some() || self.opts.logprobs.is_some() || self.processors.is_empty() {
            return Ok(false);
        }
        let mut any = false;
        while self.finish.is_none() {
            let (first, others) = self.processors.split_at_mut(1);
            let mut forced = first[0].forced_tokens(&self.history);
            for p in others {
                let n = p.valid_prefix_len(&self.history, &forced);
                forced.truncate(n);
            }
            let n_vocab = self.n_vocab;
            if let Some(bad) = forced.iter().position(|&t| t as usize >= n_vocab) {
                forced.truncate(bad);
            }
            if forced.is_empty() {
                break;
            }
            for token in forced {
                if self.finish.is_some() {
                    break;
                }
                for p in &mut self.processors {
                    p.commit(token);
                }
                let step = self.commit_token(token, None)?;
                self.forced += 1;
                self.ready.push_back(step);
                any = true;
            }
        }
        Ok(any)
    }

    /// Append a decided `token` to the history and apply the stop rules.
    fn commit_token(&mut self, token: u32, logprobs: Option<TokenLogprobs>) -> Result<Step> {
        self.history.push(token);
        let mut step = Step {
            token,
            emitted: true,
            text: String::new(),
            logprobs,
            finish: None,
            stop_index: None,
        };
        let ends = (!self.opts.ignore_eos && self.tokenizer.is_eog(token))
            || self.opts.stop_ids.contains(&token);
        if ends {
            step.emitted = false;
            step.finish = Some(FinishReason::Stop);
            step.text = self.flush_text();
        } else {
            let piece = self.tokenizer.token_to_piece(token, self.opts.special)?;
            let text = self.utf8.push(piece);
            let pushed = self.stop.push(&text);
            step.text = pushed.emit;
            if pushed.stopped.is_some() {
                step.stop_index = pushed.stopped;
                step.finish = Some(FinishReason::Stop);
            } else if self.generated().len() >= self.max_new {
                step.finish = Some(FinishReason::Length);
                step.text.push_str(&self.flush_text());
            }
        }
        self.finish = step.finish;
        Ok(step)
    }

    /// The decoder's and the stop matcher's held text, now final.
    fn flush_text(&mut self) -> String {
        let tail = self.utf8.flush();
        let mut out = self.stop.push(&tail);
        if out.stopped.is_none() {
            out.emit.push_str(&self.stop.flush());
        }
        out.emit
    }
}
