//! Qwen1.5-MoE / Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B):
//! `llama_model_qwen2moe` in llama.cpp.
//!
//! Qwen2's attention (biased q/k/v, NeoX RoPE), and on every layer routed experts
//! (softmax over `expert_count`, top `expert_used_count`, weights not renormalised:
//! llama.cpp passes `norm_w = false` for this architecture) plus a shared SwiGLU
//! expert of width `expert_shared_feed_forward_length`, scaled per token by
//! `sigmoid(ffn_gate_inp_shexp · x)` and added to the routed sum.

use fucina_gguf::{Metadata, ZeroPolicy};

use super::{FamilySpec, Presence};
use crate::ffn::{FfnConfig, Gating, MoeConfig, SharedExpert};
use crate::Result;

/// Tensors of a Qwen2-MoE layer beyond the common ones.
pub const SPEC: FamilySpec = FamilySpec {
    qk_norm: Presence::Absent,
    post_norms: Presence::Absent,
    qkv_bias: Presence::Optional,
    out_ffn_bias: Presence::Absent,
    output_bias: Presence::Absent,
    probs_bias: Presence::Absent,
    ffn_norm: "ffn_norm",
    rope_freqs: Presence::Absent,
};

const ARCH: &str = "qwen2moe";

/// Every layer's FFN: routed experts and a gated shared expert. Widths default as
/// llama.cpp's: an expert `n_ff / expert_used_count`, the shared expert `n_ff`.
pub fn ffn_configs(md: &Metadata, n_ff: &[usize]) -> Result<Vec<FfnConfig>> {
    let (n_expert, n_expert_used, n_ff_exp) = super::expert_counts(md, ARCH)?;
    let n_ff_shexp = md
        .meta_int_opt(
            ARCH,
            "expert_shared_feed_forward_length",
            ZeroPolicy::RejectZero,
        )
        .and_then(|v| usize::try_from(v).ok());
    n_ff.iter()
        .enumerate()
        .map(|(il, &n_ff)| {
            let moe = MoeConfig {
                n_expert,
                n_expert_used,
                n_ff_exp: n_ff_exp.unwrap_or(n_ff / n_expert_used),
                gating: Gating::Softmax,
                norm_weights: false,
                weights_scale: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use fucina_gguf::Value;

    #[test]
    fn shared_expert_width_and_defaults() {
        let mut md = Metadata::default();
        md.insert("qwen2moe.expert_count", Value::U32(60));
        md.insert("qwen2moe.expert_used_count", Value::U32(4));
        let c = ffn_configs(&md, &[5632]).unwrap();
        let m = c[0].moe().copied().unwrap();
        assert_eq!((m.n_ff_exp, m.shared.map(|s| s.n_ff)), (1408, Some(5632)));
        assert!(!m.norm_weights && m.shared.is_some_and(|s| s.gated));
        md.insert("qwen2moe.expert_feed_forward_length", Value::U32(1408));
        md.insert(
            "qwen2moe.expert_shared_feed_forward_length",
            Value::U32(5632),
        );
        assert_eq!(ffn_configs(&md, &[0]).unwrap(), c);
        // Neither width known: an error, not a zero-sized expert.
        let mut bare = Metadata::default();
        bare.insert("qwen2moe.expert_count", Value::U32(8));
        bare.insert("qwen2moe.expert_used_count", Value::U32(2));
        assert!(ffn_configs(&bare, &[0]).is_err());
    }
}
