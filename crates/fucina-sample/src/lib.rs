//! Token sampling with llama.cpp's exact semantics (spec §13.6): the sampler
//! sees one logits row and the token history, nothing about models.
//!
//! # The pipeline
//!
//! The order is llama-cpp-python 0.3.36's (`Llama._init_sampler` plus
//! `create_completion`'s logit-bias processor):
//!
//! 1. [`LogitProcessor`]s, in slice order (llama-cpp-python's `logits_processor`
//!    list is the first sampler of its chain);
//! 2. `logit_bias` (llama-cpp-python appends its bias processor after the user's);
//! 3. repetition penalties (`repeat_penalty`, `frequency_penalty`,
//!    `presence_penalty` over the last `repeat_last_n` counted tokens);
//! 4. greedy (`temperature <= 0`): the first argmax, no draw. Otherwise
//!    top-k → typical → top-p → min-p (all with `min_keep = 1`, as
//!    llama-cpp-python passes) → temperature → softmax and one draw; or, with
//!    `mirostat_mode` 1 or 2, llama.cpp's Mirostat v1 / v2 in place of those
//!    filters (llama-cpp-python's chain: no temperature), whose running `mu`
//!    the sampler keeps for the generation.
//!
//! Each filter replays the llama.cpp sampler of the same name, including the
//! edge cases: `top_k <= 0` is off and a larger-than-vocabulary `top_k` keeps
//! everything; `top_p >= 1`, `typical_p >= 1`, `min_p <= 0` are off; tokens
//! tied at a cut are kept or dropped exactly as llama.cpp's libstdc++ sorts
//! leave them (replayed move for move: this is the Linux/GCC build's
//! behaviour; a libc++ build of llama.cpp breaks ties differently); top-p's
//! denominator is llama.cpp's f32 running sum over the *whole* surviving set
//! (not the true sum: on real rows it is up to 0.07% low, and that moves the
//! cut), and its cut walks llama.cpp's 256-token window and then its full
//! sort as far as the mass needs (nothing is clipped). Probabilities are
//! llama.cpp's dist sampler's: f32 `expf`, an f64 sum. Tokens llama.cpp keeps
//! at probability 0 (say -inf logits inside a top-k) are kept here too.
//!
//! [`Sampler::candidates`] returns the kept set sorted by logit descending;
//! where llama.cpp's chain leaves it sorted (any active top-k or top-p) that
//! is llama.cpp's own order, ties included, otherwise ties go by id.
//!
//! # Cost
//!
//! Only the first active filter reads the whole row, 16 logits at a time, and
//! nothing materialises the vocabulary as candidates while a filter keeps a
//! few of them: on a 262,144-token Gemma 3 row the defaults cost ~60 µs and
//! top-p without top-k ~0.2 ms (`examples/sample_bench.rs`). `typical_p < 1`
//! without top-k sorts the whole vocabulary, as llama.cpp does.

//! # Penalties and the history
//!
//! llama.cpp keeps the last `repeat_last_n` *accepted* tokens in a ring
//! buffer and counts occurrences there. Here the counted tokens are
//! `history[penalty_start..]` and the window is their last `repeat_last_n`
//! (`-1`: all of them). llama-cpp-python accepts only the tokens it sampled in
//! the current `generate` call, never the prompt: set
//! [`Sampler::set_penalty_start`] to the prompt length to match it. The
//! default start, 0, counts the prompt too (llama.cpp's CLI behaviour).
//!
//! # Defaults
//!
//! [`SamplingParams::default`] is llama-cpp-python's `create_completion`:
//! temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, typical_p 1,
//! repeat_penalty 1, presence and frequency 0, repeat_last_n 64
//! (`last_n_tokens_size`), no bias; the seed is [`DEFAULT_SEED`].
//!
//! # Deviations, all on inputs where llama.cpp has no sensible answer
//!
//! - temperature < 0 is greedy (llama-cpp-python samples the unfiltered
//!   softmax at temperature 1 there);
//! - a NaN logit bans its token and +inf is treated as f32::MAX (llama.cpp
//!   computes NaN probabilities); if temperature overflows kept logits to
//!   +inf, those tokens share the mass equally;
//! - every logit -inf/NaN is [`SampleError::AllTokensMasked`], not a
//!   garbage draw.
//!
//! # The draw
//!
//! llama.cpp's, draw for draw: [`Rng`] is its `std::mt19937` (seeded with the
//! seed modulo 2^32) and [`Rng::next_f64`] libstdc++'s `generate_canonical`. One
//! `u` per sampled token: the `dist` sampler's candidate, in llama.cpp's array
//! order (sorted when a filter sorted it, else the vocabulary's), whose running
//! f64 sum of `expf(l - max)` first reaches `u` times their sum; Mirostat's via
//! `std::discrete_distribution` (no draw when one candidate is left). So a seed
//! gives llama-cpp-python's tokens, on every platform.
//!
//! ```
//! use fucina_sample::{Sampler, SamplingParams};
//! let mut s = Sampler::new(SamplingParams::default(), 4)?;
//! let mut logits = [0.5, 3.0, 2.9, -1.0];
//! let tok = s.sample(&mut logits, &[], &mut [])?;
//! assert!(tok == 1 || tok == 2);
//! # Ok::<(), fucina_sample::SampleError>(())
//! ```

mod bucket;
mod chain;
mod error;
mod params;
mod penalty;
mod processor;
mod reasoning_budget;
mod rng;
mod row;
mod sampler;
mod stdsort;

pub use error::SampleError;
pub use params::{SamplingParams, DEFAULT_SEED};
pub use processor::LogitProcessor;
pub use reasoning_budget::{BudgetState, ReasoningBudget};
pub use rng::Rng;
pub use row::argmax;
pub use sampler::Sampler;

/// One kept token: llama.cpp's `llama_token_data`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// Logit after penalties, bias and temperature.
    pub logit: f32,
    /// Probability the draw gives it (the kept set sums to 1).
    pub p: f32,
}
