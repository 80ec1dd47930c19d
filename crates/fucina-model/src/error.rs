//! The one error type of `fucina-model`: bad models, bad batches and cache misuse
//! are values naming what was wrong, never panics.

use fucina_gguf::GgmlType;

/// Errors from loading a model, binding weights, running a forward or using a KV cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The GGUF file could not be read or its metadata is malformed.
    #[error(transparent)]
    Gguf(#[from] fucina_gguf::GgufError),
    /// The expert store failed (a short read of a truncated file, bad options).
    #[error(transparent)]
    Experts(#[from] fucina_experts::ExpertError),
    /// A block-format operation failed (unknown type, wrong byte count).
    #[error(transparent)]
    Quant(#[from] fucina_quant::QuantError),
    /// `general.architecture` names a family this crate does not run.
    #[error("unsupported model architecture '{arch}' (supported: {})", supported.join(", "))]
    UnsupportedArchitecture {
        /// The architecture the file declares.
        arch: String,
        /// The architectures this crate runs.
        supported: Vec<&'static str>,
    },
    /// Hyperparameters that are missing, inconsistent or out of range.
    #[error("invalid model config: {0}")]
    InvalidConfig(String),
    /// A tensor the family needs is absent.
    #[error("missing tensor '{0}'")]
    MissingTensor(String),
    /// A tensor whose shape does not match the hyperparameters.
    #[error("tensor '{name}': shape {found:?} (ggml order), expected {expected:?}")]
    WeightShape {
        /// The tensor.
        name: String,
        /// Its dims, fastest first.
        found: Vec<u64>,
        /// The dims the config implies, fastest first.
        expected: Vec<u64>,
    },
    /// A tensor type that cannot be used where it appears.
    #[error("tensor '{name}': type {ty} is not supported here ({why})")]
    UnsupportedWeightType {
        /// The tensor.
        name: String,
        /// Its ggml type.
        ty: GgmlType,
        /// Why it cannot be used.
        why: &'static str,
    },
    /// A batch that cannot be run (bad token, position, sequence).
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    /// Appending past the KV cache's capacity.
    #[error("KV cache overflow: {needed} positions needed, capacity {capacity}")]
    KvCacheOverflow {
        /// Positions the operation needs.
        needed: usize,
        /// Positions the cache holds.
        capacity: usize,
    },
    /// Two caches (or a cache and a model) whose geometry or dtype differ.
    #[error("KV cache shape mismatch: {0}")]
    KvCacheShapeMismatch(String),
    /// A q8_0 cache needs head dimensions that are multiples of 32.
    #[error("q8_0 KV cache needs head_dim % 32 == 0, layer {layer} has {head_dim}")]
    KvCacheHeadDimNotBlockAligned {
        /// The layer.
        layer: usize,
        /// Its head dimension.
        head_dim: usize,
    },
}

/// Result alias for this crate.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;
