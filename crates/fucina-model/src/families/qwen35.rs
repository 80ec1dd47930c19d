//! Qwen3.5 (dense): `llama_model_qwen35` in llama.cpp, `Qwen3_5ForCausalLM` in
//! transformers.
//!
//! Three Gated DeltaNet layers to one full-attention layer (or the file's explicit
//! `attention.recurrent_layers`). Every block: RMSNorm → mixer → residual; RMSNorm
//! (named `post_attention_norm` in the GGUF) → SwiGLU FFN → residual. Norm weights
//! are stored as `1 + w` by the converter (except the DeltaNet output norm).
//!
//! Attention layers: `attn_q` yields `[q, gate]` per head; per-head q/k RMSNorm;
//! interleaved MRoPE over the first `rope.dimension_count` dims (for text every
//! section sees the same position, which is NeoX RoPE); 1/√head_dim; the output
//! times `sigmoid(gate)` before `attn_output`.
//!
//! DeltaNet layers (see [`crate::mixer::deltanet`]): `attn_qkv` → causal conv
//! (`ssm_conv1d`, kernel `ssm.conv_kernel`) + SiLU → L2-normalised q/k; decay
//! `softplus(ssm_alpha·x + ssm_dt) · ssm_a` and `β = sigmoid(ssm_beta·x)` per value
//! head; the gated delta rule; `rmsnorm(o) · ssm_norm · silu(attn_gate·x)` per head
//! → `ssm_out`. The converter reorders value heads into the tiled order
//! ([`VHeadOrder::Tiled`]) when they outnumber key heads.

use fucina_gguf::{Metadata, ZeroPolicy};

use super::{FamilySpec, Presence};
use crate::config::Mixer;
use crate::kv_cache::RecurrentGeometry;
use crate::ops::deltanet::{DeltaShape, VHeadOrder};
use crate::{ModelError, Result};

/// Tensors of a Qwen3.5 layer beyond the common ones.
pub const SPEC: FamilySpec = FamilySpec {
    qk_norm: Presence::Required,
    post_norms: Presence::Absent,
    qkv_bias: Presence::Absent,
    out_ffn_bias: Presence::Absent,
    output_bias: Presence::Absent,
    probs_bias: Presence::Absent,
    ffn_norm: "post_attention_norm",
    rope_freqs: Presence::Absent,
};

/// llama.cpp's default `full_attention_interval` (every fourth layer attends).
pub const DEFAULT_FULL_ATTENTION_INTERVAL: usize = 4;

/// Largest convolution kernel accepted (Qwen3.5 uses 4): a bound on an untrusted
/// value that sizes per-sequence state.
const MAX_CONV_KERNEL: usize = 64;

fn invalid(msg: String) -> ModelError {
    ModelError::InvalidConfig(msg)
}

/// The DeltaNet geometry from `<arch>.ssm.*`, checked for consistency.
pub fn delta_geometry(md: &Metadata, arch: &str, order: VHeadOrder) -> Result<RecurrentGeometry> {
    let key = |s: &str| -> Result<usize> {
        let v = md.meta_int(arch, s, ZeroPolicy::RejectZero)?;
        usize::try_from(v).map_err(|_| invalid(format!("{arch}.{s} = {v}")))
    };
    let conv_kernel = key("ssm.conv_kernel")?;
    let state = key("ssm.state_size")?;
    let n_k_heads = key("ssm.group_count")?;
    let n_v_heads = key("ssm.time_step_rank")?;
    let inner = key("ssm.inner_size")?;
    if !(2..=MAX_CONV_KERNEL).contains(&conv_kernel) {
        return Err(invalid(format!(
            "{arch}.ssm.conv_kernel = {conv_kernel} (2..={MAX_CONV_KERNEL})"
        )));
    }
    if n_v_heads % n_k_heads != 0 {
        return Err(invalid(format!(
            "{arch}.ssm.time_step_rank = {n_v_heads} value heads is not a multiple of \
             {arch}.ssm.group_count = {n_k_heads} key heads"
        )));
    }
    if n_v_heads.checked_mul(state) != Some(inner) {
        return Err(invalid(format!(
            "{arch}.ssm.inner_size = {inner} is not {n_v_heads} value heads × \
             {arch}.ssm.state_size = {state}"
        )));
    }
    Ok(RecurrentGeometry {
        shape: DeltaShape {
            n_k_heads,
            n_v_heads,
            dk: state,
            dv: state,
            order,
        },
        conv_kernel,
    })
}

/// Which of the `n_layer` trunk layers are recurrent: `attention.recurrent_layers`
/// (one bool per block of the file, `n_layer_all`) when present, else every layer
/// but each `full_attention_interval`-th.
pub fn recurrent_layers(
    md: &Metadata,
    arch: &str,
    n_layer: usize,
    n_layer_all: usize,
) -> Result<Vec<bool>> {
    let key = format!("{arch}.attention.recurrent_layers");
    if md.contains_key(&key) {
        let v = md.per_layer_u32(&key, n_layer_all)?;
        return Ok(v[..n_layer].iter().map(|&x| x != 0).collect());
    }
    let key = format!("{arch}.full_attention_interval");
    let interval = match md.get(&key) {
        None => DEFAULT_FULL_ATTENTION_INTERVAL,
        Some(_) => {
            let v = md.get_u64(&key)?.unwrap_or(0);
            usize::try_from(v)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| invalid(format!("{key} = {v}: must be a positive layer count")))?
        }
    };
    Ok((0..n_layer).map(|il| (il + 1) % interval != 0).collect())
}

/// Every trunk layer's mixer: DeltaNet (tiled value heads) or gated attention.
pub fn mixers(md: &Metadata, arch: &str, n_layer: usize, n_layer_all: usize) -> Result<Vec<Mixer>> {
    mixers_with(md, arch, n_layer, n_layer_all, VHeadOrder::Tiled)
}

/// [`mixers`] with value heads in `order`.
pub fn mixers_with(
    md: &Metadata,
    arch: &str,
    n_layer: usize,
    n_layer_all: usize,
    order: VHeadOrder,
) -> Result<Vec<Mixer>> {
    let recurrent = recurrent_layers(md, arch, n_layer, n_layer_all)?;
    if !recurrent.iter().any(|&r| !r) {
        return Err(invalid(format!(
            "{arch}: the layer pattern has no full-attention layer"
        )));
    }
    let geom = delta_geometry(md, arch, order)?;
    Ok(recurrent
        .into_iter()
        .map(|r| {
            if r {
                Mixer::DeltaNet(geom)
            } else {
                Mixer::Attention { gated: true }
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fucina_gguf::Value;

    fn md() -> Metadata {
        let mut md = Metadata::default();
        for (k, v) in [
            ("ssm.conv_kernel", 4),
            ("ssm.state_size", 32),
            ("ssm.group_count", 2),
            ("ssm.time_step_rank", 4),
            ("ssm.inner_size", 128),
        ] {
            md.insert(format!("qwen35.{k}"), Value::U32(v));
        }
        md
    }

    #[test]
    fn interval_and_explicit_patterns() {
        let m = md();
        let r = recurrent_layers(&m, "qwen35", 8, 8).unwrap();
        assert_eq!(r, [true, true, true, false, true, true, true, false]);
        let mut m2 = m.clone();
        m2.insert("qwen35.full_attention_interval", Value::U32(2));
        assert_eq!(
            recurrent_layers(&m2, "qwen35", 4, 4).unwrap(),
            [true, false, true, false]
        );
        // An explicit pattern covers the MTP block too; the trunk takes its prefix.
        let mut m3 = m.clone();
        m3.insert(
            "qwen35.attention.recurrent_layers",
            Value::Array(fucina_gguf::Array::Bool(vec![true, false, false])),
        );
        assert_eq!(
            recurrent_layers(&m3, "qwen35", 2, 3).unwrap(),
            [true, false]
        );
        let c = mixers(&m, "qwen35", 4, 4).unwrap();
        assert!(matches!(c[3], Mixer::Attention { gated: true }));
        let Mixer::DeltaNet(g) = c[0] else {
            panic!("{:?}", c[0])
        };
        assert_eq!((g.shape.n_v_heads, g.shape.dk, g.conv_kernel), (4, 32, 4));
    }

    #[test]
    fn bad_patterns_and_heads_name_the_key() {
        let mut m = md();
        m.insert("qwen35.full_attention_interval", Value::U32(0));
        let e = recurrent_layers(&m, "qwen35", 4, 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("qwen35.full_attention_interval"), "{e}");
        let mut m = md();
        m.insert(
            "qwen35.attention.recurrent_layers",
            Value::Array(fucina_gguf::Array::Bool(vec![true, false])),
        );
        let e = mixers(&m, "qwen35", 4, 4).unwrap_err().to_string();
        assert!(e.contains("qwen35.attention.recurrent_layers"), "{e}");
        let mut m = md();
        m.insert(
            "qwen35.attention.recurrent_layers",
            Value::Array(fucina_gguf::Array::Bool(vec![true; 4])),
        );
        assert!(mixers(&m, "qwen35", 4, 4).is_err(), "no attention layer");
        let mut m = md();
        m.insert("qwen35.ssm.time_step_rank", Value::U32(3));
        let e = mixers(&m, "qwen35", 4, 4).unwrap_err().to_string();
        assert!(e.contains("qwen35.ssm.time_step_rank"), "{e}");
        let mut m = md();
        m.insert("qwen35.ssm.inner_size", Value::U32(100));
        let e = mixers(&m, "qwen35", 4, 4).unwrap_err().to_string();
        assert!(e.contains("qwen35.ssm.inner_size"), "{e}");
        let mut m = md();
        m.remove("qwen35.ssm.group_count");
        let e = mixers(&m, "qwen35", 4, 4).unwrap_err().to_string();
        assert!(e.contains("qwen35.ssm.group_count"), "{e}");
    }
}
