//! The feed-forward block of a layer, chosen per layer by the family: a dense gated
//! MLP ([`DenseFfn`]) or a routed mixture of experts ([`MoeFfn`]). Each kind has
//! its hyperparameters ([`FfnConfig`]), its weights and its forward; the layer
//! forward only calls [`FfnWeights::forward`] on the normed rows (Gemma 4's MoE block,
//! a dense MLP beside routed experts, also reads the un-normed ones).

pub mod dense;
pub mod gemma4_moe;
pub mod moe;
pub mod moe_stream;
pub mod router;

pub use dense::DenseFfn;
pub use gemma4_moe::Gemma4MoeFfn;
pub use moe::{MoeFfn, MoeScratch, SharedFfn};
pub use moe_stream::{Lookahead, MoeStream};

use crate::config::Activation;
use crate::matmul::MatmulScratch;
use crate::parallel::ThreadPool;
use crate::weights::Linear;
use crate::Result;

/// llama.cpp's `LLAMA_MAX_EXPERTS`: a bound on untrusted expert counts.
pub const MAX_EXPERTS: usize = 1024;

/// The feed-forward block of one layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FfnConfig {
    /// Gated MLP of inner width `n_ff`.
    Dense {
        /// Inner width.
        n_ff: usize,
    },
    /// Routed experts.
    Moe(MoeConfig),
}

impl FfnConfig {
    /// The inner width of one MLP (the dense one, or one expert's).
    pub fn n_ff(&self) -> usize {
        match self {
            FfnConfig::Dense { n_ff } => *n_ff,
            FfnConfig::Moe(m) => m.n_ff_exp,
        }
    }

    /// The mixture-of-experts parameters, for MoE layers.
    pub fn moe(&self) -> Option<&MoeConfig> {
        match self {
            FfnConfig::Moe(m) => Some(m),
            FfnConfig::Dense { .. } => None,
        }
    }
}

/// How router logits become expert probabilities (llama.cpp's
/// `llama_expert_gating_func_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over all experts (Qwen3-MoE, DeepSeek-V2).
    Softmax,
    /// Independent sigmoids (DeepSeek-V3 style, GLM-4.5).
    Sigmoid,
}

/// Group-limited routing (DeepSeek-V3): experts are split into `n_groups` equal
/// groups, each scored by the sum of its two best selection scores, and only the
/// experts of the best `n_groups_used` groups may be selected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupLimit {
    /// Groups (divides the expert count).
    pub n_groups: usize,
    /// Groups kept per token.
    pub n_groups_used: usize,
}

/// A shared expert: a dense SwiGLU FFN every token runs beside its routed experts,
/// its output added to theirs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedExpert {
    /// Inner width.
    pub n_ff: usize,
    /// Scaled per token by `sigmoid(w · x)` (`ffn_gate_inp_shexp`, Qwen2-MoE); else
    /// added as is (DeepSeek).
    pub gated: bool,
}

/// A mixture-of-experts FFN's hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeConfig {
    /// Experts in the layer.
    pub n_expert: usize,
    /// Experts routed per token (top-k).
    pub n_expert_used: usize,
    /// Inner width of one expert.
    pub n_ff_exp: usize,
    /// Probability function of the router.
    pub gating: Gating,
    /// Renormalise the selected experts' weights to sum to one (Qwen3-MoE's
    /// `norm_topk_prob`; llama.cpp always does for qwen3moe).
    pub norm_weights: bool,
    /// Multiplier of the (renormalised) weights (`expert_weights_scale`), where not 1.
    pub weights_scale: Option<f32>,
    /// Group-limited selection, where the family uses it.
    pub group_limit: Option<GroupLimit>,
    /// The shared expert, where the family has one.
    pub shared: Option<SharedExpert>,
}

impl MoeConfig {
    /// Check the counts against each other and the bounds llama.cpp enforces.
    pub fn validate(&self, layer: usize) -> Result<()> {
        let bad = |what: String| {
            Err(crate::ModelError::InvalidConfig(format!(
                "layer {layer}: {what}"
            )))
        };
        if self.n_expert < 2 || self.n_expert > MAX_EXPERTS {
            return bad(format!("{} experts (2..={MAX_EXPERTS})", self.n_expert));
        }
        if self.n_expert_used == 0 || self.n_expert_used > self.n_expert {
            return bad(format!(
                "{} experts used of {}",
                self.n_expert_used, self.n_expert
            ));
        }
        if self.n_ff_exp == 0 || self.shared.is_some_and(|s| s.n_ff == 0) {
            return bad("zero expert width".into());
        }
        if let Some(g) = self.group_limit {
            let per = self.n_expert.checked_div(g.n_groups).unwrap_or(0);
            if g.n_groups < 2
                || self.n_expert % g.n_groups != 0
                || g.n_groups_used == 0
                || g.n_groups_used >= g.n_groups
                || per < 2
                || g.n_groups_used * per < self.n_expert_used
            {
                return bad(format!(
                    "expert groups {} (used {}) for {} experts, top-{}",
                    g.n_groups, g.n_groups_used, self.n_expert, self.n_expert_used
                ));
            }
        }
        Ok(())
    }
}

/// The feed-forward weights of one layer.
#[derive(Clone, Debug)]
pub enum FfnWeights {
    /// Gated MLP.
    Dense(DenseFfn),
    /// Routed experts.
    Moe(MoeFfn),
    /// Gemma 4's dense MLP beside routed experts (boxed: two FFNs).
    Gemma4Moe(Box<Gemma4MoeFfn>),
}

/// Reusable buffers of the FFN forwards.
#[derive(Default, Debug)]
pub struct FfnScratch {
    pub(crate) gate: Vec<f32>,
    pub(crate) up: Vec<f32>,
    pub(crate) moe: MoeScratch,
    pub(crate) gemma4: gemma4_moe::Gemma4MoeScratch,
}

impl FfnWeights {
    /// `out = ffn(xn)` for `m` rows: `xn` is the pre-FFN norm of the residual
    /// stream `x` (`m × n_embd` each; only Gemma 4's MoE block also reads `x`).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        pool: &ThreadPool,
        act: Activation,
        x: &[f32],
        xn: &[f32],
        m: usize,
        out: &mut [f32],
        eps: f32,
        s: &mut FfnScratch,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        match self {
            FfnWeights::Dense(d) => d.forward(pool, act, xn, m, out, &mut s.gate, &mut s.up, mm),
            FfnWeights::Moe(e) => e.forward(pool, act, xn, m, out, &mut s.moe, mm),
            FfnWeights::Gemma4Moe(g) => g.forward(pool, act, x, xn, m, out, eps, &mut s.gemma4, mm),
        }
    }

    /// The matrices read in full by every token (the dense projections; a router):
    /// what load-time repacking applies to.
    pub fn resident_matrices(&self) -> Vec<&Linear> {
        match self {
            FfnWeights::Dense(d) => vec![&d.gate, &d.up, &d.down],
            FfnWeights::Moe(e) => {
                let mut v = vec![&e.gate_inp];
                if let Some(sh) = &e.shared {
                    v.extend([&sh.ffn.gate, &sh.ffn.up, &sh.ffn.down]);
                    v.extend(&sh.gate);
                }
                v
            }
            FfnWeights::Gemma4Moe(g) => g.resident_matrices(),
        }
    }

    /// The routed experts of a MoE layer (Gemma 4's included), `None` for dense ones.
    pub fn moe(&self) -> Option<&MoeFfn> {
        match self {
            FfnWeights::Dense(_) => None,
            FfnWeights::Moe(e) => Some(e),
            FfnWeights::Gemma4Moe(g) => Some(&g.moe),
        }
    }

    /// [`FfnWeights::moe`], mutable (attaching an expert store).
    pub fn moe_mut(&mut self) -> Option<&mut MoeFfn> {
        match self {
            FfnWeights::Dense(_) => None,
            FfnWeights::Moe(e) => Some(e),
            FfnWeights::Gemma4Moe(g) => Some(&mut g.moe),
        }
    }

    /// Bytes of weights one decode token reads (a MoE layer: the router and
    /// `n_expert_used` experts).
    pub fn bytes_per_token(&self) -> usize {
        match self {
            FfnWeights::Dense(d) => [&d.gate, &d.up, &d.down]
                .iter()
                .map(|w| w.stream_bytes())
                .sum(),
            FfnWeights::Moe(e) => e.bytes_per_token(),
            FfnWeights::Gemma4Moe(g) => g.bytes_per_token(),
        }
    }
}
