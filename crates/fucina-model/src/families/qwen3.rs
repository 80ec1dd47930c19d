//! Qwen3 (dense): `llm_build_qwen3` in llama.cpp.
//!
//! Pre-norm blocks with per-head q/k RMSNorm before NeoX RoPE, SwiGLU FFN,
//! 1/√head_dim attention scale; tied or untied output head.

use super::{FamilySpec, Presence};

/// Tensors of a Qwen3 layer beyond the common ones.
pub const SPEC: FamilySpec = FamilySpec {
    qk_norm: Presence::Required,
    post_norms: Presence::Absent,
    qkv_bias: Presence::Optional,
    out_ffn_bias: Presence::Absent,
    output_bias: Presence::Absent,
    probs_bias: Presence::Absent,
    ffn_norm: "ffn_norm",
    rope_freqs: Presence::Absent,
};
