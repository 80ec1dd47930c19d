//! `fucina._core` quantization functions (`fucina.quant.dequantize` / `quantize`):
//! thin wrappers over `fucina-quant` that release the GIL while they compute.
//!
//! Unsupported types raise `fucina.UnsupportedModelError`; wrong lengths and shapes
//! raise `ValueError`.

use fucina_gguf::GgmlType;
use fucina_quant::QuantError;
use numpy::{PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{raise, unsupported_model_error};

pub(crate) fn quant_err(e: QuantError) -> PyErr {
    match e {
        QuantError::Unsupported { .. } => Python::attach(|py| match unsupported_model_error(py) {
            Ok(ty) => raise(ty, e.to_string()),
            Err(err) => err,
        }),
        other => crate::errors::value_err(other.to_string()),
    }
}

/// A ggml type from its name (`"Q4_K"`, any case) or numeric id.
fn ggml_type(obj: &Bound<'_, PyAny>) -> PyResult<GgmlType> {
    let t = if let Ok(id) = obj.extract::<u32>() {
        GgmlType::from_u32(id)
    } else {
        GgmlType::from_name(&obj.extract::<String>()?)
    };
    t.ok_or_else(|| crate::errors::value_err(format!("unknown ggml type {obj}")))
}

/// Dequantize raw block bytes of `ggml_type` to a float32 array of `shape` (numpy
/// order; the last dimension is the ggml row). Bit-identical to gguf-py.
#[pyfunction]
#[pyo3(signature = (raw, ggml_type, shape))]
fn dequantize<'py>(
    py: Python<'py>,
    raw: &[u8],
    ggml_type: &Bound<'py, PyAny>,
    shape: Vec<usize>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let ty = self::ggml_type(ggml_type)?;
    let n = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| crate::errors::value_err(format!("shape {shape:?} overflows")))?;
    let have = fucina_quant::elements_in(ty, raw.len()).map_err(quant_err)?;
    if have != n {
        return Err(crate::errors::value_err(format!(
            "{ty}: {} bytes hold {have} elements, shape {shape:?} needs {n}",
            raw.len()
        )));
    }
    if let Some(&last) = shape.last() {
        if last as u64 % ty.block_size() != 0 {
            return Err(crate::errors::value_err(format!(
                "{ty}: last dimension {last} is not a multiple of the block size {}",
                ty.block_size()
            )));
        }
    }
    let mut out = vec![0f32; n];
    py.detach(|| fucina_quant::dequantize(ty, raw, &mut out))
        .map_err(quant_err)?;
    numpy::PyArray1::from_vec(py, out).reshape(shape)
}

/// Quantize a float array (any shape, last dimension a multiple of the block size)
/// to `ggml_type` block bytes. Bit-identical to gguf-py where gguf-py quantizes.
#[pyfunction]
#[pyo3(signature = (array, ggml_type))]
fn quantize<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyAny>,
    ggml_type: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let ty = self::ggml_type(ggml_type)?;
    let numpy = py.import("numpy")?;
    let arr = numpy.call_method1("ascontiguousarray", (array, "float32"))?;
    let arr: PyReadonlyArrayDyn<'py, f32> = arr.extract()?;
    if let Some(&last) = arr.shape().last() {
        if last as u64 % ty.block_size() != 0 {
            return Err(crate::errors::value_err(format!(
                "{ty}: last dimension {last} is not a multiple of the block size {}",
                ty.block_size()
            )));
        }
    }
    let src = arr.as_slice()?;
    let mut out = Vec::new();
    py.detach(|| fucina_quant::quantize(ty, src, &mut out))
        .map_err(quant_err)?;
    Ok(PyBytes::new(py, &out))
}

/// Add `dequantize` and `quantize` to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    Ok(())
}
