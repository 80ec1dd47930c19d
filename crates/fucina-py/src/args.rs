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

/// `None` or [`token_ids`].
pub fn opt_token_ids(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u32>>> {
    if obj.is_none() {
        Ok(None)
    } else {
        token_ids(obj).map(Some)
    }
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

/// A number (int or float, not bool) as f32; NaN and range checks are the
/// sampler's, which names the parameter.
pub fn number(obj: &Bound<'_, PyAny>) -> PyResult<f32> {
    if obj.is_instance_of::<PyBool>()
        || !(obj.is_instance_of::<PyInt>() || obj.is_instance_of::<pyo3::types::PyFloat>())
    {
        return Err(type_err(format!(
            "expected a number, not {}",
            obj.get_type().name()?
        )));
    }
    Ok(obj.extract::<f64>()? as f32)
}

/// A signed int that fits i32 (`top_k`, `repeat_last_n`: negative values mean
/// "off" / "all" there).
pub fn small_int(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(type_err(format!(
            "expected an int, not {}",
            obj.get_type().name()?
        )));
    }
    obj.extract::<i32>()
        .map_err(|_| value_err(format!("{obj} is out of range for a 32-bit int")))
}

/// A 64-bit seed (`0 <= seed < 2**64`).
pub fn seed(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
        return Err(type_err(format!(
            "seed must be an int, not {}",
            obj.get_type().name()?
        )));
    }
    obj.extract::<u64>()
        .map_err(|_| value_err(format!("seed {obj} is out of range (0 to 2**64 - 1)")))
}

/// `{token_id: bias}` pairs: a sequence of `(int, number)`.
pub fn logit_bias(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<(u32, f32)>>> {
    if obj.is_none() {
        return Ok(None);
    }
    let iter = obj
        .try_iter()
        .map_err(|_| type_err("logit_bias must be a sequence of (token id, bias) pairs"))?;
    let mut out = Vec::new();
    for item in iter {
        let item = item?;
        let pair = item
            .cast::<pyo3::types::PyTuple>()
            .map_err(|_| type_err("logit_bias must be a sequence of (token id, bias) pairs"))?;
        if pair.len() != 2 {
            return Err(type_err("logit_bias pairs must be (token id, bias)"));
        }
        out.push((token_id(&pair.get_item(0)?)?, number(&pair.get_item(1)?)?));
    }
    Ok(Some(out))
}

/// A filesystem path: `str` or an `os.PathLike` (as `os.fspath` accepts).
pub fn path(obj: &Bound<'_, PyAny>) -> PyResult<std::path::PathBuf> {
    let os = obj.py().import("os")?;
    let fs = os.call_method1("fspath", (obj,)).map_err(|_| {
        let ty = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        type_err(format!("expected a path (str or os.PathLike), not {ty}"))
    })?;
    if fs.is_instance_of::<PyString>() {
        Ok(std::path::PathBuf::from(fs.extract::<String>()?))
    } else {
        Err(type_err(
            "expected a str path (bytes paths are not supported)",
        ))
    }
}

/// `None` or a reasoning budget `(start_ids, end_ids, forced_ids, budget, open)`:
/// the token sequences opening and closing the block, what is forced when the
/// budget runs out, the budget in tokens, and whether the prompt opened the block.
pub fn reasoning_budget(
    obj: &Bound<'_, PyAny>,
) -> PyResult<Option<fucina_sample::ReasoningBudget>> {
    if obj.is_none() {
        return Ok(None);
    }
    let fields: Vec<Bound<'_, PyAny>> = obj
        .extract()
        .ok()
        .filter(|f: &Vec<Bound<'_, PyAny>>| f.len() == 5)
        .ok_or_else(|| {
            type_err("reasoning_budget must be (start_ids, end_ids, forced_ids, budget, open)")
        })?;
    let open = fields[4]
        .cast::<PyBool>()
        .map_err(|_| type_err("reasoning_budget's open flag must be a bool"))?
        .is_true();
    fucina_sample::ReasoningBudget::new(
        token_ids(&fields[0])?,
        token_ids(&fields[1])?,
        token_ids(&fields[2])?,
        count(&fields[3])?,
        open,
    )
    .map(Some)
    .map_err(|e| value_err(e.to_string()))
}

/// `mirostat_mode`: 0 (off), 1 or 2, as llama-cpp-python takes it.
pub fn mirostat_mode(obj: &Bound<'_, PyAny>) -> PyResult<u8> {
    match small_int(obj)? {
        m @ 0..=2 => Ok(m as u8),
        m => Err(value_err(format!(
            "mirostat_mode must be 0 (off), 1 or 2, not {m}"
        ))),
    }
}
