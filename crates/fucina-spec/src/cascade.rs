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
//! for `mute_commits` committed tokens, then probed again, or at once where its match
//! reaches `unmute_match` tokens (the stream repeats itself at length); accepted
//! again, it is unmuted. Muted sources keep observing, so they stay in sync. The
//! decoder cuts an exact-match draft where the stream's short contexts have gone on
//! otherwise too often for the rest to pay for its verify rows
//! ([`SpeculationIndex::confident_len`]).
//!
//! A copy survives small edits: once the conversation matches [`FOLLOW_MIN`] tokens of
//! earlier text, the index follows where the copy reads, and when the stream leaves it
//! (an edited token, a prompt cut inside a word that the model re-spells) it looks for
//! the stream coming back within [`RESYNC_SKIP`] tokens of where it left: the next
//! token where the copy expected it (an insertion) or as many tokens on (a
//! substitution), or two tokens in a row anywhere in the window. Back in step, it
//! drafts the copy's continuation at once instead of waiting for a suffix match to
//! grow long enough again.

use std::collections::VecDeque;

use crate::branches::Branches;
use crate::recycling::Recycling;
use crate::sam::{Cursor, SamIndex};
use crate::{DraftSource, TopKRow};

/// Drafted tokens each source's acceptance gate remembers.
pub const GATE_WINDOW: usize = 64;

/// A suffix match this long marks the stream as copying earlier text.
pub const FOLLOW_MIN: usize = 8;

/// How far past the token where the stream left a copy it may come back (skipped or
/// edited source tokens), and how many tokens off the copy before it is given up.
pub const RESYNC_SKIP: usize = 16;

/// Where the stream copies earlier text of itself, followed across small edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Follow {
    /// Stream index of the token the copy expects next.
    next: usize,
    /// Tokens matched in a row since the copy was found or found again.
    run: usize,
    /// Tokens observed since the copy last matched (0: in step).
    lost: usize,
}

impl Follow {
    /// Track the copy over one more observed token `t` (after `prev`), the copied text
    /// being `source[..limit]`: `false` when the copy is lost for good.
    fn step(&mut self, source: &[u32], limit: usize, t: u32, prev: Option<u32>) -> bool {
        if self.lost == 0 && self.next < limit && source[self.next] == t {
            self.next += 1;
            self.run += 1;
            return true;
        }
        self.lost += 1;
        self.run = 0;
        let (next, lost) = (self.next, self.lost);
        let two = |p: usize| p > next && lost >= 2 && Some(source[p - 1]) == prev;
        // Back in step: right where the copy expected (an insertion), `lost - 1` tokens
        // on (as many tokens replaced), or anywhere in the window with the token before
        // matching too.
        let end = (next + lost + RESYNC_SKIP).min(limit);
        let back =
            (next..end).find(|&p| source[p] == t && (p == next || p + 1 == next + lost || two(p)));
        if let Some(p) = back {
            *self = Follow {
                next: p + 1,
                run: if two(p) { 2 } else { 1 },
                lost: 0,
            };
            return true;
        }
        lost <= RESYNC_SKIP
    }

    /// Follow a copy over one observed token: found afresh where a match of `m` tokens
    /// (continuing at `found`) is long and longer than the copy's own run, stepped
    /// otherwise; dropped when lost.
    fn track(
        follow: &mut Option<Follow>,
        m: usize,
        found: Option<usize>,
        source: &[u32],
        limit: usize,
        t: u32,
        prev: Option<u32>,
    ) {
        if m >= FOLLOW_MIN && follow.is_none_or(|f| f.lost > 0 || m > f.run) {
            *follow = found.map(|next| Follow {
                next,
                run: m,
                lost: 0,
            });
        } else if let Some(f) = follow {
            if !f.step(source, limit, t, prev) {
                *follow = None;
            }
        }
    }

    /// The copy's continuation, up to `max` tokens of `source`.
    fn draft(&self, source: &[u32], max: usize, out: &mut Vec<u32>) {
        let stop = source.len().min(self.next + max);
        out.extend_from_slice(&source[self.next.min(stop)..stop]);
    }
}

/// Weight of a source's earlier drafts at each new one in its first-token record
/// ([`SpeculationIndex::guess_hit_rate`]: about the last ten drafts count), and per
/// [`HIT_IDLE`] committed tokens without a draft (a record that stopped the guesses
/// fades back toward the prior, so they are tried again now and then).
const HIT_DECAY: f64 = 0.9;

/// Committed tokens per [`HIT_DECAY`] step of an idle record.
const HIT_IDLE: u64 = 32;

/// The first-token record's prior: this many hits in two drafts (a chance of 0.25
/// before any draft is settled). At 0.25 a first guess is still tried where rows are
/// cheap, and one miss stops the guesses where three did at the former even prior:
/// Gemma 3 270M's guesses seldom land (the code and story tasks of
/// `benches/speculative.py`, alternated in one process on 2 cores: 3.51 -> 3.69x and
/// 1.88 -> 1.97x plain, the story 2.19 -> 2.27 tokens a step; the others unchanged),
/// and where they do (the Qwen3-4B shape's) the first hit lifts the record at once.
const HIT_PRIOR: f64 = 0.5;

/// A source's rolling acceptance.
#[derive(Clone, Debug, Default)]
struct Gate {
    /// (drafted, accepted) per settled draft, covering about `GATE_WINDOW` drafted.
    window: VecDeque<(usize, usize)>,
    drafted: usize,
    accepted: usize,
    muted_until: u64,
    /// Settled drafts and those whose first token was accepted, decayed by
    /// [`HIT_DECAY`], as of commit `probed_at`.
    probes: f64,
    hits: f64,
    probed_at: u64,
}

impl Gate {
    fn muted(&self, commits: u64) -> bool {
        commits < self.muted_until
    }

    /// Whether a source with this gate may draft from a match of `len` tokens: unmuted,
    /// or muted but matching at least `unmute` tokens (the text repeats at length: the
    /// likeliest draft there is, whatever the source missed before).
    fn open(&self, commits: u64, len: usize, unmute: usize) -> bool {
        !self.muted(commits) || len >= unmute
    }

    /// How much of the first-token record is left at commit `commits`.
    fn fade(&self, commits: u64) -> f64 {
        let idle = commits.saturating_sub(self.probed_at) / HIT_IDLE;
        HIT_DECAY.powi(i32::try_from(idle).unwrap_or(i32::MAX))
    }

    /// The chance that the next draft's first token is accepted: the faded record with
    /// [`HIT_PRIOR`] hits in two drafts as the prior.
    fn hit_rate(&self, commits: u64) -> f64 {
        let f = self.fade(commits);
        (self.hits * f + HIT_PRIOR) / (self.probes * f + 2.0)
    }

    fn record(
        &mut self,
        drafted: usize,
        accepted: usize,
        commits: u64,
        mute_below: f64,
        mute_for: u64,
    ) {
        let fade = self.fade(commits) * HIT_DECAY;
        self.probes = self.probes * fade + 1.0;
        self.hits = self.hits * fade + f64::from(u8::from(accepted > 0));
        self.probed_at = commits;
        self.window.push_back((drafted, accepted));
        self.drafted += drafted;
        self.accepted += accepted;
        while self.drafted - self.window.front().map_or(0, |w| w.0) >= GATE_WINDOW {
            let (d, a) = self.window.pop_front().unwrap_or_default();
            self.drafted -= d;
            self.accepted -= a;
        }
        if self.drafted >= GATE_WINDOW / 2 {
            if (self.accepted as f64) < mute_below * self.drafted as f64 {
                self.muted_until = commits + mute_for;
                self.window.clear();
                self.drafted = 0;
                self.accepted = 0;
            } else {
                // Drafting again (from a long match while muted) and accepted: unmuted.
                self.muted_until = 0;
            }
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
    /// The copy of this document the stream is making, if any.
    follow: Option<Follow>,
}

/// The cascade of draft sources over one stream.
#[derive(Clone, Debug)]
pub struct SpeculationIndex {
    conversation: SamIndex,
    conversation_gate: Gate,
    references: Vec<FrozenRef>,
    recycling: Recycling,
    recycling_gate: Gate,
    branches: Branches,
    pending: Option<(Source, Vec<u32>)>,
    /// The copy of earlier conversation text the stream is making, if any.
    follow: Option<Follow>,
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
    /// A muted exact-match source drafts all the same from a match this long (default
    /// 16): a stream that has started to repeat itself (a model caught in a loop, a
    /// quoted passage) is the likeliest place for a draft to be accepted.
    pub unmute_match: usize,
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
            branches: Branches::default(),
            pending: None,
            follow: None,
            commits: 0,
            beta: 2,
            min_match: 2,
            recycling_chain: 8,
            mute_acceptance: 0.20,
            mute_commits: 128,
            unmute_match: 16,
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
            follow: None,
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

    /// The chance that a guessed (recycling) draft's first token is accepted: the
    /// source's recent record, decayed per draft and while no draft is made, over a
    /// prior of 0.25 (half a hit in two drafts). The decoder
    /// lets guesses draft only where this pays for their verify rows
    /// (`CostGate::guesses_pay`).
    pub fn guess_hit_rate(&self) -> f64 {
        self.recycling_gate.hit_rate(self.commits)
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
        let copy = match self.follow {
            Some(f) if f.lost == 0 => format!(", copying (run {})", f.run),
            Some(f) => format!(", copy lost {} tokens ago", f.lost),
            None => String::new(),
        };
        format!(
            "conversation: {} tokens, match {}{}{}; references: {}; recycling{}",
            self.conversation.token_count(),
            self.conversation.match_len(),
            copy,
            muted(&self.conversation_gate),
            self.references.len(),
            muted(&self.recycling_gate),
        )
    }
}

impl SpeculationIndex {
    /// The longest current match of an exact-match source that may draft (unmuted, or
    /// muted with a match of at least `unmute_match`).
    pub fn best_match(&self) -> usize {
        self.best_source().map_or(0, |(_, m)| m)
    }

    /// The exact-match source that may draft with the longest current match, and its
    /// length (ties: the conversation, then the first-added reference).
    fn best_source(&self) -> Option<(Source, usize)> {
        let (commits, unmute) = (self.commits, self.unmute_match);
        let mut best: Option<(Source, usize)> = None;
        let m = self.conversation.match_len();
        if self.conversation_gate.open(commits, m, unmute) {
            best = Some((Source::Conversation, m));
        }
        for (i, r) in self.references.iter().enumerate() {
            let m = r.cursor.len();
            if r.gate.open(commits, m, unmute) && best.is_none_or(|(_, b)| m > b) {
                best = Some((Source::Reference(i), m));
            }
        }
        best
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
        let best = self.best_source();
        // A copy back in step after an edit drafts its continuation where the suffix
        // matches are still too short (the longest run since it was found again; ties:
        // the conversation, then the first reference), under its source's gate.
        let mut copy: Option<(Source, Follow)> = None;
        let live =
            |f: &Option<Follow>, gate: &Gate| f.filter(|f| f.lost == 0 && !gate.muted(commits));
        if let Some(f) = live(&self.follow, &self.conversation_gate) {
            copy = Some((Source::Conversation, f));
        }
        for (i, r) in self.references.iter().enumerate() {
            if let Some(f) = live(&r.follow, &r.gate) {
                if copy.is_none_or(|(_, c)| f.run > c.run) {
                    copy = Some((Source::Reference(i), f));
                }
            }
        }
        let source = match (best, copy) {
            (Some((source, m)), _) if m >= self.min_match.max(min_match) => {
                let budget = max.min(self.beta * (1 + m));
                match source {
                    Source::Reference(i) => {
                        let r = &self.references[i];
                        r.index.draft_from(r.cursor, budget, out);
                    }
                    _ => {
                        let n = self.conversation.draft(budget, out);
                        // The occurrence overlaps the suffix (its continuation ran into
                        // the end of the stream: the text repeats with period `n`): the
                        // copy goes on over the tokens it drafted, as an overlapping
                        // LZ77 copy does, so a loop drafts `budget` tokens, not `n`.
                        let sam = &self.conversation;
                        let budget = budget.min(sam.max_draft);
                        if n > 0 && n < budget && sam.match_next() == Some(sam.tokens().len() - n) {
                            for k in n..budget {
                                out.push(out[start + k % n]);
                            }
                        }
                    }
                }
                source
            }
            (_, Some((source, f))) => {
                let index = match source {
                    Source::Reference(i) => &self.references[i].index,
                    _ => &self.conversation,
                };
                let budget = max.min(self.beta * (1 + f.run)).min(index.max_draft);
                f.draft(index.tokens(), budget, out);
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

    /// How much of the exact-match draft just suggested is worth verifying when a verify
    /// row costs `row_cost` plain steps: where the stream's recent contexts have gone on
    /// in other ways than the draft (a loop with variations), the draft is cut before
    /// the token at which the chance that all of it is accepted falls below the row's
    /// cost ([`Branches`]). Guessed (recycling) drafts are left as they are.
    pub fn confident_len(&self, draft: &[u32], row_cost: f64) -> usize {
        match &self.pending {
            Some((Source::Recycling, _)) | None => draft.len(),
            Some(_) => self
                .branches
                .confident_len(self.conversation.tokens(), draft, row_cost),
        }
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
        for &t in committed {
            let prev = self.conversation.tokens().last().copied();
            self.conversation.append(&[t]);
            self.branches.observe_last(self.conversation.tokens());
            let sam = &self.conversation;
            if sam.is_poisoned() {
                self.follow = None;
            } else {
                let (tokens, m) = (sam.tokens(), sam.match_len());
                let i = tokens.len() - 1;
                Follow::track(&mut self.follow, m, sam.match_next(), tokens, i, t, prev);
            }
            for r in &mut self.references {
                r.index.advance(&mut r.cursor, t);
                let (m, found) = (r.cursor.len(), r.index.cursor_next(r.cursor));
                let tokens = r.index.tokens();
                Follow::track(&mut r.follow, m, found, tokens, tokens.len(), t, prev);
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
    fn the_first_token_record_follows_hits_and_fades_while_idle() {
        let mut g = Gate::default();
        let prior = HIT_PRIOR / 2.0;
        assert!((g.hit_rate(0) - prior).abs() < 1e-12, "the prior");
        g.record(2, 0, 1, 0.2, 128);
        assert!(g.hit_rate(1) < 0.17, "one miss: {}", g.hit_rate(1));
        for c in 2..=3 {
            g.record(2, 0, c, 0.2, 128);
        }
        let missed = g.hit_rate(3);
        assert!(missed < 0.11, "three misses: {missed}");
        assert!(
            g.hit_rate(3 + 31) == missed,
            "unchanged within an idle step"
        );
        let later = g.hit_rate(3 + 4 * HIT_IDLE);
        assert!(later > missed && later < prior, "fading back: {later}");
        g.record(2, 2, 200, 0.2, 128);
        assert!(g.hit_rate(200) > 0.3, "a hit lifts it: {}", g.hit_rate(200));
        for c in 201..210 {
            g.record(2, 2, c, 0.2, 128);
        }
        assert!(g.hit_rate(210) > 0.75, "{}", g.hit_rate(210));
    }

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
    fn a_repeating_stream_drafts_its_period_over_and_over() {
        // One token over and over: the latest earlier occurrence is one back, so the
        // SAM's continuation is one token; the copy runs on to the budget.
        let mut index = SpeculationIndex::new(1024);
        let stream = [5, 8, 8, 8, 8, 8, 8];
        index.observe(&stream);
        let mut out = Vec::new();
        index.suggest_with(&stream, 6, 2, false, &mut out);
        assert_eq!(out, [8; 6]);
        // A period of three.
        let mut index = SpeculationIndex::new(1024);
        let stream = [1, 2, 3, 1, 2, 3, 1, 2];
        index.observe(&stream);
        out.clear();
        index.suggest_with(&stream, 7, 2, false, &mut out);
        assert_eq!(out, [3, 1, 2, 3, 1, 2, 3]);
    }

    /// A long stretch of distinct tokens to copy.
    fn text() -> Vec<u32> {
        (100..140).collect()
    }

    /// An index that saw the text, then a copy of its first `n` tokens.
    fn copying(n: usize) -> (SpeculationIndex, Vec<u32>) {
        let a = text();
        let mut index = SpeculationIndex::new(1024);
        index.observe(&a);
        index.observe(&a[..n]);
        (index, a)
    }

    /// What the index drafts under expensive rows (exact matches of 4, no guesses).
    fn draft(index: &mut SpeculationIndex) -> Vec<u32> {
        let mut out = Vec::new();
        index.suggest_with(&[], 6, 4, false, &mut out);
        out
    }

    #[test]
    fn a_copy_is_followed_across_an_insertion_a_substitution_and_a_deletion() {
        // A prompt cut inside a word: the copy's token 12 comes back re-spelled as two
        // tokens, then the copy goes on where it was expected.
        let (mut index, a) = copying(12);
        index.observe(&[7, 8]);
        assert!(
            draft(&mut index).is_empty(),
            "off the copy: nothing to draft"
        );
        index.observe(&[a[12]]);
        assert_eq!(
            draft(&mut index),
            &a[13..17],
            "back where the copy expected it"
        );

        // One token replaced by another, then the copy again.
        let (mut index, _) = copying(20);
        index.observe(&[9]);
        index.observe(&[a[21]]);
        assert_eq!(draft(&mut index), &a[22..26]);

        // Three source tokens skipped: two tokens in a row further on find it again.
        let (mut index, _) = copying(20);
        index.observe(&[a[23]]);
        assert!(draft(&mut index).is_empty());
        index.observe(&[a[24]]);
        assert_eq!(
            draft(&mut index),
            &a[25..31],
            "two tokens of evidence: budget 6"
        );
        // Drafted tokens committed: the suffix match takes over.
        index.observe(&a[25..31]);
        assert_eq!(draft(&mut index), &a[31..37]);

        // A reference document is followed the same way (it is not in the stream).
        let mut index = SpeculationIndex::new(1024);
        index.add_reference(&a);
        index.observe(&[1, 2, 3]);
        index.observe(&a[..10]);
        index.observe(&[7]);
        assert!(draft(&mut index).is_empty());
        index.observe(&[a[11]]);
        assert_eq!(
            draft(&mut index),
            &a[12..16],
            "the reference's copy, found again"
        );
    }

    #[test]
    fn a_copy_left_for_long_is_dropped_and_short_matches_alone_do_not_draft() {
        let (mut index, a) = copying(20);
        index.observe(&(500..500 + RESYNC_SKIP as u32 + 1).collect::<Vec<_>>());
        index.observe(&[a[20]]);
        assert!(draft(&mut index).is_empty(), "the copy was given up");
        assert!(!index.summary().contains("cop"));

        // A one-token match with no copy behind it drafts nothing where rows are costly.
        let mut index = SpeculationIndex::new(1024);
        index.observe(&[1, 2, 3, 4, 5, 6, 7, 3]);
        assert!(draft(&mut index).is_empty());
    }

    #[test]
    fn a_muted_conversation_drafts_again_once_the_stream_repeats_at_length() {
        let mut index = SpeculationIndex::new(1024);
        let suggest = |index: &mut SpeculationIndex| {
            let mut out = Vec::new();
            index.suggest_with(&[], 16, 2, false, &mut out);
            out
        };
        // Short matches whose continuations always miss: `1 2` is followed by a new token
        // every time, so each draft after `1 2` is wrong from its first token.
        let mut next = 1000;
        let mut drafted = 0;
        // (The summary reads "conversation: .., match M (muted); references ..".)
        while !index.summary().contains("(muted);") {
            for t in [1, 2] {
                index.observe(&[t]);
            }
            drafted += suggest(&mut index).len();
            index.observe(&[next]);
            next += 1;
            assert!(next < 1200, "never muted: {}", index.summary());
        }
        assert!(drafted >= GATE_WINDOW / 2);
        // The stream falls into a loop of period 5: muted, the conversation drafts nothing
        // until its match reaches `unmute_match`, then the loop's continuation.
        let lp = [500u32, 501, 502, 503, 504];
        let mut first = None;
        for i in 0..40 {
            index.observe(&[lp[i % 5]]);
            let m = index.conversation.match_len();
            let d = suggest(&mut index);
            assert_eq!(
                d.is_empty(),
                m < index.unmute_match,
                "step {i}, match {m}: {d:?}"
            );
            assert!(index.best_match() >= index.unmute_match || d.is_empty());
            if !d.is_empty() {
                first.get_or_insert(i);
                let want: Vec<u32> = (1..=d.len()).map(|k| lp[(i + k) % 5]).collect();
                assert_eq!(d, want);
                // Accepted: committed as drafted (the index then settles it).
                index.observe(&d);
                break;
            }
        }
        assert!(first.is_some(), "the loop was never drafted");
        // Accepted drafts unmute it: a short match drafts again.
        for _ in 0..4 {
            let d = suggest(&mut index);
            index.observe(&d);
        }
        assert!(!index.summary().contains("(muted)"), "{}", index.summary());
        index.observe(&[1, 2]);
        assert!(
            !suggest(&mut index).is_empty(),
            "a 2-token match drafts again once unmuted"
        );
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
