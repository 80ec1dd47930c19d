//! The Python exception hierarchy, created once per interpreter.
//!
//! `FucinaError` is the root; `GGUFError` and `UnsupportedModelError` also derive
//! from `ValueError` so existing `except ValueError` code keeps working. OS
//! failures surface as the builtin `OSError` subclasses (`FileNotFoundError`, ...).

use fucina_gguf::GgufError;
use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

static FUCINA_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static GGUF_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNSUPPORTED_MODEL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

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
    cell.get_or_try_init(py, || {
        let bases = PyTuple::new(
            py,
            [fucina_error(py)?.clone(), py.get_type::<PyValueError>()],
        )?;
        make_type(py, name, &bases, doc)
    })
    .map(|t| t.bind(py))
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

/// Add the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("FucinaError", fucina_error(py)?)?;
    m.add("GGUFError", gguf_error(py)?)?;
    m.add("UnsupportedModelError", unsupported_model_error(py)?)?;
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
                _ => PyOSError::new_err(msg),
            }
        }
        other => match gguf_error(py) {
            Ok(ty) => raise(ty, other.to_string()),
            Err(err) => err,
        },
    })
}
