//! The suffix automaton against a brute-force oracle on random streams: after every
//! append, the self-excluded longest suffix match and the draft (the tokens after the
//! most recent earlier occurrence) equal what a quadratic scan finds; a frozen index
//! walked by a cursor finds the longest suffix of another stream and drafts from the
//! latest occurrence.

use fucina_spec::{Cursor, SamIndex};
use proptest::prelude::*;

/// Longest L with `s[n-L..]` also ending at some e < n-1, and the latest such e.
fn oracle(s: &[u32]) -> (usize, Option<usize>) {
    let n = s.len();
    for l in (1..n).rev() {
        let suffix = &s[n - l..];
        if let Some(e) = (l - 1..n - 1).rev().find(|&e| &s[e + 1 - l..=e] == suffix) {
            return (l, Some(e));
        }
    }
    (0, None)
}

/// Longest suffix of `q` occurring in `doc`, and its latest end in `doc`.
fn oracle_in(doc: &[u32], q: &[u32]) -> (usize, Option<usize>) {
    for l in (1..=q.len().min(doc.len())).rev() {
        let suffix = &q[q.len() - l..];
        if let Some(e) = (l - 1..doc.len())
            .rev()
            .find(|&e| &doc[e + 1 - l..=e] == suffix)
        {
            return (l, Some(e));
        }
    }
    (0, None)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn match_and_draft_equal_the_oracle(alphabet in 2u32..7, raw in prop::collection::vec(0u32..1000, 1..200)) {
        let stream: Vec<u32> = raw.iter().map(|t| t % alphabet).collect();
        let mut sam = SamIndex::new();
        sam.min_match = 1;
        for i in 0..stream.len() {
            sam.append(&stream[i..=i]);
            let (l, e) = oracle(&stream[..=i]);
            prop_assert_eq!(sam.match_len(), l, "prefix {:?}", &stream[..=i]);
            let mut got = Vec::new();
            sam.draft(5, &mut got);
            let want: Vec<u32> = match e {
                Some(e) => stream[e + 1..(e + 6).min(i + 1)].to_vec(),
                None => Vec::new(),
            };
            prop_assert_eq!(got, want, "prefix {:?}", &stream[..=i]);
        }
    }

    #[test]
    fn a_frozen_cursor_equals_the_oracle(
        alphabet in 2u32..6,
        doc in prop::collection::vec(0u32..1000, 1..120),
        query in prop::collection::vec(0u32..1000, 1..60),
    ) {
        let doc: Vec<u32> = doc.iter().map(|t| t % alphabet).collect();
        let query: Vec<u32> = query.iter().map(|t| t % (alphabet + 1)).collect();
        let mut index = SamIndex::frozen(&doc);
        index.min_match = 1;
        let mut cursor = Cursor::default();
        for i in 0..query.len() {
            index.advance(&mut cursor, query[i]);
            let (l, e) = oracle_in(&doc, &query[..=i]);
            prop_assert_eq!(cursor.len(), l);
            let mut got = Vec::new();
            index.draft_from(cursor, 4, &mut got);
            let want: Vec<u32> = e.map(|e| doc[e + 1..(e + 5).min(doc.len())].to_vec()).unwrap_or_default();
            prop_assert_eq!(got, want);
        }
    }
}

/// Whether `draft` occurs contiguously in `text`.
fn occurs(text: &[u32], draft: &[u32]) -> bool {
    draft.is_empty() || text.windows(draft.len()).any(|w| w == draft)
}

/// Whether `draft` is a copy from `text` that may run on over itself (an overlapping
/// copy: it starts inside `text`, and past its end repeats what it copied).
fn copied(text: &[u32], draft: &[u32]) -> bool {
    let ext: Vec<u32> = text.iter().chain(draft).copied().collect();
    draft.is_empty() || (0..text.len()).any(|j| ext[j..j + draft.len()] == *draft)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the cascade drafts (suffix matches, a copy followed across edits, a
    /// reference), under cheap or costly rows, is text it has seen: a run of a
    /// reference, or of the stream (copied on over itself where the stream repeats
    /// up to its end), never out of bounds.
    #[test]
    fn cascade_drafts_are_runs_of_seen_text(
        alphabet in 2u32..12,
        doc in prop::collection::vec(0u32..1000, 0..60),
        raw in prop::collection::vec(0u32..1000, 1..300),
        min_match in 1usize..6,
    ) {
        use fucina_spec::{DraftSource, SpeculationIndex};
        let doc: Vec<u32> = doc.into_iter().map(|t| t % alphabet).collect();
        let mut index = SpeculationIndex::new(64);
        if !doc.is_empty() {
            index.add_reference(&doc);
        }
        let mut stream = Vec::new();
        for (i, t) in raw.into_iter().enumerate() {
            // Long stretches copy the document or the stream itself, with edits.
            let t = match (i / 40) % 3 {
                0 if !doc.is_empty() && t % 7 != 0 => doc[i % doc.len()],
                1 if i > 50 && t % 5 != 0 => stream[i - 37],
                _ => t % alphabet,
            };
            stream.push(t);
            index.observe(&[t]);
            let mut out = Vec::new();
            index.suggest_with(&stream, 16, min_match, t % 2 == 0, &mut out);
            prop_assert!(out.len() <= 16);
            if t % 2 == 1 {
                prop_assert!(copied(&stream, &out) || occurs(&doc, &out), "draft {out:?}");
            }
        }
    }
}
