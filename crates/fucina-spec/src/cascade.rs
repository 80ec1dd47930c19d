//! `SpeculationIndex` (spec §13.9.4): the draft source a generation uses, composing
//! the conversation's own suffix automaton over every committed token, frozen
//! reference documents (the RAG seam: [`SpeculationIndex::add_reference`]) and the
//! token-recycling matrix as the fallback.
//!
//! Policy: the source with the longest current match wins (ties: the conversation,
//! then the first-added reference), with a budget of `beta · (1 + match_len)` tokens;
//! matches shorter than `min_match` fall back to the recycling chain (at most
//! `recycling_chain` tokens). Each source keeps a rolling acceptance over its last
//! [`GATE_WINDOW`] drafted tokens, settled when the next committed tokens arrive
//! (their common prefix with the draft): below `mute_acceptance` the source is muted
//! for `mute_commits` committed tokens, then probed again. Muted sources keep
//! observing, so they stay in sync.

use std::collections::VecDeque;

use crate::recycling::Recycling;
use crate::sam::{Cursor, SamIndex};
use crate::{DraftSource, TopKRow};

/// Drafted tokens each source's acceptance gate remembers.
pub const GATE_WINDOW: usize = 64;

/// A source's rolling acceptance.
#[derive(Clone, Debug, Default)]
struct Gate {
    /// (drafted, accepted) per settled draft, covering about `GATE_WINDOW` drafted.
    window: VecDeque<(usize, usize)>,
    drafted: usize,
    accepted: usize,
    muted_until: u64,
}

impl Gate {
    fn muted(&self, commits: u64) -> bool {
        commits < self.muted_until
    }

    fn record(
        &mut self,
        drafted: usize,
        accepted: usize,
        commits: u64,
        mute_below: f64,
        mute_for: u64,
    ) {
        self.window.push_back((drafted, accepted));
        self.drafted += drafted;
        self.accepted += accepted;
        while self.drafted - self.window.front().map_or(0, |w| w.0) >= GATE_WINDOW {
            let (d, a) = self.window.pop_front().unwrap_or_default();
            self.drafted -= d;
            self.accepted -= a;
        }
        if self.drafted >= GATE_WINDOW / 2
            && (self.accepted as f64) < mute_below * self.drafted as f64
        {
            self.muted_until = commits + mute_for;
            self.window.clear();
            self.drafted = 0;
            self.accepted = 0;
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Conversation,
    Reference(usize),
    Recycling,
}

#[derive(Clone, Debug)]
struct FrozenRef {
    index: SamIndex,
    cursor: Cursor,
    gate: Gate,
}

/// The cascade of draft sources over one stream.
#[derive(Clone, Debug)]
pub struct SpeculationIndex {
    conversation: SamIndex,
    conversation_gate: Gate,
    references: Vec<FrozenRef>,
    recycling: Recycling,
    recycling_gate: Gate,
    pending: Option<(Source, Vec<u32>)>,
    commits: u64,
    /// Draft budget per matched token: `beta · (1 + match_len)` (default 2).
    pub beta: usize,
    /// Shortest match a suffix automaton drafts from (default 2).
    pub min_match: usize,
    /// Longest recycling chain (default 8).
    pub recycling_chain: usize,
    /// A source whose acceptance falls below this is muted (default 0.20).
    pub mute_acceptance: f64,
    /// Committed tokens a muted source waits (default 128).
    pub mute_commits: u64,
    /// Drafts shorter than this are not verified (the decoder's `min_draft`), so they
    /// do not count toward acceptance (default 2).
    pub accounting_min_draft: usize,
}

impl SpeculationIndex {
    /// An empty cascade for a vocabulary of `n_vocab` tokens.
    pub fn new(n_vocab: usize) -> SpeculationIndex {
        let _ = n_vocab; // the recycling rows are sparse: nothing is sized by the vocabulary
        SpeculationIndex {
            conversation: SamIndex::new(),
            conversation_gate: Gate::default(),
            references: Vec::new(),
            recycling: Recycling::new(),
            recycling_gate: Gate::default(),
            pending: None,
            commits: 0,
            beta: 2,
            min_match: 2,
            recycling_chain: 8,
            mute_acceptance: 0.20,
            mute_commits: 128,
            accounting_min_draft: 2,
        }
    }

    /// Index a reference document (frozen), caught up over the stream observed so
    /// far, so it can match the existing context at once.
    pub fn add_reference(&mut self, tokens: &[u32]) {
        let index = SamIndex::frozen(tokens);
        let mut cursor = Cursor::default();
        for &t in self.conversation.tokens() {
            index.advance(&mut cursor, t);
        }
        self.references.push(FrozenRef {
            index,
            cursor,
            gate: Gate::default(),
        });
    }

    /// Drop every reference document.
    pub fn clear_references(&mut self) {
        self.references.clear();
    }

    /// Reference documents indexed.
    pub fn n_references(&self) -> usize {
        self.references.len()
    }

    /// Tokens observed.
    pub fn observed(&self) -> usize {
        self.conversation.token_count()
    }

    fn settle(&mut self, committed: &[u32]) {
        let Some((source, draft)) = self.pending.take() else {
            return;
        };
        if draft.len() < self.accounting_min_draft {
            return;
        }
        let accepted = draft
            .iter()
            .zip(committed)
            .take_while(|(a, b)| a == b)
            .count();
        let (commits, below, wait) = (self.commits, self.mute_acceptance, self.mute_commits);
        let gate = match source {
            Source::Conversation => &mut self.conversation_gate,
            Source::Reference(i) => &mut self.references[i].gate,
            Source::Recycling => &mut self.recycling_gate,
        };
        gate.record(draft.len(), accepted, commits, below, wait);
    }

    /// A one-line account of the sources: matches, mutes, sizes.
    pub fn summary(&self) -> String {
        let muted = |g: &Gate| {
            if g.muted(self.commits) {
                " (muted)"
            } else {
                ""
            }
        };
        format!(
            "conversation: {} tokens, match {}{}; references: {}; recycling{}",
            self.conversation.token_count(),
            self.conversation.match_len(),
            muted(&self.conversation_gate),
            self.references.len(),
            muted(&self.recycling_gate),
        )
    }
}

impl SpeculationIndex {
    /// The longest current match of an unmuted exact-match source.
    pub fn best_match(&self) -> usize {
        let commits = self.commits;
        let conv = if self.conversation_gate.muted(commits) {
            0
        } else {
            self.conversation.match_len()
        };
        self.references
            .iter()
            .filter(|r| !r.gate.muted(commits))
            .map(|r| r.cursor.len())
            .fold(conv, usize::max)
    }

    /// [`DraftSource::suggest`] under the decoder's economics: exact matches of at
    /// least `min_match` tokens (and this index's own `min_match`), the recycling
    /// fallback only when `guesses` can pay.
    pub fn suggest_with(
        &mut self,
        context: &[u32],
        max: usize,
        min_match: usize,
        guesses: bool,
        out: &mut Vec<u32>,
    ) {
        let start = out.len();
        let commits = self.commits;
        let mut best: Option<(Source, usize)> = None;
        if !self.conversation_gate.muted(commits) {
            best = Some((Source::Conversation, self.conversation.match_len()));
        }
        for (i, r) in self.references.iter().enumerate() {
            if !r.gate.muted(commits) && best.is_none_or(|(_, m)| r.cursor.len() > m) {
                best = Some((Source::Reference(i), r.cursor.len()));
            }
        }
        let source = match best {
            Some((source, m)) if m >= self.min_match.max(min_match) => {
                let budget = max.min(self.beta * (1 + m));
                match source {
                    Source::Reference(i) => {
                        let r = &self.references[i];
                        r.index.draft_from(r.cursor, budget, out);
                    }
                    _ => {
                        self.conversation.draft(budget, out);
                    }
                }
                source
            }
            _ if guesses && !self.recycling_gate.muted(commits) => {
                self.recycling
                    .suggest(context, max.min(self.recycling_chain), out);
                Source::Recycling
            }
            _ => return,
        };
        self.pending = (out.len() > start).then(|| (source, out[start..].to_vec()));
    }
}

impl DraftSource for SpeculationIndex {
    fn suggest(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>) {
        self.suggest_with(context, max, self.min_match, true, out);
    }

    fn observe(&mut self, committed: &[u32]) {
        if committed.is_empty() {
            return;
        }
        self.settle(committed);
        self.commits += committed.len() as u64;
        self.conversation.append(committed);
        for r in &mut self.references {
            for &t in committed {
                r.index.advance(&mut r.cursor, t);
            }
        }
        self.recycling.observe(committed);
    }

    fn wants_topk(&self) -> bool {
        true
    }

    fn observe_topk(&mut self, rows: &[TopKRow<'_>]) {
        self.recycling.observe_topk(rows);
    }

    fn truncate_pending(&mut self, new_len: usize) {
        if let Some((_, draft)) = &mut self.pending {
            draft.truncate(new_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observe_committed_tokens_then_suggest_from_the_longest_match() {
        let mut index = SpeculationIndex::new(1024);
        index.observe(&[1, 2, 3, 4, 1, 2]);
        let mut out = Vec::new();
        index.suggest(&[1, 2, 3, 4, 1, 2], 16, &mut out);
        assert!(out.len() >= 2);
        assert_eq!(&out[..2], &[3, 4]);
        // A reference with a longer match wins.
        index.add_reference(&[9, 3, 4, 1, 2, 7, 7, 7]);
        index.observe(&[3]);
        out.clear();
        index.suggest(&[1, 2, 3, 4, 1, 2, 3], 16, &mut out);
        assert_eq!(out.first(), Some(&4));
        assert!(index.wants_topk());
    }

    #[test]
    fn a_source_that_keeps_missing_is_muted_then_probed_again() {
        let mut index = SpeculationIndex::new(64);
        index.mute_commits = 10;
        index.observe_topk(&[
            TopKRow {
                token: 5,
                topk: &[6],
            },
            TopKRow {
                token: 6,
                topk: &[5],
            },
        ]);
        let mut muted_at = None;
        for step in 0..200 {
            let mut out = Vec::new();
            index.suggest(&[5], 8, &mut out);
            if out.is_empty() {
                muted_at = Some(step);
                break;
            }
            // The recycling chain 6, 5, 6, ... is never what gets committed.
            index.observe(&[40 + (step % 7) as u32]);
            index.observe_topk(&[TopKRow {
                token: 5,
                topk: &[6],
            }]);
        }
        let at = muted_at.expect("the recycling source was muted");
        assert!(at < 64);
        for _ in 0..10 {
            index.observe(&[1]);
        }
        let mut out = Vec::new();
        index.observe_topk(&[TopKRow {
            token: 1,
            topk: &[2],
        }]);
        index.suggest(&[1], 8, &mut out);
        assert!(!out.is_empty(), "re-probed after mute_commits");
    }
}
