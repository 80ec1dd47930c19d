//! Model forward for GGUF LLMs on CPU: weight binding (§13.2), hyperparameters
//! from metadata (§13.3), the KV cache (§13.4), tensor ops, the FFN blocks (dense,
//! mixture of experts), the token mixers (attention, Gated DeltaNet), the Gemma 3 / Qwen3 /
//! Qwen2 / Llama / Qwen3-MoE / Qwen2-MoE / Qwen3.5 families and a batched forward over
//! several sequences.
//!
//! Sequences, sessions and the generation loop live in `fucina-engine`.
//!
//! ```no_run
//! use fucina_model::{BatchRow, KvDtype, Model, ModelOptions, Scratch};
//! let model = Model::load("model.gguf", ModelOptions::with_threads(2))?;
//! let mut caches = vec![model.new_cache(2048, KvDtype::F16)?];
//! let rows = BatchRow::sequence(0, 0, &[2, 651, 6037], false);
//! let logits = model.forward(&rows, &mut caches, &mut Scratch::default())?;
//! # Ok::<(), fucina_model::ModelError>(())
//! ```

pub mod config;
mod error;
pub mod families;
pub mod ffn;
pub mod forward;
pub mod greedy;
pub mod kv_cache;
pub mod matmul;
pub mod mixer;
pub mod model;
pub mod mtp;
pub mod ops;
pub mod parallel;
pub mod ple;
pub mod weights;

pub use config::{
    Activation, Config, Family, LayerConfig, Mixer, MlaGeometry, RopeConfig, RopeKind,
};
pub use error::{ModelError, Result};
pub use ffn::{FfnConfig, FfnWeights, Gating, GroupLimit, MoeConfig};
pub use forward::{BatchRow, Scratch};
pub use kv_cache::{
    KvCache, KvDtype, KvGeometry, KvLayer, LayerSpec, LayerState, RecurrentGeometry,
};
pub use model::{Model, ModelOptions};
pub use mtp::MtpWeights;
pub use parallel::ThreadPool;
pub use weights::Linear;
