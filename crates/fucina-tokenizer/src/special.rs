//! Special-token partitioning with llama.cpp `tokenizer_st_partition` semantics.
//!
//! llama.cpp takes the special tokens (CONTROL, USER_DEFINED and UNKNOWN; with
//! `parse_special` off only USER_DEFINED) longest first, and lets each claim every
//! leftmost non-overlapping occurrence in the text not yet claimed. That is not the
//! same as matching the longest token at each position ("ab" + "bcd" on "abcd" gives
//! `a|bcd`), so this module reproduces the priority order exactly: a byte trie finds
//! every occurrence in one pass, then occurrences are accepted in (priority, position)
//! order unless they overlap an accepted one. When a text has more occurrences than
//! [`OCCURRENCE_BUDGET`] allows (say, a megabyte of newlines against Gemma's newline
//! tokens), it falls back to llama.cpp's token-by-token search over the free regions,
//! restricted to tokens that occur at all. Equal-length tokens are ordered by id
//! (llama.cpp uses an unstable sort there).

use std::collections::BTreeMap;

use crate::vocab::{attr, Vocab};

/// Max occurrences per text byte (plus a constant) before the fallback search.
const OCCURRENCE_BUDGET: usize = 4;

/// A piece of the partitioned input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Bytes `start..end` of the input, to be tokenized normally.
    Text(usize, usize),
    /// A special token matched in the text.
    Token(u32),
}

struct Node {
    /// Sorted `(byte, child)` edges.
    edges: Vec<(u8, u32)>,
    /// Priority rank of the token ending here.
    rank: Option<u32>,
}

/// The special tokens in priority order plus a trie over their texts.
pub(crate) struct Specials {
    /// `(id, text, attrs)` in priority order (longest first, then id).
    tokens: Vec<(u32, Vec<u8>, u16)>,
    nodes: Vec<Node>,
    first: [bool; 256],
    any_user_defined: bool,
    /// Some token strips whitespace: acceptance then reaches beyond a token's own bytes.
    any_strip: bool,
    /// `[parse_special][byte]`: when every active token starting with `byte` is a run of
    /// it (Gemma's newline, tab and space tokens), those tokens as `(len, rank)`, longest
    /// first; empty otherwise.
    runs: [Vec<Vec<(u32, u32)>>; 2],
}

/// `Occ::rank` of a run record: a maximal run of one byte whose tokens are all runs.
const RUN: u32 = u32::MAX;

/// An occurrence of token `rank` at `start..end`, or a run record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Occ {
    rank: u32,
    start: u32,
    end: u32,
}

/// Reusable buffers.
#[derive(Default)]
pub(crate) struct PartitionWork {
    occ: Vec<Occ>,
    accepted: BTreeMap<usize, (usize, usize, usize, u32)>,
    seen: Vec<bool>,
    component: Vec<(u32, u32)>,
    flat: Vec<(usize, usize, u32)>,
}

fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

impl Specials {
    pub(crate) fn new(vocab: &Vocab) -> Self {
        let mut ids: Vec<u32> = (0..vocab.texts.len() as u32)
            .filter(|&id| {
                vocab.attrs[id as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .collect();
        ids.sort_by(|&a, &b| {
            vocab
                .texts
                .get(b)
                .len()
                .cmp(&vocab.texts.get(a).len())
                .then(a.cmp(&b))
        });
        let tokens: Vec<(u32, Vec<u8>, u16)> = ids
            .iter()
            .map(|&id| (id, vocab.texts.get(id).to_vec(), vocab.attrs[id as usize]))
            .collect();
        let mut nodes = vec![Node {
            edges: Vec::new(),
            rank: None,
        }];
        let mut first = [false; 256];
        for (rank, (_, text, _)) in tokens.iter().enumerate() {
            let Some(&b0) = text.first() else { continue };
            first[b0 as usize] = true;
            let mut node = 0usize;
            for &b in text {
                node = match nodes[node].edges.binary_search_by_key(&b, |e| e.0) {
                    Ok(i) => nodes[node].edges[i].1 as usize,
                    Err(i) => {
                        let child = nodes.len();
                        nodes[node].edges.insert(i, (b, child as u32));
                        nodes.push(Node {
                            edges: Vec::new(),
                            rank: None,
                        });
                        child
                    }
                };
            }
            // Duplicate texts: the first in priority order is found first by llama.cpp
            // and leaves nothing for the others.
            if nodes[node].rank.is_none() {
                nodes[node].rank = Some(rank as u32);
            }
        }
        let any_user_defined = tokens
            .iter()
            .any(|t| t.2 & (attr::CONTROL | attr::UNKNOWN) == 0);
        let any_strip = tokens
            .iter()
            .any(|t| t.2 & (attr::LSTRIP | attr::RSTRIP) != 0);
        let mut runs = [vec![Vec::new(); 256], vec![Vec::new(); 256]];
        for (parse, lists) in runs.iter_mut().enumerate() {
            let mut mixed = [false; 256];
            for (rank, (_, text, a)) in tokens.iter().enumerate() {
                let active = parse == 1 || a & (attr::CONTROL | attr::UNKNOWN) == 0;
                let Some(&c) = text.first().filter(|_| active) else {
                    continue;
                };
                if text.iter().all(|&b| b == c) {
                    lists[c as usize].push((text.len() as u32, rank as u32));
                } else {
                    mixed[c as usize] = true;
                }
            }
            for (list, mixed) in lists.iter_mut().zip(mixed) {
                if mixed {
                    list.clear();
                }
            }
        }
        Self {
            tokens,
            nodes,
            first,
            any_user_defined,
            any_strip,
            runs,
        }
    }

    fn active(&self, rank: usize, parse_special: bool) -> bool {
        parse_special || self.tokens[rank].2 & (attr::CONTROL | attr::UNKNOWN) == 0
    }

    /// Split `text` into fragments.
    pub(crate) fn partition(
        &self,
        text: &[u8],
        parse_special: bool,
        w: &mut PartitionWork,
        out: &mut Vec<Fragment>,
    ) {
        self.partition_with_budget(text, parse_special, OCCURRENCE_BUDGET, w, out);
    }

    fn partition_with_budget(
        &self,
        text: &[u8],
        parse_special: bool,
        per_byte: usize,
        w: &mut PartitionWork,
        out: &mut Vec<Fragment>,
    ) {
        out.clear();
        if text.is_empty() {
            return;
        }
        if self.tokens.is_empty() || !(parse_special || self.any_user_defined) {
            out.push(Fragment::Text(0, text.len()));
            return;
        }
        w.occ.clear();
        let budget = per_byte
            .saturating_mul(text.len())
            .saturating_add(if per_byte == 0 { 0 } else { 1024 });
        let mut over_budget = false;
        let runs = &self.runs[parse_special as usize];
        let mut p = 0;
        while p < text.len() {
            let c = text[p];
            if !self.first[c as usize] {
                p += 1;
                continue;
            }
            // Only run tokens start with `c`: note the whole run once instead of every
            // occurrence in it (quadratic in its length).
            if let Some(&(min_len, _)) = runs[c as usize].last().filter(|_| !self.any_strip) {
                let e = p + text[p..].iter().take_while(|&&b| b == c).count();
                if e - p >= min_len as usize {
                    w.occ.push(Occ {
                        rank: RUN,
                        start: p as u32,
                        end: e as u32,
                    });
                }
                p = e;
                continue;
            }
            let mut node = 0usize;
            for (k, &b) in text[p..].iter().enumerate() {
                match self.nodes[node].edges.binary_search_by_key(&b, |e| e.0) {
                    Ok(i) => node = self.nodes[node].edges[i].1 as usize,
                    Err(_) => break,
                }
                if let Some(rank) = self.nodes[node].rank {
                    if self.active(rank as usize, parse_special) {
                        w.occ.push(Occ {
                            rank,
                            start: p as u32,
                            end: (p + k + 1) as u32,
                        });
                    }
                }
            }
            if w.occ.len() > budget || per_byte == 0 {
                over_budget = true;
                break;
            }
            p += 1;
        }
        if !over_budget && !self.any_strip {
            self.accept_by_component(text, runs, w);
            let accepted = w.flat.iter().copied();
            self.emit(text.len(), accepted, out);
            return;
        }
        w.accepted.clear();
        if over_budget {
            self.accept_by_search(text, parse_special, w);
        } else {
            w.occ.sort_unstable();
            for i in 0..w.occ.len() {
                let Occ { rank, start, .. } = w.occ[i];
                self.try_accept(text, rank, start as usize, w);
            }
        }
        let accepted = w
            .accepted
            .iter()
            .map(|(&lo, &(_, _, hi, rank))| (lo, hi, rank));
        self.emit(text.len(), accepted, out);
    }

    /// Fragments from accepted `(start, end, rank)` claims in text order.
    fn emit(
        &self,
        len: usize,
        accepted: impl Iterator<Item = (usize, usize, u32)>,
        out: &mut Vec<Fragment>,
    ) {
        let mut pos = 0usize;
        for (lo, hi, rank) in accepted {
            if pos < lo {
                out.push(Fragment::Text(pos, lo));
            }
            out.push(Fragment::Token(self.tokens[rank as usize].0));
            pos = hi;
        }
        if pos < len {
            out.push(Fragment::Text(pos, len));
        }
    }

    /// Without whitespace stripping, an occurrence is only ever blocked by occurrences
    /// it overlaps, so each cluster of overlapping occurrences (the scan lists them by
    /// start) is resolved on its own: usually a single occurrence, accepted as is. A run
    /// on its own resolves greedily: longest-first priority tiles a run of one byte
    /// from the left with the longest token that still fits.
    fn accept_by_component(&self, text: &[u8], runs: &[Vec<(u32, u32)>], w: &mut PartitionWork) {
        w.flat.clear();
        let mut i = 0;
        while i < w.occ.len() {
            let mut j = i + 1;
            let mut reach = w.occ[i].end;
            while j < w.occ.len() && w.occ[j].start < reach {
                reach = reach.max(w.occ[j].end);
                j += 1;
            }
            let o = w.occ[i];
            if j == i + 1 && o.rank != RUN {
                w.flat.push((o.start as usize, o.end as usize, o.rank));
            } else if j == i + 1 {
                let lens = &runs[text[o.start as usize] as usize];
                let mut pos = o.start;
                while let Some(&(len, rank)) = lens.iter().find(|&&(len, _)| pos + len <= o.end) {
                    w.flat.push((pos as usize, (pos + len) as usize, rank));
                    pos += len;
                }
            } else {
                w.component.clear();
                for o in &w.occ[i..j] {
                    if o.rank != RUN {
                        w.component.push((o.rank, o.start));
                        continue;
                    }
                    for &(len, rank) in &runs[text[o.start as usize] as usize] {
                        if o.end - o.start >= len {
                            w.component
                                .extend((o.start..=o.end - len).map(|s| (rank, s)));
                        }
                    }
                }
                w.component.sort_unstable();
                let first = w.flat.len();
                for &(rank, start) in &w.component {
                    let (s, e) = (
                        start as usize,
                        start as usize + self.tokens[rank as usize].1.len(),
                    );
                    if w.flat[first..].iter().all(|&(a, b, _)| e <= a || b <= s) {
                        w.flat.push((s, e, rank));
                    }
                }
                w.flat[first..].sort_unstable();
            }
            i = j;
        }
    }

    /// Accept the occurrence of token `rank` at `start` if it lies in a free region,
    /// claiming the whitespace its LSTRIP/RSTRIP attributes strip as well.
    fn try_accept(
        &self,
        text: &[u8],
        rank: u32,
        start: usize,
        w: &mut PartitionWork,
    ) -> Option<usize> {
        let (_, tok, a) = &self.tokens[rank as usize];
        let end = start + tok.len();
        let free_lo = w
            .accepted
            .range(..=start)
            .next_back()
            .map_or(0, |(_, &(_, _, hi, _))| hi);
        if free_lo > start {
            return None;
        }
        let free_hi = w
            .accepted
            .range(start..)
            .next()
            .map_or(text.len(), |(&lo, _)| lo);
        if free_hi < end {
            return None;
        }
        let mut lo = start;
        if a & attr::LSTRIP != 0 {
            while lo > free_lo && is_c_space(text[lo - 1]) {
                lo -= 1;
            }
        }
        let mut hi = end;
        if a & attr::RSTRIP != 0 {
            while hi < free_hi && is_c_space(text[hi]) {
                hi += 1;
            }
        }
        w.accepted.insert(lo, (start, end, hi, rank));
        Some(hi)
    }

    /// llama.cpp's own loop (token by token, leftmost occurrence in each free region),
    /// for the tokens that occur at all.
    fn accept_by_search(&self, text: &[u8], parse_special: bool, w: &mut PartitionWork) {
        w.seen.clear();
        w.seen.resize(self.tokens.len(), false);
        for p in 0..text.len() {
            if !self.first[text[p] as usize] {
                continue;
            }
            let mut node = 0usize;
            for &b in &text[p..] {
                match self.nodes[node].edges.binary_search_by_key(&b, |e| e.0) {
                    Ok(i) => node = self.nodes[node].edges[i].1 as usize,
                    Err(_) => break,
                }
                if let Some(rank) = self.nodes[node].rank {
                    w.seen[rank as usize] = true;
                }
            }
        }
        for rank in 0..self.tokens.len() {
            if !w.seen[rank] || !self.active(rank, parse_special) {
                continue;
            }
            let tok = &self.tokens[rank].1;
            let mut from = 0usize;
            while let Some(off) = find(&text[from..], tok) {
                let start = from + off;
                match self.try_accept(text, rank as u32, start, w) {
                    Some(next) => from = next,
                    None => {
                        // Inside or across a claimed region: resume after that region.
                        let blocked = w
                            .accepted
                            .range(..start + tok.len())
                            .next_back()
                            .map_or(start + 1, |(_, &(_, _, hi, _))| hi.max(start + 1));
                        from = blocked;
                    }
                }
                if from >= text.len() {
                    break;
                }
            }
        }
    }
}

/// First occurrence of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        let off = hay[i..hay.len() - rest.len()]
            .iter()
            .position(|&b| b == first)?;
        i += off;
        if &hay[i + 1..i + needle.len()] == rest {
            return Some(i);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_substrings() {
        assert_eq!(find(b"hello world", b"wor"), Some(6));
        assert_eq!(find(b"aaa", b"aa"), Some(0));
        assert_eq!(find(b"ab", b"abc"), None);
        assert_eq!(find(b"xyz", b"z"), Some(2));
    }
}

#[cfg(test)]
mod reference_tests {
    use fucina_gguf::{Array, Metadata, StringArray, Value};

    use super::*;

    /// llama.cpp's `tokenizer_st_partition`, transcribed literally (fragment list,
    /// token by token, leftmost occurrence per fragment, LSTRIP/RSTRIP).
    fn reference(vocab: &Vocab, text: &[u8], parse_special: bool) -> Vec<Fragment> {
        let mut ids: Vec<u32> = (0..vocab.texts.len() as u32)
            .filter(|&id| {
                vocab.attrs[id as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .collect();
        ids.sort_by(|&a, &b| {
            vocab
                .texts
                .get(b)
                .len()
                .cmp(&vocab.texts.get(a).len())
                .then(a.cmp(&b))
        });
        let mut frags = if text.is_empty() {
            vec![]
        } else {
            vec![Fragment::Text(0, text.len())]
        };
        for id in ids {
            let a = vocab.attrs[id as usize];
            if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
                continue;
            }
            let tok = vocab.texts.get(id);
            let mut out = Vec::new();
            for f in frags {
                let Fragment::Text(mut lo, hi) = f else {
                    out.push(f);
                    continue;
                };
                while lo < hi {
                    let Some(m) = find(&text[lo..hi], tok).map(|m| m + lo) else {
                        break;
                    };
                    let mut left = m;
                    if a & attr::LSTRIP != 0 {
                        while left > lo && is_c_space(text[left - 1]) {
                            left -= 1;
                        }
                    }
                    if left > lo {
                        out.push(Fragment::Text(lo, left));
                    }
                    out.push(Fragment::Token(id));
                    lo = m + tok.len();
                    if a & attr::RSTRIP != 0 {
                        while lo < hi && is_c_space(text[lo]) {
                            lo += 1;
                        }
                    }
                }
                if lo < hi {
                    out.push(Fragment::Text(lo, hi));
                }
            }
            frags = out;
        }
        frags
    }

    fn vocab(name: &str) -> Vocab {
        let tokens = [
            "a", "b", "c", "d", " ", "ab", "bcd", "cd", "  ", "   ", "abab", "<|x|>", "<|end|>",
            "x", "<", "\t\t", "\t\t\t\t", "\t\t\t", "d\t\t", " x", "\n", "\n\n\n",
        ];
        let types = [
            1, 1, 1, 1, 1, 4, 4, 3, 4, 4, 4, 3, 2, 1, 1, 4, 4, 3, 4, 4, 4, 4,
        ];
        let mut md = Metadata::default();
        md.insert("general.name", Value::string(name));
        md.insert("tokenizer.ggml.model", Value::string("llama"));
        md.insert(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(tokens.iter().collect::<StringArray>())),
        );
        md.insert(
            "tokenizer.ggml.scores",
            Value::Array(Array::F32(vec![0.0; tokens.len()])),
        );
        md.insert(
            "tokenizer.ggml.token_type",
            Value::Array(Array::I32(types.to_vec())),
        );
        Vocab::from_metadata(&md).expect("vocab").0
    }

    #[test]
    fn trie_partition_equals_llama_cpp_loop() {
        let mut rng = 99u64;
        let pieces: [&[u8]; 13] = [
            b"a", b"b", b"c", b"d", b" ", b"\t", b"<|x|>", b"<|end|>", b"<|", b"\t\t", b"x", b"\n",
            b"\n\n",
        ];
        for name in ["plain", "Phi-3 mini"] {
            let v = vocab(name);
            let sp = Specials::new(&v);
            let mut w = PartitionWork::default();
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            for _ in 0..4000 {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let n = (rng >> 59) as usize + 1;
                let mut text = Vec::new();
                for k in 0..n * 3 {
                    let r = (rng >> (k % 50)) as usize;
                    text.extend_from_slice(pieces[r % pieces.len()]);
                }
                for parse in [false, true] {
                    let want = reference(&v, &text, parse);
                    sp.partition_with_budget(&text, parse, OCCURRENCE_BUDGET, &mut w, &mut fast);
                    sp.partition_with_budget(&text, parse, 0, &mut w, &mut slow);
                    let show = String::from_utf8_lossy(&text);
                    assert_eq!(
                        fast, want,
                        "{name}: occurrence path on {show:?} (parse_special {parse})"
                    );
                    assert_eq!(
                        slow, want,
                        "{name}: search path on {show:?} (parse_special {parse})"
                    );
                }
            }
        }
    }
}
