//! How the stream's short contexts have continued: for each run of [`ORDER`] committed
//! tokens, how often each token followed it. An exact-match draft copies what followed
//! the longest earlier match; where the same short context has gone on in different
//! ways (a loop with variations, a list, a table), these counts say how likely the
//! copied token is, and a draft is cut where the chance that all of it up to a token is
//! accepted no longer pays for that token's verify row.

use crate::hash::FastMap;

/// Tokens of context the counts are keyed by.
pub const ORDER: usize = 4;

/// Weight of the draft's own evidence (the earlier match it copies) beside the counts:
/// a context seen once, followed by another token, leaves the drafted token a chance
/// of `PRIOR / (1 + PRIOR)`.
const PRIOR: f64 = 1.0;

/// Continuation counts of the stream's `ORDER`-token contexts.
#[derive(Clone, Debug, Default)]
pub struct Branches {
    /// (context, next token) -> times seen.
    next: FastMap<(u64, u32), u32>,
    /// context -> times seen with any next token.
    total: FastMap<u64, u32>,
}

fn key(ctx: &[u32]) -> u64 {
    ctx.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| {
        (h ^ u64::from(t))
            .wrapping_mul(0x0100_0000_01b3)
            .rotate_left(17)
    })
}

impl Branches {
    /// Count the last token of `stream` after the `ORDER` before it.
    pub fn observe_last(&mut self, stream: &[u32]) {
        let n = stream.len();
        if n <= ORDER {
            return;
        }
        let k = key(&stream[n - 1 - ORDER..n - 1]);
        *self.next.entry((k, stream[n - 1])).or_insert(0) += 1;
        *self.total.entry(k).or_insert(0) += 1;
    }

    /// The chance that `token` follows the context `ctx` (its last `ORDER` tokens), from
    /// the counts and the draft's own evidence.
    fn chance(&self, ctx: &[u32], token: u32) -> f64 {
        if ctx.len() < ORDER {
            return 1.0;
        }
        let k = key(&ctx[ctx.len() - ORDER..]);
        let total = self.total.get(&k).copied().unwrap_or(0);
        if total == 0 {
            return 1.0;
        }
        let c = self.next.get(&(k, token)).copied().unwrap_or(0);
        (f64::from(c) + PRIOR) / (f64::from(total) + PRIOR)
    }

    /// How much of `draft` (continuing `stream`) to verify: the longest prefix whose
    /// every token's cumulative chance of acceptance stays at least `floor`.
    pub fn confident_len(&self, stream: &[u32], draft: &[u32], floor: f64) -> usize {
        // The stream's last `ORDER` tokens, then the draft: token `i`'s context ends at
        // `tail + i`.
        let tail = stream.len().min(ORDER);
        let seq: Vec<u32> = stream[stream.len() - tail..]
            .iter()
            .chain(draft)
            .copied()
            .collect();
        let mut cum = 1.0;
        for (i, &t) in draft.iter().enumerate() {
            cum *= self.chance(&seq[..tail + i], t);
            if cum < floor {
                return i;
            }
        }
        draft.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_a_draft_where_a_context_has_gone_on_otherwise() {
        let mut b = Branches::default();
        // "1 2 3 4" was followed by 5 once and by 9 eight times.
        let mut stream = Vec::new();
        for i in 0..9u32 {
            stream.extend_from_slice(&[1, 2, 3, 4, if i == 0 { 5 } else { 9 }, 7]);
        }
        for n in 1..=stream.len() {
            b.observe_last(&stream[..n]);
        }
        let ctx = [7, 1, 2, 3, 4];
        // Drafting 5 after "1 2 3 4": (1 + 1) / (9 + 1) < 0.3; 9 is likely.
        assert_eq!(b.confident_len(&ctx, &[5, 7], 0.3), 0);
        assert_eq!(b.confident_len(&ctx, &[9, 7], 0.3), 2);
        // Unseen contexts keep the whole draft.
        assert_eq!(b.confident_len(&[40, 41, 42, 43], &[1, 2, 3], 0.3), 3);
    }
}
