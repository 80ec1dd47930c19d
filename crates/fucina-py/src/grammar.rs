//! `Grammar`: a JSON Schema, regex or Lark grammar a generation's output must match
//! (compiled per model by the engine, on first use, against its vocabulary).

use fucina_grammar::{Grammar, GrammarError};
use pyo3::prelude::*;

use crate::errors::grammar_err;

/// A grammar error as `fucina.GrammarError`.
pub(crate) fn grammar_error(e: GrammarError) -> PyErr {
    grammar_err(e.to_string())
}

/// A constraint on generated text: build one with `json_schema`, `json_object`,
/// `regex` or `lark`.
#[pyclass(frozen, module = "fucina._core", name = "Grammar")]
pub struct PyGrammar {
    pub(crate) inner: Grammar,
}

#[pymethods]
impl PyGrammar {
    /// A JSON Schema given as JSON text.
    #[staticmethod]
    fn json_schema(schema: &str) -> PyResult<PyGrammar> {
        Grammar::json_schema_str(schema)
            .map(|inner| PyGrammar { inner })
            .map_err(grammar_error)
    }

    /// Any JSON object.
    #[staticmethod]
    fn json_object() -> PyGrammar {
        PyGrammar {
            inner: Grammar::JsonObject,
        }
    }

    /// A regular expression the whole output must match.
    #[staticmethod]
    fn regex(pattern: String) -> PyGrammar {
        PyGrammar {
            inner: Grammar::Regex(pattern),
        }
    }

    /// A grammar in llguidance's Lark-like syntax.
    #[staticmethod]
    fn lark(text: String) -> PyGrammar {
        PyGrammar {
            inner: Grammar::Lark(text),
        }
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
        format!("Grammar.{}({src:?})", self.kind())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGrammar>()?;
    Ok(())
}
