//! Gemma 4 (text): `llama_model_gemma4` in llama.cpp, `Gemma4ForCausalLM` in
//! transformers.
//!
//! Embeddings × √n_embd; per layer RMSNorm → q (and, on layers with their own K/V,
//! k and v; v = k where the file has no `attn_v`) → per-head q/k RMSNorm and a
//! weightless RMSNorm on v → NeoX RoPE → attention with scale 1 (sliding window on
//! local layers) → `post_attention_norm` → residual; `ffn_norm` → GeGLU(tanh) →
//! `post_ffw_norm` → residual; then, with per-layer embeddings (E2B/E4B),
//! `gelu(inp_gate·x) ⊙ ple[layer]` → `proj` → `post_norm` → residual; finally
//! `× layer_output_scale`. Norm weights are stored as is (no `1 + w`).
//!
//! Per-layer geometry (spec §13.4): sliding layers use `key_length_swa`,
//! `rope.dimension_count_swa` and `rope.freq_base_swa`, global layers
//! `key_length`, `rope.dimension_count` and `rope.freq_base` with the
//! "proportional" RoPE of `rope_freqs.weight` (1e30 factors on the pairs past the
//! rotary span), and `head_count_kv` per layer. The last
//! `attention.shared_kv_layers` layers write no K/V: each attends to the K/V of the
//! last earlier layer of its own kind.

use fucina_gguf::{Metadata, ZeroPolicy};

use super::{FamilySpec, Presence};
use crate::config::LayerConfig;
use crate::ffn::{FfnConfig, Gating, MoeConfig, SharedExpert};
use crate::{ModelError, Result};

/// Tensors of a Gemma 4 layer beyond the common ones.
pub const SPEC: FamilySpec = FamilySpec {
    qk_norm: Presence::Required,
    post_norms: Presence::Required,
    qkv_bias: Presence::Absent,
    out_ffn_bias: Presence::Absent,
    output_bias: Presence::Absent,
    probs_bias: Presence::Absent,
    ffn_norm: "ffn_norm",
    rope_freqs: Presence::Required,
};

const ARCH: &str = "gemma4";

fn invalid(msg: String) -> ModelError {
    ModelError::InvalidConfig(msg)
}

fn key(md: &Metadata, suffix: &str) -> Result<usize> {
    let v = md.meta_int(ARCH, suffix, ZeroPolicy::RejectZero)?;
    usize::try_from(v).map_err(|_| invalid(format!("{ARCH}.{suffix} = {v}")))
}

/// Every layer's FFN: the dense GeGLU of width `n_ff`, or (where the file has
/// `expert_count`: 26B-A4B) that MLP beside routed experts
/// ([`crate::ffn::Gemma4MoeFfn`]; the MLP's width rides in `shared`): softmax, top
/// `expert_used_count` renormalised, experts of `expert_feed_forward_length`.
pub fn ffn_configs(md: &Metadata, n_ff: &[usize]) -> Result<Vec<FfnConfig>> {
    if !md.contains_key(&format!("{ARCH}.expert_count")) {
        return Ok(n_ff.iter().map(|&n_ff| FfnConfig::Dense { n_ff }).collect());
    }
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
                shared: Some(SharedExpert { n_ff, gated: false }),
            };
            moe.validate(il)?;
            Ok(FfnConfig::Moe(moe))
        })
        .collect()
}

/// Give each layer its kind's geometry and RoPE, and the shared-KV layers their
/// source; errors name the key that is missing or inconsistent.
pub fn layer_geometry(md: &Metadata, layers: &mut [LayerConfig]) -> Result<()> {
    let n_layer = layers.len();
    let pattern_key = format!("{ARCH}.attention.sliding_window_pattern");
    let swa: Vec<bool> = md
        .per_layer_u32(&pattern_key, n_layer)?
        .into_iter()
        .map(|v| v != 0)
        .collect();
    let window = key(md, "attention.sliding_window")?;
    let hd_swa = key(md, "attention.key_length_swa")?;
    let hdv_swa = key(md, "attention.value_length_swa")?;
    let n_rot_swa = md
        .meta_int_opt(ARCH, "rope.dimension_count_swa", ZeroPolicy::RejectZero)
        .and_then(|v| usize::try_from(v).ok())
        .unwrap_or(hd_swa);
    for (il, l) in layers.iter_mut().enumerate() {
        if swa[il] {
            l.head_dim_k = hd_swa;
            l.head_dim_v = hdv_swa;
            l.sliding_window = Some(window);
            l.rope.n_rot = n_rot_swa;
            l.rope.freq_base = md
                .meta_float_opt(ARCH, "rope.freq_base_swa")
                .unwrap_or(l.rope.freq_base);
            l.rope.freq_scale = 1.0;
            l.rope.ext_factor = 0.0;
            l.rope.attn_factor = 1.0;
            l.rope_freqs = false;
        }
        if l.head_dim_k != l.head_dim_v {
            return Err(invalid(format!(
                "layer {il}: Gemma 4 needs equal key and value head dims ({} / {})",
                l.head_dim_k, l.head_dim_v
            )));
        }
    }
    let n_shared = md
        .meta_int_opt(ARCH, "attention.shared_kv_layers", ZeroPolicy::AcceptZero)
        .and_then(|v| usize::try_from(v).ok())
        .unwrap_or(0);
    let first_shared = n_layer.checked_sub(n_shared).ok_or_else(|| {
        invalid(format!(
            "{ARCH}.attention.shared_kv_layers = {n_shared} exceeds the {n_layer} layers"
        ))
    })?;
    for il in first_shared..n_layer {
        let src = (0..first_shared)
            .rev()
            .find(|&j| swa[j] == swa[il])
            .ok_or_else(|| {
                invalid(format!(
                    "{ARCH}.attention.shared_kv_layers = {n_shared}: layer {il} has no earlier \
                     {} layer to share K/V with",
                    if swa[il] { "sliding" } else { "global" }
                ))
            })?;
        let s = layers[src];
        let l = &mut layers[il];
        if l.head_dim_k != s.head_dim_k {
            return Err(invalid(format!(
                "layer {il} shares the K/V of layer {src} but their head dims differ"
            )));
        }
        l.n_head_kv = s.n_head_kv;
        l.kv_source = Some(src);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Family};
    use fucina_gguf::{Array, Value};

    fn md() -> Metadata {
        let mut md = Metadata::default();
        for (k, v) in [
            ("block_count", 6),
            ("embedding_length", 64),
            ("context_length", 512),
            ("feed_forward_length", 128),
            ("attention.head_count", 4),
            ("attention.key_length", 64),
            ("attention.value_length", 64),
            ("attention.key_length_swa", 32),
            ("attention.value_length_swa", 32),
            ("attention.sliding_window", 8),
            ("attention.shared_kv_layers", 2),
            ("rope.dimension_count", 64),
            ("rope.dimension_count_swa", 32),
        ] {
            md.insert(format!("gemma4.{k}"), Value::U32(v));
        }
        md.insert(
            "gemma4.attention.head_count_kv",
            Value::Array(Array::U32(vec![2, 2, 2, 1, 2, 1])),
        );
        md.insert(
            "gemma4.attention.sliding_window_pattern",
            Value::Array(Array::Bool(vec![true, true, true, false, true, false])),
        );
        md.insert("gemma4.attention.layer_norm_rms_epsilon", Value::F32(1e-6));
        md.insert("gemma4.rope.freq_base", Value::F32(1e6));
        md.insert("gemma4.rope.freq_base_swa", Value::F32(1e4));
        md
    }

    #[test]
    fn per_layer_geometry_and_shared_kv() {
        let c = Config::from_metadata(&md(), Family::Gemma4, 256).unwrap();
        let l = &c.layers;
        assert_eq!(
            (l[0].head_dim_k, l[0].rope.n_rot, l[0].n_head_kv),
            (32, 32, 2)
        );
        assert_eq!(
            (l[3].head_dim_k, l[3].rope.n_rot, l[3].n_head_kv),
            (64, 64, 1)
        );
        assert_eq!((l[0].rope.freq_base, l[3].rope.freq_base), (1e4, 1e6));
        assert_eq!((l[0].sliding_window, l[3].sliding_window), (Some(8), None));
        assert!(!l[0].rope_freqs && l[3].rope_freqs);
        assert_eq!((l[4].kv_source, l[5].kv_source), (Some(2), Some(3)));
        assert_eq!(l[3].kv_source, None);
        assert_eq!((c.kq_scale, c.q_scale, c.v_norm), (1.0, 1.0, true));
    }

    #[test]
    fn bad_sharing_and_patterns_name_the_key() {
        let mut m = md();
        m.insert("gemma4.attention.shared_kv_layers", Value::U32(3));
        let e = Config::from_metadata(&m, Family::Gemma4, 256)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gemma4.attention.shared_kv_layers"), "{e}");
        let mut m = md();
        m.insert(
            "gemma4.attention.sliding_window_pattern",
            Value::Array(Array::Bool(vec![true; 4])),
        );
        let e = Config::from_metadata(&m, Family::Gemma4, 256)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gemma4.attention.sliding_window_pattern"), "{e}");
        let mut m = md();
        m.remove("gemma4.attention.key_length_swa");
        let e = Config::from_metadata(&m, Family::Gemma4, 256)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gemma4.attention.key_length_swa"), "{e}");
    }
}
