//! The one error type of `fucina-quant`: wrong lengths, unsupported types, bad ISA requests.

use fucina_gguf::GgmlType;

/// Errors from dequantizing, quantizing or multiplying quantized data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// The type has no implementation for the requested operation.
    #[error("{ty}: {op} is not supported for this type")]
    Unsupported {
        /// The ggml type.
        ty: GgmlType,
        /// The operation (`"dequantize"`, `"quantize"`, `"dot"`).
        op: &'static str,
    },
    /// A byte buffer is not a whole number of blocks, or does not match the element count.
    #[error("{ty}: {what} has {found} bytes, expected {expected}")]
    ByteLength {
        /// The ggml type.
        ty: GgmlType,
        /// Which buffer.
        what: &'static str,
        /// Bytes found.
        found: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// A byte buffer is not a whole number of blocks.
    #[error("{ty}: {what} has {found} bytes, not a multiple of the {type_size}-byte block")]
    NotWholeBlocks {
        /// The ggml type.
        ty: GgmlType,
        /// Which buffer.
        what: &'static str,
        /// Bytes found.
        found: usize,
        /// Bytes per block.
        type_size: usize,
    },
    /// An element count is not a multiple of the type's block size.
    #[error("{ty}: {what} has {found} elements, not a multiple of the block size {block_size}")]
    NotBlockMultiple {
        /// The ggml type.
        ty: GgmlType,
        /// Which buffer.
        what: &'static str,
        /// Elements found.
        found: usize,
        /// Block size of the type.
        block_size: usize,
    },
    /// An output or input float buffer has the wrong number of elements.
    #[error("{ty}: {what} has {found} elements, expected {expected}")]
    ElementCount {
        /// The ggml type.
        ty: GgmlType,
        /// Which buffer.
        what: &'static str,
        /// Elements found.
        found: usize,
        /// Elements expected.
        expected: usize,
    },
    /// Matrix shapes that do not agree (or overflow `usize`).
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// `FUCINA_ISA` (or an explicit request) named an ISA that is unknown or that this CPU lacks.
    #[error("instruction set {requested:?} is not available on this CPU (available: {available})")]
    IsaUnavailable {
        /// The requested ISA name.
        requested: String,
        /// The ISAs this CPU runs.
        available: String,
    },
    /// A thread pool could not be started.
    #[error("thread pool: {0}")]
    Pool(String),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, QuantError>;
