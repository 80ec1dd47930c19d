//! Argument extractors for `#[pyo3(from_py_with = ...)]`: token ids and counts
//! whose bad values are fucina's own errors — `InvalidArgumentError` (a
//! `ValueError`) for a negative or too-large int, `ArgumentTypeError` (a
//! `TypeError`) for a non-int — instead of pyo3's bare `OverflowError` /
//! `TypeError`. pyo3 adds a note naming the argument.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString};

use crate::errors::{type_err, value_err};

/// A non-negative int no larger than `max`.
fn int(obj: &Bound<'_, PyAny>, what: &str, max: u64) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(type_err(format!(
            "{what} must be an int, not {}",
            obj.get_type().name()?
        )));
    }
    match obj.extract::<i64>() {
        Ok(v) if v >= 0 && v as u64 <= max => Ok(v as u64),
        _ => Err(value_err(format!(
            "{what} {obj} is out of range (0 to {max})"
        ))),
    }
}

/// A token id (`0 <= id < 2**32`).
pub fn token_id(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    int(obj, "token id", u64::from(u32::MAX)).map(|v| v as u32)
}

/// A sequence of token ids (any iterable of ints but `str` / `bytes`).
pub fn token_ids(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<pyo3::types::PyBytes>() {
        return Err(type_err(
            "token ids must be a sequence of ints, not text (tokenize it first)",
        ));
    }
    let iter = obj.try_iter().map_err(|_| {
        let ty = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        type_err(format!("token ids must be a sequence of ints, not {ty}"))
    })?;
    let mut out = Vec::with_capacity(obj.len().unwrap_or(0));
    for item in iter {
        out.push(token_id(&item?)?);
    }
    Ok(out)
}

/// A non-negative count.
pub fn count(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    int(obj, "count", usize::MAX as u64).map(|v| v as usize)
}

/// A non-negative count or `None`.
pub fn opt_count(obj: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    if obj.is_none() {
        Ok(None)
    } else {
        count(obj).map(Some)
    }
}
