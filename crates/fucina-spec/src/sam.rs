//! `SamIndex`: an online suffix automaton over a token stream (spec §13.9.2), the
//! exact-match draft source. Appending a token is O(1) amortized; after each append
//! the index knows the longest suffix of the stream that also occurs ending earlier
//! (the self-excluded match: in a suffix automaton that is the suffix link of the
//! whole stream's state) and where its most recent earlier occurrence ended, so a
//! draft is the tokens that followed that occurrence.
//!
//! Frozen mode turns the index into a read-only reference document: external
//! [`Cursor`]s walk it with another stream's tokens (the RAG seam). A failed append
//! (a stream past [`SamIndex::MAX_STREAM_LEN`], or an append to a frozen index)
//! poisons the index: it drafts nothing from then on, so a half-applied append can
//! never serve a draft.

use crate::hash::FastMap;

const NONE: u32 = u32::MAX;

/// States whose most-recent-occurrence mark one append refreshes, walking up the
/// suffix links from the match: the marks of deeper states (only on long repeats)
/// may lag, which makes a draft follow an older occurrence, never a wrong one.
const RECENT_WALK: usize = 64;

/// A match position in a frozen index: the automaton state and the matched length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    state: u32,
    len: u32,
}

impl Cursor {
    /// Tokens matched (the length of the walked stream's suffix found in the index).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether nothing is matched.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An online suffix automaton over one token stream.
#[derive(Clone, Debug)]
pub struct SamIndex {
    /// Longest string of each state.
    len: Vec<u32>,
    link: Vec<u32>,
    /// End index of the most recent known occurrence of each state's strings.
    recent: Vec<u32>,
    /// Transitions, keyed by `state << 32 | token`.
    next: FastMap<u64, u32>,
    /// Each state's outgoing tokens (for cloning a state's transitions).
    out: Vec<Vec<u32>>,
    last: u32,
    tokens: Vec<u32>,
    match_len: u32,
    match_end: u32,
    frozen: bool,
    poisoned: bool,
    /// Shortest match that drafts (default 2).
    pub min_match: usize,
    /// Most tokens one draft proposes (default 16).
    pub max_draft: usize,
}

impl Default for SamIndex {
    fn default() -> Self {
        SamIndex::new()
    }
}

fn key(state: u32, token: u32) -> u64 {
    u64::from(state) << 32 | u64::from(token)
}

impl SamIndex {
    /// Longest stream an index holds; the append past it poisons the index.
    pub const MAX_STREAM_LEN: usize = 1 << 29;

    /// An empty index.
    pub fn new() -> SamIndex {
        SamIndex {
            len: vec![0],
            link: vec![NONE],
            recent: vec![0],
            next: FastMap::default(),
            out: vec![Vec::new()],
            last: 0,
            tokens: Vec::new(),
            match_len: 0,
            match_end: 0,
            frozen: false,
            poisoned: false,
            min_match: 2,
            max_draft: 16,
        }
    }

    /// An index over `tokens`, frozen (a reference document).
    pub fn frozen(tokens: &[u32]) -> SamIndex {
        let mut s = SamIndex::new();
        s.append(tokens);
        s.freeze();
        s
    }

    fn new_state(&mut self, len: u32, link: u32, recent: u32) -> u32 {
        self.len.push(len);
        self.link.push(link);
        self.recent.push(recent);
        self.out.push(Vec::new());
        (self.len.len() - 1) as u32
    }

    fn set(&mut self, state: u32, token: u32, to: u32) {
        if self.next.insert(key(state, token), to).is_none() {
            self.out[state as usize].push(token);
        }
    }

    fn get(&self, state: u32, token: u32) -> Option<u32> {
        self.next.get(&key(state, token)).copied()
    }

    /// Append tokens to the stream (a poisoned or frozen index is poisoned for good).
    pub fn append(&mut self, tokens: &[u32]) {
        for &t in tokens {
            if self.poisoned || self.frozen || self.tokens.len() >= Self::MAX_STREAM_LEN {
                self.poisoned = true;
                return;
            }
            self.push(t);
        }
    }

    fn push(&mut self, t: u32) {
        let i = self.tokens.len() as u32;
        self.tokens.push(t);
        let cur = self.new_state(self.len[self.last as usize] + 1, NONE, i);
        let mut p = self.last;
        while p != NONE && self.get(p, t).is_none() {
            self.set(p, t, cur);
            p = self.link[p as usize];
        }
        if p == NONE {
            self.link[cur as usize] = 0;
        } else {
            let q = self.get(p, t).unwrap_or(0);
            if self.len[p as usize] + 1 == self.len[q as usize] {
                self.link[cur as usize] = q;
            } else {
                let (qlink, qrecent) = (self.link[q as usize], self.recent[q as usize]);
                let clone = self.new_state(self.len[p as usize] + 1, qlink, qrecent);
                for k in 0..self.out[q as usize].len() {
                    let tok = self.out[q as usize][k];
                    if let Some(to) = self.get(q, tok) {
                        self.set(clone, tok, to);
                    }
                }
                while p != NONE && self.get(p, t) == Some(q) {
                    self.next.insert(key(p, t), clone);
                    p = self.link[p as usize];
                }
                self.link[q as usize] = clone;
                self.link[cur as usize] = clone;
            }
        }
        self.last = cur;
        // The longest suffix occurring earlier is the whole stream's suffix link; its
        // mark, before this append refreshes it, is its latest earlier end.
        let m = self.link[cur as usize];
        self.match_len = self.len[m as usize];
        self.match_end = self.recent[m as usize];
        let mut s = m;
        for _ in 0..RECENT_WALK {
            if s == NONE || s == 0 {
                break;
            }
            self.recent[s as usize] = i;
            s = self.link[s as usize];
        }
    }

    /// Length of the longest suffix of the stream that also occurs ending earlier (0
    /// when poisoned).
    pub fn match_len(&self) -> usize {
        if self.poisoned {
            0
        } else {
            self.match_len as usize
        }
    }

    /// Stream index of the token that followed the most recent earlier occurrence of
    /// the matched suffix (where a draft starts); `None` with no match or when poisoned.
    pub fn match_next(&self) -> Option<usize> {
        (self.match_len() > 0).then(|| self.match_end as usize + 1)
    }

    /// Append to `out` up to `max` (and [`SamIndex::max_draft`]) tokens that followed
    /// the most recent earlier occurrence of the matched suffix; nothing when the match
    /// is shorter than [`SamIndex::min_match`]. Returns how many.
    pub fn draft(&self, max: usize, out: &mut Vec<u32>) -> usize {
        if self.match_len() < self.min_match.max(1) {
            return 0;
        }
        self.continuation(self.match_end, max, out)
    }

    fn continuation(&self, end: u32, max: usize, out: &mut Vec<u32>) -> usize {
        let start = end as usize + 1;
        let stop = self.tokens.len().min(start + max.min(self.max_draft));
        let n = stop.saturating_sub(start);
        out.extend_from_slice(&self.tokens[start..start + n]);
        n
    }

    /// Tokens appended.
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// The stream.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// States of the automaton.
    pub fn state_count(&self) -> usize {
        self.len.len()
    }

    /// Transitions of the automaton.
    pub fn transition_count(&self) -> usize {
        self.next.len()
    }

    /// Whether a failed append poisoned the index.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// End appends: the index becomes a reference that [`Cursor`]s walk.
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    /// Move `cursor` over one more token of the walked stream: afterwards it holds the
    /// longest suffix of that stream found in the index.
    pub fn advance(&self, cursor: &mut Cursor, token: u32) {
        let (mut state, mut len) = (cursor.state, cursor.len);
        loop {
            if let Some(to) = self.get(state, token) {
                *cursor = Cursor {
                    state: to,
                    len: len + 1,
                };
                return;
            }
            if state == 0 {
                *cursor = Cursor::default();
                return;
            }
            state = self.link[state as usize];
            len = self.len[state as usize];
        }
    }

    /// Stream index of the token that followed the latest occurrence of what `cursor`
    /// matched (where [`SamIndex::draft_from`] starts); `None` with no match or when
    /// poisoned.
    pub fn cursor_next(&self, cursor: Cursor) -> Option<usize> {
        (!self.poisoned && !cursor.is_empty())
            .then(|| self.recent[cursor.state as usize] as usize + 1)
    }

    /// [`SamIndex::draft`] from an external cursor: the tokens that followed the
    /// matched text's (latest) occurrence in the index.
    pub fn draft_from(&self, cursor: Cursor, max: usize, out: &mut Vec<u32>) -> usize {
        if self.poisoned || (cursor.len as usize) < self.min_match.max(1) {
            return 0;
        }
        self.continuation(self.recent[cursor.state as usize], max, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_self_excluded_suffix_match_drives_the_draft() {
        let mut sam = SamIndex::new();
        sam.append(&[5, 6, 7, 5, 6]);
        assert_eq!(sam.match_len(), 2);
        let mut out = Vec::new();
        assert_eq!(sam.draft(8, &mut out), 3);
        assert_eq!(out, [7, 5, 6]);
    }

    #[test]
    fn a_frozen_index_is_walked_by_cursors_and_poisoned_by_appends() {
        let doc = SamIndex::frozen(&[10, 11, 12, 13, 14, 11, 12, 20]);
        let mut c = Cursor::default();
        for t in [99, 11, 12] {
            doc.advance(&mut c, t);
        }
        assert_eq!(c.len(), 2);
        let mut out = Vec::new();
        doc.draft_from(c, 3, &mut out);
        assert_eq!(
            out,
            [20],
            "the latest occurrence of [11, 12] is followed by 20"
        );
        let mut poisoned = doc.clone();
        poisoned.append(&[1]);
        assert!(poisoned.is_poisoned());
        out.clear();
        assert_eq!(poisoned.draft_from(c, 3, &mut out), 0);
    }
}
