//! Codepoint facts exactly as llama.cpp has them: category flags (from the generated
//! tables), its lenient UTF-8 decoding, and the GPT-2 byte <-> codepoint map.
//!
//! llama.cpp decodes UTF-8 leniently (overlong forms and surrogates pass, each bad
//! byte becomes U+FFFD) and byte-level BPE then re-encodes the codepoints, so the
//! bytes a BPE tokenizer sees are [`normalize_lenient`]'s output, not the input.

use std::sync::LazyLock;

use crate::unicode_tables::{CATEGORY_RANGES, LOWER_TO_ASCII, WHITESPACE};

/// `\p{N}`.
pub(crate) const NUMBER: u8 = 0x01;
/// `\p{L}`.
pub(crate) const LETTER: u8 = 0x02;
/// `\p{M}`.
pub(crate) const MARK: u8 = 0x04;
/// `\p{P}`.
pub(crate) const PUNCT: u8 = 0x08;
/// `\p{S}`.
pub(crate) const SYMBOL: u8 = 0x10;
/// `\s` as llama.cpp defines it.
pub(crate) const WHITESPACE_FLAG: u8 = 0x20;
/// Set for every codepoint (llama.cpp's "flags are non-zero" test); absent only for
/// positions outside the chunk being split.
pub(crate) const DEFINED: u8 = 0x80;

const BLOCK: usize = 256;
const N_BLOCKS: usize = 0x110000 / BLOCK;

/// Two-stage lookup: `blocks[cp / 256]` selects a deduplicated 256-entry page.
pub(crate) struct FlagTable {
    blocks: Vec<u16>,
    pages: Vec<u8>,
}

impl FlagTable {
    fn build() -> Self {
        let mut flat = vec![0u8; 0x110000];
        for (i, &(start, f)) in CATEGORY_RANGES.iter().enumerate() {
            let end = CATEGORY_RANGES.get(i + 1).map_or(0x110000, |r| r.0) as usize;
            flat[start as usize..end].fill(f | DEFINED);
        }
        for &cp in &WHITESPACE {
            flat[cp as usize] |= WHITESPACE_FLAG;
        }
        let mut blocks = Vec::with_capacity(N_BLOCKS);
        let mut pages: Vec<u8> = Vec::new();
        let mut seen: std::collections::HashMap<&[u8], u16> = std::collections::HashMap::new();
        for chunk in flat.chunks(BLOCK) {
            let next = (pages.len() / BLOCK) as u16;
            let id = *seen.entry(chunk).or_insert(next);
            if id == next {
                pages.extend_from_slice(chunk);
            }
            blocks.push(id);
        }
        Self { blocks, pages }
    }

    /// Flags of `cp`; codepoints past U+10FFFF are llama.cpp's "undefined" (no category).
    #[inline]
    pub(crate) fn get(&self, cp: u32) -> u8 {
        let hi = (cp >> 8) as usize;
        match self.blocks.get(hi) {
            Some(&page) => self.pages[((page as usize) << 8) | (cp as usize & 0xFF)],
            None => DEFINED,
        }
    }
}

static TABLE: LazyLock<FlagTable> = LazyLock::new(FlagTable::build);

/// The shared flag table (built on first use, about 40 KB).
pub(crate) fn table() -> &'static FlagTable {
    &TABLE
}

/// llama.cpp's `unicode_tolower`, restricted to what the contraction rules ask:
/// the ASCII letter `cp` lowercases to, if any.
#[inline]
pub(crate) fn lower_ascii(cp: u32) -> Option<u8> {
    if cp < 0x80 {
        return Some((cp as u8).to_ascii_lowercase());
    }
    LOWER_TO_ASCII
        .iter()
        .find(|&&(c, _)| c == cp)
        .map(|&(_, l)| l)
}

/// Decode one codepoint at `s[i]` with llama.cpp's `unicode_cpt_from_utf8` rules and
/// its catch-all (a bad byte is U+FFFD and advances one byte). Codepoints above
/// U+10FFFF, which llama.cpp decodes but then fails to re-encode, are U+FFFD too.
#[inline]
pub(crate) fn decode_lenient(s: &[u8], i: usize) -> (u32, usize) {
    const BAD: (u32, usize) = (0xFFFD, 1);
    let b0 = s[i] as u32;
    if b0 < 0x80 {
        return (b0, 1);
    }
    let cont = |k: usize| {
        s.get(i + k)
            .filter(|&&b| b & 0xC0 == 0x80)
            .map(|&b| (b & 0x3F) as u32)
    };
    if b0 & 0x40 == 0 {
        return BAD;
    }
    if b0 & 0x20 == 0 {
        return match cont(1) {
            Some(c1) => (((b0 & 0x1F) << 6) | c1, 2),
            None => BAD,
        };
    }
    if b0 & 0x10 == 0 {
        return match (cont(1), cont(2)) {
            (Some(c1), Some(c2)) => (((b0 & 0x0F) << 12) | (c1 << 6) | c2, 3),
            _ => BAD,
        };
    }
    if b0 & 0x08 == 0 {
        return match (cont(1), cont(2), cont(3)) {
            (Some(c1), Some(c2), Some(c3)) => {
                let cp = ((b0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3;
                if cp > 0x10FFFF {
                    BAD
                } else {
                    (cp, 4)
                }
            }
            _ => BAD,
        };
    }
    BAD
}

/// llama.cpp's `unicode_len_utf8`: the length of a sequence from its lead byte.
#[inline]
pub(crate) fn utf8_len(b: u8) -> usize {
    const LEN: [u8; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LEN[(b >> 4) as usize] as usize
}

/// Append the UTF-8 encoding of `cp` (surrogates included, as llama.cpp writes them).
#[inline]
pub(crate) fn push_utf8(out: &mut Vec<u8>, cp: u32) {
    if cp < 0x80 {
        out.push(cp as u8);
    } else if cp < 0x800 {
        out.extend_from_slice(&[0xC0 | (cp >> 6) as u8, 0x80 | (cp & 0x3F) as u8]);
    } else if cp < 0x10000 {
        out.extend_from_slice(&[
            0xE0 | (cp >> 12) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]);
    } else {
        out.extend_from_slice(&[
            0xF0 | (cp >> 18) as u8,
            0x80 | ((cp >> 12) & 0x3F) as u8,
            0x80 | ((cp >> 6) & 0x3F) as u8,
            0x80 | (cp & 0x3F) as u8,
        ]);
    }
}

/// Rewrite `s` into `out` the way llama.cpp's decode/re-encode round trip does:
/// identical for valid UTF-8, U+FFFD for each byte that starts no valid sequence.
pub(crate) fn normalize_lenient(s: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(s.len() + 8);
    let mut i = 0;
    while i < s.len() {
        let (cp, n) = decode_lenient(s, i);
        push_utf8(out, cp);
        i += n;
    }
}

/// GPT-2's byte -> codepoint map (printable Latin-1 bytes map to themselves, the rest
/// to U+0100.. in byte order).
pub(crate) const fn byte_to_codepoint_table() -> [u16; 256] {
    let mut map = [0u16; 256];
    let mut n = 0u16;
    let mut b = 0usize;
    while b < 256 {
        let printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if printable {
            map[b] = b as u16;
        } else {
            map[b] = 256 + n;
            n += 1;
        }
        b += 1;
    }
    map
}

/// Byte -> codepoint, see [`byte_to_codepoint_table`].
pub(crate) static BYTE_TO_CP: [u16; 256] = byte_to_codepoint_table();

/// Codepoint -> byte for the 256 codepoints of the byte-level alphabet.
pub(crate) fn codepoint_to_byte(cp: u32) -> Option<u8> {
    static INV: LazyLock<[i16; 324]> = LazyLock::new(|| {
        let mut inv = [-1i16; 324];
        for (b, &cp) in BYTE_TO_CP.iter().enumerate() {
            inv[cp as usize] = b as i16;
        }
        inv
    });
    INV.get(cp as usize).and_then(|&b| u8::try_from(b).ok())
}

/// A byte-level vocabulary string back to raw bytes, appended to `out`; `false` (with
/// `out` partly written) if it holds a character outside the 256-codepoint alphabet
/// (such a token can never be produced by merges).
pub(crate) fn byte_level_decode_into(text: &[u8], out: &mut Vec<u8>) -> bool {
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if b < 0x80 {
            // Printable ASCII except space stands for itself; anything else is outside.
            if !(0x21..=0x7E).contains(&b) {
                return false;
            }
            out.push(b);
            i += 1;
            continue;
        }
        // The alphabet lies below U+0144: two-byte sequences with lead C2..C5.
        let Some(&c) = text.get(i + 1) else {
            return false;
        };
        if !(0xC2..=0xC5).contains(&b) || c & 0xC0 != 0x80 {
            return false;
        }
        match codepoint_to_byte((((b & 0x1F) as u32) << 6) | (c & 0x3F) as u32) {
            Some(raw) => out.push(raw),
            None => return false,
        }
        i += 2;
    }
    true
}

/// [`byte_level_decode_into`] into a new vector.
#[cfg(test)]
pub(crate) fn byte_level_decode(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    byte_level_decode_into(text, &mut out).then_some(out)
}

/// The UTF-8 bytes of raw byte `b`'s byte-level character (1 or 2 bytes).
pub(crate) fn byte_level_char(b: u8) -> ([u8; 2], usize) {
    let cp = BYTE_TO_CP[b as usize] as u32;
    if cp < 0x80 {
        ([cp as u8, 0], 1)
    } else {
        ([0xC0 | (cp >> 6) as u8, 0x80 | (cp & 0x3F) as u8], 2)
    }
}

/// llama.cpp's `llama_decode_text`: render a byte-level token text as raw bytes, with
/// its `[UNK_BYTE_0x..]` marker for characters outside the alphabet.
pub(crate) fn llama_decode_text(text: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    if byte_level_decode_into(text, out) {
        return;
    }
    out.truncate(start);
    let mut i = 0;
    while i < text.len() {
        let (cp, n) = decode_lenient(text, i);
        i += n;
        match codepoint_to_byte(cp) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut enc = Vec::with_capacity(4);
                push_utf8(&mut enc, cp);
                for b in enc {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text);
                out.push(b']');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_match_known_codepoints() {
        let t = table();
        assert_eq!(t.get('a' as u32) & LETTER, LETTER);
        assert_eq!(t.get('7' as u32) & NUMBER, NUMBER);
        assert_eq!(t.get(' ' as u32), DEFINED | WHITESPACE_FLAG);
        assert_eq!(t.get(0x0301) & MARK, MARK, "combining acute is \\p{{M}}");
        assert_eq!(t.get(0x4E2D) & LETTER, LETTER, "CJK ideograph is \\p{{L}}");
        assert_eq!(
            t.get(0x0966) & NUMBER,
            NUMBER,
            "Devanagari zero is \\p{{N}}"
        );
        assert_eq!(t.get('$' as u32) & SYMBOL, SYMBOL);
        assert_eq!(t.get('!' as u32) & PUNCT, PUNCT);
        assert_eq!(t.get(0x3000) & WHITESPACE_FLAG, WHITESPACE_FLAG);
        assert_eq!(t.get(0x1F600) & SYMBOL, SYMBOL, "emoji is \\p{{S}}");
        assert_eq!(
            t.get(0x10FFFF),
            DEFINED,
            "noncharacter: defined, no category"
        );
        assert_eq!(t.get(0x110000), DEFINED);
    }

    #[test]
    fn lenient_decoding_matches_llama_cpp_rules() {
        assert_eq!(
            decode_lenient(b"\xC0\x80", 0),
            (0, 2),
            "overlong NUL is accepted"
        );
        assert_eq!(
            decode_lenient(b"\xED\xA0\x80", 0),
            (0xD800, 3),
            "surrogates are accepted"
        );
        assert_eq!(decode_lenient(b"\x80", 0), (0xFFFD, 1));
        assert_eq!(
            decode_lenient(b"\xE2\x82", 0),
            (0xFFFD, 1),
            "truncated sequence"
        );
        assert_eq!(decode_lenient(b"\xF8\x88\x80\x80", 0), (0xFFFD, 1));
        assert_eq!(decode_lenient("€".as_bytes(), 0), (0x20AC, 3));
        let mut out = Vec::new();
        normalize_lenient(b"a\xFFb\xC3", &mut out);
        assert_eq!(out, "a\u{FFFD}b\u{FFFD}".as_bytes());
    }

    #[test]
    fn byte_level_map_is_a_bijection() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let cp = BYTE_TO_CP[b as usize] as u32;
            assert!(seen.insert(cp));
            assert_eq!(codepoint_to_byte(cp), Some(b));
        }
        assert_eq!(BYTE_TO_CP[b' ' as usize], 0x120, "space is 'Ġ'");
        assert_eq!(
            byte_level_decode("Ġhello".as_bytes()).as_deref(),
            Some(&b" hello"[..])
        );
        assert_eq!(
            byte_level_decode(b"a b"),
            None,
            "raw space is outside the alphabet"
        );
    }
}
