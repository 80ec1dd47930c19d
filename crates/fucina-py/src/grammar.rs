//! `Grammar`: a JSON Schema, regex or Lark grammar a generation's output must match
//! (compiled per model by the engine, on first use, against its vocabulary), and
//! `GrammarCompiler` / `GrammarMatcher` for callers that run their own sampling loop
//! (and for the mask-time benchmark on vocabularies without a model).

use std::sync::{Arc, Mutex, OnceLock};

use fucina_grammar::{Constraint, Grammar, GrammarCompiler, GrammarError};
use fucina_sample::LogitProcessor;
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::engine::lock;
use crate::errors::grammar_err;
use crate::tokenizer::PyTokenizer;

/// A model's grammar compiler, built on the first constrained request (building it
/// indexes the whole vocabulary), shared by every later one.
#[derive(Default)]
pub(crate) struct LazyCompiler(OnceLock<Result<Arc<GrammarCompiler>, String>>);

impl LazyCompiler {
    /// The compiler (built now if this is the first use; GIL released).
    pub(crate) fn get(
        &self,
        py: Python<'_>,
        tokenizer: &Arc<fucina_tokenizer::Tokenizer>,
        n_vocab: usize,
    ) -> PyResult<Arc<GrammarCompiler>> {
        py.detach(|| {
            self.0
                .get_or_init(|| {
                    GrammarCompiler::new(Arc::clone(tokenizer), n_vocab)
                        .map(Arc::new)
                        .map_err(|e| e.to_string())
                })
                .clone()
        })
        .map_err(grammar_err)
    }

    /// A fresh constraint following `grammar`, for one generation.
    pub(crate) fn constraint(
        &self,
        py: Python<'_>,
        tokenizer: &Arc<fucina_tokenizer::Tokenizer>,
        n_vocab: usize,
        grammar: &PyGrammar,
    ) -> PyResult<Constraint> {
        let compiler = self.get(py, tokenizer, n_vocab)?;
        start_constraint(py, &compiler, tokenizer, grammar)
    }
}

/// A `fucina.GrammarWarning` (a `UserWarning`) for what a leniently compiled JSON Schema
/// leaves unenforced.
pub(crate) fn warn_unenforced(py: Python<'_>, c: &Constraint) -> PyResult<()> {
    let Some(w) = c.warning() else {
        return Ok(());
    };
    let msg = std::ffi::CString::new(format!("{w}: not enforced (the rest of the schema is)"))
        .unwrap_or_else(|_| c"a JSON Schema keyword is not enforced".to_owned());
    PyErr::warn(py, crate::errors::grammar_warning(py)?, &msg, 2)
}

/// A grammar error as `fucina.GrammarError`.
pub(crate) fn grammar_error(e: GrammarError) -> PyErr {
    grammar_err(e.to_string())
}

/// A constraint on generated text: build one with `json_schema`, `json_object`,
/// `regex` or `lark`.
#[pyclass(frozen, module = "fucina._core", name = "Grammar")]
pub struct PyGrammar {
    pub(crate) inner: Grammar,
    /// Text already written before the generation starts (an assistant prefill): a
    /// constraint consumes its tokens first, so the output continues it.
    pub(crate) prefix: String,
}

impl PyGrammar {
    fn new(inner: Grammar) -> PyGrammar {
        PyGrammar {
            inner,
            prefix: String::new(),
        }
    }
}

/// Compile `grammar` with `compiler` and consume its prefix (tokenized with `tokenizer`,
/// special tokens parsed, as a rendered prompt is), warning about what a lenient schema
/// leaves unenforced.
fn start_constraint(
    py: Python<'_>,
    compiler: &GrammarCompiler,
    tokenizer: &fucina_tokenizer::Tokenizer,
    grammar: &PyGrammar,
) -> PyResult<Constraint> {
    let g = &grammar.inner;
    let mut c = py.detach(|| compiler.compile(g)).map_err(grammar_error)?;
    warn_unenforced(py, &c)?;
    if !grammar.prefix.is_empty() {
        let ids = tokenizer
            .encode(&grammar.prefix, false, true)
            .map_err(|e| grammar_err(e.to_string()))?;
        py.detach(|| c.consume(&ids)).map_err(|e| {
            let mut shown: String = grammar.prefix.chars().take(60).collect();
            if shown.len() < grammar.prefix.len() {
                shown.push_str("...");
            }
            grammar_err(format!(
                "the text the output continues ({shown:?}) does not match the grammar: {e}"
            ))
        })?;
    }
    Ok(c)
}

#[pymethods]
impl PyGrammar {
    /// A JSON Schema given as JSON text.
    #[staticmethod]
    fn json_schema(schema: &str) -> PyResult<PyGrammar> {
        Grammar::json_schema_str(schema)
            .map(PyGrammar::new)
            .map_err(grammar_error)
    }

    /// The JSON Schema text `schema` as `json_schema` compiles it (llama.cpp's reading,
    /// compact separators), for embedding in a Lark grammar's `%json { ... }`; with
    /// `lenient`, read leniently from the start (what llguidance does not implement is
    /// not enforced, and nothing says so).
    #[staticmethod]
    #[pyo3(signature = (schema, lenient = false))]
    fn compiled_json_schema(schema: &str, lenient: bool) -> PyResult<String> {
        match Grammar::json_schema_str(schema).map_err(grammar_error)? {
            Grammar::JsonSchema(v) if lenient => {
                Ok(fucina_grammar::lenient_compiled_schema(v).to_string())
            }
            Grammar::JsonSchema(v) => Ok(fucina_grammar::compiled_schema(v).to_string()),
            _ => unreachable!("json_schema_str builds a JSON Schema"),
        }
    }

    /// Any JSON object.
    #[staticmethod]
    fn json_object() -> PyGrammar {
        PyGrammar::new(Grammar::JsonObject)
    }

    /// A regular expression the whole output must match.
    #[staticmethod]
    fn regex(pattern: String) -> PyGrammar {
        PyGrammar::new(Grammar::Regex(pattern))
    }

    /// A grammar in llguidance's Lark-like syntax.
    #[staticmethod]
    fn lark(text: String) -> PyGrammar {
        PyGrammar::new(Grammar::Lark(text))
    }

    /// This grammar for output that continues `prefix`: text already written (an
    /// assistant prefill) is consumed first, so `prefix` + output matches the grammar.
    /// A prefix the grammar cannot start with fails when a generation compiles it.
    fn after(&self, prefix: &str) -> PyGrammar {
        PyGrammar {
            inner: self.inner.clone(),
            prefix: format!("{}{prefix}", self.prefix),
        }
    }

    /// The text the output continues (empty unless built with `after`).
    #[getter]
    fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `"json_schema"`, `"json_object"`, `"regex"` or `"lark"`.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner {
            Grammar::JsonSchema(_) => "json_schema",
            Grammar::JsonObject => "json_object",
            Grammar::Regex(_) => "regex",
            Grammar::Lark(_) => "lark",
        }
    }

    /// The schema (JSON text), pattern or grammar text.
    #[getter]
    fn source(&self) -> String {
        match &self.inner {
            Grammar::JsonSchema(v) => v.to_string(),
            Grammar::JsonObject => "{\"type\": \"object\"}".into(),
            Grammar::Regex(s) | Grammar::Lark(s) => s.clone(),
        }
    }

    fn __repr__(&self) -> String {
        let mut src = self.source();
        if src.chars().count() > 60 {
            src = src.chars().take(57).collect::<String>() + "...";
        }
        if self.prefix.is_empty() {
            format!("Grammar.{}({src:?})", self.kind())
        } else {
            format!("Grammar.{}({src:?}).after({:?})", self.kind(), self.prefix)
        }
    }
}

/// Compiles grammars against a tokenizer's vocabulary (building it indexes every token).
#[pyclass(frozen, module = "fucina._core", name = "GrammarCompiler")]
pub struct PyGrammarCompiler {
    inner: Arc<GrammarCompiler>,
    tokenizer: Arc<fucina_tokenizer::Tokenizer>,
}

#[pymethods]
impl PyGrammarCompiler {
    /// The compiler for `tokenizer`, over masks of `n_vocab` entries (default: the
    /// tokenizer's vocabulary size; a model's output may have padding rows past it).
    #[new]
    #[pyo3(signature = (tokenizer, n_vocab = None))]
    fn new(
        py: Python<'_>,
        tokenizer: PyRef<'_, PyTokenizer>,
        n_vocab: Option<usize>,
    ) -> PyResult<Self> {
        let tok = Arc::clone(tokenizer.arc());
        let n = n_vocab.unwrap_or(tok.vocab_size());
        let inner = py
            .detach(|| GrammarCompiler::new(Arc::clone(&tok), n))
            .map_err(grammar_error)?;
        Ok(PyGrammarCompiler {
            inner: Arc::new(inner),
            tokenizer: tok,
        })
    }

    /// Size of the masks.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    /// A matcher at the grammar's start, past its prefix if it has one (raises
    /// `GrammarError` naming the problem).
    fn compile(&self, py: Python<'_>, grammar: PyRef<'_, PyGrammar>) -> PyResult<PyGrammarMatcher> {
        let c = start_constraint(py, &self.inner, &self.tokenizer, &grammar)?;
        Ok(PyGrammarMatcher {
            inner: Mutex::new(c),
            n_vocab: self.inner.vocab_size(),
        })
    }
}

/// One grammar's state over a token stream.
#[pyclass(frozen, module = "fucina._core", name = "GrammarMatcher")]
pub struct PyGrammarMatcher {
    inner: Mutex<Constraint>,
    n_vocab: usize,
}

#[pymethods]
impl PyGrammarMatcher {
    /// The tokens allowed next, as a boolean array, and the microseconds computing it took
    /// (on a worker thread, when it was started ahead by the last `consume`).
    fn mask<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyArray1<bool>>, f64)> {
        let (mask, us) = py
            .detach(|| {
                let mut c = lock(&self.inner);
                let m = c.mask()?;
                let us = f64::from(c.last_mask_us());
                let out: Vec<bool> = (0..self.n_vocab).map(|t| m.is_allowed(t as u32)).collect();
                Ok::<_, GrammarError>((out, us))
            })
            .map_err(grammar_error)?;
        Ok((PyArray1::from_vec(py, mask), us))
    }

    /// Commit `tokens` in order (raises `GrammarError` if the grammar rejects one).
    fn consume(&self, py: Python<'_>, tokens: Vec<u32>) -> PyResult<()> {
        py.detach(|| lock(&self.inner).consume(&tokens))
            .map_err(grammar_error)
    }

    /// Tokens the grammar forces next (llguidance's fast-forward; the stop token once complete).
    fn forced_tokens(&self, py: Python<'_>) -> Vec<u32> {
        py.detach(|| lock(&self.inner).forced_tokens(&[]))
    }

    /// How many of `tokens` the grammar accepts in order (nothing is committed).
    fn valid_prefix_len(&self, py: Python<'_>, tokens: Vec<u32>) -> usize {
        py.detach(|| lock(&self.inner).valid_prefix_len(&[], &tokens))
    }

    /// Whether the text so far is a complete match.
    #[getter]
    fn accepting(&self) -> bool {
        lock(&self.inner).is_accepting()
    }

    /// Whether nothing but the stop token can follow.
    #[getter]
    fn stopped(&self) -> bool {
        lock(&self.inner).is_stopped()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGrammar>()?;
    m.add_class::<PyGrammarCompiler>()?;
    m.add_class::<PyGrammarMatcher>()?;
    Ok(())
}
