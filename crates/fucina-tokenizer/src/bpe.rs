//! BPE merging (llama.cpp's `llm_tokenizer_bpe_session`), on token ids.
//!
//! For byte-level vocabularies llama.cpp merges strings of GPT-2 byte-level
//! characters; since that encoding is a bijection, merging raw bytes instead gives the
//! same result. SentencePiece-style vocabularies (Gemma 4: `byte_encode = false`) merge
//! raw UTF-8 characters and fall back to `<0xXX>` tokens. Symbols are ids: `0..n_vocab`
//! are tokens (the id llama.cpp's `text_to_token` returns for that text), and ids past
//! the vocabulary stand for byte strings that a merge rule names or produces but the
//! vocabulary lacks (emitted with llama.cpp's per-byte fallback).
//!
//! The merge order is llama.cpp's: repeatedly merge the adjacent pair of lowest rank,
//! leftmost first. Short chunks use an O(n^2) scan over a flat array (fastest for
//! the usual handful of symbols); long ones a heap with lazy deletion.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::error::{Result, TokenizerError};
use crate::hash::{PairMap, StrMap};
use crate::pre_config::PreConfig;
use crate::unicode;

/// Chunks with more symbols than this use the heap merger.
const SCAN_MAX: usize = 64;

/// A BPE merge model.
pub(crate) struct Bpe {
    pub(crate) config: PreConfig,
    n_vocab: u32,
    byte_sym: [u32; 256],
    pairs: PairMap,
    /// Raw bytes -> canonical token id.
    raw: StrMap,
    /// Raw bytes of symbol `n_vocab + i`.
    synth: Vec<Vec<u8>>,
    /// Raw bytes -> `i` of symbol `n_vocab + i`.
    synth_index: StrMap,
    /// `text_to_token` of each one-byte string, for the byte-level fallback.
    single_byte: [Option<u32>; 256],
    /// `text_to_token("<0xXX>")` of each byte, for the SentencePiece-style fallback.
    byte_token: [Option<u32>; 256],
}

impl Bpe {
    /// Build from the token texts, the canonical text index and the merge rules
    /// (`"left right"`, rank = position; none at all for Kimi-K2). Texts and rules are
    /// byte-level encoded unless the configuration is SentencePiece-style.
    pub(crate) fn new(
        config: PreConfig,
        texts: &crate::vocab::Texts,
        index: &StrMap,
        merges: Option<&fucina_gguf::StringArray>,
    ) -> Result<Self> {
        let n_vocab = texts.len() as u32;
        let raw = if config.spm_style {
            index.clone()
        } else {
            let mut raw = StrMap::with_capacity(texts.len(), texts.data_len());
            let mut buf = Vec::new();
            for id in 0..n_vocab {
                let text = texts.get(id);
                buf.clear();
                if unicode::byte_level_decode_into(text, &mut buf) && index.get(text) == Some(id) {
                    raw.insert(&buf, id, true);
                }
            }
            raw
        };
        let empty = fucina_gguf::StringArray::default();
        let merges = merges.unwrap_or(&empty);
        let mut bpe = Self {
            config,
            n_vocab,
            byte_sym: [0; 256],
            pairs: PairMap::with_capacity(merges.len()),
            raw,
            synth: Vec::new(),
            synth_index: StrMap::with_capacity(64, 256),
            single_byte: [None; 256],
            byte_token: [None; 256],
        };
        for b in 0..=255u8 {
            if !config.spm_style {
                bpe.byte_sym[b as usize] = bpe.symbol(&[b]);
            }
            bpe.single_byte[b as usize] = index.get(&[b]);
            bpe.byte_token[b as usize] = index.get(format!("<0x{b:02X}>").as_bytes());
        }
        // Decode one side of a rule into `out`; false when it can never match.
        let side = |text: &[u8], out: &mut Vec<u8>| {
            if config.spm_style {
                out.extend_from_slice(text);
                true
            } else {
                unicode::byte_level_decode_into(text, out)
            }
        };
        let mut joined = Vec::new();
        let mut left = Vec::new();
        for (rank, line) in merges.iter().enumerate() {
            // llama.cpp splits at the first space after position 0.
            let split = line.iter().skip(1).position(|&c| c == b' ').map(|p| p + 1);
            let Some(split) = split else {
                return Err(TokenizerError::InvalidMetadata {
                    key: "tokenizer.ggml.merges".into(),
                    message: format!(
                        "merge {rank} ({:?}) has no space separator",
                        String::from_utf8_lossy(line)
                    ),
                });
            };
            // `joined` = left bytes then right bytes; a character outside the byte
            // alphabet means the rule can never fire.
            left.clear();
            joined.clear();
            if !side(&line[..split], &mut left)
                || !side(&line[split + 1..], &mut joined)
                || left.is_empty()
                || joined.is_empty()
            {
                continue;
            }
            let r = bpe.symbol(&joined);
            joined.splice(0..0, left.iter().copied());
            let l = bpe.symbol(&left);
            let m = bpe.symbol(&joined);
            bpe.pairs.insert_first(l, r, rank as u32, m);
        }
        Ok(bpe)
    }

    fn symbol(&mut self, bytes: &[u8]) -> u32 {
        if let Some(id) = self.raw.get(bytes) {
            return id;
        }
        if let Some(i) = self.synth_index.get(bytes) {
            return self.n_vocab + i;
        }
        let i = self.synth.len() as u32;
        self.synth.push(bytes.to_vec());
        self.synth_index.insert(bytes, i, false);
        self.n_vocab + i
    }

    /// Encode one pretokenized chunk with the model's rules, appending ids to `out`.
    #[inline]
    pub(crate) fn encode(&self, chunk: &[u8], work: &mut MergeWork, out: &mut Vec<u32>) {
        if self.config.spm_style {
            self.encode_word_raw(chunk, work, out);
        } else {
            self.encode_chunk(chunk, work, out);
        }
    }

    /// Encode one byte-level chunk (raw, normalised bytes), appending ids to `out`.
    fn encode_chunk(&self, chunk: &[u8], work: &mut MergeWork, out: &mut Vec<u32>) {
        if chunk.is_empty() {
            return;
        }
        if chunk.len() == 1 {
            self.emit(self.byte_sym[chunk[0] as usize], out);
            return;
        }
        if self.config.ignore_merges {
            if let Some(id) = self.raw.get(chunk) {
                out.push(id);
                return;
            }
        }
        work.syms.clear();
        work.syms
            .extend(chunk.iter().map(|&b| self.byte_sym[b as usize]));
        self.merge(work);
        for i in 0..work.syms.len() {
            self.emit(work.syms[i], out);
        }
    }

    /// Encode one word of SentencePiece-style BPE (raw, normalised UTF-8 with spaces
    /// already written as U+2581), appending ids to `out`.
    fn encode_word_raw(&self, word: &[u8], w: &mut MergeWork, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        // llama.cpp's ignore_merges, and its Gemma 4 fix (PR 21343): a newline run that
        // is a token is taken whole.
        if self.config.ignore_merges || (self.config.gemma4 && word.iter().all(|&b| b == b'\n')) {
            if let Some(id) = self.raw.get(word) {
                out.push(id);
                return;
            }
        }
        // Symbols start as characters. One that no token and no merge rule names can
        // never merge, so the words on either side of it merge independently.
        w.syms.clear();
        let mut i = 0;
        while i < word.len() {
            let n = unicode::utf8_len(word[i]).min(word.len() - i);
            let ch = &word[i..i + n];
            let sym = self
                .raw
                .get(ch)
                .or_else(|| self.synth_index.get(ch).map(|k| self.n_vocab + k));
            match sym {
                Some(sym) => w.syms.push(sym),
                None => {
                    self.merge_raw(w, out);
                    w.syms.clear();
                    self.fallback_raw(ch, out);
                }
            }
            i += n;
        }
        self.merge_raw(w, out);
    }

    /// Merge the SentencePiece-style symbols in `w.syms` and emit the result.
    fn merge_raw(&self, w: &mut MergeWork, out: &mut Vec<u32>) {
        self.merge(w);
        for i in 0..w.syms.len() {
            self.emit_raw(w.syms[i], out);
        }
    }

    /// Merge `w.syms` to the end, leaving the result in `w.syms`: a flat scan for short
    /// chunks, llama.cpp's heap for long ones.
    fn merge(&self, w: &mut MergeWork) {
        if w.syms.len() <= SCAN_MAX {
            self.merge_scan(w);
        } else {
            self.merge_heap(w);
        }
    }

    /// A SentencePiece-style symbol: a token, or its bytes as `<0xXX>` tokens.
    fn emit_raw(&self, sym: u32, out: &mut Vec<u32>) {
        if sym < self.n_vocab {
            out.push(sym);
        } else if let Some(bytes) = self.synth.get((sym - self.n_vocab) as usize) {
            self.fallback_raw(bytes, out);
        }
    }

    /// llama.cpp's fallback for non-byte-encoded BPE: each byte's `<0xXX>` token, and
    /// nothing for a byte the vocabulary lacks.
    fn fallback_raw(&self, bytes: &[u8], out: &mut Vec<u32>) {
        out.extend(bytes.iter().filter_map(|&b| self.byte_token[b as usize]));
    }

    #[inline]
    fn emit(&self, sym: u32, out: &mut Vec<u32>) {
        if sym < self.n_vocab {
            out.push(sym);
            return;
        }
        // llama.cpp looks each byte of the symbol's byte-level text up as a one-byte
        // token and drops the ones it does not find.
        let Some(bytes) = self.synth.get((sym - self.n_vocab) as usize) else {
            return;
        };
        for &b in bytes {
            let (enc, n) = unicode::byte_level_char(b);
            for &e in &enc[..n] {
                if let Some(t) = self.single_byte[e as usize] {
                    out.push(t);
                }
            }
        }
    }

    /// Flat-array merging of `w.syms`: find the lowest (rank, position) pair, merge,
    /// repeat.
    fn merge_scan(&self, w: &mut MergeWork) {
        w.ranks.clear();
        w.ranks
            .extend(w.syms.windows(2).map(|p| self.pairs.get(p[0], p[1])));
        loop {
            let mut best = u64::MAX;
            let mut at = 0;
            for (i, &r) in w.ranks.iter().enumerate() {
                if r < best {
                    best = r;
                    at = i;
                }
            }
            if best == u64::MAX {
                break;
            }
            w.syms[at] = best as u32;
            w.syms.remove(at + 1);
            w.ranks.remove(at);
            if at > 0 {
                w.ranks[at - 1] = self.pairs.get(w.syms[at - 1], w.syms[at]);
            }
            if at < w.ranks.len() {
                w.ranks[at] = self.pairs.get(w.syms[at], w.syms[at + 1]);
            }
        }
    }

    /// Heap merging of `w.syms` with a linked list (llama.cpp's algorithm, for long
    /// chunks); the surviving symbols are compacted back into `w.syms` in order.
    fn merge_heap(&self, w: &mut MergeWork) {
        let n = w.syms.len();
        if n == 0 {
            return;
        }
        w.next.clear();
        w.next
            .extend((1..=n).map(|i| if i < n { i as u32 } else { NONE }));
        w.prev.clear();
        w.prev
            .extend((0..n).map(|i| if i == 0 { NONE } else { i as u32 - 1 }));
        w.heap.clear();
        for i in 0..n - 1 {
            self.push_pair(w, i as u32, i as u32 + 1);
        }
        while let Some(Reverse((key, right, lsym, rsym))) = w.heap.pop() {
            let left = key as u32 as usize;
            let right = right as usize;
            if w.syms[left] != lsym || w.syms[right] != rsym || w.next[left] != right as u32 {
                continue; // stale: one side has merged since this pair was queued
            }
            let v = self.pairs.get(lsym, rsym);
            if v == u64::MAX {
                continue;
            }
            let merged = v as u32;
            w.syms[left] = merged;
            w.syms[right] = DEAD;
            let after = w.next[right];
            w.next[left] = after;
            if after != NONE {
                w.prev[after as usize] = left as u32;
            }
            if w.prev[left] != NONE {
                self.push_pair(w, w.prev[left], left as u32);
            }
            if after != NONE {
                self.push_pair(w, left as u32, after);
            }
        }
        // Alive symbols in list order; the k-th lies at index >= k, so this is in place.
        let (mut i, mut k) = (0u32, 0usize);
        while i != NONE {
            w.syms[k] = w.syms[i as usize];
            k += 1;
            i = w.next[i as usize];
        }
        w.syms.truncate(k);
    }

    #[inline]
    fn push_pair(&self, w: &mut MergeWork, left: u32, right: u32) {
        let (a, b) = (w.syms[left as usize], w.syms[right as usize]);
        let v = self.pairs.get(a, b);
        if v != u64::MAX {
            let rank = v >> 32;
            w.heap
                .push(Reverse(((rank << 32) | left as u64, right, a, b)));
        }
    }
}

const NONE: u32 = u32::MAX;
const DEAD: u32 = u32::MAX;

/// Reusable buffers for merging (one per encoding thread).
#[derive(Default)]
pub(crate) struct MergeWork {
    syms: Vec<u32>,
    ranks: Vec<u64>,
    next: Vec<u32>,
    prev: Vec<u32>,
    heap: BinaryHeap<Reverse<(u64, u32, u32, u32)>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pre_config::PreConfig;
    use crate::vocab::Texts;

    /// A random byte-level vocabulary over "abc " with `n` merges built bottom-up.
    fn random_bpe(seed: u64, n: usize) -> Bpe {
        let mut rng = seed;
        let mut next = || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) as usize
        };
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let mut merges = Vec::new();
        let alphabet: Vec<usize> = b"abc ".iter().map(|&b| b as usize).collect();
        let mut pool = alphabet.clone();
        while merges.len() < n {
            let (l, r) = (pool[next() % pool.len()], pool[next() % pool.len()]);
            let joined = [tokens[l].clone(), tokens[r].clone()].concat();
            if tokens.contains(&joined) {
                continue;
            }
            merges.push((l, r));
            tokens.push(joined);
            pool.push(tokens.len() - 1);
        }
        let enc = |raw: &[u8]| -> Vec<u8> {
            let mut s = Vec::new();
            for &b in raw {
                let (c, k) = unicode::byte_level_char(b);
                s.extend_from_slice(&c[..k]);
            }
            s
        };
        let mut texts = Texts::default();
        let mut index = StrMap::with_capacity(tokens.len(), 0);
        for (i, t) in tokens.iter().enumerate() {
            texts.push(&enc(t));
            index.insert(&enc(t), i as u32, true);
        }
        let merge_lines: fucina_gguf::StringArray = merges
            .iter()
            .map(|&(l, r)| [enc(&tokens[l]), b" ".to_vec(), enc(&tokens[r])].concat())
            .collect();
        let cfg = PreConfig::from_name("qwen2").expect("qwen2");
        Bpe::new(cfg, &texts, &index, Some(&merge_lines)).expect("bpe")
    }

    #[test]
    fn scan_and_heap_mergers_agree() {
        let mut rng = 7u64;
        for seed in 0..8 {
            let bpe = random_bpe(seed, 300);
            let mut w = MergeWork::default();
            for len in [2usize, 3, 5, 17, 64, 65, 200] {
                for _ in 0..20 {
                    let text: Vec<u8> = (0..len)
                        .map(|_| {
                            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
                            b"abc "[(rng >> 40) as usize % 4]
                        })
                        .collect();
                    let fill = |w: &mut MergeWork| {
                        w.syms.clear();
                        w.syms
                            .extend(text.iter().map(|&b| bpe.byte_sym[b as usize]));
                    };
                    fill(&mut w);
                    bpe.merge_scan(&mut w);
                    let mut scan = Vec::new();
                    for i in 0..w.syms.len() {
                        bpe.emit(w.syms[i], &mut scan);
                    }
                    let mut heap = Vec::new();
                    fill(&mut w);
                    bpe.merge_heap(&mut w);
                    for i in 0..w.syms.len() {
                        bpe.emit(w.syms[i], &mut heap);
                    }
                    assert_eq!(
                        scan,
                        heap,
                        "seed {seed}, text {:?}",
                        String::from_utf8_lossy(&text)
                    );
                }
            }
        }
    }
}
