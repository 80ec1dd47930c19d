//! Qwen3.5-MoE (Qwen3.5-35B-A3B, -122B-A10B, -397B-A17B): `llama_model_qwen35moe`
//! in llama.cpp, `Qwen3_5MoeForCausalLM` in transformers.
//!
//! Qwen3.5's blocks (Gated DeltaNet and gated attention with MRoPE, see
//! [`super::qwen35`]) with a mixture of experts on every layer: softmax over
//! `expert_count` router logits, top `expert_used_count`, the selected weights
//! renormalised, SwiGLU experts of width `expert_feed_forward_length`, and a SwiGLU
//! shared expert of width `expert_shared_feed_forward_length` scaled per token by
//! `sigmoid(ffn_gate_inp_shexp · x)`.

use fucina_gguf::{Metadata, ZeroPolicy};

use super::FamilySpec;
use crate::ffn::{FfnConfig, Gating, MoeConfig, SharedExpert};
use crate::Result;

/// Tensors of a Qwen3.5-MoE layer beyond the common ones (Qwen3.5's).
pub const SPEC: FamilySpec = super::qwen35::SPEC;

/// Every layer's FFN for architecture `arch` (`qwen35moe`, `qwen3next`): routed
/// experts (renormalised, times `expert_weights_scale` where the file has one) and
/// a gated shared expert. Widths default as llama.cpp's: an expert
/// `n_ff / expert_used_count`, the shared expert `n_ff`.
pub fn ffn_configs(md: &Metadata, arch: &str, n_ff: &[usize]) -> Result<Vec<FfnConfig>> {
    let (n_expert, n_expert_used, n_ff_exp) = super::expert_counts(md, arch)?;
    let n_ff_shexp = md
        .meta_int_opt(
            arch,
            "expert_shared_feed_forward_length",
            ZeroPolicy::RejectZero,
        )
        .and_then(|v| usize::try_from(v).ok());
    let scale = md
        .meta_float_opt(arch, "expert_weights_scale")
        .filter(|s| *s != 0.0 && *s != 1.0);
    n_ff.iter()
        .enumerate()
        .map(|(il, &n_ff)| {
            let moe = MoeConfig {
                n_expert,
                n_expert_used,
                n_ff_exp: n_ff_exp.unwrap_or(n_ff / n_expert_used),
                gating: Gating::Softmax,
                norm_weights: true,
                weights_scale: scale,
                group_limit: None,
                shared: Some(SharedExpert {
                    n_ff: n_ff_shexp.unwrap_or(n_ff),
                    gated: true,
                }),
            };
            moe.validate(il)?;
            Ok(FfnConfig::Moe(moe))
        })
        .collect()
}
