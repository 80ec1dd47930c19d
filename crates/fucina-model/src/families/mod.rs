//! Model families as data over shared blocks: each family module says which
//! tensors its layers carry (q/k norms, post-norms, biases, RoPE factors) and which
//! FFN block each layer has (dense or mixture of experts, with the family's own
//! hyperparameters); the binder here turns that into [`LayerWeights`] with shapes
//! checked against the [`Config`]. The forward itself is family-agnostic.

pub mod deepseek2;
pub mod gemma3;
pub mod gemma4;
pub mod glm4moe;
pub mod llama;
pub mod qwen2;
pub mod qwen2moe;
pub mod qwen3;
pub mod qwen35;
pub mod qwen35moe;
pub mod qwen3moe;
pub mod qwen3next;

use std::sync::Arc;

use fucina_gguf::{GgufFile, Metadata};

use crate::config::{Config, Family, Mixer};
use crate::ffn::{DenseFfn, FfnConfig, FfnWeights, Gemma4MoeFfn, MoeFfn};
use crate::mixer::{AttnWeights, DeltaNetWeights, MixerWeights, MlaWeights};
use crate::ple::PleLayer;
use crate::weights::{has_tensor, layer_name, load_vector, load_vector_opt, Linear};
use crate::Result;

/// Whether a family's layers carry a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Must be present.
    Required,
    /// Bound when present (llama.cpp's `TENSOR_NOT_REQUIRED`).
    Optional,
    /// Not part of the family's graph (ignored if present, as llama.cpp does).
    Absent,
}

/// The tensors a family's layers carry beyond the common ones.
#[derive(Clone, Copy, Debug)]
pub struct FamilySpec {
    /// `attn_q_norm` / `attn_k_norm` (per-head RMSNorm before RoPE).
    pub qk_norm: Presence,
    /// `post_attention_norm` / `post_ffw_norm` (Gemma's sandwich norms).
    pub post_norms: Presence,
    /// `attn_q/k/v.bias`.
    pub qkv_bias: Presence,
    /// `attn_output.bias`, `ffn_{gate,up,down}.bias`.
    pub out_ffn_bias: Presence,
    /// `output.bias` on the head.
    pub output_bias: Presence,
    /// `rope_freqs.weight` (llama3 frequency factors).
    pub rope_freqs: Presence,
    /// `exp_probs_b.bias` on MoE layers (DeepSeek-V3-style selection bias).
    pub probs_bias: Presence,
    /// Name of the pre-FFN RMSNorm (`ffn_norm`; Qwen3.5 / Qwen3-Next call it
    /// `post_attention_norm`).
    pub ffn_norm: &'static str,
}

/// The spec of `family`.
pub fn spec(family: Family) -> FamilySpec {
    match family {
        Family::Gemma3 => gemma3::SPEC,
        Family::Qwen3 => qwen3::SPEC,
        Family::Qwen2 => qwen2::SPEC,
        Family::Llama => llama::SPEC,
        Family::Qwen3Moe => qwen3moe::SPEC,
        Family::Qwen2Moe => qwen2moe::SPEC,
        Family::Qwen35 => qwen35::SPEC,
        Family::Gemma4 => gemma4::SPEC,
        Family::Qwen35Moe => qwen35moe::SPEC,
        Family::Qwen3Next => qwen3next::SPEC,
        Family::Deepseek2 => deepseek2::SPEC,
        Family::Glm4Moe => glm4moe::SPEC,
    }
}

/// The token mixer of every layer of `family` (`n_layer` trunk layers of
/// `n_layer_all` blocks in the file).
pub fn mixers(
    md: &Metadata,
    family: Family,
    n_layer: usize,
    n_layer_all: usize,
) -> Result<Vec<Mixer>> {
    match family {
        Family::Qwen35 | Family::Qwen35Moe => {
            qwen35::mixers(md, family.arch(), n_layer, n_layer_all)
        }
        Family::Qwen3Next => qwen3next::mixers(md, family.arch(), n_layer, n_layer_all),
        Family::Deepseek2 => deepseek2::mixers(md, n_layer),
        Family::Gemma3
        | Family::Gemma4
        | Family::Qwen3
        | Family::Qwen2
        | Family::Llama
        | Family::Qwen3Moe
        | Family::Qwen2Moe
        | Family::Glm4Moe => Ok(vec![Mixer::Attention { gated: false }; n_layer]),
    }
}

/// The FFN block of every layer of `family` (`n_ff`: the per-layer
/// `feed_forward_length`, zeros where the file has none).
pub fn ffn_configs(md: &Metadata, family: Family, n_ff: &[usize]) -> Result<Vec<FfnConfig>> {
    match family {
        Family::Qwen3Moe => qwen3moe::ffn_configs(md, n_ff),
        Family::Qwen2Moe => qwen2moe::ffn_configs(md, n_ff),
        Family::Qwen35Moe | Family::Qwen3Next => qwen35moe::ffn_configs(md, family.arch(), n_ff),
        Family::Gemma4 => gemma4::ffn_configs(md, n_ff),
        Family::Deepseek2 => deepseek2::ffn_configs(md, n_ff),
        Family::Glm4Moe => glm4moe::ffn_configs(md, n_ff),
        Family::Gemma3 | Family::Qwen3 | Family::Qwen2 | Family::Llama | Family::Qwen35 => {
            Ok(n_ff.iter().map(|&n_ff| FfnConfig::Dense { n_ff }).collect())
        }
    }
}

/// `<arch>.expert_count`, `<arch>.expert_used_count` (both required, non-zero) and
/// `<arch>.expert_feed_forward_length` (optional) of a MoE family.
pub(crate) fn expert_counts(md: &Metadata, arch: &str) -> Result<(usize, usize, Option<usize>)> {
    use fucina_gguf::ZeroPolicy;
    let count = |suffix: &str| -> Result<usize> {
        let v = md.meta_int(arch, suffix, ZeroPolicy::RejectZero)?;
        usize::try_from(v)
            .map_err(|_| crate::ModelError::InvalidConfig(format!("{arch}.{suffix} = {v}")))
    };
    let width = md
        .meta_int_opt(arch, "expert_feed_forward_length", ZeroPolicy::RejectZero)
        .and_then(|v| usize::try_from(v).ok());
    Ok((count("expert_count")?, count("expert_used_count")?, width))
}

/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_*` values of `expert_gating_func`.
const GATING_SOFTMAX: u64 = 1;
const GATING_SIGMOID: u64 = 2;

/// The routing of a DeepSeek-style MoE layer (`deepseek2`, `glm4moe`): gating from
/// `expert_gating_func` (`default_gating` when absent or 0, as llama.cpp picks per
/// architecture), `expert_weights_norm`, `expert_weights_scale` (applied only when
/// neither 0 nor 1, as llama.cpp), group-limited top-k from `expert_group_count` /
/// `expert_group_used_count`, and `expert_shared_count` ungated shared experts of
/// `n_ff_exp` each.
pub(crate) fn routed_moe_config(
    md: &Metadata,
    arch: &str,
    n_expert: usize,
    n_expert_used: usize,
    n_ff_exp: usize,
    default_gating: crate::ffn::Gating,
) -> Result<crate::ffn::MoeConfig> {
    use crate::ffn::{Gating, GroupLimit, MoeConfig, SharedExpert};
    use fucina_gguf::ZeroPolicy;
    let int_opt = |suffix: &str| {
        md.meta_int_opt(arch, suffix, ZeroPolicy::AcceptZero)
            .and_then(|v| usize::try_from(v).ok())
    };
    let n_shared = int_opt("expert_shared_count").unwrap_or(0);
    let gating = match md
        .meta_int_opt(arch, "expert_gating_func", ZeroPolicy::AcceptZero)
        .unwrap_or(0)
    {
        0 => default_gating,
        GATING_SOFTMAX => Gating::Softmax,
        GATING_SIGMOID => Gating::Sigmoid,
        other => {
            return Err(crate::ModelError::InvalidConfig(format!(
                "{arch}.expert_gating_func = {other} is not supported (1 softmax, 2 sigmoid)"
            )))
        }
    };
    let scale = md
        .meta_float_opt(arch, "expert_weights_scale")
        .unwrap_or(0.0);
    let n_groups = int_opt("expert_group_count").unwrap_or(0);
    let group_limit = (n_groups > 1).then(|| GroupLimit {
        n_groups,
        n_groups_used: int_opt("expert_group_used_count").unwrap_or(0),
    });
    Ok(MoeConfig {
        n_expert,
        n_expert_used,
        n_ff_exp,
        gating,
        norm_weights: md
            .get(&format!("{arch}.expert_weights_norm"))
            .and_then(fucina_gguf::Value::as_int)
            .is_some_and(|v| v != 0),
        weights_scale: (scale != 0.0 && scale != 1.0).then_some(scale),
        group_limit,
        shared: (n_shared > 0).then_some(SharedExpert {
            n_ff: n_shared * n_ff_exp,
            gated: false,
        }),
    })
}

/// One transformer block's weights.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// Pre-mixer RMSNorm.
    pub attn_norm: Vec<f32>,
    /// The token mixer's weights (attention or Gated DeltaNet).
    pub mixer: MixerWeights,
    /// RMSNorm on the attention output before the residual add.
    pub post_attn_norm: Option<Vec<f32>>,
    /// Pre-FFN RMSNorm.
    pub ffn_norm: Vec<f32>,
    /// The FFN block (dense or experts).
    pub ffn: FfnWeights,
    /// RMSNorm on the FFN output before the residual add.
    pub post_ffn_norm: Option<Vec<f32>>,
    /// RoPE frequency factors (`n_rot / 2` values).
    pub rope_freqs: Option<Arc<Vec<f32>>>,
    /// `layer_output_scale`: the block's output multiplier (Gemma 4).
    pub out_scale: Option<f32>,
    /// The per-layer-embedding block (Gemma 4 E2B/E4B).
    pub ple: Option<PleLayer>,
}

fn vec_by(file: &GgufFile, name: &str, len: usize, p: Presence) -> Result<Option<Vec<f32>>> {
    match p {
        Presence::Required => load_vector(file, name, len).map(Some),
        Presence::Optional => load_vector_opt(file, name, len),
        Presence::Absent => Ok(None),
    }
}

/// Bind layer `il` of a model of `config`, per `spec`.
pub fn bind_layer(
    file: &Arc<GgufFile>,
    config: &Config,
    spec: &FamilySpec,
    il: usize,
    rope_freqs: Option<&Arc<Vec<f32>>>,
) -> Result<LayerWeights> {
    let l = &config.layers[il];
    let n = |s: &str| layer_name(il, s);
    let e = config.n_embd;
    // A shared-KV layer has no K/V weights; Gemma 4's global layers may have no V
    // (their values are the keys).
    let own_kv = l.kv_source.is_none();
    let kv_presence = |p: Presence| if own_kv { p } else { Presence::Absent };
    let v_presence = if config.family == Family::Gemma4 {
        Presence::Optional
    } else {
        Presence::Required
    };
    let linear_by = |name: &str, rows: usize, p: Presence| -> Result<Option<Linear>> {
        match p {
            Presence::Required => Linear::bind(file, name, rows, e).map(Some),
            Presence::Optional if has_tensor(file, name) => {
                Linear::bind(file, name, rows, e).map(Some)
            }
            _ => Ok(None),
        }
    };
    let mixer = match l.mixer {
        Mixer::Attention { .. } => MixerWeights::Attention(AttnWeights {
            wq: Linear::bind(file, &n("attn_q.weight"), l.q_proj_dim(), e)?,
            wk: linear_by(
                &n("attn_k.weight"),
                l.k_dim(),
                kv_presence(Presence::Required),
            )?,
            wv: linear_by(&n("attn_v.weight"), l.v_dim(), kv_presence(v_presence))?,
            wo: Linear::bind(file, &n("attn_output.weight"), e, l.attn_out_dim())?,
            bq: vec_by(file, &n("attn_q.bias"), l.q_dim(), spec.qkv_bias)?,
            bk: vec_by(
                file,
                &n("attn_k.bias"),
                l.k_dim(),
                kv_presence(spec.qkv_bias),
            )?,
            bv: vec_by(
                file,
                &n("attn_v.bias"),
                l.v_dim(),
                kv_presence(spec.qkv_bias),
            )?,
            bo: vec_by(file, &n("attn_output.bias"), e, spec.out_ffn_bias)?,
            q_norm: vec_by(file, &n("attn_q_norm.weight"), l.head_dim_k, spec.qk_norm)?,
            k_norm: vec_by(
                file,
                &n("attn_k_norm.weight"),
                l.head_dim_k,
                kv_presence(spec.qk_norm),
            )?,
        }),
        Mixer::DeltaNet(g) => MixerWeights::DeltaNet(DeltaNetWeights::bind(file, il, e, &g)?),
        Mixer::Mla(g) => MixerWeights::Mla(Box::new(MlaWeights::bind(file, il, e, l.n_head, &g)?)),
    };
    let ffn = match &l.ffn {
        FfnConfig::Dense { n_ff } => {
            let bias = |name: &str, len| vec_by(file, name, len, spec.out_ffn_bias);
            FfnWeights::Dense(DenseFfn::bind(file, il, "", e, *n_ff, &bias)?)
        }
        FfnConfig::Moe(moe) if config.family == Family::Gemma4 => {
            let n_ff = moe.shared.map_or(0, |s| s.n_ff);
            FfnWeights::Gemma4Moe(Box::new(Gemma4MoeFfn::bind(file, il, moe, e, n_ff)?))
        }
        FfnConfig::Moe(moe) => FfnWeights::Moe(MoeFfn::bind(
            file,
            il,
            moe,
            e,
            match spec.probs_bias {
                Presence::Required => true,
                Presence::Optional => has_tensor(file, &n("exp_probs_b.bias")),
                Presence::Absent => false,
            },
        )?),
    };
    Ok(LayerWeights {
        attn_norm: load_vector(file, &n("attn_norm.weight"), e)?,
        mixer,
        post_attn_norm: vec_by(file, &n("post_attention_norm.weight"), e, spec.post_norms)?,
        ffn_norm: load_vector(file, &n(&format!("{}.weight", spec.ffn_norm)), e)?,
        ffn,
        post_ffn_norm: vec_by(file, &n("post_ffw_norm.weight"), e, spec.post_norms)?,
        rope_freqs: if l.rope_freqs {
            rope_freqs.cloned()
        } else {
            None
        },
        out_scale: match config.family {
            Family::Gemma4 => load_vector_opt(file, &n("layer_output_scale.weight"), 1)?
                .and_then(|v| v.first().copied()),
            _ => None,
        },
        ple: match config.n_embd_per_layer {
            0 => None,
            n_pl => Some(PleLayer::bind(file, il, e, n_pl)?),
        },
    })
}

/// `rope_freqs.weight` (or its per-layer duplicate `blk.0.rope_freqs.weight`) when
/// the family reads it.
pub fn bind_rope_freqs(
    file: &GgufFile,
    config: &Config,
    spec: &FamilySpec,
) -> Result<Option<Arc<Vec<f32>>>> {
    let half = config
        .layers
        .iter()
        .find(|l| l.rope_freqs)
        .map_or(0, |l| l.rope.n_rot / 2);
    let name = ["rope_freqs.weight", "blk.0.rope_freqs.weight"]
        .into_iter()
        .find(|n| has_tensor(file, n));
    match (spec.rope_freqs, name) {
        (Presence::Absent, _) | (Presence::Optional, None) => Ok(None),
        (_, Some(n)) => Ok(Some(Arc::new(load_vector(file, n, half)?))),
        (Presence::Required, None) => {
            Err(crate::ModelError::MissingTensor("rope_freqs.weight".into()))
        }
    }
}
