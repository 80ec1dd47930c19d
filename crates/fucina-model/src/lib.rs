//! Model forward for GGUF LLMs on CPU: weight binding (§13.2), hyperparameters
//! from metadata (§13.3), the KV cache (§13.4), tensor ops, the Gemma 3 / Qwen3 /
//! Qwen2 / Llama families and a batched forward over several sequences.
//!
//! ```no_run
//! use std::sync::Arc;
//! use fucina_model::{KvDtype, Model, ModelOptions, Session};
//! let model = Arc::new(Model::load("model.gguf", ModelOptions { n_threads: 2 })?);
//! let mut s = Session::new(model, 2048, KvDtype::F16)?;
//! let continuation = s.generate_greedy(&[2, 651, 6037], 16, |_| false)?;
//! # Ok::<(), fucina_model::ModelError>(())
//! ```

pub mod config;
mod error;
pub mod families;
pub mod forward;
pub mod kv_cache;
pub mod matmul;
pub mod model;
pub mod ops;
pub mod parallel;
pub mod session;
pub mod weights;

pub use config::{Activation, Config, Family, LayerConfig, RopeConfig, RopeKind};
pub use error::{ModelError, Result};
pub use forward::{BatchRow, Scratch};
pub use kv_cache::{KvCache, KvDtype, KvGeometry};
pub use model::{Model, ModelOptions};
pub use session::{argmax, Session};
pub use weights::Linear;
