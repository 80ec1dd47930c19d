//! Tensor ops of the forward, each written to follow ggml's CPU numerics
//! (accumulation width, operation order) so logits track llama.cpp closely.

pub mod act;
pub mod attention;
pub mod deltanet;
#[cfg(target_arch = "x86_64")]
mod deltanet_tiles;
pub mod norm;
pub mod rope;
pub mod softmax;

// The attention dot kernels live in fucina-quant with the other kernels.
pub use fucina_quant::{f16dot, f16dot_vec};
