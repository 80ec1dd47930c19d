//! The token environment llguidance computes masks over, built from our tokenizer.
//!
//! Every token is given as the bytes it renders to: byte-level BPE pieces decoded,
//! SentencePiece pieces unescaped (`▁` as a space), `<0xXX>` byte tokens as their byte
//! (the tokenizer's `token_to_piece` already holds exactly that). Control, unknown and
//! unused tokens and every end-of-generation token get llguidance's special-token
//! marker (a leading `0xFF`, a byte no UTF-8 text holds), so no grammar can spell them
//! from text; a grammar reaches them only by naming them. Ids past the tokenizer's
//! vocabulary (padding rows of the output matrix) are empty and never allowed.
//!
//! llguidance commits the tokens it gets from tokenizing forced bytes as exactly those
//! bytes, so that tokenization must spell them in the trie. The model's own tokenizer
//! does not always: a SentencePiece vocabulary reads a literal `▁` (its space escape) as
//! a space, so DeepSeek's `<｜tool▁calls▁begin｜>` written as text comes back as
//! `tool`, `▁calls`, ... whose bytes are `tool calls`. Such characters are spelled by
//! their bytes (`Vocab::spell`).

use std::sync::Arc;

use fucina_tokenizer::{attr, Tokenizer};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// Our tokenizer as llguidance's `TokenizerEnv`.
pub struct Vocab {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
    canonical: bool,
}

impl Vocab {
    /// The environment for `tokenizer` over a logits row of `n_vocab` entries (the
    /// model's output size, which may exceed the tokenizer's vocabulary).
    pub fn new(tokenizer: Arc<Tokenizer>, n_vocab: usize) -> Vocab {
        let n = n_vocab.max(tokenizer.vocab_size());
        let mut words = Vec::with_capacity(n);
        for id in 0..n as u32 {
            words.push(token_bytes(&tokenizer, id));
        }
        let eos = tokenizer
            .eot_id()
            .or(tokenizer.eos_id())
            .or_else(|| tokenizer.eog_ids().first().copied())
            .unwrap_or(0);
        let info = TokRxInfo {
            vocab_size: n as u32,
            tok_eos: eos,
            tok_bos: tokenizer.bos_id(),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: tokenizer.eot_id(),
        };
        let mut eog: Vec<TokenId> = vec![eos];
        eog.extend(tokenizer.eog_ids().iter().filter(|&&t| t != eos));
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        // Forced tokens come from tokenizing forced bytes; that is only the model's own
        // tokenization where encoding adds nothing in front (no SentencePiece space
        // prefix).
        let canonical = !tokenizer.add_space_prefix();
        Vocab {
            tokenizer,
            trie,
            canonical,
        }
    }

    /// As llguidance's shared handle.
    pub fn into_env(self) -> TokEnv {
        Arc::new(self)
    }
}

impl Vocab {
    /// `s` in the model's tokenization, as far as that spells `s` in the trie; a
    /// character it reads as something else is spelled by its bytes (the vocabulary's
    /// byte tokens) and the rest tokenized again after it. Empty when some byte of `s`
    /// has no token at all: nothing is forced then, and the masks, computed from the
    /// grammar's state, allow only what the vocabulary can spell.
    fn spell(&self, s: &[u8]) -> Vec<TokenId> {
        if !self.canonical {
            return self.trie.greedy_tokenize(s);
        }
        let mut out = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            let ids = self
                .tokenizer
                .encode(rest, false, false)
                .unwrap_or_default();
            let mut at = 0;
            for &id in &ids {
                let bytes = self.trie.token(id);
                if bytes.is_empty() || !rest[at..].starts_with(bytes) {
                    break;
                }
                out.push(id);
                at += bytes.len();
            }
            rest = &rest[at..];
            if rest.is_empty() {
                break;
            }
            let n = char_len(rest);
            let bytes = self.trie.greedy_tokenize(&rest[..n]);
            if self.trie.decode_raw(&bytes) != rest[..n] {
                return Vec::new();
            }
            out.extend(bytes);
            rest = &rest[n..];
        }
        out
    }
}

/// The length of the UTF-8 character `s` starts with (1 for a byte that starts none).
fn char_len(s: &[u8]) -> usize {
    let n = match s.first() {
        Some(b) if *b >= 0xF0 => 4,
        Some(b) if *b >= 0xE0 => 3,
        Some(b) if *b >= 0xC0 => 2,
        _ => 1,
    };
    match s.get(..n) {
        Some(c) if std::str::from_utf8(c).is_ok() => n,
        _ => 1,
    }
}

/// The bytes token `id` stands for in the trie.
fn token_bytes(tokenizer: &Tokenizer, id: u32) -> Vec<u8> {
    let Some(a) = tokenizer.token_attr(id) else {
        return Vec::new();
    };
    let special = a & (attr::CONTROL | attr::UNKNOWN | attr::UNUSED) != 0 || tokenizer.is_eog(id);
    if special {
        let text = tokenizer.token_text(id).unwrap_or_default();
        let mut w = Vec::with_capacity(text.len() + 1);
        w.push(TokTrie::SPECIAL_TOKEN_MARKER);
        w.extend_from_slice(text);
        return w;
    }
    tokenizer
        .token_to_piece(id, true)
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

impl TokenizerEnv for Vocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.spell(s)
    }

    fn tokenize_bytes_special(&self, s: &[u8]) -> Vec<TokenId> {
        if !self.canonical {
            return self.trie.greedy_tokenize(s);
        }
        self.tokenizer
            .encode(s, false, true)
            .unwrap_or_else(|_| self.trie.greedy_tokenize(s))
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.canonical
    }
}
