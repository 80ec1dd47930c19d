//! Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): `llama_model_qwen3moe` in llama.cpp.
//!
//! Qwen3's attention (per-head q/k RMSNorm before NeoX RoPE, 1/√head_dim), and on
//! every layer a routed mixture of experts instead of the dense FFN: softmax over
//! `expert_count` router logits, top `expert_used_count`, the selected weights
//! renormalised (llama.cpp always renormalises for this architecture, whatever
//! `norm_topk_prob` the checkpoint had), SwiGLU experts of width
//! `expert_feed_forward_length`, no shared expert.

use fucina_gguf::Metadata;

use super::{FamilySpec, Presence};
use crate::ffn::{FfnConfig, Gating, MoeConfig};
use crate::Result;

/// Tensors of a Qwen3-MoE layer beyond the common ones.
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

const ARCH: &str = "qwen3moe";

/// Every layer's FFN: experts. `n_ff` (the dense `feed_forward_length`, 0 when
/// absent) gives the expert width `n_ff / expert_used_count` when the file has no
/// `expert_feed_forward_length`, as llama.cpp does.
pub fn ffn_configs(md: &Metadata, n_ff: &[usize]) -> Result<Vec<FfnConfig>> {
    let (n_expert, n_expert_used, n_ff_exp) = super::expert_counts(md, ARCH)?;
    n_ff.iter()
        .enumerate()
        .map(|(il, &n_ff)| {
            let moe = MoeConfig {
                n_expert,
                n_expert_used,
                n_ff_exp: n_ff_exp.unwrap_or(n_ff / n_expert_used),
                gating: Gating::Softmax,
                norm_weights: true,
                weights_scale: None,
                group_limit: None,
                shared: None,
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

    fn md(n_expert: u32, used: u32) -> Metadata {
        let mut md = Metadata::default();
        md.insert("qwen3moe.expert_count", Value::U32(n_expert));
        md.insert("qwen3moe.expert_used_count", Value::U32(used));
        md.insert("qwen3moe.expert_feed_forward_length", Value::U32(96));
        md
    }

    #[test]
    fn every_layer_is_moe() {
        let c = ffn_configs(&md(8, 2), &[0, 0, 0]).unwrap();
        assert_eq!(c.len(), 3);
        let m = c[2].moe().copied().unwrap();
        assert_eq!((m.n_expert, m.n_expert_used, m.n_ff_exp), (8, 2, 96));
        assert!(m.norm_weights && m.gating == Gating::Softmax);
    }

    #[test]
    fn bad_counts_are_errors() {
        assert!(ffn_configs(&md(4, 5), &[0]).is_err());
        assert!(ffn_configs(&md(4096, 2), &[0]).is_err());
        assert!(ffn_configs(&md(1, 1), &[0]).is_err());
        let mut no_count = md(8, 2);
        no_count.insert("qwen3moe.expert_count", Value::U32(0));
        assert!(ffn_configs(&no_count, &[0]).is_err());
    }
}
