//! The one error type of `fucina-gguf`: every malformed input names what was wrong and where.

use std::path::PathBuf;

/// Errors from reading, validating or writing GGUF files.
///
/// Parse errors carry the byte offset (from the start of the file) at which the
/// offending field starts, so a user can look at it with `xxd -s`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// An OS-level failure opening, mapping or writing a file.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file ends before a field that the header says is there.
    #[error(
        "truncated file: {what} at byte {offset} needs {needed} bytes but only {available} remain"
    )]
    Truncated {
        /// The field being read.
        what: String,
        /// Byte offset where the field starts.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A GGUF version this reader does not understand.
    #[error("unsupported GGUF version {version} (supported: 2, 3)")]
    UnsupportedVersion {
        /// The version field.
        version: u32,
    },
    /// A structurally invalid field: bad count, bad type id, bad UTF-8, duplicate, ...
    #[error("malformed GGUF at byte {offset}: {message}")]
    Malformed {
        /// Byte offset of the field.
        offset: u64,
        /// What is wrong.
        message: String,
    },
    /// A tensor whose info is invalid or whose data does not fit the file.
    #[error("tensor '{name}': {message}")]
    Tensor {
        /// The tensor's name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A metadata key that is required but missing.
    #[error("missing metadata key '{key}'")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata value with the wrong type or an invalid value for its use.
    #[error("metadata key '{key}': {message}")]
    InvalidValue {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A tensor name looked up that the file does not contain.
    #[error("no tensor named '{name}'")]
    NoSuchTensor {
        /// The name asked for.
        name: String,
    },
    /// Split (multi-file) model inconsistencies.
    #[error("split model {path}: {message}")]
    Split {
        /// The file involved.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Invalid use of the writer (duplicate names, wrong byte counts, ...).
    #[error("GGUF writer: {0}")]
    Writer(String),
}

impl GgufError {
    pub(crate) fn malformed(offset: u64, message: impl Into<String>) -> Self {
        Self::Malformed {
            offset,
            message: message.into(),
        }
    }

    pub(crate) fn tensor(name: &str, message: impl Into<String>) -> Self {
        Self::Tensor {
            name: name.to_owned(),
            message: message.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;
