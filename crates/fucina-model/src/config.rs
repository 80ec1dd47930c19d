//! Per-family hyperparameters read from GGUF metadata (spec §13.3), with
//! llama.cpp's defaults and per-family conventions (`llama_model_base::load_hparams`
//! and each family's `load_arch_hparams`).
//!
//! Everything the forward needs to know about a model's shape lives here, per
//! layer where families vary it per layer (head counts, sliding window, RoPE base).

use fucina_gguf::{Metadata, ZeroPolicy};

pub use crate::ffn::{FfnConfig, Gating, GroupLimit, MoeConfig};
use crate::kv_cache::{KvGeometry, LayerSpec, RecurrentGeometry};
use crate::{ModelError, Result};

/// The model families this crate runs, selected by `general.architecture`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Gemma 3 (text): GeGLU, (1+w) norms folded at conversion, q/k norms,
    /// post-attention/post-FFN norms, local:global sliding-window layers.
    Gemma3,
    /// Qwen3 (dense): SwiGLU, q/k norms, NeoX RoPE.
    Qwen3,
    /// Qwen2 / Qwen2.5: SwiGLU, q/k/v biases, NeoX RoPE.
    Qwen2,
    /// Llama 2/3, Mistral-style: SwiGLU, normal (interleaved) RoPE, optional
    /// llama3 frequency factors (`rope_freqs.weight`).
    Llama,
    /// Qwen3-MoE: Qwen3's attention, a routed mixture-of-experts FFN on every layer.
    Qwen3Moe,
    /// Qwen1.5-MoE / Qwen2-MoE: Qwen2's attention, routed experts plus a gated
    /// shared expert on every layer.
    Qwen2Moe,
    /// Qwen3.5 (dense): Gated DeltaNet layers interleaved with gated full-attention
    /// layers (MRoPE, partial rotary), SwiGLU FFN.
    Qwen35,
    /// Qwen3.5-MoE: Qwen3.5's hybrid blocks, routed experts plus a gated shared
    /// expert on every layer.
    Qwen35Moe,
    /// Qwen3-Next: the Qwen3.5-MoE hybrid with plain RoPE, grouped value heads and a
    /// fused β/α projection.
    Qwen3Next,
    /// Gemma 4 (text): sliding and global layers with their own head dims, kv heads,
    /// RoPE bases and rotary spans, shared-KV layers, per-layer embeddings, V norms,
    /// layer output scales, final logit soft cap.
    Gemma4,
    /// DeepSeek-V2 / V3 (and GLM-4.7-Flash, Moonlight, which share the arch):
    /// Multi-head Latent Attention over a compressed KV cache, leading dense layers,
    /// routed experts plus shared experts (softmax or sigmoid routing).
    Deepseek2,
    /// GLM-4.5 / GLM-4.5-Air: biased q/k/v, optional q/k norms, partial NeoX RoPE,
    /// leading dense layers, sigmoid-routed experts plus shared experts, trailing
    /// multi-token-prediction (`nextn`) blocks.
    Glm4Moe,
}

impl Family {
    /// Every supported family.
    pub const ALL: [Family; 12] = [
        Family::Gemma3,
        Family::Qwen3,
        Family::Qwen2,
        Family::Llama,
        Family::Qwen3Moe,
        Family::Qwen2Moe,
        Family::Qwen35,
        Family::Qwen35Moe,
        Family::Qwen3Next,
        Family::Gemma4,
        Family::Deepseek2,
        Family::Glm4Moe,
    ];

    /// The `general.architecture` string of the family.
    pub fn arch(self) -> &'static str {
        match self {
            Family::Gemma3 => "gemma3",
            Family::Qwen3 => "qwen3",
            Family::Qwen2 => "qwen2",
            Family::Llama => "llama",
            Family::Qwen3Moe => "qwen3moe",
            Family::Qwen2Moe => "qwen2moe",
            Family::Qwen35 => "qwen35",
            Family::Qwen35Moe => "qwen35moe",
            Family::Qwen3Next => "qwen3next",
            Family::Gemma4 => "gemma4",
            Family::Deepseek2 => "deepseek2",
            Family::Glm4Moe => "glm4moe",
        }
    }

    /// Whether some layers are Gated DeltaNet layers (a recurrent state per sequence).
    pub fn is_hybrid(self) -> bool {
        matches!(self, Family::Qwen35 | Family::Qwen35Moe | Family::Qwen3Next)
    }

    /// The family of an architecture string, or `UnsupportedArchitecture`.
    pub fn from_arch(arch: &str) -> Result<Family> {
        Family::ALL
            .into_iter()
            .find(|f| f.arch() == arch)
            .ok_or_else(|| ModelError::UnsupportedArchitecture {
                arch: arch.to_owned(),
                supported: Family::ALL.iter().map(|f| f.arch()).collect(),
            })
    }
}

/// How RoPE pairs head dimensions (ggml's `GGML_ROPE_TYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeKind {
    /// Consecutive pairs (x\[2i\], x\[2i+1\]): Llama (weights permuted at conversion).
    Normal,
    /// Pairs (x\[i\], x\[i + n_rot/2\]): Qwen, Gemma.
    Neox,
}

/// The feed-forward gate activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: silu(gate) · up.
    Silu,
    /// GeGLU with the tanh approximation of GELU: gelu_tanh(gate) · up, through
    /// ggml's f16 lookup table: llama.cpp's CPU numerics (its `ggml_geglu_split` and
    /// `ggml_gelu`), the default of Gemma 3 and Gemma 4.
    GeluTanh,
    /// GeGLU with the tanh GELU computed in f32 (transformers' `gelu_pytorch_tanh`).
    /// Never chosen from a file: [`crate::ModelOptions::f32_gelu`] asks for it.
    GeluTanhF32,
}

/// RoPE parameters of one layer, in ggml's `ggml_rope_ext` terms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeConfig {
    /// Pairing convention.
    pub kind: RopeKind,
    /// Rotated dimensions (the first `n_rot` of each head).
    pub n_rot: usize,
    /// θ base.
    pub freq_base: f32,
    /// Position scale (1 / linear scaling factor).
    pub freq_scale: f32,
    /// YaRN extrapolation mix (1 for YaRN, else 0).
    pub ext_factor: f32,
    /// Magnitude factor applied to cos/sin.
    pub attn_factor: f32,
    /// YaRN β_fast.
    pub beta_fast: f32,
    /// YaRN β_slow.
    pub beta_slow: f32,
    /// Original training context (YaRN correction dims).
    pub n_ctx_orig: usize,
}

/// The token mixer of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mixer {
    /// Softmax attention over the layer's K/V rows.
    Attention {
        /// The query projection also yields a per-head output gate (Qwen3.5 /
        /// Qwen3-Next: `attn_q` rows are `[q, gate]` per head, and the attention
        /// output is multiplied by `sigmoid(gate)` before `attn_output`).
        gated: bool,
    },
    /// Gated DeltaNet linear attention with its recurrent state.
    DeltaNet(RecurrentGeometry),
    /// Multi-head Latent Attention (DeepSeek-V2/V3) over a latent cache of one
    /// `kv_lora_rank + qk_rope` row per position; the head fields of the layer then
    /// describe that cache (one kv head, keys `kv_lora_rank + qk_rope` wide, values
    /// the first `kv_lora_rank`).
    Mla(MlaGeometry),
}

/// Shape of a Multi-head Latent Attention layer (llama.cpp's `n_lora_q`,
/// `n_lora_kv`, `n_embd_head_k_mla`, `n_embd_head_v_mla`, `n_rot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlaGeometry {
    /// Rank of the query compression (`attn_q_a` → norm → `attn_q_b`); 0: a plain
    /// `attn_q` projection.
    pub q_lora_rank: usize,
    /// Width of the compressed KV (the latent cached per position).
    pub kv_lora_rank: usize,
    /// Per-head query/key dims without RoPE.
    pub qk_nope: usize,
    /// Per-head query dims with RoPE, and the width of the shared RoPE key.
    pub qk_rope: usize,
    /// Per-head value dims (after decompression by `attn_v_b`).
    pub v_head: usize,
}

/// Attention geometry and masking of one layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerConfig {
    /// The token mixer (attention or Gated DeltaNet; the head fields below describe
    /// the attention layers).
    pub mixer: Mixer,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (GQA: divides `n_head`).
    pub n_head_kv: usize,
    /// Key (and query) head dimension.
    pub head_dim_k: usize,
    /// Value head dimension.
    pub head_dim_v: usize,
    /// The feed-forward block of the layer (dense or mixture of experts), chosen
    /// per layer by the family.
    pub ffn: FfnConfig,
    /// Sliding window (a query at position p sees keys at p - window < k <= p), or
    /// `None` for full causal attention.
    pub sliding_window: Option<usize>,
    /// RoPE parameters (Gemma 3 uses a different base on sliding layers).
    pub rope: RopeConfig,
    /// A shared-KV layer (Gemma 4) attends to the K/V rows layer `kv_source` wrote
    /// and writes none of its own; the head fields then describe that layer's K/V.
    pub kv_source: Option<usize>,
    /// The layer reads `rope_freqs.weight` (llama3 factors; Gemma 4's global layers,
    /// whose 1e30 factors leave the dims past the rotary span unrotated).
    pub rope_freqs: bool,
}

impl LayerConfig {
    /// Width of the query projection output.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim_k
    }
    /// Rows of `attn_q` (twice [`Self::q_dim`] with an output gate).
    pub fn q_proj_dim(&self) -> usize {
        match self.mixer {
            Mixer::Attention { gated: true } => 2 * self.q_dim(),
            _ => self.q_dim(),
        }
    }
    /// The layer's slot in a sequence's cache (a shared-KV layer's is empty).
    pub fn cache_spec(&self) -> LayerSpec {
        match self.mixer {
            Mixer::DeltaNet(g) => LayerSpec::Recurrent(g),
            Mixer::Mla(g) => LayerSpec::Attention(KvGeometry {
                n_head_kv: 1,
                head_dim_k: g.kv_lora_rank + g.qk_rope,
                head_dim_v: g.kv_lora_rank,
            }),
            Mixer::Attention { .. } if self.kv_source.is_some() => {
                LayerSpec::Attention(KvGeometry {
                    n_head_kv: 0,
                    head_dim_k: 0,
                    head_dim_v: 0,
                })
            }
            Mixer::Attention { .. } => LayerSpec::Attention(KvGeometry {
                n_head_kv: self.n_head_kv,
                head_dim_k: self.head_dim_k,
                head_dim_v: self.head_dim_v,
            }),
        }
    }
    /// Width of the key projection output.
    pub fn k_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_k
    }
    /// Width of the value projection output.
    pub fn v_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }
    /// Width of the attention output (input of `attn_output`).
    pub fn attn_out_dim(&self) -> usize {
        self.n_head * self.head_dim_v
    }
}

/// Everything the forward needs to know about a model's shape and numerics.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The family.
    pub family: Family,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Residual width.
    pub n_embd: usize,
    /// Vocabulary size (rows of the output head).
    pub n_vocab: usize,
    /// Training context length (`<arch>.context_length`).
    pub n_ctx_train: usize,
    /// RMSNorm ε.
    pub rms_eps: f32,
    /// Per-layer geometry.
    pub layers: Vec<LayerConfig>,
    /// Multiplier applied to token embeddings (Gemma: √n_embd).
    pub embed_scale: Option<f32>,
    /// Multiplier applied to queries after RoPE (Gemma's `f_attention_scale`); the
    /// attention itself then uses `kq_scale`.
    pub q_scale: f32,
    /// Scale applied to q·k inside the softmax.
    pub kq_scale: f32,
    /// Attention logit soft cap `c·tanh(s/c)`, where the family uses one.
    pub attn_softcap: Option<f32>,
    /// Final logit soft cap, where the file declares one.
    pub final_softcap: Option<f32>,
    /// FFN activation.
    pub activation: Activation,
    /// RMSNorm (no weight) on each V head before caching (Gemma 4).
    pub v_norm: bool,
    /// Width of each layer's per-layer embedding (Gemma 4 E2B/E4B), 0 without.
    pub n_embd_per_layer: usize,
}

impl Config {
    /// Largest per-layer q, k, v and ff widths (scratch sizing).
    pub fn max_dims(&self) -> MaxDims {
        let mut m = MaxDims::default();
        for l in &self.layers {
            m.q = m.q.max(l.q_proj_dim());
            m.k = m.k.max(l.k_dim());
            m.v = m.v.max(l.v_dim());
            m.attn_out = m.attn_out.max(l.attn_out_dim());
            m.ff = m.ff.max(l.ffn.n_ff());
            m.head_dim = m.head_dim.max(l.head_dim_k).max(l.head_dim_v);
        }
        m
    }

    /// Read the hyperparameters of `family` from `md`; `n_vocab` comes from the
    /// token embedding's shape (the truth the output head must agree with).
    pub fn from_metadata(md: &Metadata, family: Family, n_vocab: usize) -> Result<Config> {
        let arch = family.arch();
        let int = |suffix: &str| -> Result<usize> {
            usize::try_from(md.meta_int(arch, suffix, ZeroPolicy::RejectZero)?)
                .map_err(|_| invalid(format!("{arch}.{suffix} does not fit in usize")))
        };
        // Multi-token-prediction blocks (`nextn_predict_layers`) follow the trunk in
        // the file; the forward runs the trunk only.
        let n_nextn = md
            .meta_int_opt(arch, "nextn_predict_layers", ZeroPolicy::AcceptZero)
            .and_then(|v| usize::try_from(v).ok())
            .unwrap_or(0);
        let n_layer_all = int("block_count")?;
        let n_layer = n_layer_all
            .checked_sub(n_nextn)
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                invalid(format!(
                    "{arch}.nextn_predict_layers = {n_nextn} leaves no trunk of {n_layer_all} blocks"
                ))
            })?;
        let n_embd = int("embedding_length")?;
        if n_layer > MAX_LAYERS {
            return Err(invalid(format!("{n_layer} layers (max {MAX_LAYERS})")));
        }
        let n_ctx_train = int("context_length")?;
        let per_layer = |suffix: &str, default: Option<&[usize]>| -> Result<Vec<usize>> {
            let key = format!("{arch}.{suffix}");
            if let (false, Some(d)) = (md.contains_key(&key), default) {
                return Ok(d.to_vec());
            }
            // llama.cpp's converter writes per-layer arrays over every block, the
            // multi-token-prediction blocks after the trunk included: the trunk's are first.
            let values = match md.per_layer_u32(&key, n_layer) {
                Err(e) if n_nextn > 0 => md.per_layer_u32(&key, n_layer_all).map_err(|_| e)?,
                r => r?,
            };
            Ok(values
                .into_iter()
                .take(n_layer)
                .map(|v| v as usize)
                .collect())
        };
        let n_head = per_layer("attention.head_count", None)?;
        let n_head_kv = per_layer("attention.head_count_kv", Some(&n_head))?;
        // MoE families may omit the dense width (llama.cpp reads it as optional).
        let no_dense = vec![0; n_layer];
        let moe = matches!(
            family,
            Family::Qwen3Moe
                | Family::Qwen2Moe
                | Family::Qwen35Moe
                | Family::Qwen3Next
                | Family::Deepseek2
                | Family::Glm4Moe
        );
        let ff_default = moe.then_some(no_dense.as_slice());
        let n_ff = per_layer("feed_forward_length", ff_default)?;
        let head0 = n_head.first().copied().unwrap_or(0);
        if head0 == 0 {
            return Err(invalid(format!("{arch}.attention.head_count is zero")));
        }
        let opt_int = |suffix: &str| -> Option<usize> {
            md.meta_int_opt(arch, suffix, ZeroPolicy::RejectZero)
                .and_then(|v| usize::try_from(v).ok())
        };
        let head_dim_k = opt_int("attention.key_length").unwrap_or(n_embd / head0);
        let head_dim_v = opt_int("attention.value_length").unwrap_or(n_embd / head0);
        let n_rot = opt_int("rope.dimension_count").unwrap_or(head_dim_k);
        let rms_eps = md.meta_float(arch, "attention.layer_norm_rms_epsilon")?;
        if !(rms_eps.is_finite() && rms_eps >= 0.0) {
            return Err(invalid(format!("rms epsilon {rms_eps}")));
        }

        let global_rope = rope_from_metadata(md, arch, family, n_rot, n_ctx_train)?;

        // Sliding-window layout (Gemma 3; Gemma 4 below).
        let mut swa = vec![false; n_layer];
        let mut window = None;
        let mut swa_rope = global_rope;
        if family == Family::Gemma3 {
            if let Some(w) = opt_int("attention.sliding_window") {
                window = Some(w);
                swa = swa_pattern(md, arch, n_layer, 6)?;
                swa_rope.freq_base = md
                    .meta_float_opt(arch, "rope.freq_base_swa")
                    .unwrap_or(GEMMA3_LOCAL_ROPE_BASE);
                swa_rope.freq_scale = 1.0;
                swa_rope.ext_factor = 0.0;
                swa_rope.attn_factor = 1.0;
            }
        }

        let ffns = crate::families::ffn_configs(md, family, &n_ff)?;
        let mixers = crate::families::mixers(md, family, n_layer, n_layer_all)?;
        let mut layers: Vec<LayerConfig> = ffns
            .into_iter()
            .zip(mixers)
            .enumerate()
            .map(|(il, (ffn, mixer))| LayerConfig {
                mixer,
                n_head: n_head[il],
                n_head_kv: n_head_kv[il],
                head_dim_k,
                head_dim_v,
                ffn,
                sliding_window: if swa[il] { window } else { None },
                rope: if swa[il] { swa_rope } else { global_rope },
                kv_source: None,
                rope_freqs: true,
            })
            .collect();
        if family == Family::Gemma4 {
            crate::families::gemma4::layer_geometry(md, &mut layers)?;
        }
        if family == Family::Deepseek2 {
            crate::families::deepseek2::check_geometry(&layers)?;
        }
        for (il, l) in layers.iter().enumerate() {
            if l.n_head == 0 || l.n_head_kv == 0 || l.n_head % l.n_head_kv != 0 {
                return Err(invalid(format!(
                    "layer {il}: {} query heads ({arch}.attention.head_count) are not a \
                     multiple of {} kv heads ({arch}.attention.head_count_kv)",
                    l.n_head, l.n_head_kv
                )));
            }
            if matches!(l.mixer, Mixer::Attention { gated: true }) && l.head_dim_k != l.head_dim_v {
                return Err(invalid(format!(
                    "layer {il}: a gated attention layer needs equal key and value head \
                     dims ({} / {})",
                    l.head_dim_k, l.head_dim_v
                )));
            }
            if l.ffn.n_ff() == 0 || l.head_dim_k == 0 || l.head_dim_v == 0 {
                return Err(invalid(format!("layer {il}: zero-sized ffn or head")));
            }
            if l.rope.n_rot > l.head_dim_k || l.rope.n_rot % 2 != 0 {
                return Err(invalid(format!(
                    "layer {il}: rope dimension {} with head_dim {}",
                    l.rope.n_rot, l.head_dim_k
                )));
            }
        }

        let kq_default = 1.0 / (head_dim_k as f32).sqrt();
        let (embed_scale, q_scale, kq_scale, activation) = match family {
            Family::Gemma3 => {
                // llama.cpp: 27B scales by 1/sqrt(n_embd / n_head), the others by
                // 1/sqrt(head_dim_k) (gemma_pytorch config.py).
                let q_scale = if n_layer == 62 {
                    1.0 / ((n_embd / head0) as f32).sqrt()
                } else {
                    kq_default
                };
                (
                    Some((n_embd as f32).sqrt()),
                    q_scale,
                    1.0,
                    Activation::GeluTanh,
                )
            }
            // Gemma 4 scales neither queries nor scores (its q/k norms set the scale).
            Family::Gemma4 => (Some((n_embd as f32).sqrt()), 1.0, 1.0, Activation::GeluTanh),
            Family::Qwen3
            | Family::Qwen2
            | Family::Llama
            | Family::Qwen3Moe
            | Family::Qwen2Moe
            | Family::Qwen35
            | Family::Qwen35Moe
            | Family::Qwen3Next
            | Family::Glm4Moe => (None, 1.0, kq_default, Activation::Silu),
            Family::Deepseek2 => (
                None,
                1.0,
                crate::families::deepseek2::kq_scale(md, &layers)?,
                Activation::Silu,
            ),
        };
        let final_softcap = md
            .meta_float_opt(arch, "final_logit_softcapping")
            .filter(|c| *c != 0.0);
        Ok(Config {
            family,
            n_layer,
            n_embd,
            n_vocab,
            n_ctx_train,
            rms_eps,
            layers,
            embed_scale,
            q_scale,
            kq_scale,
            attn_softcap: None,
            final_softcap,
            activation,
            v_norm: family == Family::Gemma4,
            n_embd_per_layer: if family == Family::Gemma4 {
                opt_int("embedding_length_per_layer_input").unwrap_or(0)
            } else {
                0
            },
        })
    }
}

/// Largest per-layer widths, for sizing scratch buffers once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaxDims {
    /// Query projection width.
    pub q: usize,
    /// Key projection width.
    pub k: usize,
    /// Value projection width.
    pub v: usize,
    /// Attention output width.
    pub attn_out: usize,
    /// FFN inner width.
    pub ff: usize,
    /// Head dimension (k or v).
    pub head_dim: usize,
}

/// llama.cpp's `LLAMA_MAX_LAYERS`: a bound on untrusted layer counts.
pub const MAX_LAYERS: usize = 512;

/// Gemma 3's RoPE base on sliding-window layers when the file does not say
/// (llama.cpp `rope_freq_base_train_swa` default; HF `rope_local_base_freq`).
pub const GEMMA3_LOCAL_ROPE_BASE: f32 = 10_000.0;

fn invalid(msg: String) -> ModelError {
    ModelError::InvalidConfig(msg)
}

/// `attention.sliding_window_pattern`: an array of per-layer booleans (true =
/// sliding), or an integer n meaning "every n-th layer is global" (layer il slides
/// when il % n < n - 1), defaulting to `default_n` (llama.cpp `set_swa_pattern`).
fn swa_pattern(md: &Metadata, arch: &str, n_layer: usize, default_n: usize) -> Result<Vec<bool>> {
    let key = format!("{arch}.attention.sliding_window_pattern");
    let n = match md.get(&key) {
        None => default_n,
        Some(fucina_gguf::Value::Array(_)) => {
            return Ok(md
                .per_layer_u32(&key, n_layer)?
                .into_iter()
                .map(|v| v != 0)
                .collect());
        }
        Some(_) => usize::try_from(md.get_u64(&key)?.unwrap_or(0))
            .map_err(|_| invalid(format!("{key} does not fit in usize")))?,
    };
    Ok((0..n_layer).map(|il| n == 0 || il % n < n - 1).collect())
}

fn rope_from_metadata(
    md: &Metadata,
    arch: &str,
    family: Family,
    n_rot: usize,
    n_ctx_train: usize,
) -> Result<RopeConfig> {
    let kind = match family {
        Family::Llama | Family::Deepseek2 => RopeKind::Normal,
        // Qwen3.5's interleaved MRoPE gives every section the same position for
        // text, which is NeoX RoPE over the rotated dims.
        Family::Gemma3
        | Family::Qwen3
        | Family::Qwen2
        | Family::Qwen3Moe
        | Family::Qwen2Moe
        | Family::Qwen35
        | Family::Qwen35Moe
        | Family::Qwen3Next
        | Family::Gemma4
        | Family::Glm4Moe => RopeKind::Neox,
    };
    let freq_base = md
        .meta_float_opt(arch, "rope.freq_base")
        .unwrap_or(10_000.0);
    let scaling = md
        .get_str(&format!("{arch}.rope.scaling.type"))?
        .unwrap_or("linear");
    let factor = md
        .meta_float_opt(arch, "rope.scaling.factor")
        .or_else(|| md.meta_float_opt(arch, "rope.scale_linear"))
        .unwrap_or(0.0);
    let mut freq_scale = if factor == 0.0 { 1.0 } else { 1.0 / factor };
    let yarn = match scaling {
        "none" => {
            freq_scale = 1.0;
            false
        }
        "linear" => false,
        "yarn" => true,
        other => {
            return Err(invalid(format!(
                "{arch}.rope.scaling.type '{other}' is not supported (none, linear, yarn)"
            )))
        }
    };
    if !(freq_scale.is_finite() && freq_scale > 0.0 && freq_base.is_finite() && freq_base > 0.0) {
        return Err(invalid(format!(
            "rope freq_base {freq_base} / scale {freq_scale}"
        )));
    }
    let n_ctx_orig = md
        .meta_int_opt(
            arch,
            "rope.scaling.original_context_length",
            ZeroPolicy::RejectZero,
        )
        .and_then(|v| usize::try_from(v).ok())
        .unwrap_or(n_ctx_train);
    let rope_attn_factor = md
        .meta_float_opt(arch, "rope.scaling.attn_factor")
        .unwrap_or(1.0);
    let ext_factor = if yarn { 1.0 } else { 0.0 };
    // llama-context.cpp: YaRN's magnitude correction is applied inside the rope
    // kernel (mscale · (1 + 0.1·ln(1/freq_scale))); the context-level factor
    // get_mscale(factor) / (1 + 0.1·ln(factor)) cancels it back to 1. These
    // families do not read yarn_log_multiplier / beta keys in llama.cpp, so
    // neither do we (defaults β_fast 32, β_slow 1).
    let mut attn_factor = 1.0f32;
    if ext_factor != 0.0 {
        let factor = 1.0 / freq_scale;
        // get_mscale(factor, 1) = 1 + 0.1·ln(factor) for factor > 1, else 1.
        // DeepSeek-V2 files with `yarn_log_multiplier` take
        // get_mscale(factor, m) / get_mscale(factor, m) with the same m (llama.cpp
        // assumes mscale == mscale_all_dim): exactly 1.
        let deepseek_log_mul = family == Family::Deepseek2
            && md
                .meta_float_opt(arch, "rope.scaling.yarn_log_multiplier")
                .is_some_and(|v| v != 0.0);
        let mscale = if factor <= 1.0 || deepseek_log_mul {
            1.0
        } else {
            0.1 * factor.ln() + 1.0
        };
        attn_factor = mscale * (1.0 / (1.0 + 0.1 * factor.ln()));
    }
    attn_factor *= rope_attn_factor;
    Ok(RopeConfig {
        kind,
        n_rot,
        freq_base,
        freq_scale,
        ext_factor,
        attn_factor,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fucina_gguf::Value;

    fn base(arch: &str) -> Metadata {
        let mut md = Metadata::default();
        md.insert("general.architecture", Value::string(arch));
        md.insert(format!("{arch}.block_count"), Value::U32(12));
        md.insert(format!("{arch}.embedding_length"), Value::U32(64));
        md.insert(format!("{arch}.context_length"), Value::U32(2048));
        md.insert(format!("{arch}.feed_forward_length"), Value::U32(128));
        md.insert(format!("{arch}.attention.head_count"), Value::U32(4));
        md.insert(format!("{arch}.attention.head_count_kv"), Value::U32(2));
        md.insert(
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-6),
        );
        md
    }

    #[test]
    fn per_layer_arrays_may_cover_the_nextn_blocks() {
        let mut md = base("qwen3");
        md.insert("qwen3.block_count", Value::U32(3));
        md.insert("qwen3.nextn_predict_layers", Value::U32(1));
        md.insert(
            "qwen3.attention.head_count_kv",
            Value::Array(fucina_gguf::Array::U32(vec![2, 1, 4])),
        );
        let c = Config::from_metadata(&md, Family::Qwen3, 1000);
        let heads: Vec<usize> = match &c {
            Ok(c) => c.layers.iter().map(|l| l.n_head_kv).collect(),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(heads, vec![2, 1]);
        // An array of another length is still an error naming the key.
        md.insert(
            "qwen3.attention.head_count_kv",
            Value::Array(fucina_gguf::Array::U32(vec![2, 1, 4, 4])),
        );
        let e = Config::from_metadata(&md, Family::Qwen3, 1000).unwrap_err();
        assert!(e.to_string().contains("head_count_kv"), "{e}");
    }

    #[test]
    fn unsupported_architecture_names_it_and_lists_supported() {
        let e = Family::from_arch("mamba").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("'mamba'") && msg.contains("gemma3") && msg.contains("llama"));
    }

    #[test]
    fn gemma3_pattern_and_local_rope_base() {
        let mut md = base("gemma3");
        md.insert("gemma3.attention.sliding_window", Value::U32(512));
        md.insert("gemma3.rope.freq_base", Value::F32(1e6));
        let c = Config::from_metadata(&md, Family::Gemma3, 1000).unwrap();
        let sliding: Vec<bool> = c
            .layers
            .iter()
            .map(|l| l.sliding_window.is_some())
            .collect();
        // every 6th layer (5, 11) is global
        for (il, s) in sliding.iter().enumerate() {
            assert_eq!(*s, il % 6 != 5, "layer {il}");
        }
        assert_eq!(c.layers[0].rope.freq_base, 10_000.0);
        assert_eq!(c.layers[5].rope.freq_base, 1e6);
        assert_eq!(c.layers[0].head_dim_k, 16);
        assert_eq!(c.embed_scale, Some(8.0));
        assert_eq!(c.activation, Activation::GeluTanh);
        assert_eq!(c.layers[0].rope.kind, RopeKind::Neox);
    }

    #[test]
    fn llama_defaults_and_yarn() {
        let mut md = base("llama");
        let c = Config::from_metadata(&md, Family::Llama, 1000).unwrap();
        assert_eq!(c.layers[3].rope.kind, RopeKind::Normal);
        assert_eq!(c.layers[3].rope.freq_base, 10_000.0);
        assert!(c.layers.iter().all(|l| l.sliding_window.is_none()));
        assert!((c.kq_scale - 0.25).abs() < 1e-7);
        md.insert("llama.rope.scaling.type", Value::string("yarn"));
        md.insert("llama.rope.scaling.factor", Value::F32(4.0));
        md.insert(
            "llama.rope.scaling.original_context_length",
            Value::U32(512),
        );
        let c = Config::from_metadata(&md, Family::Llama, 1000).unwrap();
        let r = c.layers[0].rope;
        assert_eq!((r.freq_scale, r.ext_factor, r.n_ctx_orig), (0.25, 1.0, 512));
        assert!((r.attn_factor - 1.0).abs() < 1e-6);
    }

    #[test]
    fn bad_heads_are_errors() {
        let mut md = base("qwen3");
        md.insert("qwen3.attention.head_count_kv", Value::U32(3));
        assert!(matches!(
            Config::from_metadata(&md, Family::Qwen3, 10),
            Err(ModelError::InvalidConfig(_))
        ));
        let mut md = base("qwen3");
        md.insert("qwen3.rope.scaling.type", Value::string("su"));
        assert!(Config::from_metadata(&md, Family::Qwen3, 10).is_err());
    }
}
