//! Qwen3-Next (Qwen3-Next-80B-A3B): `llama_model_qwen3next` in llama.cpp,
//! `Qwen3NextForCausalLM` in transformers.
//!
//! The hybrid of Qwen3.5-MoE with three differences: plain NeoX RoPE over the first
//! `rope.dimension_count` dims (no MRoPE sections), value heads kept in the
//! checkpoint's grouped order ([`VHeadOrder::Grouped`]: llama.cpp's converter does
//! not reorder them for this architecture), and β/α from one fused projection
//! `ssm_ba` laid out per key head as `[β × per, α × per]` (`per` value heads per key
//! head). The q/k/v and z projections are `attn_qkv` / `attn_gate` (what the
//! converter writes), or the older fused `ssm_in`, per key head `[q, k, v, z]`.

use fucina_gguf::Metadata;

use super::FamilySpec;
use crate::config::Mixer;
use crate::ops::deltanet::VHeadOrder;
use crate::Result;

/// Tensors of a Qwen3-Next layer beyond the common ones (Qwen3.5's).
pub const SPEC: FamilySpec = super::qwen35::SPEC;

/// Every trunk layer's mixer: DeltaNet (grouped value heads) or gated attention.
pub fn mixers(md: &Metadata, arch: &str, n_layer: usize, n_layer_all: usize) -> Result<Vec<Mixer>> {
    super::qwen35::mixers_with(md, arch, n_layer, n_layer_all, VHeadOrder::Grouped)
}
