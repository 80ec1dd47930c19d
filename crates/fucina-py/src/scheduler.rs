//! Python bindings for the continuous-batching scheduler: `Scheduler` (submit
//! generations and embeddings, wait for news, metrics, shutdown) and
//! `ScheduledRequest` (drain a request's events, cancel it).
//!
//! The scheduler's thread runs every token without the GIL; Python only submits and
//! drains. One Python thread blocks in `Scheduler.wait_ready` (GIL released) and
//! wakes the asyncio tasks whose requests have events, so the event loop never
//! blocks. Python logit processors are the one exception, for requests that carry
//! them: the scheduler thread takes the GIL to call them on a copy of the row.

use std::sync::Arc;
use std::time::Duration;

use fucina_engine::{
    EngineError, Event, GenerationOptions, Request, RequestHandle, Scheduler, SchedulerConfig,
    SpecOptions,
};
use fucina_model::KvDtype;
use fucina_sample::{LogitProcessor, SampleError, SamplingParams};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::engine::engine_err;
use crate::errors::{queue_full_error, raise, type_err, value_err};
use crate::llm::PyModel;
use crate::tokenizer::PyTokenizer;

fn sched_err(e: EngineError) -> PyErr {
    match e {
        e @ EngineError::QueueFull { .. } => Python::attach(|py| match queue_full_error(py) {
            Ok(ty) => raise(ty, e.to_string()),
            Err(err) => err,
        }),
        other => engine_err(other),
    }
}

/// A Python callable `(token_ids, logits) -> None` as a [`LogitProcessor`]: called
/// with the GIL on a float32 copy of the row, whose edits are copied back.
struct PyFnProcessor {
    f: Py<PyAny>,
}

impl LogitProcessor for PyFnProcessor {
    fn process(&mut self, logits: &mut [f32], history: &[u32]) -> Result<(), SampleError> {
        Python::attach(|py| {
            let row = PyArray1::from_slice(py, logits);
            let ids = PyList::new(py, history)?;
            self.f.bind(py).call1((ids, row.clone()))?;
            logits.copy_from_slice(row.readonly().as_slice()?);
            Ok::<(), PyErr>(())
        })
        .map_err(|e| SampleError::Processor(e.to_string()))
    }
}

/// A continuous-batching scheduler over one model: `n_slots` requests decode
/// together in one batched forward per step, prompts prefill in chunks of
/// `prefill_chunk` tokens between decode steps, and prompt prefixes are reused across
/// requests (`prefix_cache`). At most `max_queue` requests wait for a slot.
#[pyclass(frozen, module = "fucina._core", name = "Scheduler")]
pub struct PyScheduler {
    inner: Scheduler,
    tokenizer: Arc<fucina_tokenizer::Tokenizer>,
    n_vocab: usize,
    grammars: crate::grammar::LazyCompiler,
}

#[pymethods]
impl PyScheduler {
    #[new]
    #[pyo3(signature = (
        model, tokenizer, *, n_slots = 4, n_ctx = 4096, kv_cache_type = "f16", max_queue = 64,
        prefill_chunk = 512, prefix_cache = true, pinned = true
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &PyModel,
        tokenizer: &PyTokenizer,
        #[pyo3(from_py_with = crate::args::count)] n_slots: usize,
        #[pyo3(from_py_with = crate::args::count)] n_ctx: usize,
        kv_cache_type: &str,
        #[pyo3(from_py_with = crate::args::count)] max_queue: usize,
        #[pyo3(from_py_with = crate::args::count)] prefill_chunk: usize,
        prefix_cache: bool,
        pinned: bool,
    ) -> PyResult<Self> {
        let kv_dtype = KvDtype::parse(kv_cache_type).map_err(|e| value_err(e.to_string()))?;
        let config = SchedulerConfig {
            n_slots,
            n_ctx,
            kv_dtype,
            max_queue,
            prefill_chunk,
            prefix_cache,
            pinned,
            ..SchedulerConfig::default()
        };
        let (m, t) = (Arc::clone(&model.inner), Arc::clone(tokenizer.arc()));
        let n_vocab = m.config().n_vocab;
        let inner = py
            .detach(|| Scheduler::new(m, Arc::clone(&t), config))
            .map_err(sched_err)?;
        Ok(Self {
            inner,
            tokenizer: t,
            n_vocab,
            grammars: Default::default(),
        })
    }

    /// Check and queue a generation of `prompt` (token ids); returns its request.
    /// Raises `InvalidArgumentError` for a bad argument or a prompt that does not
    /// fit a slot's context, `QueueFullError` when `max_queue` requests already wait.
    /// `processors` are Python callables `(token_ids, logits) -> None` run on this
    /// request's rows (under the GIL). `reference`: token ids the speculative drafts
    /// may quote (ignored without `speculation`; the tokens are the same either way).
    #[pyo3(signature = (
        prompt, *, max_tokens, seed, temperature = 0.0, top_k = 40, top_p = 0.95, min_p = 0.05,
        typical_p = 1.0, repeat_penalty = 1.0, presence_penalty = 0.0, frequency_penalty = 0.0,
        repeat_last_n = 64,
        mirostat_mode = 0, mirostat_tau = 5.0, mirostat_eta = 0.1, logit_bias = None, stop = Vec::new(), stop_ids = Vec::new(),
        ignore_eos = false, logprobs = None, special = false, speculation = false,
        processors = Vec::new(), grammar = None, reasoning_budget = None, reference = Vec::new()
    ))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::token_ids)] prompt: Vec<u32>,
        #[pyo3(from_py_with = crate::args::opt_count)] max_tokens: Option<usize>,
        #[pyo3(from_py_with = crate::args::seed)] seed: u64,
        #[pyo3(from_py_with = crate::args::number)] temperature: f32,
        #[pyo3(from_py_with = crate::args::small_int)] top_k: i32,
        #[pyo3(from_py_with = crate::args::number)] top_p: f32,
        #[pyo3(from_py_with = crate::args::number)] min_p: f32,
        #[pyo3(from_py_with = crate::args::number)] typical_p: f32,
        #[pyo3(from_py_with = crate::args::number)] repeat_penalty: f32,
        #[pyo3(from_py_with = crate::args::number)] presence_penalty: f32,
        #[pyo3(from_py_with = crate::args::number)] frequency_penalty: f32,
        #[pyo3(from_py_with = crate::args::small_int)] repeat_last_n: i32,
        #[pyo3(from_py_with = crate::args::mirostat_mode)] mirostat_mode: u8,
        #[pyo3(from_py_with = crate::args::number)] mirostat_tau: f32,
        #[pyo3(from_py_with = crate::args::number)] mirostat_eta: f32,
        #[pyo3(from_py_with = crate::args::logit_bias)] logit_bias: Option<Vec<(u32, f32)>>,
        stop: Vec<String>,
        #[pyo3(from_py_with = crate::args::token_ids)] stop_ids: Vec<u32>,
        ignore_eos: bool,
        #[pyo3(from_py_with = crate::args::opt_count)] logprobs: Option<usize>,
        special: bool,
        speculation: bool,
        processors: Vec<Py<PyAny>>,
        grammar: Option<PyRef<'_, crate::grammar::PyGrammar>>,
        #[pyo3(from_py_with = crate::args::reasoning_budget)] reasoning_budget: Option<
            fucina_sample::ReasoningBudget,
        >,
        #[pyo3(from_py_with = crate::args::token_ids)] reference: Vec<u32>,
    ) -> PyResult<PyScheduledRequest> {
        if let Some(&id) = reference.iter().find(|&&id| id as usize >= self.n_vocab) {
            return Err(value_err(format!(
                "reference token id {id} is out of range (vocabulary of {})",
                self.n_vocab
            )));
        }
        let mut procs: Vec<Box<dyn LogitProcessor>> = Vec::with_capacity(processors.len() + 1);
        if let Some(g) = &grammar {
            let c = self
                .grammars
                .constraint(py, &self.tokenizer, self.n_vocab, g)?;
            procs.push(Box::new(c));
        }
        if let Some(b) = reasoning_budget {
            procs.push(Box::new(b));
        }
        for f in processors {
            if !f.bind(py).is_callable() {
                return Err(type_err(format!(
                    "processors must be callable, got {}",
                    f.bind(py).get_type().name()?
                )));
            }
            procs.push(Box::new(PyFnProcessor { f }));
        }
        let options = GenerationOptions {
            max_tokens,
            sampling: SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                typical_p,
                repeat_penalty,
                presence_penalty,
                frequency_penalty,
                repeat_last_n,
                seed,
                logit_bias: logit_bias.unwrap_or_default(),
                mirostat_mode,
                mirostat_tau,
                mirostat_eta,
            },
            stop,
            stop_ids,
            ignore_eos,
            logprobs,
            special,
            speculation: speculation.then(SpecOptions::default),
        };
        let request = Request {
            prompt,
            options,
            processors: procs,
            reference,
        };
        let handle = py
            .detach(|| self.inner.submit(request))
            .map_err(sched_err)?;
        Ok(PyScheduledRequest { handle })
    }

    /// Queue an embedding of `tokens`: its request ends with an `("embedding",
    /// vector)` event (the final hidden states pooled as the model declares, unit length).
    fn embed(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::token_ids)] tokens: Vec<u32>,
    ) -> PyResult<PyScheduledRequest> {
        let handle = py.detach(|| self.inner.embed(tokens)).map_err(sched_err)?;
        Ok(PyScheduledRequest { handle })
    }

    /// Ids of the requests that got events since the last call, waiting up to
    /// `timeout` seconds (GIL released) for one; `[]` on timeout.
    fn wait_ready(&self, py: Python<'_>, timeout: f64) -> PyResult<Vec<u64>> {
        if !timeout.is_finite() || timeout < 0.0 {
            return Err(value_err(format!(
                "timeout must be a finite number of seconds >= 0, not {timeout}"
            )));
        }
        let t = Duration::from_secs_f64(timeout.min(3600.0));
        Ok(py.detach(|| self.inner.wait_ready(t)))
    }

    /// Counters and gauges: requests (submitted, rejected, completed, cancelled,
    /// failed), queue depth, busy and total slots, prompt / cached / copied /
    /// evaluated / generated tokens, steps, seconds of prefill and decode, tokens per
    /// second, prefix-cache hit rate, speculation drafted / accepted / acceptance
    /// rate, and the most steps a cancellation took to free its slot.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.inner.metrics();
        let d = PyDict::new(py);
        for (k, v) in [
            ("requests_submitted", m.requests_submitted),
            ("requests_rejected", m.requests_rejected),
            ("requests_completed", m.requests_completed),
            ("requests_cancelled", m.requests_cancelled),
            ("requests_failed", m.requests_failed),
            ("embeddings", m.embeddings),
            ("queue_depth", m.queue_depth),
            ("slots_busy", m.slots_busy),
            ("slots_total", m.slots_total),
            ("prompt_tokens", m.prompt_tokens),
            ("prompt_tokens_cached", m.prompt_tokens_cached),
            ("prompt_tokens_copied", m.prompt_tokens_copied),
            ("prompt_tokens_evaluated", m.prompt_tokens_evaluated),
            ("generated_tokens", m.generated_tokens),
            ("steps", m.steps),
            ("decode_rows", m.decode_rows),
            ("spec_drafted", m.spec_drafted),
            ("spec_accepted", m.spec_accepted),
            ("cancel_steps_max", m.cancel_steps_max),
        ] {
            d.set_item(k, v)?;
        }
        for (k, v) in [
            ("prefill_seconds", m.prefill_seconds),
            ("decode_seconds", m.decode_seconds),
            ("prompt_tokens_per_second", m.prompt_tokens_per_second()),
            (
                "generated_tokens_per_second",
                m.generated_tokens_per_second(),
            ),
            ("prefix_cache_hit_rate", m.prefix_cache_hit_rate()),
            ("spec_acceptance_rate", m.spec_acceptance_rate()),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Requests that run at once.
    #[getter]
    fn n_slots(&self) -> usize {
        self.inner.config().n_slots
    }

    /// Positions each slot holds (a request's prompt plus completion).
    #[getter]
    fn n_ctx(&self) -> usize {
        self.inner.config().n_ctx
    }

    /// Requests that may wait for a slot.
    #[getter]
    fn max_queue(&self) -> usize {
        self.inner.config().max_queue
    }

    /// Stop the scheduler thread; requests still queued or running end with an
    /// `("error", "unavailable", ...)` event. Idempotent.
    fn shutdown(&self, py: Python<'_>) {
        py.detach(|| self.inner.shutdown());
    }
}

impl Drop for PyScheduler {
    fn drop(&mut self) {
        // Without the GIL: the scheduler thread may be waiting for it to call a
        // request's Python processor.
        Python::attach(|py| py.detach(|| self.inner.shutdown()));
    }
}

/// A request queued on a `Scheduler`: `take()` its events, `cancel()` it (dropping
/// it cancels it too).
#[pyclass(frozen, module = "fucina._core", name = "ScheduledRequest")]
pub struct PyScheduledRequest {
    handle: RequestHandle,
}

fn error_kind(e: &EngineError) -> &'static str {
    match e {
        EngineError::InvalidArgument { .. }
        | EngineError::PromptTooLong { .. }
        | EngineError::Tokenizer(_) => "invalid",
        EngineError::Sample(SampleError::Processor(_)) => "processor",
        // The request's: bad parameters, every token masked, a grammar that cannot go on
        // (SampleError::Constraint: what the request asks for cannot be written).
        EngineError::Sample(_) => "invalid",
        EngineError::Scheduler(_) | EngineError::QueueFull { .. } => "unavailable",
        _ => "internal",
    }
}

fn event<'py>(py: Python<'py>, e: Event) -> PyResult<Bound<'py, PyTuple>> {
    match e {
        Event::Started {
            prompt_tokens,
            cached,
        } => ("started", prompt_tokens, cached).into_pyobject(py),
        Event::Step(s) => (
            "token",
            s.token,
            s.emitted,
            s.text,
            s.finish.map(|f| f.as_str()),
            s.logprobs.map(|l| (l.logprob, l.top)),
            s.stop_index,
        )
            .into_pyobject(py),
        Event::Finished(o) => {
            let (drafted, accepted) = o.spec.map_or((0, 0), |s| (s.drafted, s.accepted));
            (
                "finished",
                o.finish.as_str(),
                o.cancelled,
                drafted,
                accepted,
            )
                .into_pyobject(py)
        }
        Event::Failed(err) => ("error", error_kind(&err), err.to_string()).into_pyobject(py),
        Event::Embedding(v) => ("embedding", v).into_pyobject(py),
    }
}

#[pymethods]
impl PyScheduledRequest {
    /// Its id (what `Scheduler.wait_ready` reports).
    #[getter]
    fn id(&self) -> u64 {
        self.handle.id()
    }

    /// Every event queued so far (never waits), in order: `("started", prompt_tokens,
    /// cached_tokens)`; `("token", token, emitted, text, finish_reason, logprobs,
    /// stop_index)` per committed token; then one of `("finished", finish_reason,
    /// cancelled, spec_drafted, spec_accepted)`, `("error", kind, message)` (kind
    /// `"invalid"`, `"processor"`, `"unavailable"` or `"internal"`) or
    /// `("embedding", vector)`.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.handle
            .try_events()
            .into_iter()
            .map(|e| event(py, e))
            .collect()
    }

    /// Whether its last event has been queued (it may not have been taken yet).
    #[getter]
    fn closed(&self) -> bool {
        self.handle.is_closed()
    }

    /// Cancel it: a queued request never starts, a running one stops before its next
    /// token and frees its slot at the next step. Idempotent.
    fn cancel(&self) {
        self.handle.cancel();
    }

    /// Whether `cancel()` was called (or it was dropped).
    #[getter]
    fn cancelled(&self) -> bool {
        self.handle.is_cancelled()
    }

    fn __repr__(&self) -> String {
        format!("ScheduledRequest(id={})", self.handle.id())
    }
}

/// Register `Scheduler` and `ScheduledRequest`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyScheduler>()?;
    m.add_class::<PyScheduledRequest>()?;
    Ok(())
}
