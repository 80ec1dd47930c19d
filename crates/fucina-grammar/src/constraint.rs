//! [`Constraint`]: one generation's grammar state as a [`LogitProcessor`].
//!
//! After each committed token the constraint works out what the grammar forces next
//! (llguidance's fast-forward tokens; once the grammar is complete, the turn's stop
//! token). When nothing is forced it starts computing the next token mask on a
//! worker thread right away, so the mask is built while the model's forward for that
//! position runs; [`LogitProcessor::process`] only waits for it (usually not at all)
//! and bans every token outside it. Drafted tokens are checked against the grammar
//! without changing its state ([`LogitProcessor::valid_prefix_len`]).

use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use fucina_sample::{LogitProcessor, SampleError};
use llguidance::toktrie::{SimpleVob, TokEnv};
use llguidance::Matcher;

use crate::error::GrammarError;

/// Threads computing masks ahead of need, shared by every constraint in the process.
const MASK_WORKERS: usize = 2;

type Job = Box<dyn FnOnce() + Send>;

fn workers() -> &'static Mutex<mpsc::Sender<Job>> {
    static POOL: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..MASK_WORKERS {
            let rx = Arc::clone(&rx);
            let spawned = std::thread::Builder::new()
                .name(format!("fucina-grammar-{i}"))
                .spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                });
            // Without workers masks are computed on the caller's thread instead.
            drop(spawned);
        }
        Mutex::new(tx)
    })
}

/// Timing and forcing counts of one constraint.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConstraintStats {
    /// Masks computed.
    pub masks: usize,
    /// Each mask's computation time, microseconds, in order.
    pub mask_us: Vec<u32>,
    /// Time `process` waited for a mask computed ahead (microseconds, total).
    pub wait_us: u64,
    /// Tokens the grammar forced (committed without sampling).
    pub forced: usize,
}

struct Shared {
    matcher: Matcher,
    stats: ConstraintStats,
}

/// Reads a constraint's [`ConstraintStats`] after the constraint has moved into a
/// generation.
#[derive(Clone)]
pub struct StatsHandle(Arc<Mutex<Shared>>);

impl StatsHandle {
    /// The counts so far.
    pub fn get(&self) -> ConstraintStats {
        lock(&self.0).stats.clone()
    }
}

impl std::fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StatsHandle").field(&self.get()).finish()
    }
}

/// A grammar followed by one generation.
pub struct Constraint {
    shared: Arc<Mutex<Shared>>,
    env: TokEnv,
    /// The mask for the next position, being computed on a worker.
    ahead: Option<Receiver<Result<SimpleVob, String>>>,
    /// Tokens forced from the current state, not yet committed.
    forced: Vec<u32>,
    /// Whether `forced` is up to date with the committed tokens.
    forced_known: bool,
    /// The grammar's start state, for [`LogitProcessor::reset`].
    start: Matcher,
    /// What the grammar leaves unenforced ([`Constraint::warning`]).
    warning: Option<String>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("forced", &self.forced)
            .finish_non_exhaustive()
    }
}

impl Clone for Constraint {
    /// An independent copy in the same state (for another stream).
    fn clone(&self) -> Self {
        let shared = self.lock();
        Constraint {
            shared: Arc::new(Mutex::new(Shared {
                matcher: shared.matcher.deep_clone(),
                stats: ConstraintStats::default(),
            })),
            env: self.env.clone(),
            ahead: None,
            forced: self.forced.clone(),
            forced_known: self.forced_known,
            start: self.start.clone(),
            warning: self.warning.clone(),
        }
    }
}

impl Constraint {
    pub(crate) fn new(matcher: Matcher, env: TokEnv) -> Constraint {
        Constraint {
            start: matcher.clone(),
            shared: Arc::new(Mutex::new(Shared {
                matcher,
                stats: ConstraintStats::default(),
            })),
            env,
            ahead: None,
            forced: Vec::new(),
            forced_known: false,
            warning: None,
        }
    }

    pub(crate) fn with_warning(mut self, warning: Option<String>) -> Constraint {
        self.warning = warning;
        self
    }

    /// What the grammar leaves unenforced (a JSON Schema compiled leniently: the
    /// keywords llguidance does not implement), if anything.
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }

    /// Whether the grammar is complete (only the stop token may follow).
    pub fn is_stopped(&self) -> bool {
        self.lock().matcher.is_stopped()
    }

    /// Whether the text so far is a complete match (the stop token is allowed).
    pub fn is_accepting(&self) -> bool {
        self.lock().matcher.is_accepting().unwrap_or(false)
    }

    /// The error that ended the constraint, if one did (without the marker llguidance
    /// appends where it leaves out its parser dump).
    pub fn error(&self) -> Option<String> {
        let e = self.lock().matcher.get_error()?;
        let e = e.trim_end();
        Some(
            e.strip_suffix("<non-verbose/>")
                .unwrap_or(e)
                .trim_end()
                .to_owned(),
        )
    }

    /// Timing and forcing counts so far.
    pub fn stats(&self) -> ConstraintStats {
        self.lock().stats.clone()
    }

    /// How long the last mask took to compute, microseconds (0 before any).
    pub fn last_mask_us(&self) -> u32 {
        self.lock().stats.mask_us.last().copied().unwrap_or(0)
    }

    /// A handle that reads the counts from anywhere.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(Arc::clone(&self.shared))
    }

    /// Consume `tokens` as committed output (outside a generation loop, e.g. tests).
    pub fn consume(&mut self, tokens: &[u32]) -> Result<(), GrammarError> {
        for &t in tokens {
            self.commit(t);
        }
        match self.error() {
            Some(e) => Err(GrammarError::Failed(e)),
            None => Ok(()),
        }
    }

    /// The mask for the next position (computed now if none is on its way).
    pub fn mask(&mut self) -> Result<SimpleVob, GrammarError> {
        let r = match self.ahead.take() {
            Some(rx) => {
                let t0 = Instant::now();
                let r = rx.recv().unwrap_or_else(|_| Err("mask worker lost".into()));
                self.lock().stats.wait_us += t0.elapsed().as_micros() as u64;
                r
            }
            None => compute(&mut self.lock()),
        };
        r.map_err(GrammarError::Failed)
    }

    /// Start computing the next mask on a worker.
    fn compute_ahead(&mut self) {
        if self.ahead.is_some() {
            return;
        }
        let (tx, rx) = mpsc::channel();
        let shared = Arc::clone(&self.shared);
        let job: Job = Box::new(move || {
            let mut s = lock(&shared);
            let _ = tx.send(compute(&mut s));
        });
        let sent = workers()
            .lock()
            .map(|w| w.send(job).is_ok())
            .unwrap_or(false);
        if sent {
            self.ahead = Some(rx);
        }
    }

    /// Work out the forced tokens of the current state; start the mask when none are.
    fn refresh_forced(&mut self) {
        let mut s = lock(&self.shared);
        self.forced = if s.matcher.is_stopped() {
            if s.matcher.is_error() {
                Vec::new()
            } else {
                vec![self.env.tok_trie().eos_token()]
            }
        } else {
            s.matcher.compute_ff_tokens()
        };
        drop(s);
        self.forced_known = true;
        if self.forced.is_empty() {
            self.compute_ahead();
        }
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

fn compute(s: &mut Shared) -> Result<SimpleVob, String> {
    let t0 = Instant::now();
    let r = s.matcher.compute_mask_or_eos().map_err(|e| e.to_string());
    s.stats.masks += 1;
    s.stats
        .mask_us
        .push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
    r
}

impl LogitProcessor for Constraint {
    fn process(&mut self, logits: &mut [f32], _history: &[u32]) -> Result<(), SampleError> {
        let mask = self
            .mask()
            .map_err(|e| SampleError::Constraint(e.to_string()))?;
        let words = mask.as_slice();
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = words.get(w).copied().unwrap_or(0);
            if bits == u32::MAX {
                continue;
            }
            for (b, x) in chunk.iter_mut().enumerate() {
                if bits & (1 << b) == 0 {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }

    fn commit(&mut self, token: u32) {
        // A mask computed ahead is for the position this token fills: it is done with.
        if let Some(rx) = self.ahead.take() {
            let _ = rx.recv();
        }
        let is_forced = self.forced_known && self.forced.first() == Some(&token);
        {
            let mut s = lock(&self.shared);
            if s.matcher.is_stopped() {
                // The stop token after a complete grammar: nothing more to follow.
                self.forced.clear();
                self.forced_known = true;
                return;
            }
            // An error here leaves the matcher in its error state; `process` reports it.
            let _ = s.matcher.consume_token(token);
            if is_forced {
                s.stats.forced += 1;
            }
        }
        if is_forced {
            self.forced.remove(0);
            if self.forced.is_empty() {
                self.refresh_forced();
            }
        } else {
            self.refresh_forced();
        }
    }

    fn reset(&mut self) {
        if let Some(rx) = self.ahead.take() {
            let _ = rx.recv();
        }
        self.lock().matcher = self.start.clone();
        self.forced.clear();
        self.forced_known = false;
    }

    fn forced_tokens(&mut self, _history: &[u32]) -> Vec<u32> {
        if !self.forced_known {
            self.refresh_forced();
        }
        self.forced.clone()
    }

    fn valid_prefix_len(&mut self, _history: &[u32], draft: &[u32]) -> usize {
        let mut s = lock(&self.shared);
        if s.matcher.is_stopped() {
            let eos = self.env.tok_trie().eos_tokens();
            return usize::from(draft.first().is_some_and(|t| eos.contains(t)));
        }
        s.matcher.validate_tokens(draft).unwrap_or(0)
    }
}
