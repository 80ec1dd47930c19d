//! ggml block formats for fucina: reference dequantizers and quantizers (the
//! numerics oracle, bit-identical to gguf-py), SIMD dot kernels per ISA chosen
//! once at run time, and threaded matrix-vector / matrix-matrix products.
//!
//! ```
//! use fucina_gguf::GgmlType;
//! let x: Vec<f32> = (0..64).map(|i| i as f32 / 8.0 - 4.0).collect();
//! let mut q = Vec::new();
//! fucina_quant::quantize(GgmlType::Q8_0, &x, &mut q)?;
//! let mut y = vec![0f32; 64];
//! fucina_quant::dequantize(GgmlType::Q8_0, &q, &mut y)?;
//! assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 0.02));
//! # Ok::<(), fucina_quant::QuantError>(())
//! ```

pub mod activation;
mod arch;
pub mod dispatch;
mod error;
pub mod f16dot;
pub mod f16dot_avx2;
pub mod f16dot_vec;
pub mod formats;
pub mod gemm;
pub mod ggml_build;
pub mod half;
pub mod lanes;
pub mod matmul;
pub mod pool;
pub mod repack;
pub mod whole_block;

pub use activation::ActType;
pub use dispatch::{DotEntry, Isa, KernelPath, Kernels, ISA_ENV};
pub use error::{QuantError, Result};
pub use formats::{format, Format, REGISTRY};
pub use fucina_gguf::GgmlType;
pub use gemm::{sgemm_order_reference, TileDot};
pub use ggml_build::{GgmlBuild, GGML_BUILD_ENV};
pub use matmul::QMatrix;
pub use pool::ThreadPool;
pub use repack::{approx_slack, q8_0_magnitude, Packed, PackedOrder, Prefetch};

fn supported(ty: GgmlType, op: &'static str) -> Result<&'static Format> {
    format(ty).ok_or(QuantError::Unsupported { ty, op })
}

/// Number of elements held by `n_bytes` of `ty`, or an error when the bytes are
/// not a whole number of blocks.
pub fn elements_in(ty: GgmlType, n_bytes: usize) -> Result<usize> {
    let f = supported(ty, "dequantize")?;
    if !n_bytes.is_multiple_of(f.type_size) {
        return Err(QuantError::NotWholeBlocks {
            ty,
            what: "input",
            found: n_bytes,
            type_size: f.type_size,
        });
    }
    Ok(n_bytes / f.type_size * f.block_size)
}

/// Bytes taken by `n_elements` of `ty`, or an error when that is not a whole number of blocks.
pub fn bytes_for(ty: GgmlType, n_elements: usize) -> Result<usize> {
    let f = supported(ty, "quantize")?;
    if !n_elements.is_multiple_of(f.block_size) {
        return Err(QuantError::NotBlockMultiple {
            ty,
            what: "input",
            found: n_elements,
            block_size: f.block_size,
        });
    }
    (n_elements / f.block_size)
        .checked_mul(f.type_size)
        .ok_or_else(|| QuantError::Shape(format!("{n_elements} elements of {ty} overflow usize")))
}

/// Dequantize `bytes` of type `ty` into `out`, whose length must be the element
/// count the bytes hold. Bit-identical to gguf-py's `gguf.quants.dequantize`.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let f = supported(ty, "dequantize")?;
    let deq = f.dequantize.ok_or(QuantError::Unsupported {
        ty,
        op: "dequantize",
    })?;
    let n = elements_in(ty, bytes.len())?;
    if out.len() != n {
        return Err(QuantError::ElementCount {
            ty,
            what: "output",
            found: out.len(),
            expected: n,
        });
    }
    deq(bytes, out);
    Ok(())
}

/// Quantize `src` to `ty`, appending the blocks to `out`. `src.len()` must be a
/// multiple of the block size. Bit-identical to gguf-py's `gguf.quants.quantize`
/// where gguf-py has a quantizer, else to ggml's `quantize_row_*_ref`.
pub fn quantize(ty: GgmlType, src: &[f32], out: &mut Vec<u8>) -> Result<()> {
    let f = supported(ty, "quantize")?;
    let q = f
        .quantize
        .ok_or(QuantError::Unsupported { ty, op: "quantize" })?;
    let n_bytes = bytes_for(ty, src.len())?;
    let start = out.len();
    out.resize(start + n_bytes, 0);
    q(src, &mut out[start..]);
    Ok(())
}
