//! Gemma 3 (text): `llm_build_gemma3` in llama.cpp.
//!
//! Embeddings × √n_embd; per layer RMSNorm → q/k/v → per-head q/k RMSNorm → NeoX
//! RoPE (base 10 000 on sliding layers, `rope.freq_base` on the global ones, every
//! sixth layer) → queries × 1/√head_dim → attention (sliding window on local
//! layers) → post-attention norm → residual; RMSNorm → GeGLU(tanh) FFN →
//! post-FFN norm → residual. Norm weights are stored as `1 + w` by the converter.
//! Tied output head. Attention soft-capping was removed in Gemma 3.

use super::{FamilySpec, Presence};

/// Tensors of a Gemma 3 layer beyond the common ones.
pub const SPEC: FamilySpec = FamilySpec {
    qk_norm: Presence::Required,
    post_norms: Presence::Required,
    qkv_bias: Presence::Optional,
    out_ffn_bias: Presence::Absent,
    output_bias: Presence::Absent,
    probs_bias: Presence::Absent,
    ffn_norm: "ffn_norm",
    rope_freqs: Presence::Absent,
};
