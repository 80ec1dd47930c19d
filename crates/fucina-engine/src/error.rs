//! The one error type of `fucina-engine`: model, sampler and tokenizer errors pass
//! through; the engine's own are bad arguments and misuse of sequences.

use fucina_model::ModelError;
use fucina_sample::SampleError;
use fucina_tokenizer::TokenizerError;

/// Errors from the sequence pool, sessions and generations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The forward or the KV cache failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Bad sampling parameters, or a logit processor failed or masked every token.
    #[error(transparent)]
    Sample(#[from] SampleError),
    /// A token id the tokenizer does not know.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// An argument out of range, named with its value.
    #[error("invalid {field}: {message}")]
    InvalidArgument {
        /// The argument.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The prompt does not fit the context.
    #[error("the prompt has {prompt} tokens but the context holds {n_ctx}")]
    PromptTooLong {
        /// Tokens in the prompt.
        prompt: usize,
        /// Context capacity.
        n_ctx: usize,
    },
    /// A KV persistence file could not be read or written.
    #[error("KV persistence file {}: {message}", path.display())]
    Persist {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A scheduler's queue is full: the request was not queued (retry later).
    #[error("the server is busy: {capacity} requests are already waiting")]
    QueueFull {
        /// Requests the queue holds.
        capacity: usize,
    },
    /// The scheduler could not run the request (it shut down, or hit an internal
    /// error); not the request's fault.
    #[error("scheduler: {0}")]
    Scheduler(String),
    /// A sequence id that is not (or no longer) in the pool.
    #[error("sequence {0} is not in the pool")]
    UnknownSequence(usize),
}

/// `Result` with [`EngineError`].
pub type Result<T> = std::result::Result<T, EngineError>;

/// An [`EngineError::InvalidArgument`].
pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> EngineError {
    EngineError::InvalidArgument {
        field,
        message: message.into(),
    }
}
