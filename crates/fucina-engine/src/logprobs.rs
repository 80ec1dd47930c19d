//! Log-probabilities under the model's own distribution (the raw logits'
//! log-softmax), for OpenAI's `logprobs`: per generated token, and for a prompt's
//! tokens (`echo`).

use crate::error::{invalid, Result};
use crate::pool::SeqPool;

/// Most alternatives a token reports (OpenAI allows up to 20 for chat and 5 for
/// completions; this leaves room without letting a request ask for the vocabulary).
pub const MAX_TOP_LOGPROBS: usize = 100;

/// Prompt rows evaluated per forward by [`prompt_logprobs`]: bounds the logits held
/// at once (64 × 262,144 floats = 64 MiB for Gemma's vocabulary).
const PROMPT_ROWS: usize = 64;

/// A token's log-probability under the model and its top alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    /// Log-probability of the token.
    pub logprob: f32,
    /// The most likely tokens with their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Log-probability of `token` and the `n` most likely tokens under the softmax of
/// `logits` (computed in f64; ties ordered by id).
pub fn log_probs(logits: &[f32], token: u32, n: usize) -> TokenLogprobs {
    let max = logits
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .filter(|v| !v.is_nan())
        .map(|&v| f64::from(v - max).exp())
        .sum();
    let lse = f64::from(max) + sum.ln();
    let lp = |v: f32| (f64::from(v) - lse) as f32;
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
    if n > 0 {
        for (i, &v) in logits.iter().enumerate() {
            if v.is_nan() || (top.len() == n && v <= top[n - 1].1) {
                continue;
            }
            let at = top.partition_point(|&(_, w)| w >= v);
            top.insert(at, (i as u32, v));
            top.truncate(n);
        }
    }
    TokenLogprobs {
        logprob: logits
            .get(token as usize)
            .map_or(f32::NEG_INFINITY, |&v| lp(v)),
        top: top.into_iter().map(|(i, v)| (i, lp(v))).collect(),
    }
}

/// For every prompt token after the first, its log-probability given the tokens
/// before it and the `n` most likely alternatives (`tokens.len() - 1` entries),
/// evaluated on a temporary sequence of `pool`.
pub fn prompt_logprobs(pool: &mut SeqPool, tokens: &[u32], n: usize) -> Result<Vec<TokenLogprobs>> {
    if n > MAX_TOP_LOGPROBS {
        return Err(invalid(
            "logprobs",
            format!("{n} alternatives requested; at most {MAX_TOP_LOGPROBS}"),
        ));
    }
    if tokens.len() < 2 {
        return Ok(Vec::new());
    }
    let vocab = pool.model().config().n_vocab;
    let seq = pool.alloc()?;
    let mut out = Vec::with_capacity(tokens.len() - 1);
    let inputs = &tokens[..tokens.len() - 1];
    let mut result = Ok(());
    for (ci, chunk) in inputs.chunks(PROMPT_ROWS).enumerate() {
        match pool.eval_all(seq, chunk) {
            Ok(rows) => {
                for (r, row) in rows.chunks_exact(vocab).enumerate() {
                    let next = tokens[ci * PROMPT_ROWS + r + 1];
                    out.push(log_probs(row, next, n));
                }
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    pool.remove(seq);
    result.map(|()| out)
}
