//! Python bindings for `fucina-engine`: `Engine` (a model, its tokenizer and a pool
//! of sequences) and `Generation` (one prompt being continued, an iterator of
//! steps). `fucina.LLM` composes them in Python.
//!
//! Each step runs with the GIL released. Python logit processors are the one
//! exception: when a generation has any, the step takes the GIL to call them with a
//! zero-copy, writable float32 view of the logits row (the pool's row buffer, whose
//! address never changes; the view keeps the `Engine` alive), so their writes are
//! what the sampler sees. Without processors the loop never touches Python.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use fucina_engine::{EngineError, Generation, GenerationOptions, SeqPool, SpecOptions};
use fucina_model::KvDtype;
use fucina_sample::{LogitProcessor, SampleError, SamplingParams};
use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::conversation::PyConversation;
use crate::errors::{fucina_error, grammar_err, raise, value_err};
use crate::grammar::{grammar_error, LazyCompiler, PyGrammar};
use crate::llm::{model_err, PyModel};
use crate::tokenizer::PyTokenizer;

/// Map an engine error to the Python hierarchy: bad arguments and sampling
/// parameters are `InvalidArgumentError`s (`ValueError`), a processor that masks
/// every token a `FucinaError` + `ValueError` too, a grammar that cannot go on a
/// `GrammarError` (one of those), model failures as `model_err`.
pub(crate) fn engine_err(e: EngineError) -> PyErr {
    match e {
        EngineError::Model(m) => model_err(m),
        EngineError::Tokenizer(t) => crate::tokenizer::tok_err(t),
        EngineError::Sample(SampleError::Constraint(m)) => grammar_err(m),
        e @ (EngineError::InvalidArgument { .. }
        | EngineError::PromptTooLong { .. }
        | EngineError::Sample(_)) => value_err(e.to_string()),
        other => Python::attach(|py| match fucina_error(py) {
            Ok(ty) => raise(ty, other.to_string()),
            Err(err) => err,
        }),
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a step cannot leave the pool inconsistent (every mutation is a
    // length update after the data is written), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A model with its tokenizer and a pool of sequences that generations run on.
#[pyclass(frozen, module = "fucina._core", name = "Engine")]
pub struct PyEngine {
    pub(crate) pool: Mutex<SeqPool>,
    tokenizer: PyTokenizer,
    n_vocab: usize,
    grammars: LazyCompiler,
}

#[pymethods]
impl PyEngine {
    /// An engine over `model` whose sequences hold up to `n_ctx` positions each.
    #[new]
    /// With `pinned`, every row of a batched forward gives bitwise the logits it would
    /// get alone, so results never depend on how prompts were chunked or batched (a
    /// little slower prefill; llama.cpp's prompt-batch arithmetic otherwise).
    #[pyo3(signature = (model, tokenizer, *, n_ctx = 4096, kv_cache_type = "f16", pinned = false))]
    fn new(
        model: &PyModel,
        tokenizer: &PyTokenizer,
        #[pyo3(from_py_with = crate::args::count)] n_ctx: usize,
        kv_cache_type: &str,
        pinned: bool,
    ) -> PyResult<Self> {
        let dtype = KvDtype::parse(kv_cache_type).map_err(|e| value_err(e.to_string()))?;
        let mut pool = SeqPool::new(Arc::clone(&model.inner), n_ctx, dtype).map_err(engine_err)?;
        pool.set_pinned(pinned);
        Ok(Self {
            pool: Mutex::new(pool),
            tokenizer: tokenizer.clone(),
            n_vocab: model.inner.config().n_vocab,
            grammars: LazyCompiler::default(),
        })
    }

    /// Positions each sequence holds.
    #[getter]
    fn n_ctx(&self) -> usize {
        lock(&self.pool).n_ctx()
    }

    /// Whether pinned numerics are on.
    #[getter]
    fn pinned(&self) -> bool {
        lock(&self.pool).pinned()
    }

    /// Sequences currently allocated (live generations).
    #[getter]
    fn n_live(&self) -> usize {
        lock(&self.pool).n_live()
    }

    /// Logits of `tokens` evaluated on a fresh sequence: `[n_vocab]` for the last
    /// token, or `[len(tokens), n_vocab]` with `all`. No other sequence is touched.
    #[pyo3(signature = (tokens, *, all = false))]
    fn logits<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::args::token_ids)] tokens: Vec<u32>,
        all: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let out = py
            .detach(|| {
                let mut pool = lock(&self.pool);
                let seq = pool.alloc()?;
                let r = if all {
                    pool.eval_all(seq, &tokens).map(<[f32]>::to_vec)
                } else {
                    pool.eval(seq, &tokens, &mut |_, _| {}).map(|l| l.to_vec())
                };
                pool.remove(seq);
                r
            })
            .map_err(engine_err)?;
        let rows = out.len() / self.n_vocab.max(1);
        let arr = PyArray1::from_vec(py, out).into_any();
        if all {
            arr.call_method1("reshape", ((rows, self.n_vocab),))
        } else {
            Ok(arr)
        }
    }

    /// The embedding of `tokens` (a float32 array of the model's width): their final
    /// hidden states pooled by `pooling` (`"mean"`, `"cls"`, `"last"`; `None`: what the
    /// model's GGUF declares, else the mean), scaled to unit length with `normalize`,
    /// computed on a temporary sequence with the GIL released.
    #[pyo3(signature = (tokens, *, normalize = true, pooling = None))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::args::token_ids)] tokens: Vec<u32>,
        normalize: bool,
        pooling: Option<&str>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let pooling = match pooling {
            None => fucina_engine::Pooling::of_model(lock(&self.pool).model()),
            Some(name) => fucina_engine::Pooling::from_name(name).ok_or_else(|| {
                value_err(format!(
                    "pooling must be 'mean', 'cls' or 'last' or None, not {name:?}"
                ))
            })?,
        };
        let v = py
            .detach(|| lock(&self.pool).embed_pooled(&tokens, pooling, normalize))
            .map_err(engine_err)?;
        Ok(PyArray1::from_vec(py, v))
    }

    /// The pooling the model's GGUF declares for embeddings (`"mean"` where it
    /// declares none).
    #[getter]
    fn pooling(&self) -> &'static str {
        fucina_engine::Pooling::of_model(lock(&self.pool).model()).name()
    }

    /// Start continuing `prompt` (token ids) on a new sequence. Every argument is
    /// checked here, before any compute. `seed` is required (the Python layer draws
    /// one when the user gives none); `processors` are callables
    /// `(token_ids, logits) -> None` that edit the float32 logits row in place;
    /// `on_prefill(done, total)` follows the prompt's evaluation.
    #[pyo3(signature = (
        prompt, *, max_tokens, seed, temperature = 0.0, top_k = 40, top_p = 0.95,
        min_p = 0.05, typical_p = 1.0, repeat_penalty = 1.0, presence_penalty = 0.0,
        frequency_penalty = 0.0, repeat_last_n = 64,
        mirostat_mode = 0, mirostat_tau = 5.0, mirostat_eta = 0.1, logit_bias = None, stop = Vec::new(),
        stop_ids = Vec::new(), ignore_eos = false, logprobs = None, special = false,
        processors = Vec::new(), on_prefill = None, conversation = None, speculation = false,
        reference = None, grammar = None, reasoning_budget = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        slf: &Bound<'_, Self>,
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
        processors: Vec<Py<PyAny>>,
        on_prefill: Option<Py<PyAny>>,
        conversation: Option<Py<PyConversation>>,
        speculation: bool,
        #[pyo3(from_py_with = crate::args::opt_token_ids)] reference: Option<Vec<u32>>,
        grammar: Option<PyRef<'_, PyGrammar>>,
        #[pyo3(from_py_with = crate::args::reasoning_budget)] reasoning_budget: Option<
            fucina_sample::ReasoningBudget,
        >,
    ) -> PyResult<PyGeneration> {
        let py = slf.py();
        for p in processors.iter().chain(&on_prefill) {
            if !p.bind(py).is_callable() {
                return Err(crate::errors::type_err(format!(
                    "logit processors and on_prefill must be callable, got {}",
                    p.bind(py).get_type().name()?
                )));
            }
        }
        let opts = GenerationOptions {
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
            // Python processors get a zero-copy view of the pool's fixed row buffer;
            // verify rows live elsewhere, so those generations decode plainly.
            speculation: (speculation && processors.is_empty()).then(SpecOptions::default),
        };
        let this = slf.get();
        let mut constraints: Vec<Box<dyn LogitProcessor>> = Vec::new();
        let mut grammar_stats = None;
        if let Some(g) = &grammar {
            let c = this
                .grammars
                .constraint(py, this.tokenizer.arc(), this.n_vocab, g)?;
            grammar_stats = Some(c.stats_handle());
            constraints.push(Box::new(c));
        }
        if let Some(b) = reasoning_budget {
            constraints.push(Box::new(b));
        }
        let engine = slf.clone().unbind();
        if let Some(c) = &conversation {
            if !c.get().belongs_to(&engine) {
                return Err(value_err("the conversation belongs to another engine"));
            }
        }
        let gen = {
            let mut pool = lock(&this.pool);
            let tokenizer = Arc::clone(this.tokenizer.arc());
            match &conversation {
                Some(c) => c
                    .get()
                    .turn(&mut pool, tokenizer, &prompt, opts, constraints),
                None => Generation::new(&mut pool, tokenizer, &prompt, opts, constraints),
            }
            .map_err(engine_err)?
        };
        let mut gen = gen;
        if let Some(r) = reference.filter(|r| !r.is_empty()) {
            gen.add_reference(&r);
        }
        Ok(PyGeneration {
            engine,
            conversation,
            gen: Mutex::new(gen),
            processors: PyProcessors {
                fns: processors,
                err: None,
            },
            on_prefill,
            grammar_stats,
        })
    }

    /// Compile `grammar` against this model's vocabulary without generating (raises
    /// `GrammarError` naming what is wrong); returns what a leniently compiled JSON
    /// Schema leaves unenforced, if anything.
    fn check_grammar(
        &self,
        py: Python<'_>,
        grammar: PyRef<'_, PyGrammar>,
    ) -> PyResult<Option<String>> {
        let compiler = self.grammars.get(py, self.tokenizer.arc(), self.n_vocab)?;
        let inner = &grammar.inner;
        py.detach(|| compiler.check(inner)).map_err(grammar_error)
    }

    /// For each token of `tokens` after the first: its log-probability given the
    /// ones before and the `n` most likely alternatives, as `(logprob, [(id,
    /// logprob), ...])` (evaluated on a temporary sequence).
    fn prompt_logprobs(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::args::token_ids)] tokens: Vec<u32>,
        #[pyo3(from_py_with = crate::args::count)] n: usize,
    ) -> PyResult<Vec<PyLogprobs>> {
        let rows = py
            .detach(|| fucina_engine::prompt_logprobs(&mut lock(&self.pool), &tokens, n))
            .map_err(engine_err)?;
        Ok(rows.into_iter().map(|r| (r.logprob, r.top)).collect())
    }

    /// The tokenizer generations decode with.
    #[getter]
    fn tokenizer(&self) -> PyTokenizer {
        self.tokenizer.clone()
    }
}

/// Python callables run as one [`LogitProcessor`] (after the generation's own).
struct PyProcessors {
    fns: Vec<Py<PyAny>>,
    /// The exception a callable raised, re-raised to the caller as it was.
    err: Option<PyErr>,
}

/// A [`PyProcessors`] bound to the engine object its logits views keep alive.
struct BoundProcessors<'a> {
    inner: &'a mut PyProcessors,
    engine: &'a Py<PyEngine>,
}

impl LogitProcessor for BoundProcessors<'_> {
    fn process(&mut self, logits: &mut [f32], history: &[u32]) -> Result<(), SampleError> {
        Python::attach(|py| {
            // SAFETY: `logits` is the pool's row buffer (allocated once, never moved
            // or freed while the pool lives); the view's base object is the engine
            // that owns the pool, so the memory outlives every reference to the view.
            // The callables run now, while this step holds the pool's lock.
            let view = unsafe {
                PyArray1::<f32>::borrow_from_array(
                    &ArrayView1::from(&*logits),
                    self.engine.bind(py).clone().into_any(),
                )
            };
            let ids = PyList::new(py, history)?;
            for f in &self.inner.fns {
                f.bind(py).call1((ids.clone(), view.clone()))?;
            }
            Ok::<(), PyErr>(())
        })
        .map_err(|e| {
            let msg = e.to_string();
            self.inner.err = Some(e);
            SampleError::Processor(msg)
        })
    }
}

/// A token's `(logprob, [(id, logprob), ...])`.
type PyLogprobs = (f32, Vec<(u32, f32)>);

/// One step as Python sees it: `(token, emitted, text, finish_reason, logprobs)`.
type PyStep = (u32, bool, String, Option<&'static str>, Option<PyLogprobs>);

fn py_step(step: fucina_engine::Step) -> PyStep {
    (
        step.token,
        step.emitted,
        step.text,
        step.finish.map(|f| f.as_str()),
        step.logprobs.map(|l| (l.logprob, l.top)),
    )
}

/// A prompt being continued: iterate for steps `(token, emitted, text,
/// finish_reason, logprobs)`; `close()` (or dropping it) ends it and frees its
/// sequence.
#[pyclass(module = "fucina._core", name = "Generation")]
pub struct PyGeneration {
    engine: Py<PyEngine>,
    /// The conversation whose sequence it writes (its sidecar is synced at the end).
    conversation: Option<Py<PyConversation>>,
    gen: Mutex<Generation>,
    processors: PyProcessors,
    on_prefill: Option<Py<PyAny>>,
    /// The grammar constraint's counts (with `grammar`).
    grammar_stats: Option<fucina_grammar::StatsHandle>,
}

impl PyGeneration {
    /// End the generation and give its sequence back; a conversation's new positions
    /// go to its sidecar (the error, if writing it fails).
    fn release(&self) -> fucina_engine::Result<()> {
        let engine = self.engine.get();
        let mut pool = lock(&engine.pool);
        let mut gen = lock(&self.gen);
        gen.release(&mut pool);
        match &self.conversation {
            Some(c) => {
                c.get().turn_ended(&gen.cancel_handle());
                c.get().sync_pool(&pool)
            }
            None => Ok(()),
        }
    }
}

#[pymethods]
impl PyGeneration {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<PyStep>> {
        let engine = self.engine.get();
        let (procs, prefill, engine_obj) = (&mut self.processors, &self.on_prefill, &self.engine);
        let gen = &self.gen;
        let step = py.detach(|| {
            let mut bound = BoundProcessors {
                inner: procs,
                engine: engine_obj,
            };
            let has_procs = !bound.inner.fns.is_empty();
            let mut extra: Vec<&mut dyn LogitProcessor> = Vec::new();
            if has_procs {
                extra.push(&mut bound);
            }
            let mut progress_err = None;
            let mut progress = |done: usize, total: usize| {
                if let (Some(f), None) = (prefill, &progress_err) {
                    if let Err(e) = Python::attach(|py| f.bind(py).call1((done, total)).map(drop)) {
                        progress_err = Some(e);
                    }
                }
            };
            let mut pool = lock(&engine.pool);
            let r = lock(gen).step(&mut pool, &mut extra, &mut progress);
            (r, progress_err)
        });
        let step = match step {
            (_, Some(e)) => {
                let _ = py.detach(|| self.release());
                return Err(e);
            }
            (Err(e), None) => {
                let _ = py.detach(|| self.release());
                return Err(self.processors.err.take().unwrap_or_else(|| engine_err(e)));
            }
            (Ok(None), None) => {
                py.detach(|| self.release()).map_err(engine_err)?;
                return Ok(None);
            }
            (Ok(Some(step)), None) => step,
        };
        if step.finish.is_some() {
            py.detach(|| self.release()).map_err(engine_err)?;
        }
        Ok(Some(py_step(step)))
    }

    /// End the generation now and free its sequence (idempotent). A conversation's
    /// turn is written to its persistence sidecar here (an `OSError`-like
    /// `FucinaError` if that fails).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        lock(&self.gen)
            .cancel_handle()
            .store(true, Ordering::Relaxed);
        py.detach(|| self.release()).map_err(engine_err)
    }

    /// One lockstep step of several generations of one engine (distinct, without
    /// Python logit processors): streams that are decoding share ONE batched forward
    /// (pinned numerics: each gets exactly the tokens it would alone), prefills run
    /// per stream. Returns, per generation, its step tuple, `None` once finished, or
    /// the exception that ended that stream (the others go on).
    #[staticmethod]
    fn step_batch(py: Python<'_>, gens: Vec<Py<PyGeneration>>) -> PyResult<Vec<Py<PyAny>>> {
        if gens.is_empty() {
            return Ok(Vec::new());
        }
        let refs: Vec<PyRef<'_, PyGeneration>> = gens
            .iter()
            .map(|g| g.bind(py).try_borrow())
            .collect::<Result<_, _>>()?;
        let engine = refs[0].engine.clone_ref(py);
        for (i, g) in refs.iter().enumerate() {
            if !g.engine.is(&engine) {
                return Err(value_err(format!(
                    "generations[{i}] belongs to another engine"
                )));
            }
            if !g.processors.fns.is_empty() || g.on_prefill.is_some() {
                return Err(value_err(format!(
                    "generations[{i}] has Python processors or on_prefill; batched steps run without the GIL"
                )));
            }
            if gens[..i].iter().any(|o| o.is(&gens[i])) {
                return Err(value_err(format!("generations[{i}] appears twice")));
            }
        }
        let plain: Vec<&PyGeneration> = refs.iter().map(|g| &**g).collect();
        let results = py.detach(|| {
            let mut pool = lock(&engine.get().pool);
            let mut guards: Vec<_> = plain.iter().map(|g| lock(&g.gen)).collect();
            let mut gs: Vec<&mut Generation> = guards.iter_mut().map(|g| &mut **g).collect();
            fucina_engine::step_batch(&mut pool, &mut gs)
        });
        let results = match results {
            Ok(r) => r,
            Err(e) => {
                for &g in &plain {
                    let _ = py.detach(|| g.release());
                }
                return Err(engine_err(e));
            }
        };
        let mut out = Vec::with_capacity(refs.len());
        for (&g, r) in plain.iter().zip(results) {
            let item = match r {
                Ok(Some(step)) => {
                    if step.finish.is_some() {
                        py.detach(|| g.release()).map_err(engine_err)?;
                    }
                    py_step(step).into_pyobject(py)?.into_any().unbind()
                }
                Ok(None) => {
                    py.detach(|| g.release()).map_err(engine_err)?;
                    py.None()
                }
                Err(e) => {
                    let _ = py.detach(|| g.release());
                    engine_err(e).into_value(py).into_any()
                }
            };
            out.push(item);
        }
        Ok(out)
    }

    /// `"stop"`, `"length"`, or `None` while running.
    #[getter]
    fn finish_reason(&self) -> Option<&'static str> {
        lock(&self.gen).finish_reason().map(|f| f.as_str())
    }

    /// Prompt tokens its sequence already held (a conversation's or the prompt cache's
    /// common prefix), kept instead of evaluated: OpenAI's `cached_tokens`.
    #[getter]
    fn reused_tokens(&self) -> usize {
        lock(&self.gen).reused()
    }

    /// Tokens of the prompt.
    #[getter]
    fn prompt_tokens(&self) -> Vec<u32> {
        lock(&self.gen).prompt_tokens().to_vec()
    }

    /// Tokens committed so far (including a final end-of-generation token).
    #[getter]
    fn tokens(&self) -> Vec<u32> {
        lock(&self.gen).generated().to_vec()
    }

    /// The grammar constraint's counts (`None` without `grammar`): `masks` computed,
    /// `mask_us` (each mask's time in microseconds), `wait_us` (time spent waiting
    /// for masks computed while the forward ran) and `forced` (tokens the grammar
    /// forced, committed without sampling).
    #[getter]
    fn grammar_stats<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        let Some(h) = &self.grammar_stats else {
            return Ok(None);
        };
        let s = py.detach(|| h.get());
        let d = pyo3::types::PyDict::new(py);
        d.set_item("masks", s.masks)?;
        d.set_item("mask_us", s.mask_us)?;
        d.set_item("wait_us", s.wait_us)?;
        d.set_item("forced", lock(&self.gen).forced_count())?;
        Ok(Some(d))
    }

    /// Speculative decoding's counts (`None` when it is off): `steps`, `spec_steps`,
    /// `fallback_steps`, `disabled_steps`, `drafted`, `accepted`, `rejected_steps`,
    /// `bonus`, `committed`, and `gate` (the cost gate and the sources, in words).
    #[getter]
    fn spec_stats<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        let gen = lock(&self.gen);
        let (Some(s), Some(summary)) = (gen.spec_stats(), gen.spec_summary()) else {
            return Ok(None);
        };
        let d = pyo3::types::PyDict::new(py);
        for (k, v) in [
            ("steps", s.steps),
            ("spec_steps", s.spec_steps),
            ("fallback_steps", s.fallback_steps),
            ("disabled_steps", s.disabled_steps),
            ("drafted", s.drafted),
            ("accepted", s.accepted),
            ("rejected_steps", s.rejected_steps),
            ("bonus", s.bonus),
            ("committed", s.committed),
        ] {
            d.set_item(k, v)?;
        }
        d.set_item("gate", summary)?;
        Ok(Some(d))
    }

    /// RNG draws consumed so far (one per sampled token; none when greedy).
    #[getter]
    fn draws(&self) -> u64 {
        lock(&self.gen).draws()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", *lock(&self.gen))
    }
}

impl Drop for PyGeneration {
    fn drop(&mut self) {
        // Without the GIL: a step on another thread may hold the pool while it waits
        // for the GIL to call a processor.
        Python::attach(|py| py.detach(|| drop(self.release())));
    }
}

/// Register `Engine`, `Generation` and `Conversation`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEngine>()?;
    m.add_class::<PyGeneration>()?;
    m.add_class::<PyConversation>()?;
    Ok(())
}
