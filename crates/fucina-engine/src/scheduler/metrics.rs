//! The scheduler's counters: updated by the scheduler thread (and by submitters for
//! admissions and rejections) with relaxed atomics, read as one [`Metrics`] snapshot
//! by whoever exports them (the server's `/metrics`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters since the scheduler started, and the current gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    /// Requests accepted into the queue (generations and embeddings).
    pub requests_submitted: u64,
    /// Requests refused because the queue was full.
    pub requests_rejected: u64,
    /// Generations that ran to a finish reason.
    pub requests_completed: u64,
    /// Requests cancelled (queued or running).
    pub requests_cancelled: u64,
    /// Requests that failed (their own error; the others went on).
    pub requests_failed: u64,
    /// Embedding requests answered.
    pub embeddings: u64,
    /// Requests waiting for a slot now.
    pub queue_depth: u64,
    /// Slots running a generation now.
    pub slots_busy: u64,
    /// Slots in the pool.
    pub slots_total: u64,
    /// Prompt tokens of admitted generations.
    pub prompt_tokens: u64,
    /// Of those, positions taken from the prefix cache (a slot's own, or rows copied
    /// from another slot) instead of evaluated.
    pub prompt_tokens_cached: u64,
    /// Of the cached ones, positions copied from another slot.
    pub prompt_tokens_copied: u64,
    /// Prompt tokens evaluated (prefill rows).
    pub prompt_tokens_evaluated: u64,
    /// Tokens committed by generations.
    pub generated_tokens: u64,
    /// Scheduler steps run (each one batched forward, or one speculative step).
    pub steps: u64,
    /// Forward rows evaluated for decode.
    pub decode_rows: u64,
    /// Seconds spent in forwards, shared between prefill and decode rows in
    /// proportion to their counts.
    pub prefill_seconds: f64,
    /// See `prefill_seconds`.
    pub decode_seconds: f64,
    /// Draft tokens verified by speculative decoding (finished generations).
    pub spec_drafted: u64,
    /// Draft tokens accepted.
    pub spec_accepted: u64,
    /// The most scheduler steps that ran between a request's cancellation and its
    /// slot being freed.
    pub cancel_steps_max: u64,
}

impl Metrics {
    /// Cached prompt positions over prompt tokens (0 before any request).
    pub fn prefix_cache_hit_rate(&self) -> f64 {
        ratio(self.prompt_tokens_cached as f64, self.prompt_tokens as f64)
    }

    /// Accepted over drafted speculative tokens (0 before any draft).
    pub fn spec_acceptance_rate(&self) -> f64 {
        ratio(self.spec_accepted as f64, self.spec_drafted as f64)
    }

    /// Prompt tokens evaluated per second of prefill.
    pub fn prompt_tokens_per_second(&self) -> f64 {
        ratio(self.prompt_tokens_evaluated as f64, self.prefill_seconds)
    }

    /// Tokens generated per second of decode.
    pub fn generated_tokens_per_second(&self) -> f64 {
        ratio(self.generated_tokens as f64, self.decode_seconds)
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// The live counters behind [`Metrics`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) requests_submitted: AtomicU64,
    pub(crate) requests_rejected: AtomicU64,
    pub(crate) requests_completed: AtomicU64,
    pub(crate) requests_cancelled: AtomicU64,
    pub(crate) requests_failed: AtomicU64,
    pub(crate) embeddings: AtomicU64,
    pub(crate) slots_busy: AtomicU64,
    pub(crate) prompt_tokens: AtomicU64,
    pub(crate) prompt_tokens_cached: AtomicU64,
    pub(crate) prompt_tokens_copied: AtomicU64,
    pub(crate) prompt_tokens_evaluated: AtomicU64,
    pub(crate) generated_tokens: AtomicU64,
    pub(crate) decode_rows: AtomicU64,
    pub(crate) prefill_nanos: AtomicU64,
    pub(crate) decode_nanos: AtomicU64,
    pub(crate) spec_drafted: AtomicU64,
    pub(crate) spec_accepted: AtomicU64,
    pub(crate) cancel_steps_max: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, queue_depth: usize, slots_total: usize, steps: u64) -> Metrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Metrics {
            requests_submitted: get(&self.requests_submitted),
            requests_rejected: get(&self.requests_rejected),
            requests_completed: get(&self.requests_completed),
            requests_cancelled: get(&self.requests_cancelled),
            requests_failed: get(&self.requests_failed),
            embeddings: get(&self.embeddings),
            queue_depth: queue_depth as u64,
            slots_busy: get(&self.slots_busy),
            slots_total: slots_total as u64,
            prompt_tokens: get(&self.prompt_tokens),
            prompt_tokens_cached: get(&self.prompt_tokens_cached),
            prompt_tokens_copied: get(&self.prompt_tokens_copied),
            prompt_tokens_evaluated: get(&self.prompt_tokens_evaluated),
            generated_tokens: get(&self.generated_tokens),
            steps,
            decode_rows: get(&self.decode_rows),
            prefill_seconds: get(&self.prefill_nanos) as f64 * 1e-9,
            decode_seconds: get(&self.decode_nanos) as f64 * 1e-9,
            spec_drafted: get(&self.spec_drafted),
            spec_accepted: get(&self.spec_accepted),
            cancel_steps_max: get(&self.cancel_steps_max),
        }
    }
}
