//! `sample_logits`: one draw of the sampling pipeline on a logits row, for callers that
//! run their own evaluation loop (llama-cpp-python's `Llama.sample` after `Llama.eval`).

use fucina_sample::{Sampler, SamplingParams};
use numpy::{PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::args;
use crate::errors::value_err;

/// The engine's parameters from a `fucina.SamplingParams` (its fields, checked by the
/// same converters `Engine.generate` uses) with `seed`.
fn core_params(p: &Bound<'_, PyAny>, seed: u64) -> PyResult<SamplingParams> {
    let num = |name: &str| args::number(&p.getattr(name)?);
    let int = |name: &str| args::small_int(&p.getattr(name)?);
    let bias = p.getattr("logit_bias")?;
    let logit_bias = if bias.is_none() {
        Vec::new()
    } else {
        args::logit_bias(&bias.call_method0("items")?)?.unwrap_or_default()
    };
    Ok(SamplingParams {
        temperature: num("temperature")?,
        top_k: int("top_k")?,
        top_p: num("top_p")?,
        min_p: num("min_p")?,
        typical_p: num("typical_p")?,
        repeat_penalty: num("repeat_penalty")?,
        presence_penalty: num("presence_penalty")?,
        frequency_penalty: num("frequency_penalty")?,
        repeat_last_n: int("repeat_last_n")?,
        seed,
        logit_bias,
        mirostat_mode: args::mirostat_mode(&p.getattr("mirostat_mode")?)?,
        mirostat_tau: num("mirostat_tau")?,
        mirostat_eta: num("mirostat_eta")?,
    })
}

/// The token a fresh sampler with `params` (a `fucina.SamplingParams`) and RNG `seed`
/// draws from `logits` (not modified) after `history` (penalties count it): bias,
/// penalties, then greedy argmax or llama.cpp's filter chain and one draw.
#[pyfunction]
#[pyo3(signature = (logits, history, params, seed))]
fn sample_logits(
    py: Python<'_>,
    logits: PyReadonlyArray1<'_, f32>,
    #[pyo3(from_py_with = args::token_ids)] history: Vec<u32>,
    params: &Bound<'_, PyAny>,
    #[pyo3(from_py_with = args::seed)] seed: u64,
) -> PyResult<u32> {
    let params = core_params(params, seed)?;
    let mut row = logits.as_slice().map(<[f32]>::to_vec).map_err(|_| {
        value_err(format!(
            "logits must be a contiguous 1-D array, not shape {:?}",
            logits.shape()
        ))
    })?;
    py.detach(|| {
        let mut sampler = Sampler::new(params, row.len())?;
        sampler.sample(&mut row, &history, &mut [])
    })
    .map_err(|e| value_err(e.to_string()))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sample_logits, m)?)
}
