//! Llama 2/3 and Mistral-style models: `llm_build_llama` in llama.cpp.
//!
//! Pre-norm blocks, normal (interleaved-pair) RoPE — the converter permutes the
//! q/k weight rows so consecutive pairs rotate together — optional llama3
//! frequency factors (`rope_freqs.weight`, precomputed by the converter), SwiGLU
//! FFN, optional biases.

use super::{FamilySpec, Presence};

/// Tensors of a Llama layer beyond the common ones.
pub const SPEC: FamilySpec = FamilySpec {
    qk_norm: Presence::Absent,
    post_norms: Presence::Absent,
    qkv_bias: Presence::Optional,
    out_ffn_bias: Presence::Optional,
    output_bias: Presence::Absent,
    probs_bias: Presence::Absent,
    ffn_norm: "ffn_norm",
    rope_freqs: Presence::Optional,
};
