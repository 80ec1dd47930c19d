//! What a scheduled request tells its owner: the [`Event`]s the scheduler thread
//! pushes onto the request's own queue, the [`RequestHandle`] that drains it (and
//! cancels the request), and the [`Ready`] set a single waiter can block on to learn
//! which requests have news, so an event loop serving many requests needs one
//! blocked thread, not one per request.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fucina_spec::Stats;

use crate::error::EngineError;
use crate::generation::{FinishReason, Step};

/// Something that happened to a request, in order: `Started`, then `Step`s, then
/// exactly one of `Finished` / `Failed` (an embedding request: `Embedding` or
/// `Failed`).
#[derive(Debug)]
pub enum Event {
    /// The request got a slot.
    Started {
        /// Tokens of the prompt.
        prompt_tokens: usize,
        /// Prompt positions taken from the prefix cache instead of evaluated
        /// (OpenAI's `cached_tokens`).
        cached: usize,
    },
    /// One committed token.
    Step(Step),
    /// The generation ended (the last `Step` carried its finish reason, unless it
    /// was cancelled).
    Finished(Outcome),
    /// The request failed; nothing more comes.
    Failed(EngineError),
    /// An embedding request's vector.
    Embedding(Vec<f32>),
}

impl Event {
    /// Whether nothing follows this event.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Event::Finished(_) | Event::Failed(_) | Event::Embedding(_)
        )
    }
}

/// How a generation ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// Why it ended (`Stop` for a cancelled one).
    pub finish: FinishReason,
    /// Whether it was cancelled (by [`RequestHandle::cancel`] or dropping the handle).
    pub cancelled: bool,
    /// Speculative decoding's counts, when it was on.
    pub spec: Option<Stats>,
}

/// Not cancelled (the `cancel_step` sentinel).
const NOT_CANCELLED: u64 = u64::MAX;

/// A request's state shared between its handle and the scheduler thread.
#[derive(Debug)]
pub(crate) struct ReqShared {
    pub(crate) id: u64,
    state: Mutex<ReqState>,
    cv: Condvar,
    cancel: AtomicBool,
    /// The scheduler's step counter when the request was cancelled.
    cancel_step: AtomicU64,
    /// Whether the request is in the [`Ready`] set (cleared by the waiter).
    notified: AtomicBool,
}

#[derive(Debug, Default)]
struct ReqState {
    events: VecDeque<Event>,
    closed: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a push or a drain of plain data: a panic cannot
    // leave it half-done, so a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ReqShared {
    pub(crate) fn new(id: u64) -> Arc<ReqShared> {
        Arc::new(ReqShared {
            id,
            state: Mutex::new(ReqState::default()),
            cv: Condvar::new(),
            cancel: AtomicBool::new(false),
            cancel_step: AtomicU64::new(NOT_CANCELLED),
            notified: AtomicBool::new(false),
        })
    }

    /// Queue `event` for the owner and wake whoever waits for it. Events after a
    /// terminal one are dropped.
    pub(crate) fn push(self: &Arc<Self>, event: Event, ready: &Ready) {
        {
            let mut s = lock(&self.state);
            if s.closed {
                return;
            }
            s.closed = event.is_terminal();
            s.events.push_back(event);
        }
        self.cv.notify_all();
        ready.notify(self);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Acquire)
    }

    /// Steps run between the cancellation and `now` (0 when not cancelled).
    pub(crate) fn steps_since_cancel(&self, now: u64) -> u64 {
        match self.cancel_step.load(Ordering::Acquire) {
            NOT_CANCELLED => 0,
            at => now.saturating_sub(at),
        }
    }

    fn cancel(&self, step: u64) {
        if !self.cancel.swap(true, Ordering::AcqRel) {
            self.cancel_step.store(step, Ordering::Release);
        }
    }
}

/// The requests with undrained events, for one waiter ([`Ready::wait`]).
#[derive(Debug, Default)]
pub(crate) struct Ready {
    pending: Mutex<Vec<Arc<ReqShared>>>,
    cv: Condvar,
    /// Set by the first wait: until someone waits, nothing is recorded.
    watching: AtomicBool,
}

impl Ready {
    fn notify(&self, req: &Arc<ReqShared>) {
        if !self.watching.load(Ordering::Acquire) || req.notified.swap(true, Ordering::AcqRel) {
            return;
        }
        lock(&self.pending).push(Arc::clone(req));
        self.cv.notify_all();
    }

    /// Ids of the requests that got events since the last call, waiting up to
    /// `timeout` for one (empty on timeout). Each id comes once per burst: a request
    /// is reported again only after it was reported and got new events.
    pub(crate) fn wait(&self, timeout: Duration) -> Vec<u64> {
        self.watching.store(true, Ordering::Release);
        let deadline = Instant::now() + timeout;
        let mut pending = lock(&self.pending);
        while pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Vec::new();
            }
            pending = self
                .cv
                .wait_timeout(pending, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        let reqs = std::mem::take(&mut *pending);
        drop(pending);
        reqs.iter()
            .map(|r| {
                // Cleared before the owner drains, so an event pushed after this
                // point is reported again.
                r.notified.store(false, Ordering::Release);
                r.id
            })
            .collect()
    }
}

/// The owner's end of a scheduled request: drain its events, or cancel it.
/// Dropping the handle cancels the request (its slot is freed within one step).
#[derive(Debug)]
pub struct RequestHandle {
    pub(crate) req: Arc<ReqShared>,
    /// The scheduler's step counter (read when cancelling).
    pub(crate) step: Arc<AtomicU64>,
}

impl RequestHandle {
    /// The request's id (unique per scheduler; what [`crate::Scheduler::wait_ready`]
    /// reports).
    pub fn id(&self) -> u64 {
        self.req.id
    }

    /// Every event queued so far (possibly none), without waiting.
    pub fn try_events(&self) -> Vec<Event> {
        lock(&self.req.state).events.drain(..).collect()
    }

    /// The queued events, waiting up to `timeout` for at least one (empty on
    /// timeout or once the terminal event has been drained).
    pub fn wait_events(&self, timeout: Duration) -> Vec<Event> {
        let deadline = Instant::now() + timeout;
        let mut s = lock(&self.req.state);
        while s.events.is_empty() && !s.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = self
                .req
                .cv
                .wait_timeout(s, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        s.events.drain(..).collect()
    }

    /// Whether the terminal event has been queued (it may still be undrained).
    pub fn is_closed(&self) -> bool {
        lock(&self.req.state).closed
    }

    /// Cancel the request: a queued one never starts, a running one stops before its
    /// next token and frees its slot at the next step (a `Finished` event with
    /// `cancelled` follows). Idempotent; no-op once finished.
    pub fn cancel(&self) {
        self.req.cancel(self.step.load(Ordering::Acquire));
    }

    /// Whether [`RequestHandle::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.req.is_cancelled()
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        self.cancel();
    }
}
