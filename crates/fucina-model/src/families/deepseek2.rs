//! DeepSeek-V2 / V3 (`deepseek2` in GGUF; also GLM-4.7-Flash and Moonlight):
//! `llama_model_deepseek2` in llama.cpp, with its hyperparameters.
//!
//! Every layer's mixer is Multi-head Latent Attention ([`crate::mixer::mla`]): the
//! query from `attn_q` or the low-rank `attn_q_a` → RMSNorm → `attn_q_b`; keys and
//! values from one compressed latent (`attn_kv_a_mqa`: `kv_lora_rank` dims, then a
//! shared RoPE key of `qk_rope` dims), cached as one "head" per position. Files
//! converted for the absorbed form carry `attn_k_b` / `attn_v_b` and say
//! `attention.key_length = kv_lora_rank + qk_rope`, `attention.value_length =
//! kv_lora_rank`; the per-head dims are `attention.key_length_mla` (qk_nope +
//! qk_rope) and `attention.value_length_mla`. RoPE pairs consecutive dims (ggml's
//! normal mode), with YaRN where the file says; the score scale is llama.cpp's
//! `mscale² / √key_length_mla` ([`kq_scale`]).
//!
//! The first `leading_dense_block_count` layers have a dense SwiGLU FFN, the others
//! routed experts (`expert_gating_func`: softmax for V2, sigmoid with the
//! `exp_probs_b` selection bias for V3; `expert_group_count` /
//! `expert_group_used_count` group-limited top-k; `expert_weights_norm`,
//! `expert_weights_scale`) plus `expert_shared_count` ungated shared experts fused
//! into one SwiGLU of width `expert_shared_count · expert_feed_forward_length`.

use fucina_gguf::{Metadata, ZeroPolicy};

use super::{FamilySpec, Presence};
use crate::config::{LayerConfig, Mixer, MlaGeometry};
use crate::ffn::{FfnConfig, Gating, MoeConfig};
use crate::{ModelError, Result};

/// Tensors of a DeepSeek-V2 layer beyond the common ones (the MLA tensors are the
/// mixer's own).
pub const SPEC: FamilySpec = FamilySpec {
    qk_norm: Presence::Absent,
    post_norms: Presence::Absent,
    qkv_bias: Presence::Absent,
    out_ffn_bias: Presence::Absent,
    output_bias: Presence::Absent,
    rope_freqs: Presence::Absent,
    probs_bias: Presence::Optional,
    ffn_norm: "ffn_norm",
};

const ARCH: &str = "deepseek2";

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

fn int_req(md: &Metadata, suffix: &str) -> Result<usize> {
    let v = md.meta_int(ARCH, suffix, ZeroPolicy::RejectZero)?;
    usize::try_from(v).map_err(|_| invalid(format!("{} = {v}", key(suffix))))
}

/// The MLA shape of the file: `attention.q_lora_rank` (absent or 0: plain q),
/// `attention.kv_lora_rank`, `attention.key_length_mla`,
/// `attention.value_length_mla` and `rope.dimension_count`.
pub fn geometry(md: &Metadata) -> Result<MlaGeometry> {
    let kv_lora_rank = int_req(md, "attention.kv_lora_rank")?;
    let k_mla = int_opt(md, "attention.key_length_mla").ok_or_else(|| {
        invalid(format!(
            "{} is missing (a GGUF without the split attn_k_b / attn_v_b tensors, \
             which this crate does not run)",
            key("attention.key_length_mla")
        ))
    })?;
    let v_head = int_req(md, "attention.value_length_mla")?;
    let qk_rope = int_req(md, "rope.dimension_count")?;
    let qk_nope = k_mla
        .checked_sub(qk_rope)
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            invalid(format!(
                "{} = {k_mla} leaves no non-RoPE dims beside {qk_rope} RoPE dims",
                key("attention.key_length_mla")
            ))
        })?;
    if qk_rope % 2 != 0 {
        return Err(invalid(format!(
            "{} = {qk_rope} is odd",
            key("rope.dimension_count")
        )));
    }
    Ok(MlaGeometry {
        q_lora_rank: int_opt(md, "attention.q_lora_rank").unwrap_or(0),
        kv_lora_rank,
        qk_nope,
        qk_rope,
        v_head,
    })
}

/// Every layer's mixer: MLA of the file's shape.
pub fn mixers(md: &Metadata, n_layer: usize) -> Result<Vec<Mixer>> {
    Ok(vec![Mixer::Mla(geometry(md)?); n_layer])
}

/// Check the cache geometry the generic keys gave each layer against the MLA shape:
/// one kv head, keys `kv_lora_rank + qk_rope` wide, values `kv_lora_rank`, RoPE
/// over `qk_rope` dims. A disagreement names the key.
pub fn check_geometry(layers: &[LayerConfig]) -> Result<()> {
    for (il, l) in layers.iter().enumerate() {
        let Mixer::Mla(g) = l.mixer else {
            return Err(invalid(format!("layer {il}: not an MLA layer")));
        };
        let checks = [
            ("attention.head_count_kv", l.n_head_kv, 1),
            (
                "attention.key_length",
                l.head_dim_k,
                g.kv_lora_rank + g.qk_rope,
            ),
            ("attention.value_length", l.head_dim_v, g.kv_lora_rank),
            ("rope.dimension_count", l.rope.n_rot, g.qk_rope),
        ];
        for (suffix, found, want) in checks {
            if found != want {
                return Err(invalid(format!(
                    "layer {il}: {} = {found} but attention.kv_lora_rank {} and \
                     rope.dimension_count {} make it {want}",
                    key(suffix),
                    g.kv_lora_rank,
                    g.qk_rope
                )));
            }
        }
    }
    Ok(())
}

/// The score scale, as llama.cpp's deepseek2 graph computes it in f32: undo the
/// context's YaRN magnitude correction to get the original attention factor, then
/// `mscale = factor₀ · (1 + 0.1 · log_mul · ln(1 / freq_scale))` and
/// `kq_scale = mscale² / √key_length_mla` (`log_mul` is
/// `rope.scaling.yarn_log_multiplier / 0.1`, the converter having multiplied
/// `mscale_all_dim` by 0.1).
pub fn kq_scale(md: &Metadata, layers: &[LayerConfig]) -> Result<f32> {
    let g = geometry(md)?;
    let rope = layers
        .first()
        .map(|l| l.rope)
        .ok_or_else(|| invalid("no layers".into()))?;
    let log_mul = md
        .meta_float_opt(ARCH, "rope.scaling.yarn_log_multiplier")
        .map_or(0.0, |v| v / 0.1);
    let inv = (1.0 / rope.freq_scale).ln();
    let attn_factor_org = rope.attn_factor * (1.0 + 0.1 * inv);
    let mscale = attn_factor_org * (1.0 + 0.1 * log_mul * inv);
    let k_mla = (g.qk_nope + g.qk_rope) as f32;
    Ok(1.0 * mscale * mscale / k_mla.sqrt())
}

/// Each layer's FFN: dense SwiGLU of `feed_forward_length` for the first
/// `leading_dense_block_count` layers, routed plus shared experts after.
pub fn ffn_configs(md: &Metadata, n_ff: &[usize]) -> Result<Vec<FfnConfig>> {
    let n_lead = int_opt(md, "leading_dense_block_count").unwrap_or(0);
    let moe = if n_lead < n_ff.len() {
        Some(moe_config(md)?)
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

fn moe_config(md: &Metadata) -> Result<MoeConfig> {
    let (n_expert, n_expert_used, n_ff_exp) = super::expert_counts(md, ARCH)?;
    let n_ff_exp = n_ff_exp
        .ok_or_else(|| invalid(format!("{} is missing", key("expert_feed_forward_length"))))?;
    super::routed_moe_config(md, ARCH, n_expert, n_expert_used, n_ff_exp, Gating::Softmax)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffn::GroupLimit;
    use fucina_gguf::Value;

    fn md() -> Metadata {
        let mut md = Metadata::default();
        for (k, v) in [
            ("attention.kv_lora_rank", 512),
            ("attention.key_length_mla", 192),
            ("attention.value_length_mla", 128),
            ("rope.dimension_count", 64),
            ("leading_dense_block_count", 1),
            ("expert_count", 64),
            ("expert_used_count", 6),
            ("expert_feed_forward_length", 1408),
            ("expert_shared_count", 2),
        ] {
            md.insert(key(k), Value::U32(v));
        }
        md.insert(key("expert_weights_scale"), Value::F32(1.0));
        md
    }

    #[test]
    fn lite_shape_dense_lead_and_shared_experts() {
        let g = geometry(&md()).unwrap();
        assert_eq!(
            (
                g.q_lora_rank,
                g.kv_lora_rank,
                g.qk_nope,
                g.qk_rope,
                g.v_head
            ),
            (0, 512, 128, 64, 128)
        );
        let c = ffn_configs(&md(), &[10944, 10944, 10944]).unwrap();
        assert_eq!(c[0], FfnConfig::Dense { n_ff: 10944 });
        let m = c[1].moe().copied().unwrap();
        assert_eq!((m.n_expert, m.n_expert_used, m.n_ff_exp), (64, 6, 1408));
        assert_eq!(m.shared.map(|s| (s.n_ff, s.gated)), Some((2816, false)));
        assert!(m.gating == Gating::Softmax && !m.norm_weights && m.weights_scale.is_none());
        assert!(m.group_limit.is_none());
    }

    #[test]
    fn v3_routing_keys() {
        let mut md = md();
        md.insert(key("expert_gating_func"), Value::U32(2));
        md.insert(key("expert_weights_norm"), Value::Bool(true));
        md.insert(key("expert_weights_scale"), Value::F32(2.5));
        md.insert(key("expert_group_count"), Value::U32(8));
        md.insert(key("expert_group_used_count"), Value::U32(3));
        let m = ffn_configs(&md, &[96, 96]).unwrap()[1]
            .moe()
            .copied()
            .unwrap();
        assert_eq!(m.gating, Gating::Sigmoid);
        assert!(m.norm_weights);
        assert_eq!(m.weights_scale, Some(2.5));
        assert_eq!(
            m.group_limit,
            Some(GroupLimit {
                n_groups: 8,
                n_groups_used: 3
            })
        );
        md.insert(key("expert_gating_func"), Value::U32(3));
        let e = ffn_configs(&md, &[96, 96]).unwrap_err().to_string();
        assert!(e.contains("expert_gating_func"), "{e}");
    }

    #[test]
    fn missing_keys_name_themselves() {
        let mut no_mla = md();
        no_mla.remove(&key("attention.key_length_mla"));
        let e = geometry(&no_mla).unwrap_err().to_string();
        assert!(e.contains("deepseek2.attention.key_length_mla"), "{e}");
        let mut no_rank = md();
        no_rank.remove(&key("attention.kv_lora_rank"));
        let e = geometry(&no_rank).unwrap_err().to_string();
        assert!(e.contains("kv_lora_rank"), "{e}");
        // A dense leading layer needs the dense width.
        assert!(ffn_configs(&md(), &[0, 0]).is_err());
    }
}
