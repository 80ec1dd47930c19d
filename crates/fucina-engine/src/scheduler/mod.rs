//! Continuous batching: a [`Scheduler`] owns a pool of slots (sequences) and runs
//! every admitted request's [`Generation`](crate::Generation) on its own thread, so callers (the HTTP
//! server, with Python's GIL released) only submit requests and drain events.
//!
//! Each step of the scheduler thread:
//! 1. frees the slots of cancelled requests (a cancellation is honoured at the next
//!    step boundary, [`Metrics::cancel_steps_max`] records how many steps it took);
//! 2. admits queued requests, in order, onto free slots (the slot sharing the longest
//!    prompt prefix, or rows copied from another slot: see the `slots` module);
//! 3. runs ONE forward holding a row for every decoding request plus up to
//!    [`SchedulerConfig::prefill_chunk`] prompt tokens of requests still prefilling
//!    (chunked prefill interleaved with decode), then lets each request decide its
//!    token from its own row, with its own sampler, processors and stop rules. A
//!    request with speculation brings its draft too: its rows (the pending token, then
//!    the draft) all return logits (or greedy picks) and it decides them as a lone
//!    verify does, keeping the rows it accepted; its cost gate is charged its share of
//!    the forward (a fixed part per request plus the rows it brought, fitted over
//!    recent forwards: `cost.rs`). A lone decoding request steps through
//!    [`Generation::step`](crate::Generation::step) instead (its own timed steps).
//!
//! Numerics are pinned by default: every row is bitwise what it would be alone, so a
//! request's tokens never depend on what else runs, how its prompt was chunked or
//! how much of it came from the cache (a seed reproduces a completion exactly).
//! A request's own failure (a processor error, a sampler rejecting its row) fails
//! that request only; a failed shared forward is retried per request, so only the
//! requests whose rows fail are failed. The queue is bounded: [`Scheduler::submit`]
//! refuses work with [`EngineError::QueueFull`] rather than letting latency grow
//! without limit, and requests are checked (prompt length against the context,
//! sampling parameters, stop rules) before they are queued.
//!
//! Logit processors ride with each request ([`Request::processors`]): the seam for
//! grammar constraints.

mod cost;
mod events;
mod metrics;
mod slots;
mod worker;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use fucina_model::{KvDtype, Model};
use fucina_sample::LogitProcessor;
use fucina_tokenizer::Tokenizer;

pub use events::{Event, Outcome, RequestHandle};
pub use metrics::Metrics;

use crate::error::{invalid, EngineError, Result};
use crate::generation::GenerationOptions;
use crate::logprobs::MAX_TOP_LOGPROBS;
use crate::pool::{SeqPool, DEFAULT_N_BATCH};
use crate::stop::StopMatcher;
use events::{Ready, ReqShared};
use metrics::Counters;

/// How a [`Scheduler`] runs.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Requests that run at once (slots in the pool).
    pub n_slots: usize,
    /// Positions each slot holds (a request's prompt plus completion).
    pub n_ctx: usize,
    /// The KV cache element type.
    pub kv_dtype: KvDtype,
    /// Requests that may wait for a slot; more are refused.
    pub max_queue: usize,
    /// Prompt tokens evaluated per step across prefilling requests (the share of a
    /// step's forward that prefill may take from decode).
    pub prefill_chunk: usize,
    /// Reuse prompt prefixes across requests (a slot's own tokens, or rows copied
    /// from another slot).
    pub prefix_cache: bool,
    /// Copy rows from another slot only when that saves at least this many
    /// positions over the chosen slot's own prefix.
    pub min_copy: usize,
    /// Pinned numerics (every row bitwise what it gives alone); off trades
    /// reproducibility across batch compositions for llama.cpp's prompt-batch
    /// arithmetic.
    pub pinned: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            n_slots: 4,
            n_ctx: 4096,
            kv_dtype: KvDtype::F16,
            max_queue: 64,
            prefill_chunk: DEFAULT_N_BATCH,
            prefix_cache: true,
            min_copy: 8,
            pinned: true,
        }
    }
}

/// One generation to schedule.
pub struct Request {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Sampling, stop rules, limits, logprobs, speculation.
    pub options: GenerationOptions,
    /// Logit processors run on each of this request's rows, in order, before its
    /// sampler (grammar constraints plug in here).
    pub processors: Vec<Box<dyn LogitProcessor>>,
    /// A document the speculative drafts may quote (the text the output is expected
    /// to repeat, as OpenAI's Predicted Outputs); empty for none, ignored without
    /// speculation. It changes no token, only how many each step verifies.
    pub reference: Vec<u32>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("prompt_tokens", &self.prompt.len())
            .field("options", &self.options)
            .field("processors", &self.processors.len())
            .field("reference_tokens", &self.reference.len())
            .finish()
    }
}

/// Work for the scheduler thread.
pub(crate) enum Job {
    Generate(Arc<ReqShared>, Box<Request>),
    Embed(Arc<ReqShared>, Vec<u32>),
}

impl Job {
    fn req(&self) -> &Arc<ReqShared> {
        match self {
            Job::Generate(r, _) | Job::Embed(r, _) => r,
        }
    }
}

#[derive(Default)]
pub(crate) struct Inbox {
    pub(crate) jobs: VecDeque<Job>,
    pub(crate) shutdown: bool,
}

/// State shared by the scheduler thread, the [`Scheduler`] and the handles.
pub(crate) struct Shared {
    pub(crate) inbox: Mutex<Inbox>,
    pub(crate) wake: Condvar,
    pub(crate) ready: Ready,
    pub(crate) counters: Counters,
    pub(crate) step: Arc<AtomicU64>,
    next_id: AtomicU64,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The inbox is a queue and a flag: no critical section can leave it torn.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A continuous-batching scheduler over one model (see the module docs).
pub struct Scheduler {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    config: SchedulerConfig,
    n_vocab: usize,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// Start a scheduler thread whose `config.n_slots` slots (allocated now, so a
    /// pool that does not fit in memory fails here) hold `config.n_ctx` positions.
    pub fn new(
        model: Arc<Model>,
        tokenizer: Arc<Tokenizer>,
        config: SchedulerConfig,
    ) -> Result<Scheduler> {
        if config.n_slots == 0 {
            return Err(invalid("n_slots", "must be positive"));
        }
        if config.prefill_chunk == 0 {
            return Err(invalid("prefill_chunk", "must be positive"));
        }
        let n_vocab = model.config().n_vocab;
        let mut pool = SeqPool::new(model, config.n_ctx, config.kv_dtype)?;
        pool.set_pinned(config.pinned);
        pool.set_n_batch(config.prefill_chunk);
        let slots = (0..config.n_slots)
            .map(|_| pool.alloc())
            .collect::<Result<Vec<_>>>()?;
        let shared = Arc::new(Shared {
            inbox: Mutex::new(Inbox::default()),
            wake: Condvar::new(),
            ready: Ready::default(),
            counters: Counters::default(),
            step: Arc::new(AtomicU64::new(0)),
            next_id: AtomicU64::new(1),
        });
        let worker =
            worker::Worker::new(pool, slots, tokenizer, config.clone(), Arc::clone(&shared));
        let thread = std::thread::Builder::new()
            .name("fucina-scheduler".into())
            .spawn(move || worker.run())
            .map_err(|e| invalid("scheduler", format!("cannot start its thread: {e}")))?;
        Ok(Scheduler {
            shared,
            thread: Mutex::new(Some(thread)),
            config,
            n_vocab,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Check `request` and queue it. Errors, before anything is queued: bad
    /// arguments ([`EngineError::InvalidArgument`], a bad sampler setting), a prompt
    /// that does not fit a slot ([`EngineError::PromptTooLong`]), a full queue
    /// ([`EngineError::QueueFull`]) or a scheduler that was shut down.
    pub fn submit(&self, request: Request) -> Result<RequestHandle> {
        self.check(&request)?;
        self.enqueue(|req| Job::Generate(req, Box::new(request)))
    }

    /// Queue an embedding of `tokens` (the final hidden states pooled as the model
    /// declares, unit length; see [`SeqPool::embed`]): an [`Event::Embedding`] answers it.
    pub fn embed(&self, tokens: Vec<u32>) -> Result<RequestHandle> {
        if tokens.is_empty() {
            return Err(invalid("input", "nothing to embed"));
        }
        if tokens.len() > self.config.n_ctx {
            return Err(EngineError::PromptTooLong {
                prompt: tokens.len(),
                n_ctx: self.config.n_ctx,
            });
        }
        self.check_ids("input", &tokens)?;
        self.enqueue(|req| Job::Embed(req, tokens))
    }

    fn enqueue(&self, job: impl FnOnce(Arc<ReqShared>) -> Job) -> Result<RequestHandle> {
        let mut inbox = lock(&self.shared.inbox);
        if inbox.shutdown {
            return Err(invalid("scheduler", "has shut down"));
        }
        if inbox.jobs.len() >= self.config.max_queue {
            self.shared
                .counters
                .requests_rejected
                .fetch_add(1, Ordering::Relaxed);
            return Err(EngineError::QueueFull {
                capacity: self.config.max_queue,
            });
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let req = ReqShared::new(id);
        inbox.jobs.push_back(job(Arc::clone(&req)));
        drop(inbox);
        self.shared
            .counters
            .requests_submitted
            .fetch_add(1, Ordering::Relaxed);
        self.shared.wake.notify_all();
        Ok(RequestHandle {
            req,
            step: Arc::clone(&self.shared.step),
        })
    }

    fn check_ids(&self, field: &'static str, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&t| t as usize >= self.n_vocab) {
            Some(bad) => Err(invalid(
                field,
                format!(
                    "token id {bad} is outside the vocabulary of {}",
                    self.n_vocab
                ),
            )),
            None => Ok(()),
        }
    }

    /// The checks [`Generation::new`](crate::Generation::new) makes, here on the caller's thread so a bad
    /// request is refused by `submit` instead of failing later.
    fn check(&self, r: &Request) -> Result<()> {
        if r.prompt.is_empty() {
            return Err(invalid("prompt", "is empty"));
        }
        self.check_ids("prompt", &r.prompt)?;
        if r.prompt.len() >= self.config.n_ctx {
            return Err(EngineError::PromptTooLong {
                prompt: r.prompt.len(),
                n_ctx: self.config.n_ctx,
            });
        }
        self.check_ids("stop_ids", &r.options.stop_ids)?;
        if let Some(n) = r.options.logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
            return Err(invalid(
                "logprobs",
                format!("{n} alternatives requested; at most {MAX_TOP_LOGPROBS}"),
            ));
        }
        r.options.sampling.validate(self.n_vocab)?;
        StopMatcher::new(r.options.stop.clone())?;
        Ok(())
    }

    /// Ids of the requests that got events since the last call (each reported once
    /// per burst of events), waiting up to `timeout` for one: one thread can wait
    /// here for every request and wake only the owners with news. Reporting starts
    /// with the first call.
    pub fn wait_ready(&self, timeout: Duration) -> Vec<u64> {
        self.shared.ready.wait(timeout)
    }

    /// The counters and gauges now.
    pub fn metrics(&self) -> Metrics {
        let depth = lock(&self.shared.inbox).jobs.len();
        self.shared.counters.snapshot(
            depth,
            self.config.n_slots,
            self.shared.step.load(Ordering::Relaxed),
        )
    }

    /// Stop the scheduler thread: requests still queued or running fail with an
    /// error saying so. Idempotent (also done on drop).
    pub fn shutdown(&self) {
        lock(&self.shared.inbox).shutdown = true;
        self.shared.wake.notify_all();
        if let Some(t) = lock(&self.thread).take() {
            // A panicking scheduler thread has already failed its requests' owners
            // (their handles see no terminal event); there is nothing to recover.
            let _ = t.join();
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shutdown();
    }
}
