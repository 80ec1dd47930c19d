//! Token recycling (spec §13.9.3; Luo et al. 2024): for every token, the most recent
//! top-K next-token candidates seen at a verified position whose input it was. Drafting
//! walks the top-1 chain from the last token. Committed bigrams are promoted to slot 0
//! (ground truth beats stale logits). Rows are stored sparsely: only tokens seen cost
//! memory, so a short generation on a 262k vocabulary allocates almost nothing.

use crate::hash::FastMap;
use crate::{DraftSource, TopKRow};

/// The adjacency matrix with `K` candidates per row.
#[derive(Clone, Debug, Default)]
pub struct TokenRecycling<const K: usize> {
    rows: FastMap<u32, [u32; K]>,
    last: Option<u32>,
    /// Longest chain one draft walks (default 8).
    pub max_chain: usize,
}

/// The spec's K = 8.
pub type Recycling = TokenRecycling<8>;

impl<const K: usize> TokenRecycling<K> {
    /// Marks an empty slot.
    pub const SENTINEL: u32 = u32::MAX;

    /// An empty matrix.
    pub fn new() -> Self {
        TokenRecycling {
            rows: FastMap::default(),
            last: None,
            max_chain: 8,
        }
    }

    /// The candidates recorded after `token` (empty when unseen).
    pub fn topk_of(&self, token: u32) -> &[u32] {
        match self.rows.get(&token) {
            Some(row) => {
                let n = row.iter().position(|&t| t == Self::SENTINEL).unwrap_or(K);
                &row[..n]
            }
            None => &[],
        }
    }

    /// Replace `token`'s row with `topk` (its first K).
    pub fn update(&mut self, token: u32, topk: &[u32]) {
        let mut row = [Self::SENTINEL; K];
        for (slot, &t) in row.iter_mut().zip(topk) {
            *slot = t;
        }
        self.rows.insert(token, row);
    }

    fn promote(&mut self, a: u32, b: u32) {
        let row = self.rows.entry(a).or_insert([Self::SENTINEL; K]);
        let at = row
            .iter()
            .position(|&t| t == b || t == Self::SENTINEL)
            .unwrap_or(K - 1);
        row.copy_within(0..at, 1);
        row[0] = b;
    }

    /// Append to `out` the top-1 chain after `last`, up to `max` (and `max_chain`)
    /// tokens, stopping at an unseen row. Returns how many.
    pub fn draft_chain(&self, last: u32, max: usize, out: &mut Vec<u32>) -> usize {
        let mut t = last;
        let mut n = 0;
        while n < max.min(self.max_chain) {
            match self.topk_of(t).first() {
                Some(&next) => {
                    out.push(next);
                    t = next;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }
}

impl<const K: usize> DraftSource for TokenRecycling<K> {
    fn suggest(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>) {
        if let Some(&last) = context.last() {
            self.draft_chain(last, max, out);
        }
    }

    fn observe(&mut self, committed: &[u32]) {
        for &b in committed {
            if let Some(a) = self.last {
                self.promote(a, b);
            }
            self.last = Some(b);
        }
    }

    fn wants_topk(&self) -> bool {
        true
    }

    fn observe_topk(&mut self, rows: &[TopKRow<'_>]) {
        for r in rows {
            self.update(r.token, r.topk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top1_chain_drafting_and_bigram_promotion() {
        let mut rec = Recycling::new();
        rec.update(3, &[7, 9]);
        rec.update(7, &[5]);
        let mut out = Vec::new();
        assert_eq!(rec.draft_chain(3, 4, &mut out), 2);
        assert_eq!(out, [7, 5]);
        rec.observe(&[3, 9]);
        assert_eq!(
            rec.topk_of(3),
            &[9, 7],
            "the committed bigram moves to slot 0"
        );
        rec.observe(&[4]);
        assert_eq!(rec.topk_of(9), &[4]);
        let long: Vec<u32> = (100..120).collect();
        rec.update(1, &long);
        assert_eq!(rec.topk_of(1).len(), 8);
    }
}
