//! Streaming detokenization: emit only complete UTF-8, hold an incomplete tail.
//!
//! A token can end in the middle of a multi-byte character (byte-fallback tokens,
//! byte-level BPE pieces of emoji), so a terminal or an SSE stream must not print a
//! token's bytes as they come. [`Utf8Stream`] emits the longest valid prefix, holds
//! back a tail that may still become a character, and replaces bytes that cannot with
//! U+FFFD exactly as `String::from_utf8_lossy` would on the whole output: the
//! concatenation of everything emitted equals the lossy decoding of all bytes pushed.

use crate::error::Result;
use crate::tokenizer::Tokenizer;

/// Bytes in, complete characters out (no tokenizer involved).
#[derive(Clone, Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `bytes`; return the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        // A truncated sequence at the end: it may complete later.
                        None => {
                            rest = after;
                            break;
                        }
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }

    /// End of input: return whatever is held (an incomplete tail becomes U+FFFD).
    pub fn flush(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }

    /// Forget any held bytes.
    pub fn reset(&mut self) {
        self.pending.clear();
    }

    /// Bytes currently held back.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }
}

/// Token-by-token decoding for generation output (see [`Utf8Stream`]).
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    special: bool,
    stream: Utf8Stream,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder rendering CONTROL tokens as text when `special`.
    pub fn new(tokenizer: &'a Tokenizer, special: bool) -> Self {
        Self {
            tokenizer,
            special,
            stream: Utf8Stream::new(),
        }
    }

    /// Add one token; return the text completed by it (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        let piece = self.tokenizer.token_to_piece(id, self.special)?;
        Ok(self.stream.push(piece))
    }

    /// End of generation: return any held tail.
    pub fn flush(&mut self) -> String {
        self.stream.flush()
    }

    /// Start over (drops any held bytes).
    pub fn reset(&mut self) {
        self.stream.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_incomplete_characters() {
        let mut s = Utf8Stream::new();
        let euro = "€".as_bytes();
        assert_eq!(s.push(&euro[..1]), "");
        assert_eq!(s.push(&euro[1..2]), "");
        assert_eq!(s.push(&euro[2..]), "€");
        assert_eq!(s.push(b"a\xF0\x9F"), "a");
        assert_eq!(s.pending(), b"\xF0\x9F");
        assert_eq!(s.flush(), "\u{FFFD}");
    }

    #[test]
    fn matches_lossy_decoding_byte_by_byte() {
        let inputs: [&[u8]; 5] = [
            b"plain",
            "é€😀".as_bytes(),
            b"\xFF\xFEab",
            b"a\xE2\x82b\xF0\x9F\x98",
            b"\xED\xA0\x80x\xC3",
        ];
        for input in inputs {
            for split in 1..=3 {
                let mut s = Utf8Stream::new();
                let mut got = String::new();
                for chunk in input.chunks(split) {
                    got.push_str(&s.push(chunk));
                }
                got.push_str(&s.flush());
                assert_eq!(
                    got,
                    String::from_utf8_lossy(input),
                    "{input:?} in chunks of {split}"
                );
            }
        }
    }
}
