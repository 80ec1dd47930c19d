//! The Python exception hierarchy, created once per interpreter.
//!
//! `FucinaError` is the root; `GGUFError`, `UnsupportedModelError` and
//! `InvalidArgumentError` also derive from `ValueError`, `ArgumentTypeError`
//! from `TypeError` and `QueueFullError` from `RuntimeError`, so existing
//! `except ValueError` code keeps working and every bad argument is both a
//! `FucinaError` and the builtin a Python user expects. OS
//! failures surface as the builtin `OSError` subclasses (`FileNotFoundError`, ...).

use fucina_gguf::GgufError;
use pyo3::exceptions::{PyException, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

static FUCINA_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static GGUF_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNSUPPORTED_MODEL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INVALID_ARGUMENT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static ARGUMENT_TYPE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static GRAMMAR_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static GRAMMAR_WARNING: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static QUEUE_FULL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn make_type(
    py: Python<'_>,
    name: &str,
    bases: &Bound<'_, PyTuple>,
    doc: &str,
) -> PyResult<Py<PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__module__", "fucina")?;
    ns.set_item("__doc__", doc)?;
    let ty = py.get_type::<PyType>().call1((name, bases, ns))?;
    Ok(ty.cast_into::<PyType>()?.unbind())
}

pub(crate) fn fucina_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    FUCINA_ERROR
        .get_or_try_init(py, || {
            let bases = PyTuple::new(py, [py.get_type::<PyException>()])?;
            make_type(
                py,
                "FucinaError",
                &bases,
                "Base class of every error fucina raises.",
            )
        })
        .map(|t| t.bind(py))
}

fn value_error_subclass<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    doc: &str,
) -> PyResult<&'py Bound<'py, PyType>> {
    builtin_subclass(py, cell, py.get_type::<PyValueError>(), name, doc)
}

fn builtin_subclass<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    builtin: Bound<'py, PyType>,
    name: &str,
    doc: &str,
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.get_or_try_init(py, || {
        let bases = PyTuple::new(py, [fucina_error(py)?.clone(), builtin])?;
        make_type(py, name, &bases, doc)
    })
    .map(|t| t.bind(py))
}

/// `fucina.InvalidArgumentError`: an argument with a bad value (out of range, NaN,
/// empty, too long for the context).
pub fn invalid_argument_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    value_error_subclass(
        py,
        &INVALID_ARGUMENT_ERROR,
        "InvalidArgumentError",
        "An argument has a value fucina cannot use (the message names it).",
    )
}

/// `fucina.ArgumentTypeError`: an argument of the wrong type.
pub fn argument_type_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    builtin_subclass(
        py,
        &ARGUMENT_TYPE_ERROR,
        py.get_type::<PyTypeError>(),
        "ArgumentTypeError",
        "An argument has a type fucina cannot use (the message names it).",
    )
}

/// `fucina.QueueFullError`: a scheduler's queue is full (the request was not queued).
pub fn queue_full_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    builtin_subclass(
        py,
        &QUEUE_FULL_ERROR,
        py.get_type::<pyo3::exceptions::PyRuntimeError>(),
        "QueueFullError",
        "A scheduler's queue is full: the request was not queued (retry later).",
    )
}

/// An `InvalidArgumentError` (a `FucinaError` and a `ValueError`) with `message`.
pub fn value_err(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| match invalid_argument_error(py) {
        Ok(ty) => raise(ty, message),
        Err(err) => err,
    })
}

/// An `ArgumentTypeError` (a `FucinaError` and a `TypeError`) with `message`.
pub fn type_err(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| match argument_type_error(py) {
        Ok(ty) => raise(ty, message),
        Err(err) => err,
    })
}

/// `fucina.GGUFError`: a malformed or unreadable GGUF file.
pub fn gguf_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    value_error_subclass(
        py,
        &GGUF_ERROR,
        "GGUFError",
        "A GGUF file is malformed, truncated, or used wrongly.",
    )
}

/// `fucina.UnsupportedModelError`: an architecture or tensor type fucina cannot run.
pub fn unsupported_model_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    value_error_subclass(
        py,
        &UNSUPPORTED_MODEL_ERROR,
        "UnsupportedModelError",
        "The model's architecture or tensor types are not supported.",
    )
}

/// `fucina.GrammarError`: a grammar or schema that cannot be compiled, or cannot be
/// followed further while generating (an `InvalidArgumentError`, so also a `ValueError`).
pub fn grammar_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    GRAMMAR_ERROR
        .get_or_try_init(py, || {
            let bases = PyTuple::new(py, [invalid_argument_error(py)?.clone()])?;
            make_type(
                py,
                "GrammarError",
                &bases,
                "A grammar, regex or JSON Schema is invalid or uses an unsupported feature, or generation cannot follow it any further (the message names it).",
            )
        })
        .map(|t| t.bind(py))
}

/// `fucina.GrammarWarning`: a `UserWarning` naming what a JSON Schema compiled
/// leniently leaves unenforced (keywords llguidance does not implement).
pub fn grammar_warning(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    GRAMMAR_WARNING
        .get_or_try_init(py, || {
            let bases = PyTuple::new(py, [py.get_type::<pyo3::exceptions::PyUserWarning>()])?;
            make_type(
                py,
                "GrammarWarning",
                &bases,
                "Part of a JSON Schema (a keyword, format or pattern llguidance does not implement) is not enforced.",
            )
        })
        .map(|t| t.bind(py))
}

/// A `GrammarError` with `message`.
pub fn grammar_err(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| match grammar_error(py) {
        Ok(ty) => raise(ty, message),
        Err(err) => err,
    })
}

/// Add the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("FucinaError", fucina_error(py)?)?;
    m.add("GGUFError", gguf_error(py)?)?;
    m.add("UnsupportedModelError", unsupported_model_error(py)?)?;
    m.add("InvalidArgumentError", invalid_argument_error(py)?)?;
    m.add("ArgumentTypeError", argument_type_error(py)?)?;
    m.add("GrammarError", grammar_error(py)?)?;
    m.add("GrammarWarning", grammar_warning(py)?)?;
    m.add("QueueFullError", queue_full_error(py)?)?;
    Ok(())
}

/// Build an instance of `ty` with `message`.
pub fn raise(ty: &Bound<'_, PyType>, message: String) -> PyErr {
    PyErr::from_type(ty.clone(), message)
}

/// Convert a GGUF error to the matching Python exception.
pub fn gguf_err(e: GgufError) -> PyErr {
    Python::attach(|py| match e {
        GgufError::Io { path, source } => {
            let msg = format!("{}: {source}", path.display());
            match source.kind() {
                std::io::ErrorKind::NotFound => pyo3::exceptions::PyFileNotFoundError::new_err(msg),
                std::io::ErrorKind::PermissionDenied => {
                    pyo3::exceptions::PyPermissionError::new_err(msg)
                }
                std::io::ErrorKind::IsADirectory => {
                    pyo3::exceptions::PyIsADirectoryError::new_err(msg)
                }
                _ => PyOSError::new_err(msg),
            }
        }
        other => match gguf_error(py) {
            Ok(ty) => raise(ty, other.to_string()),
            Err(err) => err,
        },
    })
}
