//! Python bindings for the engine's `Conversation`: a sequence of an `Engine` that
//! holds a chat's history across turns. `fucina.Conversation` (Python) renders the
//! messages and starts each turn with `Engine.generate(..., conversation=...)`,
//! which reuses the longest common prefix of the new render and what the sequence
//! holds; the turn's positions are written to the persistence sidecar (when on) as
//! the turn's generation ends.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fucina_engine::{Conversation, Generation, GenerationOptions, SeqPool};
use fucina_sample::LogitProcessor;
use fucina_tokenizer::Tokenizer;
use pyo3::prelude::*;

use crate::engine::{engine_err, lock, PyEngine};
use crate::errors::value_err;

/// A conversation's sequence in an `Engine`'s pool.
#[pyclass(frozen, module = "fucina._core", name = "Conversation")]
pub struct PyConversation {
    engine: Py<PyEngine>,
    conv: Mutex<Option<Conversation>>,
    /// The cancel flag of the turn in flight: a new turn (or a reset) ends it first,
    /// so two generations never write the sequence.
    turn: Mutex<Option<Arc<AtomicBool>>>,
}

impl PyConversation {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Conversation, &mut SeqPool) -> fucina_engine::Result<T>,
    ) -> PyResult<T> {
        let engine = self.engine.get();
        let mut pool = lock(&engine.pool);
        let mut conv = lock(&self.conv);
        let conv = conv
            .as_mut()
            .ok_or_else(|| value_err("the conversation is closed"))?;
        f(conv, &mut pool).map_err(engine_err)
    }

    fn end_turn(&self) {
        if let Some(flag) = lock(&self.turn).take() {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Start a turn after `history` (called with the pool locked).
    pub(crate) fn turn(
        &self,
        pool: &mut SeqPool,
        tokenizer: Arc<Tokenizer>,
        history: &[u32],
        opts: GenerationOptions,
        processors: Vec<Box<dyn LogitProcessor>>,
    ) -> fucina_engine::Result<Generation> {
        self.end_turn();
        let mut conv = lock(&self.conv);
        let conv = conv
            .as_mut()
            .ok_or_else(|| fucina_engine::EngineError::InvalidArgument {
                field: "conversation",
                message: "the conversation is closed".into(),
            })?;
        let g = conv.turn(pool, tokenizer, history, opts, processors)?;
        *lock(&self.turn) = Some(g.cancel_handle());
        Ok(g)
    }

    /// The turn whose cancel flag is `handle` ended (a newer turn's is left alone).
    pub(crate) fn turn_ended(&self, handle: &Arc<AtomicBool>) {
        let mut turn = lock(&self.turn);
        if turn.as_ref().is_some_and(|t| Arc::ptr_eq(t, handle)) {
            *turn = None;
        }
    }

    /// Write the sequence's new positions to the sidecar (no-op without one).
    pub(crate) fn sync_pool(&self, pool: &SeqPool) -> fucina_engine::Result<()> {
        match lock(&self.conv).as_mut() {
            Some(c) => c.sync(pool),
            None => Ok(()),
        }
    }

    /// Whether `engine` is the engine this conversation lives in.
    pub(crate) fn belongs_to(&self, engine: &Py<PyEngine>) -> bool {
        self.engine.is(engine)
    }
}

#[pymethods]
impl PyConversation {
    /// A new, empty conversation on a sequence of `engine`.
    #[new]
    fn new(engine: Py<PyEngine>) -> PyResult<Self> {
        let conv = {
            let mut pool = lock(&engine.get().pool);
            Conversation::new(&mut pool).map_err(engine_err)?
        };
        Ok(Self {
            engine,
            conv: Mutex::new(Some(conv)),
            turn: Mutex::new(None),
        })
    }

    /// Tokens the sequence holds (the history whose KV rows are computed).
    #[getter]
    fn tokens(&self, py: Python<'_>) -> PyResult<Vec<u32>> {
        py.detach(|| self.with(|c, pool| c.tokens(pool).map(<[u32]>::to_vec)))
    }

    /// History positions the last turn kept instead of prefilling.
    #[getter]
    fn last_reused_tokens(&self) -> PyResult<usize> {
        lock(&self.conv)
            .as_ref()
            .map(Conversation::last_reused)
            .ok_or_else(|| value_err("the conversation is closed"))
    }

    /// Whether a turn is in flight (its generation neither finished nor closed).
    #[getter]
    fn busy(&self) -> bool {
        lock(&self.turn).is_some()
    }

    /// Whether persistence is on.
    #[getter]
    fn persistent(&self) -> bool {
        lock(&self.conv)
            .as_ref()
            .is_some_and(Conversation::persistent)
    }

    /// Forget the history (and what the sidecar holds); ends a turn in flight.
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        self.end_turn();
        py.detach(|| self.with(|c, pool| c.reset(pool)))
    }

    /// Persist to `path` from now on; resume what a compatible file there holds.
    /// Returns `(positions resumed, why an existing file was ignored or None)`.
    fn enable_persistence(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::path)] path: PathBuf,
    ) -> PyResult<(usize, Option<String>)> {
        py.detach(|| {
            self.with(|c, pool| {
                let r = c.enable_persistence(pool, &path)?;
                Ok((r.positions, r.ignored))
            })
        })
    }

    /// Write the current state to a new sidecar at `path` (atomically replaced).
    fn save(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::path)] path: PathBuf,
    ) -> PyResult<()> {
        py.detach(|| self.with(|c, pool| c.save(pool, &path)))
    }

    /// Write the positions the sidecar does not hold yet (turns do this as they end).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.with(|c, pool| c.sync(pool)))
    }

    /// Free the sequence (idempotent); the conversation is unusable after.
    fn close(&self, py: Python<'_>) {
        self.end_turn();
        py.detach(|| {
            let engine = self.engine.get();
            let mut pool = lock(&engine.pool);
            if let Some(c) = lock(&self.conv).take() {
                c.release(&mut pool);
            }
        });
    }

    fn __repr__(&self) -> String {
        match lock(&self.conv).as_ref() {
            Some(c) => format!(
                "Conversation(seq={}, reused={})",
                c.seq().index(),
                c.last_reused()
            ),
            None => "Conversation(closed)".into(),
        }
    }
}

impl Drop for PyConversation {
    fn drop(&mut self) {
        self.end_turn();
        // Without the GIL: a step on another thread may hold the pool while it waits
        // for the GIL to call a processor.
        Python::attach(|py| {
            py.detach(|| {
                let engine = self.engine.get();
                let mut pool = lock(&engine.pool);
                if let Some(c) = lock(&self.conv).take() {
                    c.release(&mut pool);
                }
            })
        });
    }
}
