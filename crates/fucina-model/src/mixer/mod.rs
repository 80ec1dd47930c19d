//! Token mixers, the part of a block that looks across positions: softmax
//! attention over the sequence's K/V rows ([`attention`]) or Gated DeltaNet linear
//! attention over a recurrent state ([`deltanet`]), or Multi-head Latent Attention
//! over a compressed cache ([`mla`]). Each kind owns its weights and
//! its part of the forward; the block around them (norms, residuals, FFN) is the
//! family-agnostic loop in [`crate::forward`].

pub mod attention;
pub mod deltanet;
pub mod mla;

pub use deltanet::{DeltaNetScratch, DeltaNetWeights};
pub use mla::{MlaQuery, MlaScratch, MlaWeights};

use crate::weights::Linear;

/// Weights of a softmax-attention mixer.
#[derive(Clone, Debug)]
pub struct AttnWeights {
    /// Query projection (rows `[q, gate]` per head for a gated layer).
    pub wq: Linear,
    /// Key projection (none on a shared-KV layer).
    pub wk: Option<Linear>,
    /// Value projection (none on a shared-KV layer, or where values are the keys).
    pub wv: Option<Linear>,
    /// Output projection.
    pub wo: Linear,
    /// Query bias.
    pub bq: Option<Vec<f32>>,
    /// Key bias.
    pub bk: Option<Vec<f32>>,
    /// Value bias.
    pub bv: Option<Vec<f32>>,
    /// Output bias.
    pub bo: Option<Vec<f32>>,
    /// Per-head query RMSNorm weight.
    pub q_norm: Option<Vec<f32>>,
    /// Per-head key RMSNorm weight.
    pub k_norm: Option<Vec<f32>>,
}

/// A layer's mixer weights.
#[derive(Clone, Debug)]
pub enum MixerWeights {
    /// Softmax attention.
    Attention(AttnWeights),
    /// Gated DeltaNet.
    DeltaNet(DeltaNetWeights),
    /// Multi-head Latent Attention (boxed: per-head matrices).
    Mla(Box<MlaWeights>),
}

impl MixerWeights {
    /// Every matrix a decode step multiplies with in full.
    pub fn matrices(&self) -> Vec<&Linear> {
        match self {
            MixerWeights::Attention(a) => [Some(&a.wq), a.wk.as_ref(), a.wv.as_ref(), Some(&a.wo)]
                .into_iter()
                .flatten()
                .collect(),
            MixerWeights::DeltaNet(d) => d.matrices(),
            MixerWeights::Mla(w) => w.matrices(),
        }
    }

    /// The attention weights, for attention layers.
    pub fn attention(&self) -> Option<&AttnWeights> {
        match self {
            MixerWeights::Attention(a) => Some(a),
            MixerWeights::DeltaNet(_) | MixerWeights::Mla(_) => None,
        }
    }
}
