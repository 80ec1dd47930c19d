//! The token environment llguidance computes masks over, built from our tokenizer.
//!
//! Every token is given as the bytes it renders to: byte-level BPE pieces decoded,
//! SentencePiece pieces unescaped (`▁` as a space), `<0xXX>` byte tokens as their byte
//! (the tokenizer's `token_to_piece` already holds exactly that). Control, unknown and
//! unused tokens and every end-of-generation token get llguidance's special-token
//! marker (a leading `0xFF`, a byte no UTF-8 text holds), so no grammar can spell them
//! from text; a grammar reaches them only by naming them. Ids past the tokenizer's
//! vocabulary (padding rows of the output matrix) are empty and never allowed.

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
    fn encode(&self, s: &[u8], special: bool) -> Vec<TokenId> {
        if !self.canonical {
            return self.trie.greedy_tokenize(s);
        }
        self.tokenizer
            .encode(s, false, special)
            .unwrap_or_else(|_| self.trie.greedy_tokenize(s))
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
        self.encode(s, false)
    }

    fn tokenize_bytes_special(&self, s: &[u8]) -> Vec<TokenId> {
        self.encode(s, true)
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.canonical
    }
}
