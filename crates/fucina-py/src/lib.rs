//! `fucina._core`: the Python extension module. Thin bindings only; all logic lives
//! in the Rust crates, and every call that computes releases the GIL.

mod args;
mod conversation;
mod engine;
mod errors;
mod experts;
mod gguf;
mod grammar;
mod llm;
mod quant;
mod sampler;
mod scheduler;
mod tokenizer;

use pyo3::prelude::*;

/// Version, build and CPU facts, for bug reports.
#[pyfunction]
fn build_info(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    let d = pyo3::types::PyDict::new(py);
    d.set_item("version", env!("CARGO_PKG_VERSION"))?;
    d.set_item("target_arch", std::env::consts::ARCH)?;
    d.set_item("target_os", std::env::consts::OS)?;
    d.set_item("debug", cfg!(debug_assertions))?;
    d.set_item(
        "n_cpus",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    )?;
    // The kernel set chosen by CPU detection (or forced by FUCINA_ISA).
    let isa = fucina_quant::Kernels::from_env()
        .map(|k| k.isa().name().to_owned())
        .unwrap_or_else(|e| format!("error: {e}"));
    d.set_item("isa", isa)?;
    // The llama.cpp x86-64 build whose ISA-dependent float orders (attention dots,
    // softmax, SiLU) the numerics follow (or forced by FUCINA_GGML_BUILD).
    d.set_item("ggml_build", fucina_quant::GgmlBuild::host().name())?;
    Ok(d)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    gguf::register(m)?;
    grammar::register(m)?;
    quant::register(m)?;
    llm::register(m)?;
    experts::register(m)?;
    engine::register(m)?;
    tokenizer::register(m)?;
    scheduler::register(m)?;
    sampler::register(m)?;
    m.add_function(wrap_pyfunction!(build_info, m)?)?;
    Ok(())
}
