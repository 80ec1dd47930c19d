//! Lockstep decoding of several generations: one batched forward per step for every
//! stream that is decoding, prefills run per stream, each stream sampled from its own
//! row with its own sampler, stop rules and history.
//!
//! The batched forward runs with pinned numerics ([`SeqPool::eval_batch`]), so a
//! stream's tokens are exactly those it would produce alone. A stream's own failure
//! (a prefill that does not fit, a sampler or processor error) ends that stream
//! only; a failure of the shared forward fails the step for all.

use crate::error::Result;
use crate::generation::{Generation, Step};
use crate::pool::SeqPool;

/// One step of each of `gens` (generations on distinct sequences of `pool`): the
/// result per stream, in order (`Ok(None)` for a finished or cancelled one).
pub fn step_batch(
    pool: &mut SeqPool,
    gens: &mut [&mut Generation],
) -> Result<Vec<Result<Option<Step>>>> {
    let mut out: Vec<Option<Result<Option<Step>>>> = (0..gens.len()).map(|_| None).collect();
    let mut decoding = Vec::with_capacity(gens.len());
    let mut items = Vec::with_capacity(gens.len());
    for (i, g) in gens.iter_mut().enumerate() {
        if g.is_finished() || g.check_cancel() {
            out[i] = Some(Ok(None));
        } else if let Err(e) = g.fast_forward() {
            out[i] = Some(Err(e));
        } else if let (false, [token]) = (g.has_queued(), g.pending()) {
            let token = *token;
            decoding.push(i);
            items.push((g.seq(), token));
        } else {
            // A prefill (or a first step): alone, exactly as a sequential step.
            out[i] = Some(g.step(pool, &mut [], &mut |_, _| {}));
        }
    }
    if !items.is_empty() {
        let rows = pool.eval_batch(&items)?;
        let n_vocab = rows.len() / items.len();
        for (row, &i) in rows.chunks_exact_mut(n_vocab).zip(&decoding) {
            out[i] = Some(gens[i].decide(row, &mut []));
        }
    }
    Ok(out.into_iter().map(|r| r.unwrap_or(Ok(None))).collect())
}
