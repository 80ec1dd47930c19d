//! Python bindings for `fucina-model` and the engine's `Session`: `Model` (weights,
//! shared) and `Session` (one sequence's KV cache and position, for callers that
//! manage tokens themselves). Generation lives in `engine.rs`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use fucina_engine::Session;
use fucina_model::{KvDtype, Model, ModelError, ModelOptions};
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::engine::engine_err;
use crate::errors::{raise, unsupported_model_error, value_err};
use crate::tokenizer::PyTokenizer;

/// Map a model error to the Python hierarchy: bad files are `GGUFError`s,
/// unsupported ones `UnsupportedModelError`s, bad arguments (a batch or context
/// that cannot be run, an unknown cache type) `InvalidArgumentError`s.
pub(crate) fn model_err(e: ModelError) -> PyErr {
    Python::attach(|py| match e {
        ModelError::Gguf(g) => crate::errors::gguf_err(g),
        ModelError::Experts(x) => crate::experts::experts_err(x),
        ModelError::Quant(q) => crate::quant::quant_err(q),
        e @ (ModelError::UnsupportedArchitecture { .. }
        | ModelError::UnsupportedWeightType { .. }) => match unsupported_model_error(py) {
            Ok(ty) => raise(ty, e.to_string()),
            Err(err) => err,
        },
        e @ (ModelError::InvalidBatch(_) | ModelError::KvCacheOverflow { .. }) => {
            value_err(e.to_string())
        }
        other => match crate::errors::fucina_error(py) {
            Ok(ty) => raise(ty, other.to_string()),
            Err(err) => err,
        },
    })
}

/// A model's weights, bound from a GGUF file (memory-mapped, in GGUF precision).
/// Shared by any number of sessions.
#[pyclass(frozen, module = "fucina._core", name = "Model")]
pub struct PyModel {
    pub(crate) inner: Arc<Model>,
    path: PathBuf,
}

#[pymethods]
impl PyModel {
    #[new]
    #[pyo3(signature = (
        path, n_threads = None, *, moe_stream = false, moe_cache_mb = None, moe_uncached = false,
        moe_io_threads = None, moe_trace = None, moe_prefetch = false, moe_eviction = None,
        moe_heat_decay = None, moe_pins = true,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::path)] path: PathBuf,
        #[pyo3(from_py_with = crate::args::opt_count)] n_threads: Option<usize>,
        moe_stream: bool,
        moe_cache_mb: Option<f64>,
        moe_uncached: bool,
        #[pyo3(from_py_with = crate::args::opt_count)] moe_io_threads: Option<usize>,
        moe_trace: Option<PathBuf>,
        moe_prefetch: bool,
        moe_eviction: Option<String>,
        moe_heat_decay: Option<f64>,
        moe_pins: bool,
    ) -> PyResult<Self> {
        let stream = crate::experts::StreamArgs {
            stream: moe_stream,
            cache_mb: moe_cache_mb,
            uncached: moe_uncached,
            io_threads: moe_io_threads,
            trace: moe_trace,
            prefetch: moe_prefetch,
            eviction: moe_eviction,
            heat_decay: moe_heat_decay,
            pins: moe_pins,
        };
        let options = ModelOptions {
            moe_stream: stream.options(&path)?,
            ..ModelOptions::with_threads(n_threads.unwrap_or(0))
        };
        let model = py
            .detach(|| Model::load(&path, options))
            .map_err(model_err)?;
        Ok(Self {
            inner: Arc::new(model),
            path,
        })
    }

    /// `general.architecture` of the file.
    #[getter]
    fn architecture(&self) -> &'static str {
        self.inner.config().family.arch()
    }

    /// Vocabulary size (rows of the output head).
    #[getter]
    fn n_vocab(&self) -> usize {
        self.inner.config().n_vocab
    }

    /// Number of transformer layers.
    #[getter]
    fn n_layer(&self) -> usize {
        self.inner.config().n_layer
    }

    /// Width of the residual stream.
    #[getter]
    fn n_embd(&self) -> usize {
        self.inner.config().n_embd
    }

    /// Context length the model was trained with.
    #[getter]
    fn n_ctx_train(&self) -> usize {
        self.inner.config().n_ctx_train
    }

    /// Threads the forward runs on.
    #[getter]
    fn n_threads(&self) -> usize {
        self.inner.n_threads()
    }

    /// Bytes of weights read to produce one token (for bandwidth estimates).
    #[getter]
    fn weight_bytes_per_token(&self) -> usize {
        self.inner.weight_bytes_per_token()
    }

    /// Block until the background repacking of weights (Q4_K; Q8_0 and Q6_K on
    /// AVX-512), started by the load, has finished. Results are the same before and after; only speed changes.
    fn wait_repacked(&self, py: Python<'_>) {
        py.detach(|| self.inner.wait_repacked());
    }

    /// Bytes of weights repacked into the interleaved form so far.
    #[getter]
    fn repacked_bytes(&self) -> usize {
        self.inner.repacked_bytes()
    }

    /// The expert store's numbers (`None` unless the experts stream).
    fn moe_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        match self.inner.expert_store() {
            Some(s) => Ok(Some(crate::experts::stats_dict(py, &s.stats())?)),
            None => Ok(None),
        }
    }

    /// Write the expert trace (when recording) and the usage histogram now; the
    /// model's teardown writes them again with what came after.
    fn moe_flush(&self, py: Python<'_>) -> PyResult<()> {
        match self.inner.expert_store() {
            Some(s) => py
                .detach(|| s.finish())
                .map_err(crate::experts::experts_err),
            None => Ok(()),
        }
    }

    /// The model's tokenizer, built from the already-open file's metadata.
    fn tokenizer(&self, py: Python<'_>) -> PyResult<PyTokenizer> {
        let md = self.inner.file().metadata();
        let tok = py
            .detach(|| fucina_tokenizer::Tokenizer::from_metadata(md))
            .map_err(crate::tokenizer::tok_err)?;
        Ok(PyTokenizer::from_arc(
            Arc::new(tok),
            Arc::clone(self.inner.pool()),
        ))
    }

    /// The GGUF file the weights come from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    fn __repr__(&self) -> String {
        let c = self.inner.config();
        format!(
            "Model(architecture={:?}, n_layer={}, n_embd={}, n_vocab={}, n_threads={})",
            c.family.arch(),
            c.n_layer,
            c.n_embd,
            c.n_vocab,
            self.inner.n_threads()
        )
    }
}

/// One sequence over a model: its KV cache and the tokens evaluated so far.
#[pyclass(frozen, module = "fucina._core", name = "Session")]
pub struct PySession {
    inner: Mutex<Session>,
    n_vocab: usize,
}

impl PySession {
    fn with<T>(&self, f: impl FnOnce(&mut Session) -> T) -> PyResult<T> {
        let mut guard = self.inner.lock().map_err(|_| {
            pyo3::exceptions::PyRuntimeError::new_err("session poisoned by an earlier panic")
        })?;
        Ok(f(&mut guard))
    }
}

#[pymethods]
impl PySession {
    #[new]
    #[pyo3(signature = (model, n_ctx = 4096, kv_cache_type = "f16"))]
    fn new(
        model: &PyModel,
        #[pyo3(from_py_with = crate::args::count)] n_ctx: usize,
        kv_cache_type: &str,
    ) -> PyResult<Self> {
        let dtype = KvDtype::parse(kv_cache_type).map_err(|e| value_err(e.to_string()))?;
        let session = Session::new(model.inner.clone(), n_ctx, dtype).map_err(engine_err)?;
        Ok(Self {
            inner: Mutex::new(session),
            n_vocab: model.inner.config().n_vocab,
        })
    }

    /// Append `tokens`; return float32 logits of the last token (`[n_vocab]`) or, with
    /// `all`, of every appended token (`[len(tokens), n_vocab]`).
    #[pyo3(signature = (tokens, *, all = false))]
    fn eval<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::args::token_ids)] tokens: Vec<u32>,
        all: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let logits = py
            .detach(|| self.with(|s| s.eval(&tokens, all).map(<[f32]>::to_vec)))?
            .map_err(engine_err)?;
        let rows = logits.len() / self.n_vocab.max(1);
        let arr = PyArray1::from_vec(py, logits).into_any();
        if all {
            arr.call_method1("reshape", ((rows, self.n_vocab),))
        } else {
            Ok(arr)
        }
    }

    /// Append `tokens` and return the argmax of the last token's logits (no array copy).
    fn eval_argmax(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::token_ids)] tokens: Vec<u32>,
    ) -> PyResult<u32> {
        py.detach(|| self.with(|s| s.eval(&tokens, false).map(fucina_engine::argmax)))?
            .map_err(engine_err)
    }

    /// Greedy continuation of `prompt` (appended to what is already evaluated): up to
    /// `max_tokens` tokens, stopping after any token in `stop_ids` (included).
    #[pyo3(signature = (prompt, max_tokens, stop_ids = Vec::new()))]
    fn generate_greedy(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::token_ids)] prompt: Vec<u32>,
        #[pyo3(from_py_with = crate::args::count)] max_tokens: usize,
        #[pyo3(from_py_with = crate::args::token_ids)] stop_ids: Vec<u32>,
    ) -> PyResult<Vec<u32>> {
        py.detach(|| {
            self.with(|s| s.generate_greedy(&prompt, max_tokens, |t| stop_ids.contains(&t)))
        })?
        .map_err(engine_err)
    }

    /// The whole state (tokens and KV rows, bit for bit) as bytes.
    fn save_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let bytes = py
            .detach(|| self.with(|s| s.save_state()))?
            .map_err(engine_err)?;
        Ok(pyo3::types::PyBytes::new(py, &bytes))
    }

    /// Replace the state with bytes from `save_state` (same model and cache shape).
    fn load_state(&self, py: Python<'_>, state: &[u8]) -> PyResult<()> {
        py.detach(|| self.with(|s| s.load_state(state)))?
            .map_err(engine_err)
    }

    /// Forget everything (the cache keeps its memory).
    fn reset(&self) -> PyResult<()> {
        self.with(Session::reset)
    }

    /// Keep only the first `n` tokens.
    fn truncate(&self, #[pyo3(from_py_with = crate::args::count)] n: usize) -> PyResult<()> {
        self.with(|s| s.truncate(n))
    }

    /// Tokens evaluated so far.
    #[getter]
    fn tokens(&self) -> PyResult<Vec<u32>> {
        self.with(|s| s.tokens().to_vec())
    }

    /// Positions the KV cache holds.
    #[getter]
    fn n_ctx(&self) -> PyResult<usize> {
        self.with(|s| s.n_ctx())
    }

    /// Bytes of KV cache memory.
    #[getter]
    fn kv_cache_bytes(&self) -> PyResult<usize> {
        self.with(|s| s.cache().byte_size())
    }

    /// Pinned numerics: every token of a batch is computed exactly as if it were
    /// evaluated alone (bitwise), instead of following llama.cpp's batch-size-dependent
    /// kernel orders (the default, which matches llama.cpp's logits).
    #[getter]
    fn pinned(&self) -> PyResult<bool> {
        self.with(|s| s.pinned())
    }

    #[setter]
    fn set_pinned(&self, pinned: bool) -> PyResult<()> {
        self.with(|s| s.set_pinned(pinned))
    }
}

/// Register `Model` and `Session`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyModel>()?;
    m.add_class::<PySession>()?;
    Ok(())
}
