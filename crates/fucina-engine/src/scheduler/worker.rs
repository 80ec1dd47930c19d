//! The scheduler thread's loop: admission onto slots, cancellation, and the step
//! that decodes every live request (and a chunk of prefill) in one forward.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use fucina_tokenizer::Tokenizer;

use super::cost::StepCost;
use super::events::{Event, Outcome, ReqShared};
use super::metrics::Counters;
use super::slots::{self, SlotView};
use super::{lock, Job, Request, SchedulerConfig, Shared};
use crate::error::{EngineError, Result};
use crate::generation::{FinishReason, Generation, HeadRow, Step};
use crate::pool::{SeqId, SeqPool};
use crate::speculate::{Cost, Verified};

/// A batched forward's answers from the head not yet handed out (see
/// [`fucina_model::greedy::Picks`]; `top` and `vals` are empty where no top values were
/// asked for).
struct HeadLeft<'a> {
    pick: &'a [Option<u32>],
    top: &'a [Vec<u32>],
    vals: &'a [Vec<f32>],
    full: &'a mut [Option<Vec<f32>>],
}

/// The next `m` deciding rows of a batched forward's results, taken off the front of
/// `head` (a batch decided from the head) or of `logits` (`n_vocab` values a row).
fn next_rows<'a>(
    head: &mut Option<HeadLeft<'a>>,
    logits: &mut &'a mut [f32],
    m: usize,
    n_vocab: usize,
) -> Result<Verified<'a>> {
    let too_few = || EngineError::Scheduler("the forward returned too few rows".into());
    if let Some(h) = head {
        let (pick, rest) = h.pick.split_at_checked(m).ok_or_else(too_few)?;
        h.pick = rest;
        let (full, rest) = std::mem::take(&mut h.full)
            .split_at_mut_checked(m)
            .ok_or_else(too_few)?;
        h.full = rest;
        let (top, vals) = if h.top.is_empty() {
            (&[][..], &[][..])
        } else {
            let (top, rest) = h.top.split_at_checked(m).ok_or_else(too_few)?;
            h.top = rest;
            let (vals, rest) = h.vals.split_at_checked(m).ok_or_else(too_few)?;
            h.vals = rest;
            (top, vals)
        };
        Ok(Verified::Head {
            pick,
            top,
            vals,
            full,
            feedback: None,
        })
    } else {
        let (rows, rest) = std::mem::take(logits)
            .split_at_mut_checked(m * n_vocab)
            .ok_or_else(too_few)?;
        *logits = rest;
        Ok(Verified::Logits {
            logits: rows,
            top_k: None,
        })
    }
}

/// One slot: a sequence of the pool that outlives the requests run on it (its
/// tokens are the prefix cache).
struct Slot {
    seq: SeqId,
    busy: bool,
    last_used: u64,
}

/// A request running on a slot.
struct Active {
    req: Arc<ReqShared>,
    gen: Generation,
    slot: usize,
    /// Finished, failed or cancelled this step (removed at its end).
    done: bool,
}

/// One item of a step's forward: `active[i]` appends `n` of its pending tokens,
/// and decides a token from the last one's logits when `last` (the rest of a prompt
/// chunk has none).
struct Item {
    i: usize,
    n: usize,
    last: bool,
    /// A decode row (the request has generated) rather than prompt rows.
    decode: bool,
    /// A speculative verify: its `n` rows (the pending tokens, then the draft) and how
    /// many of them are drafted.
    verify: Option<(Vec<u32>, usize)>,
}

pub(crate) struct Worker {
    pool: SeqPool,
    slots: Vec<Slot>,
    active: Vec<Active>,
    tokenizer: Arc<Tokenizer>,
    cfg: SchedulerConfig,
    shared: Arc<Shared>,
    clock: u64,
    /// The request being admitted (failed if admission panics).
    admitting: Option<Arc<ReqShared>>,
    /// What a forward costs per row and whatever its rows (the verifies' charges).
    step_cost: StepCost,
}

impl Worker {
    pub(crate) fn new(
        pool: SeqPool,
        seqs: Vec<SeqId>,
        tokenizer: Arc<Tokenizer>,
        cfg: SchedulerConfig,
        shared: Arc<Shared>,
    ) -> Worker {
        Worker {
            pool,
            slots: seqs
                .into_iter()
                .map(|seq| Slot {
                    seq,
                    busy: false,
                    last_used: 0,
                })
                .collect(),
            active: Vec::new(),
            tokenizer,
            cfg,
            shared,
            clock: 0,
            admitting: None,
            step_cost: StepCost::default(),
        }
    }

    fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    fn push(&self, req: &Arc<ReqShared>, event: Event) {
        req.push(event, &self.shared.ready);
    }

    pub(crate) fn run(mut self) {
        while self.wait_for_work() {
            self.reap_cancelled();
            let r = catch_unwind(AssertUnwindSafe(|| {
                self.admit();
                self.step();
            }));
            if r.is_err() {
                // A bug, not bad input (that is an Err): fail what was running, start
                // the slots afresh and keep serving.
                self.fail_running("the scheduler hit an internal error; the request was dropped");
            }
        }
        self.fail_running("the scheduler shut down");
        let jobs = std::mem::take(&mut lock(&self.shared.inbox).jobs);
        for job in jobs {
            self.push(
                job.req(),
                Event::Failed(EngineError::Scheduler("the scheduler shut down".into())),
            );
        }
    }

    /// Block until there is something to do; `false` on shutdown. Queued requests
    /// that were cancelled leave the queue here.
    fn wait_for_work(&mut self) -> bool {
        let mut inbox = lock(&self.shared.inbox);
        loop {
            if inbox.shutdown {
                return false;
            }
            let before = inbox.jobs.len();
            let mut cancelled = Vec::new();
            inbox.jobs.retain(|j| {
                let keep = !j.req().is_cancelled();
                if !keep {
                    cancelled.push(Arc::clone(j.req()));
                }
                keep
            });
            if inbox.jobs.len() != before {
                drop(inbox);
                for req in cancelled {
                    Counters::add(&self.counters().requests_cancelled, 1);
                    self.push(&req, cancelled_outcome());
                }
                inbox = lock(&self.shared.inbox);
                continue;
            }
            if !self.active.is_empty() || !inbox.jobs.is_empty() {
                return true;
            }
            inbox = self
                .shared
                .wake
                .wait(inbox)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Admit queued requests, in order, while slots are free (embeddings need none).
    fn admit(&mut self) {
        loop {
            let free = self.slots.iter().any(|s| !s.busy);
            let job = {
                let mut inbox = lock(&self.shared.inbox);
                match inbox.jobs.front() {
                    Some(Job::Embed(..)) => inbox.jobs.pop_front(),
                    Some(Job::Generate(..)) if free => inbox.jobs.pop_front(),
                    _ => None,
                }
            };
            let Some(job) = job else { break };
            self.admitting = Some(Arc::clone(job.req()));
            match job {
                Job::Embed(req, tokens) => self.embed(&req, &tokens),
                Job::Generate(req, request) => self.start(req, *request),
            }
            self.admitting = None;
        }
    }

    fn embed(&mut self, req: &Arc<ReqShared>, tokens: &[u32]) {
        if req.is_cancelled() {
            Counters::add(&self.counters().requests_cancelled, 1);
            return self.push(req, cancelled_outcome());
        }
        let t = Instant::now();
        match self.pool.embed(tokens) {
            Ok(v) => {
                Counters::add(&self.counters().embeddings, 1);
                Counters::add(&self.counters().prompt_tokens_evaluated, tokens.len());
                self.counters()
                    .prefill_nanos
                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                self.push(req, Event::Embedding(v));
            }
            Err(e) => {
                Counters::add(&self.counters().requests_failed, 1);
                self.push(req, Event::Failed(e));
            }
        }
    }

    /// Put `request` on the slot the prefix-cache policy picks.
    fn start(&mut self, req: Arc<ReqShared>, request: Request) {
        if req.is_cancelled() {
            Counters::add(&self.counters().requests_cancelled, 1);
            return self.push(&req, cancelled_outcome());
        }
        let views: Vec<SlotView<'_>> = self
            .slots
            .iter()
            .map(|s| SlotView {
                tokens: self.pool.tokens(s.seq).unwrap_or_default(),
                busy: s.busy,
                last_used: s.last_used,
            })
            .collect();
        let choice = slots::choose(
            &request.prompt,
            &views,
            self.cfg.prefix_cache,
            self.cfg.min_copy,
        );
        let Some(choice) = choice else {
            // Admission only pops a request when a slot is free.
            let e = EngineError::Scheduler("no free slot at admission".into());
            return self.push(&req, Event::Failed(e));
        };
        let seq = self.slots[choice.slot].seq;
        let mut copied = 0;
        if let Some((src, n)) = choice.copy_from {
            if self.pool.copy_prefix(self.slots[src].seq, seq, n).is_ok() {
                copied = n;
            }
        }
        if !self.cfg.prefix_cache {
            // The slot's own sequence is always live.
            let _ = self.pool.clear(seq);
        }
        let n_prompt = request.prompt.len();
        let gen = Generation::on_sequence(
            &mut self.pool,
            seq,
            Arc::clone(&self.tokenizer),
            &request.prompt,
            request.options,
            request.processors,
        );
        match gen {
            Ok(mut gen) => {
                if !request.reference.is_empty() {
                    gen.add_reference(&request.reference);
                }
                let cached = gen.reused();
                let c = self.counters();
                Counters::add(&c.prompt_tokens, n_prompt);
                Counters::add(&c.prompt_tokens_cached, cached);
                Counters::add(&c.prompt_tokens_copied, copied.min(cached));
                self.slots[choice.slot].busy = true;
                self.push(
                    &req,
                    Event::Started {
                        prompt_tokens: n_prompt,
                        cached,
                    },
                );
                self.active.push(Active {
                    req,
                    gen,
                    slot: choice.slot,
                    done: false,
                });
                self.publish_busy();
            }
            Err(e) => {
                Counters::add(&self.counters().requests_failed, 1);
                self.push(&req, Event::Failed(e));
            }
        }
    }

    fn publish_busy(&self) {
        let busy = self.slots.iter().filter(|s| s.busy).count();
        self.counters()
            .slots_busy
            .store(busy as u64, Ordering::Relaxed);
    }

    /// Free the slots of cancelled requests, before the next step's forward.
    fn reap_cancelled(&mut self) {
        let now = self.shared.step.load(Ordering::Acquire);
        for i in 0..self.active.len() {
            if !self.active[i].done && self.active[i].req.is_cancelled() {
                let waited = self.active[i].req.steps_since_cancel(now);
                self.counters()
                    .cancel_steps_max
                    .fetch_max(waited, Ordering::Relaxed);
                self.finish(i, true);
            }
        }
        self.active.retain(|a| !a.done);
        self.publish_busy();
    }

    /// One step: queued speculative steps handed out, then one forward for every
    /// decoding request and a prefill chunk (or a lone request's own step).
    fn step(&mut self) {
        if self.active.is_empty() {
            return;
        }
        self.shared.step.fetch_add(1, Ordering::AcqRel);
        for i in 0..self.active.len() {
            // Grammar-forced tokens are committed (and queued) before rows are planned.
            if !self.active[i].done {
                if let Err(e) = self.active[i].gen.fast_forward() {
                    self.deliver(i, Err(e));
                    continue;
                }
            }
            self.drain_queued(i);
        }
        let mut decode = Vec::new();
        let mut prefill = Vec::new();
        for (i, a) in self.active.iter().enumerate() {
            if a.done {
                continue;
            }
            if a.gen.pending().len() <= 1 {
                decode.push(i);
            } else {
                prefill.push(i);
            }
        }
        if decode.len() == 1 && prefill.is_empty() {
            self.step_alone(decode[0]);
        } else if !decode.is_empty() || !prefill.is_empty() {
            self.forward(&decode, &prefill);
        }
        self.active.retain(|a| !a.done);
        self.publish_busy();
    }

    /// Steps a speculative verify committed beyond the one it returned: already
    /// computed, handed out now.
    fn drain_queued(&mut self, i: usize) {
        while !self.active[i].done && self.active[i].gen.has_queued() {
            let r = self.active[i]
                .gen
                .step(&mut self.pool, &mut [], &mut |_, _| {});
            self.deliver(i, r);
        }
    }

    /// The only decoding request: its own step (speculative when it has speculation).
    fn step_alone(&mut self, i: usize) {
        if self.active[i].gen.pending().is_empty() {
            // Finished before its first step (`max_tokens` 0).
            return self.deliver(i, Ok(None));
        }
        let prompt = self.active[i].gen.generated().is_empty();
        let t = Instant::now();
        let r = self.active[i]
            .gen
            .step(&mut self.pool, &mut [], &mut |_, _| {});
        let nanos = t.elapsed().as_nanos() as u64;
        let c = &self.shared.counters;
        if prompt {
            c.prefill_nanos.fetch_add(nanos, Ordering::Relaxed);
            Counters::add(&c.prompt_tokens_evaluated, 1);
        } else {
            c.decode_nanos.fetch_add(nanos, Ordering::Relaxed);
            Counters::add(&c.decode_rows, 1);
        }
        self.deliver(i, r);
        self.drain_queued(i);
    }

    /// One forward over every decoding request's rows (its pending token, and a draft
    /// to verify where its speculation drafts one) and up to `prefill_chunk` prompt
    /// tokens of the prefilling ones, oldest first.
    fn forward(&mut self, decode: &[usize], prefill: &[usize]) {
        let mut plan = Vec::with_capacity(decode.len() + prefill.len());
        // Verifies need every row bitwise a lone step's (pinned numerics).
        let speculate = self.pool.pinned();
        for &i in decode {
            let g = &mut self.active[i].gen;
            if g.pending().is_empty() {
                self.deliver(i, Ok(None));
                continue;
            }
            let decoding = !g.generated().is_empty();
            let mut draft = Vec::new();
            if speculate && decoding && g.spec_stats().is_some() && !g.drafts_with_mtp() {
                match g.next_draft(self.pool.n_ctx(), &mut []) {
                    Ok(d) => draft = d,
                    Err(e) => {
                        self.deliver(i, Err(e));
                        continue;
                    }
                }
            }
            let rows = (!draft.is_empty()).then(|| g.verify_rows(&draft));
            let drafted = draft.len();
            g.recycle_draft(draft);
            plan.push(Item {
                i,
                n: rows.as_ref().map_or(1, Vec::len),
                last: true,
                decode: decoding,
                verify: rows.map(|rows| (rows, drafted)),
            });
        }
        let mut budget = self.cfg.prefill_chunk;
        for &i in prefill {
            if budget == 0 {
                break;
            }
            let pending = self.active[i].gen.pending().len();
            let n = pending.min(budget);
            plan.push(Item {
                i,
                n,
                last: n == pending,
                decode: false,
                verify: None,
            });
            budget -= n;
        }
        if plan.is_empty() {
            return;
        }
        let t = Instant::now();
        let results = match self.eval(&plan) {
            Ok(results) => results,
            // The shared forward failed: run each item alone, so only the requests
            // whose own rows fail are failed.
            Err(_) if plan.len() > 1 => plan
                .iter()
                .flat_map(|item| match self.eval(std::slice::from_ref(item)) {
                    Ok(r) => r,
                    Err(e) => vec![(item.i, Err(e))],
                })
                .collect(),
            Err(e) => vec![(plan[0].i, Err(e))],
        };
        self.account(&plan, t);
        for (i, r) in results {
            self.deliver(i, r);
            // A verify's other committed steps, at once.
            self.drain_queued(i);
        }
    }

    /// Evaluate `plan` in one forward and let each item's request decide (or, for a
    /// prompt chunk that is not the last, record its progress).
    fn eval(&mut self, plan: &[Item]) -> Result<Vec<(usize, Result<Option<Step>>)>> {
        let Worker {
            pool,
            active,
            step_cost,
            ..
        } = self;
        let items: Vec<(SeqId, &[u32], Option<usize>)> = plan
            .iter()
            .map(|it| {
                let g = &active[it.i].gen;
                match &it.verify {
                    // Rows from the last pending one decide.
                    Some((rows, drafted)) => (g.seq(), &rows[..], Some(rows.len() - drafted - 1)),
                    None => (g.seq(), &g.pending()[..it.n], it.last.then_some(it.n - 1)),
                }
            })
            .collect();
        let n_vocab = pool.model().config().n_vocab;
        // Every deciding request decided by its greedy pick or by a sampler that reads
        // only the row's top-k, with nothing else between logits and decision: the head
        // gives picks and top values without computing most logits (bitwise the same
        // decisions; whole rows where top values tie).
        let head = plan
            .iter()
            .filter(|it| it.last)
            .map(|it| active[it.i].gen.decides_from_head())
            .collect::<Option<Vec<usize>>>()
            .map(|ks| {
                ks.iter()
                    .map(|&k| crate::speculate::head_request(k, None))
                    .fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)))
            });
        let t = Instant::now();
        let mut picks = fucina_model::greedy::Picks::default();
        let mut empty = [0f32; 0];
        let rows: &mut [f32] = if let Some((k, distinct)) = head {
            picks.clone_from(pool.eval_mixed_top_from(&items, k, distinct)?);
            &mut empty
        } else {
            pool.eval_mixed_from(&items)?
        };
        // The forward's time, shared out to the decoding requests' gates.
        let total: usize = plan.iter().map(|it| it.n).sum();
        let secs = t.elapsed().as_secs_f64();
        step_cost.observe(total, secs);
        let share = |n: usize| step_cost.share(secs, n, plan.len(), total);
        let mut rows = rows;
        let mut left = head.map(|_| HeadLeft {
            pick: &picks.pick,
            top: &picks.top,
            vals: &picks.vals,
            full: &mut picks.full,
        });
        let mut out = Vec::new();
        let mut verified = Vec::new();
        for (k, it) in plan.iter().enumerate() {
            let g = &mut active[it.i].gen;
            if let Some((vrows, drafted)) = &it.verify {
                let v = next_rows(&mut left, &mut rows, drafted + 1, n_vocab)?;
                verified.push((k, g.accept_verified(&mut [], vrows, *drafted, v)));
            } else if it.last {
                let decided = match next_rows(&mut left, &mut rows, 1, n_vocab)? {
                    Verified::Head {
                        pick,
                        top,
                        vals,
                        full,
                        ..
                    } => g.decide_from_head(HeadRow::at(pick, top, vals, full, 0)),
                    Verified::Logits { logits, .. } => g.decide(logits, &mut []),
                };
                if it.decode && decided.is_ok() {
                    g.record_batched_plain(share(1));
                }
                out.push((it.i, decided));
            } else {
                let evaluated = g.history.len() - g.pending().len();
                g.set_evaluated(evaluated + it.n);
            }
        }
        // The verifies' ends (truncating the rejected rows) once the rows are read.
        for (k, accepted) in verified {
            let it = &plan[k];
            let (vrows, drafted) = it.verify.as_ref().expect("a verify item");
            let g = &mut active[it.i].gen;
            let step = g.finish_verify(pool, vrows, *drafted, accepted, Cost::Secs(share(it.n)));
            out.push((it.i, step.map(Some)));
        }
        Ok(out)
    }

    /// Share a forward's time between prefill and decode rows.
    fn account(&self, plan: &[Item], t: Instant) {
        let nanos = t.elapsed().as_nanos() as u64;
        let decode: usize = plan.iter().filter(|it| it.decode).map(|it| it.n).sum();
        let total: usize = plan.iter().map(|it| it.n).sum();
        let prefill = total - decode;
        let c = self.counters();
        let share = |n: usize| nanos * n as u64 / total.max(1) as u64;
        c.prefill_nanos.fetch_add(share(prefill), Ordering::Relaxed);
        c.decode_nanos.fetch_add(share(decode), Ordering::Relaxed);
        Counters::add(&c.prompt_tokens_evaluated, prefill);
        Counters::add(&c.decode_rows, decode);
    }

    /// Hand a step's result to its request; finished, failed and cancelled requests
    /// release their slot.
    fn deliver(&mut self, i: usize, r: Result<Option<Step>>) {
        if self.active[i].done {
            return;
        }
        match r {
            Ok(Some(step)) => {
                Counters::add(&self.counters().generated_tokens, 1);
                let finished = step.finish.is_some();
                let req = Arc::clone(&self.active[i].req);
                self.push(&req, Event::Step(step));
                if finished {
                    self.finish(i, false);
                }
            }
            Ok(None) => {
                let cancelled = self.active[i].req.is_cancelled();
                self.finish(i, cancelled);
            }
            Err(e) => {
                Counters::add(&self.counters().requests_failed, 1);
                self.release(i);
                let req = Arc::clone(&self.active[i].req);
                self.push(&req, Event::Failed(e));
            }
        }
    }

    fn release(&mut self, i: usize) {
        let a = &mut self.active[i];
        a.gen.release(&mut self.pool);
        a.done = true;
        self.clock += 1;
        let slot = &mut self.slots[a.slot];
        slot.busy = false;
        slot.last_used = self.clock;
        // Before the request's last event, so its owner never sees its slot still busy.
        self.publish_busy();
    }

    fn finish(&mut self, i: usize, cancelled: bool) {
        let spec = self.active[i].gen.spec_stats();
        let finish = self.active[i]
            .gen
            .finish_reason()
            .unwrap_or(FinishReason::Stop);
        self.release(i);
        let c = self.counters();
        if let Some(s) = spec {
            Counters::add(&c.spec_drafted, s.drafted);
            Counters::add(&c.spec_accepted, s.accepted);
        }
        Counters::add(
            if cancelled {
                &c.requests_cancelled
            } else {
                &c.requests_completed
            },
            1,
        );
        let req = Arc::clone(&self.active[i].req);
        self.push(
            &req,
            Event::Finished(Outcome {
                finish,
                cancelled,
                spec,
            }),
        );
    }

    /// Fail every running request and the one being admitted, and start every slot
    /// afresh (after a panic their state is not trusted).
    fn fail_running(&mut self, why: &str) {
        let failed = |why: &str| Event::Failed(EngineError::Scheduler(why.into()));
        for a in std::mem::take(&mut self.active) {
            if !a.done {
                a.req.push(failed(why), &self.shared.ready);
            }
        }
        if let Some(req) = self.admitting.take() {
            req.push(failed(why), &self.shared.ready);
        }
        for s in &mut self.slots {
            s.busy = false;
            // The slots' sequences are the pool's for its whole life.
            let _ = self.pool.clear(s.seq);
        }
        self.publish_busy();
    }
}

fn cancelled_outcome() -> Event {
    Event::Finished(Outcome {
        finish: FinishReason::Stop,
        cancelled: true,
        spec: None,
    })
}
