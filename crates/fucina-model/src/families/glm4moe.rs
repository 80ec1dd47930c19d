//! GLM-4.5 / GLM-4.5-Air / GLM-4.6 (`glm4moe` in GGUF): `llama_model_glm4_moe` in
//! llama.cpp, `Glm4MoeForCausalLM` in transformers.
//!
//! Attention: biased q/k/v projections (`attn_{q,k,v}.bias`, optional), optional
//! per-head q/k RMSNorm (GLM-4.5 355B), NeoX RoPE over the first
//! `rope.dimension_count` dims of each head (partial rotary: half of `head_dim`
//! for the released models), 1/√head_dim. The pre-FFN RMSNorm is
//! `post_attention_norm` in the GGUF.
//!
//! The first `leading_dense_block_count` layers have a dense SwiGLU FFN, the others
//! routed experts: sigmoid gating (llama.cpp's default for this architecture when
//! `expert_gating_func` is absent), the `exp_probs_b` selection bias, group-limited
//! top-k where `expert_group_count` > 1, `expert_weights_norm` renormalisation,
//! `expert_weights_scale`, plus `expert_shared_count` ungated shared experts fused
//! into one SwiGLU of width `expert_shared_count · expert_feed_forward_length`.
//!
//! The `nextn_predict_layers` trailing blocks are the multi-token-prediction head
//! ([`crate::mtp`]); the trunk forward skips them, as llama.cpp's does.

use fucina_gguf::{Metadata, ZeroPolicy};

use super::{FamilySpec, Presence};
use crate::ffn::{FfnConfig, Gating, MoeConfig};
use crate::{ModelError, Result};

/// Tensors of a GLM-4.5 layer beyond the common ones.
pub const SPEC: FamilySpec = FamilySpec {
    qk_norm: Presence::Optional,
    post_norms: Presence::Absent,
    qkv_bias: Presence::Optional,
    out_ffn_bias: Presence::Absent,
    output_bias: Presence::Absent,
    rope_freqs: Presence::Absent,
    probs_bias: Presence::Required,
    ffn_norm: "post_attention_norm",
};

const ARCH: &str = "glm4moe";

fn invalid(msg: String) -> ModelError {
    ModelError::InvalidConfig(msg)
}

fn key(suffix: &str) -> String {
    format!("{ARCH}.{suffix}")
}

fn int_opt(md: &Metadata, suffix: &str) -> Option<usize> {
    md.meta_int_opt(ARCH, suffix, ZeroPolicy::AcceptZero)
        .and_then(|v| usize::try_from(v).ok())
}

/// Each layer's FFN: dense SwiGLU of `feed_forward_length` for the first
/// `leading_dense_block_count` layers, routed plus shared experts after.
pub fn ffn_configs(md: &Metadata, n_ff: &[usize]) -> Result<Vec<FfnConfig>> {
    let n_lead = int_opt(md, "leading_dense_block_count").unwrap_or(0);
    let moe = if n_lead < n_ff.len() {
        Some(moe_config(md, n_ff)?)
    } else {
        None
    };
    n_ff.iter()
        .enumerate()
        .map(|(il, &n_ff)| match moe {
            Some(m) if il >= n_lead => {
                m.validate(il)?;
                Ok(FfnConfig::Moe(m))
            }
            _ if n_ff == 0 => Err(invalid(format!(
                "layer {il} is dense ({} = {n_lead}) but {} is missing",
                key("leading_dense_block_count"),
                key("feed_forward_length")
            ))),
            _ => Ok(FfnConfig::Dense { n_ff }),
        })
        .collect()
}

/// The routed-expert block of the MoE layers (the MTP block has the same).
pub fn moe_config(md: &Metadata, n_ff: &[usize]) -> Result<MoeConfig> {
    let (n_expert, n_expert_used, n_ff_exp) = super::expert_counts(md, ARCH)?;
    // llama.cpp: `n_ff / n_expert_used` when the file has no expert width.
    let n_ff_exp = n_ff_exp
        .or_else(|| n_ff.first().map(|&f| f / n_expert_used))
        .filter(|&f| f > 0)
        .ok_or_else(|| invalid(format!("{} is missing", key("expert_feed_forward_length"))))?;
    super::routed_moe_config(md, ARCH, n_expert, n_expert_used, n_ff_exp, Gating::Sigmoid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffn::GroupLimit;
    use fucina_gguf::Value;

    fn md() -> Metadata {
        let mut md = Metadata::default();
        for (k, v) in [
            ("leading_dense_block_count", 1),
            ("expert_count", 128),
            ("expert_used_count", 8),
            ("expert_feed_forward_length", 1408),
            ("expert_shared_count", 1),
        ] {
            md.insert(key(k), Value::U32(v));
        }
        md.insert(key("expert_weights_norm"), Value::Bool(true));
        md.insert(key("expert_weights_scale"), Value::F32(1.0));
        md
    }

    #[test]
    fn air_shape_dense_lead_sigmoid_and_shared_expert() {
        let c = ffn_configs(&md(), &[10944, 10944, 10944]).unwrap();
        assert_eq!(c[0], FfnConfig::Dense { n_ff: 10944 });
        let m = c[2].moe().copied().unwrap();
        assert_eq!((m.n_expert, m.n_expert_used, m.n_ff_exp), (128, 8, 1408));
        assert_eq!(m.shared.map(|s| (s.n_ff, s.gated)), Some((1408, false)));
        assert!(m.gating == Gating::Sigmoid && m.norm_weights && m.weights_scale.is_none());
        assert!(m.group_limit.is_none());
    }

    #[test]
    fn scale_groups_and_bad_gating() {
        let mut md = md();
        md.insert(key("expert_weights_scale"), Value::F32(2.5));
        md.insert(key("expert_group_count"), Value::U32(8));
        md.insert(key("expert_group_used_count"), Value::U32(4));
        let m = ffn_configs(&md, &[96, 96]).unwrap()[1]
            .moe()
            .copied()
            .unwrap();
        assert_eq!(m.weights_scale, Some(2.5));
        assert_eq!(
            m.group_limit,
            Some(GroupLimit {
                n_groups: 8,
                n_groups_used: 4
            })
        );
        md.insert(key("expert_gating_func"), Value::U32(3));
        let e = ffn_configs(&md, &[96, 96]).unwrap_err().to_string();
        assert!(e.contains("expert_gating_func"), "{e}");
        let mut bare = super::tests::md();
        bare.remove(&key("expert_feed_forward_length"));
        let m = ffn_configs(&bare, &[800, 800]).unwrap()[1]
            .moe()
            .copied()
            .unwrap();
        assert_eq!(m.n_ff_exp, 100);
        // A dense leading layer needs the dense width.
        assert!(ffn_configs(&super::tests::md(), &[0, 0]).is_err());
    }
}
