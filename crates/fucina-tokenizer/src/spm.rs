//! SentencePiece encoding as llama.cpp does it (`llm_tokenizer_spm_session`): split
//! into UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the
//! highest-scoring token (leftmost on ties), then emit tokens, falling back to
//! `<0xXX>` byte tokens for characters the vocabulary lacks.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::error::{Result, TokenizerError};
use crate::vocab::Vocab;

/// Byte-fallback table, resolved once.
pub(crate) struct Spm {
    byte_tokens: [Option<u32>; 256],
}

#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
}

struct Bigram {
    score: f32,
    left: i32,
    right: i32,
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Higher score first; on equal scores the leftmost pair first.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Reusable buffers (one per encoding thread).
#[derive(Default)]
pub(crate) struct SpmWork {
    syms: Vec<Sym>,
    heap: BinaryHeap<Bigram>,
}

/// llama.cpp's `unicode_len_utf8`: the sequence length a lead byte announces.
#[inline]
fn utf8_len(b: u8) -> usize {
    const LOOKUP: [u8; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LOOKUP[(b >> 4) as usize] as usize
}

impl Spm {
    pub(crate) fn new(vocab: &Vocab) -> Self {
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            *slot = vocab
                .index
                .get(hex.as_bytes())
                .or_else(|| vocab.index.get(&[b as u8]));
        }
        Self { byte_tokens }
    }

    /// Encode already-escaped text (spaces as `▁`), appending ids to `out`.
    pub(crate) fn encode(
        &self,
        vocab: &Vocab,
        text: &[u8],
        w: &mut SpmWork,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        w.syms.clear();
        let mut offs = 0usize;
        while offs < text.len() {
            let n = utf8_len(text[offs]).min(text.len() - offs);
            let idx = w.syms.len() as i32;
            offs += n;
            w.syms.push(Sym {
                start: (offs - n) as u32,
                len: n as u32,
                prev: idx - 1,
                next: if offs == text.len() { -1 } else { idx + 1 },
            });
        }
        w.heap.clear();
        for i in 1..w.syms.len() as i32 {
            self.try_add(vocab, text, w, i - 1, i);
        }
        while let Some(b) = w.heap.pop() {
            let (l, r) = (w.syms[b.left as usize], w.syms[b.right as usize]);
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            let left = &mut w.syms[b.left as usize];
            left.len += r.len;
            left.next = r.next;
            let prev = left.prev;
            w.syms[b.right as usize].len = 0;
            if r.next >= 0 {
                w.syms[r.next as usize].prev = b.left;
            }
            self.try_add(vocab, text, w, prev, b.left);
            self.try_add(vocab, text, w, b.left, r.next);
        }
        let mut i = 0i32;
        while i != -1 {
            let s = w.syms[i as usize];
            let piece = &text[s.start as usize..(s.start + s.len) as usize];
            match vocab.index.get(piece) {
                Some(id) => out.push(id),
                None => {
                    for &byte in piece {
                        out.push(
                            self.byte_tokens[byte as usize]
                                .ok_or(TokenizerError::MissingByteToken { byte })?,
                        );
                    }
                }
            }
            i = s.next;
        }
        Ok(())
    }

    fn try_add(&self, vocab: &Vocab, text: &[u8], w: &mut SpmWork, left: i32, right: i32) {
        if left < 0 || right < 0 {
            return;
        }
        let (l, r) = (w.syms[left as usize], w.syms[right as usize]);
        let size = l.len + r.len;
        let piece = &text[l.start as usize..(l.start + size) as usize];
        if let Some(id) = vocab.index.get(piece) {
            let score = vocab.scores.get(id as usize).copied().unwrap_or(0.0);
            w.heap.push(Bigram {
                score,
                left,
                right,
                size,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bigram_order_is_score_then_leftmost() {
        let mut h = BinaryHeap::new();
        h.push(Bigram {
            score: -1.0,
            left: 3,
            right: 4,
            size: 2,
        });
        h.push(Bigram {
            score: -1.0,
            left: 1,
            right: 2,
            size: 2,
        });
        h.push(Bigram {
            score: -2.0,
            left: 0,
            right: 1,
            size: 2,
        });
        assert_eq!(h.pop().map(|b| b.left), Some(1));
        assert_eq!(h.pop().map(|b| b.left), Some(3));
        assert_eq!(h.pop().map(|b| b.left), Some(0));
    }
}
