//! The one error type of `fucina-experts`: bad registrations, short reads, bad
//! trace or histogram files are values naming what was wrong, never panics.

use std::path::PathBuf;

/// Errors of the expert store, its trace and its replay.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExpertError {
    /// A file could not be opened, read or written (the OS error as text, so the
    /// error can be handed to every reader waiting on the same expert).
    #[error("{path}: {what}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        message: String,
    },
    /// An expert's bytes end before the file does (a truncated or shrunk GGUF).
    #[error("{stack}: expert {expert} at offset {offset}: read {got} of {wanted} bytes (truncated file?)")]
    ShortRead {
        /// The stacked tensor.
        stack: String,
        /// The expert.
        expert: u32,
        /// Byte offset of the read in its file.
        offset: u64,
        /// Bytes wanted.
        wanted: usize,
        /// Bytes the file had.
        got: usize,
    },
    /// A stack registration whose geometry cannot be right.
    #[error("expert stack {stack}: {why}")]
    BadStack {
        /// The stacked tensor.
        stack: String,
        /// What is wrong.
        why: String,
    },
    /// A request the store cannot serve (unregistered layer, expert out of range,
    /// more experts than the layer's slots in one acquire).
    #[error("expert request: {0}")]
    BadRequest(String),
    /// Options that cannot work together.
    #[error("expert store options: {0}")]
    BadOptions(String),
    /// A malformed trace or histogram file.
    #[error("{path}:{line}: {why}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        why: String,
    },
}

impl ExpertError {
    pub(crate) fn io(path: impl Into<PathBuf>, what: &'static str, e: &std::io::Error) -> Self {
        ExpertError::Io {
            path: path.into(),
            what,
            message: e.to_string(),
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = ExpertError> = std::result::Result<T, E>;
