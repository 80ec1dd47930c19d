//! The hook through which grammars, constraints and custom rules shape a logits row.

use crate::SampleError;

/// Something that edits the logits before the sampling chain sees them.
///
/// Processors run first, in slice order, before logit bias and penalties, as
/// llama-cpp-python's `logits_processor` list runs first in its sampler chain.
/// [`crate::Sampler`] only calls [`LogitProcessor::process`]; the owner of the
/// token loop calls `commit`, `reset`, `forced_tokens` and `valid_prefix_len`,
/// because only it knows which sampled token is kept (speculative drafts can be
/// rejected after sampling).
pub trait LogitProcessor: Send {
    /// Mutate the logits row in place (set -inf to ban). `history` = every token so far (prompt + generated).
    fn process(&mut self, logits: &mut [f32], history: &[u32]) -> Result<(), SampleError>;
    /// The token that was committed after this step.
    fn commit(&mut self, _token: u32) {}
    /// Start a new turn/sequence.
    fn reset(&mut self) {}
    /// Tokens the processor forces next without sampling (grammar fast-forward); default none.
    fn forced_tokens(&mut self, _history: &[u32]) -> Vec<u32> {
        Vec::new()
    }
    /// How many of `draft` the processor would accept in order (speculative drafts); default all.
    fn valid_prefix_len(&mut self, _history: &[u32], draft: &[u32]) -> usize {
        draft.len()
    }
}
