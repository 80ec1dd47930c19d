//! Qwen2 / Qwen2.5: `llm_build_qwen2` in llama.cpp.
//!
//! Pre-norm blocks with biased q/k/v projections, NeoX RoPE, SwiGLU FFN; the
//! output head may carry a bias.

use super::{FamilySpec, Presence};

/// Tensors of a Qwen2 layer beyond the common ones.
pub const SPEC: FamilySpec = FamilySpec {
    qk_norm: Presence::Absent,
    post_norms: Presence::Absent,
    qkv_bias: Presence::Optional,
    out_ffn_bias: Presence::Absent,
    output_bias: Presence::Optional,
    probs_bias: Presence::Absent,
    ffn_norm: "ffn_norm",
    rope_freqs: Presence::Absent,
};
