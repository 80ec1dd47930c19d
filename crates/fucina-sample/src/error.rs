//! The crate's one error type: every way a sampling call can refuse its input.

/// Why sampling could not produce a token. Display strings are user-facing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SampleError {
    /// A [`crate::SamplingParams`] field (or the vocabulary size) is out of its domain.
    #[error("invalid sampling parameter `{field}`: {message}")]
    InvalidParam {
        /// The field's name as spelled in `SamplingParams` (or `n_vocab`).
        field: &'static str,
        /// What is wrong, including the offending value.
        message: String,
    },
    /// After processors, logit bias and penalties no token has a finite or +inf logit.
    #[error("every token is masked: all logits are -inf or NaN after processors, logit bias and penalties")]
    AllTokensMasked,
    /// The logits row does not have one entry per vocabulary token.
    #[error(
        "logits row has {got} entries but the sampler was built for a vocabulary of {expected}"
    )]
    LogitsLength {
        /// The sampler's vocabulary size.
        expected: usize,
        /// The row's length.
        got: usize,
    },
    /// A [`crate::LogitProcessor`] failed; the message is the processor's own.
    #[error("logit processor failed: {0}")]
    Processor(String),
    /// A constraint (a grammar) cannot go on from the tokens committed so far: what it
    /// still requires is more than the vocabulary can spell or than its parser's limits
    /// allow. The message names the constraint and says why.
    #[error("{0}")]
    Constraint(String),
}
