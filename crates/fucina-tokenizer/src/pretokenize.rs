//! Byte-level BPE pretokenizers: the chunkers llama.cpp selects by `tokenizer.ggml.pre`,
//! hand-written (no regex engine) and split-for-split identical to llama.cpp's.
//!
//! llama.cpp has hand-rolled loops for the gpt2, llama3 and qwen2/qwen35 regexes
//! (`unicode_regex_split_custom_*`) and runs every other regex through `std::regex`
//! on a "collapsed" string (one byte per codepoint, non-ASCII codepoints replaced by
//! a per-category byte). The deepseek-v3 family and the `\p{N}` pre-split of the
//! starcoder family take that second route, so their chunkers here reproduce
//! ECMAScript leftmost-first alternation over those collapsed categories, including
//! how unmatched stretches become chunks of their own.
//!
//! All chunkers work on a decoded codepoint array ([`Cps`]) and append chunk end
//! positions (codepoint indices) to `ends`.

use crate::unicode::{self, LETTER, MARK, NUMBER, WHITESPACE_FLAG};

/// A pretokenizer family (one chunking rule set; many `tokenizer.ggml.pre` names map to each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pre {
    /// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
    Gpt2,
    /// Each `\p{N}` on its own, then [`Pre::Gpt2`] (starcoder, refact, command-r, smollm, ...).
    Starcoder,
    /// Llama 3 (and GLM-4): case-insensitive contractions, letters with one leading
    /// non-letter, digit runs of up to three, punctuation runs, newline-aware whitespace.
    Llama3,
    /// Qwen2: as [`Pre::Llama3`] but every digit is its own chunk.
    Qwen2,
    /// Qwen3.5: as [`Pre::Qwen2`] with combining marks (`\p{M}`) in the letter class.
    Qwen35,
    /// DeepSeek-V3 (also hunyuan-dense, joyai-llm, hy_v4): digit triples, CJK/kana runs,
    /// then `[punct][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|...`.
    DeepseekV3,
    /// GPT-4o / o200k (also llama4, kanana2, talkie, minimax-m2) as llama.cpp runs it:
    /// `[^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|...`
    /// on the collapsed string, where `U` is "a letter but not `a-z`" and `L` "a letter
    /// but not `A-Z`" (so non-ASCII letters are in both), `C` the ASCII contractions.
    /// Combining marks are not letters here: a mark after a letter starts a new chunk.
    Gpt4o,
    /// The spec's `inkling` (and llama.cpp's granite-embed-multi-97m): [`Pre::Gpt4o`]
    /// with `\p{M}` in both word classes, so combining marks attach to base letters.
    Inkling,
}

/// How a `tokenizer.ggml.pre` name configures the BPE tokenizer, as llama.cpp's loader does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreConfig {
    pub pre: Pre,
    /// Take a chunk that is itself a token whole, without merging (llama3 family).
    pub ignore_merges: bool,
    /// The loader's default for add_bos before metadata overrides it.
    pub add_bos_default: bool,
    /// The loader disables the default BOS id (chatglm/glm4).
    pub no_default_bos: bool,
}

/// `(names, family, ignore_merges, add_bos default, no default BOS)`, in llama.cpp's terms.
const NAMES: &[(&[&str], Pre, bool, bool, bool)] = &[
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        Pre::Llama3,
        true,
        true,
        false,
    ),
    (&["dbrx", "smaug-bpe"], Pre::Llama3, false, false, false),
    (&["chatglm-bpe"], Pre::Llama3, false, false, true),
    (&["glm4", "glm5"], Pre::Llama3, true, false, true),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
            "grok-2",
        ],
        Pre::Qwen2,
        false,
        false,
        false,
    ),
    (&["qwen35"], Pre::Qwen35, false, false, false),
    (
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        ],
        Pre::Gpt2,
        false,
        false,
        false,
    ),
    (
        &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        Pre::Starcoder,
        false,
        false,
        false,
    ),
    (
        &["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
        Pre::DeepseekV3,
        false,
        false,
        false,
    ),
    (
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        Pre::Gpt4o,
        false,
        false,
        false,
    ),
    (&["inkling"], Pre::Inkling, false, false, false),
    (
        &["granite-embed-multi-97m"],
        Pre::Inkling,
        true,
        false,
        false,
    ),
];

impl PreConfig {
    /// The configuration for a `tokenizer.ggml.pre` value, or `None` if not implemented.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        NAMES.iter().find(|e| e.0.contains(&name)).map(
            |&(_, pre, ignore_merges, add_bos_default, no_default_bos)| Self {
                pre,
                ignore_merges,
                add_bos_default,
                no_default_bos,
            },
        )
    }
}

/// Every `tokenizer.ggml.pre` value this crate implements, comma separated.
pub(crate) fn known_names() -> String {
    NAMES
        .iter()
        .flat_map(|e| e.0.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A decoded chunk: codepoints, their flags, and byte offsets (`offs[i]` is where
/// codepoint `i` starts; `offs[len]` is the end).
#[derive(Default)]
pub(crate) struct Cps {
    pub cp: Vec<u32>,
    pub fl: Vec<u8>,
    pub offs: Vec<u32>,
}

impl Cps {
    /// Decode `s` (already normalised, so every sequence decodes) into the arrays.
    pub(crate) fn load(&mut self, s: &[u8]) {
        let t = unicode::table();
        self.cp.clear();
        self.fl.clear();
        self.offs.clear();
        let mut i = 0;
        while i < s.len() {
            let b = s[i];
            let (c, n) = if b < 0x80 {
                (b as u32, 1)
            } else {
                unicode::decode_lenient(s, i)
            };
            self.cp.push(c);
            self.fl.push(t.get(c));
            self.offs.push(i as u32);
            i += n;
        }
        self.offs.push(s.len() as u32);
    }
}

const OOR: u32 = u32::MAX;

/// Bounded view of one chunk `[ini, end)` with llama.cpp's out-of-range conventions.
struct View<'a> {
    cp: &'a [u32],
    fl: &'a [u8],
    end: usize,
}

impl View<'_> {
    #[inline]
    fn cpt(&self, i: usize) -> u32 {
        if i < self.end {
            self.cp[i]
        } else {
            OOR
        }
    }
    #[inline]
    fn flags(&self, i: usize) -> u8 {
        if i < self.end {
            self.fl[i]
        } else {
            0
        }
    }
}

#[inline]
fn is_rn(c: u32) -> bool {
    c == b'\r' as u32 || c == b'\n' as u32
}

/// Split the whole decoded string with `pre`, appending chunk ends to `ends`;
/// `tmp` is scratch for the multi-stage families.
pub(crate) fn split(pre: Pre, cps: &Cps, ends: &mut Vec<u32>, tmp: &mut Vec<u32>) {
    let n = cps.cp.len() as u32;
    ends.clear();
    if n == 0 {
        return;
    }
    match pre {
        Pre::Gpt2 => gpt2(cps, 0, n as usize, ends),
        Pre::Llama3 => llama3::<3, false>(cps, 0, n as usize, ends),
        Pre::Qwen2 => llama3::<1, false>(cps, 0, n as usize, ends),
        Pre::Qwen35 => llama3::<1, true>(cps, 0, n as usize, ends),
        Pre::Starcoder => {
            tmp.clear();
            crate::pretokenize_regex::digits_each(cps, 0, n as usize, tmp);
            stage(cps, tmp, ends, gpt2);
        }
        Pre::DeepseekV3 => {
            ends.clear();
            crate::pretokenize_regex::digit_triples(cps, 0, n as usize, ends);
            tmp.clear();
            stage(cps, ends, tmp, crate::pretokenize_regex::cjk_runs);
            ends.clear();
            stage(cps, tmp, ends, crate::pretokenize_regex::deepseek_v3_main);
        }
        Pre::Gpt4o => crate::pretokenize_regex::o200k_main::<false>(cps, 0, n as usize, ends),
        Pre::Inkling => crate::pretokenize_regex::o200k_main::<true>(cps, 0, n as usize, ends),
    }
}

impl Pre {
    /// Split `text` into this pretokenizer's chunks, returning each chunk's end as a
    /// byte offset (the last is `text.len()`; an empty text has no chunks). This is
    /// the chunking the BPE encoder applies after special-token partitioning.
    pub fn chunk_ends(self, text: &str) -> Vec<usize> {
        let mut cps = Cps::default();
        cps.load(text.as_bytes());
        let (mut ends, mut tmp) = (Vec::new(), Vec::new());
        split(self, &cps, &mut ends, &mut tmp);
        ends.iter()
            .filter_map(|&e| cps.offs.get(e as usize).map(|&o| o as usize))
            .collect()
    }
}

/// Run `f` over each chunk of `prev` (chunk ends), appending the refined ends to `out`.
fn stage(cps: &Cps, prev: &[u32], out: &mut Vec<u32>, f: fn(&Cps, usize, usize, &mut Vec<u32>)) {
    let mut start = 0usize;
    for &e in prev {
        f(cps, start, e as usize, out);
        start = e as usize;
    }
}

/// llama.cpp `unicode_regex_split_custom_gpt2` over chunk `[ini, end)`.
pub(crate) fn gpt2(cps: &Cps, ini: usize, end: usize, ends: &mut Vec<u32>) {
    let v = View {
        cp: &cps.cp,
        fl: &cps.fl,
        end,
    };
    let mut pos = ini;
    let add = |e: usize, ends: &mut Vec<u32>| ends.push(e as u32);
    while pos < end {
        let cpt = v.cpt(pos);
        let flags = v.flags(pos);
        if cpt == '\'' as u32 && pos + 1 < end {
            let n1 = v.cpt(pos + 1);
            if n1 == 's' as u32 || n1 == 't' as u32 || n1 == 'm' as u32 || n1 == 'd' as u32 {
                pos += 2;
                add(pos, ends);
                continue;
            }
            if pos + 2 < end {
                let n2 = v.cpt(pos + 2);
                let pair = (char::from_u32(n1), char::from_u32(n2));
                if matches!(
                    pair,
                    (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
                ) {
                    pos += 3;
                    add(pos, ends);
                    continue;
                }
            }
        }
        let space = cpt == ' ' as u32;
        let mut f2 = if space { v.flags(pos + 1) } else { flags };
        if f2 & LETTER != 0 {
            pos += space as usize;
            while f2 & LETTER != 0 {
                pos += 1;
                f2 = v.flags(pos);
            }
            add(pos, ends);
            continue;
        }
        if f2 & NUMBER != 0 {
            pos += space as usize;
            while f2 & NUMBER != 0 {
                pos += 1;
                f2 = v.flags(pos);
            }
            add(pos, ends);
            continue;
        }
        let other = |f: u8| f & (WHITESPACE_FLAG | LETTER | NUMBER) == 0 && f != 0;
        if other(f2) {
            pos += space as usize;
            while other(f2) {
                pos += 1;
                f2 = v.flags(pos);
            }
            add(pos, ends);
            continue;
        }
        let mut nws = 0;
        while v.flags(pos + nws) & WHITESPACE_FLAG != 0 {
            nws += 1;
        }
        if nws > 1 && v.cpt(pos + nws) != OOR {
            pos += nws - 1;
            add(pos, ends);
            continue;
        }
        if nws > 0 {
            pos += nws;
            add(pos, ends);
            continue;
        }
        pos += 1;
        add(pos, ends);
    }
}

/// llama.cpp `unicode_regex_split_custom_llama3` (`NUM_MAX = 3`, `MARKS = false`),
/// `_qwen2` (`1`, `false`) and `_qwen35` (`1`, `true`) over chunk `[ini, end)`.
fn llama3<const NUM_MAX: usize, const MARKS: bool>(
    cps: &Cps,
    ini: usize,
    end: usize,
    ends: &mut Vec<u32>,
) {
    let v = View {
        cp: &cps.cp,
        fl: &cps.fl,
        end,
    };
    let word = if MARKS { LETTER | MARK } else { LETTER };
    let mut pos = ini;
    while pos < end {
        let cpt = v.cpt(pos);
        let flags = v.flags(pos);

        if cpt == '\'' as u32 && pos + 1 < end {
            let n1 = unicode::lower_ascii(v.cpt(pos + 1));
            if matches!(n1, Some(b's' | b't' | b'm' | b'd')) {
                pos += 2;
                ends.push(pos as u32);
                continue;
            }
            if pos + 2 < end {
                let n2 = unicode::lower_ascii(v.cpt(pos + 2));
                if matches!(
                    (n1, n2),
                    (Some(b'r'), Some(b'e')) | (Some(b'v'), Some(b'e')) | (Some(b'l'), Some(b'l'))
                ) {
                    pos += 3;
                    ends.push(pos as u32);
                    continue;
                }
            }
        }

        if !(is_rn(cpt) || flags & NUMBER != 0)
            && (flags & word != 0 || v.flags(pos + 1) & word != 0)
        {
            pos += 1;
            while v.flags(pos) & word != 0 {
                pos += 1;
            }
            ends.push(pos as u32);
            continue;
        }

        if flags & NUMBER != 0 {
            if NUM_MAX == 1 {
                pos += 1;
            } else {
                let mut ini_n = pos;
                while v.flags(pos) & NUMBER != 0 {
                    pos += 1;
                    if pos - ini_n >= NUM_MAX {
                        ends.push(pos as u32);
                        ini_n = pos;
                    }
                }
                // A run of exactly NUM_MAX digits already pushed its end.
                if ends.last() == Some(&(pos as u32)) {
                    continue;
                }
            }
            ends.push(pos as u32);
            continue;
        }

        let stop = WHITESPACE_FLAG | LETTER | NUMBER | if MARKS { MARK } else { 0 };
        let mut f2 = if cpt == ' ' as u32 {
            v.flags(pos + 1)
        } else {
            flags
        };
        if f2 & stop == 0 && flags != 0 {
            pos += (cpt == ' ' as u32) as usize;
            while f2 & stop == 0 && f2 != 0 {
                pos += 1;
                f2 = v.flags(pos);
            }
            while is_rn(v.cpt(pos)) {
                pos += 1;
            }
            ends.push(pos as u32);
            continue;
        }

        let mut nws = 0;
        let mut last_rn = None;
        while v.flags(pos + nws) & WHITESPACE_FLAG != 0 {
            if is_rn(v.cpt(pos + nws)) {
                last_rn = Some(pos + nws + 1);
            }
            nws += 1;
        }
        if let Some(e) = last_rn {
            pos = e;
            ends.push(pos as u32);
            continue;
        }
        if nws > 1 && v.cpt(pos + nws) != OOR {
            pos += nws - 1;
            ends.push(pos as u32);
            continue;
        }
        if nws > 0 {
            pos += nws;
            ends.push(pos as u32);
            continue;
        }
        pos += 1;
        ends.push(pos as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(pre: Pre, s: &str) -> Vec<String> {
        let mut cps = Cps::default();
        cps.load(s.as_bytes());
        let (mut ends, mut tmp) = (Vec::new(), Vec::new());
        split(pre, &cps, &mut ends, &mut tmp);
        let mut out = Vec::new();
        let mut start = 0usize;
        for &e in &ends {
            let (a, b) = (cps.offs[start] as usize, cps.offs[e as usize] as usize);
            out.push(s[a..b].to_string());
            start = e as usize;
        }
        assert_eq!(out.concat(), s, "chunks must tile the input");
        out
    }

    #[test]
    fn qwen2_chunks_like_its_regex() {
        assert_eq!(
            chunks(Pre::Qwen2, "Hello, world! It's 2024.\n\n  ok"),
            [
                "Hello", ",", " world", "!", " It", "'s", " ", "2", "0", "2", "4", ".\n\n", " ",
                " ok"
            ]
        );
        assert_eq!(
            chunks(Pre::Qwen2, "I'LL  go   \n x"),
            ["I", "'LL", " ", " go", "   \n", " x"]
        );
    }

    #[test]
    fn llama3_groups_digits_by_three() {
        assert_eq!(chunks(Pre::Llama3, "1234567 x"), ["123", "456", "7", " x"]);
        assert_eq!(chunks(Pre::Llama3, "123"), ["123"]);
    }

    #[test]
    fn qwen35_keeps_marks_with_letters() {
        assert_eq!(chunks(Pre::Qwen2, "e\u{301}x"), ["e", "\u{301}x"]);
        assert_eq!(chunks(Pre::Qwen35, "e\u{301}x"), ["e\u{301}x"]);
    }

    #[test]
    fn gpt2_contractions_are_case_sensitive() {
        assert_eq!(
            chunks(Pre::Gpt2, "it's IT'S"),
            ["it", "'s", " IT", "'", "S"]
        );
        assert_eq!(chunks(Pre::Starcoder, "x 123"), ["x", " ", "1", "2", "3"]);
    }

    #[test]
    fn gpt4o_follows_the_o200k_regex() {
        assert_eq!(
            chunks(Pre::Gpt4o, "Hello, WORLD! I'm HTTPServer 12345\n\n  x"),
            [
                "Hello",
                ",",
                " WORLD",
                "!",
                " I'm",
                " HTTPServer",
                " ",
                "123",
                "45",
                "\n\n",
                " ",
                " x"
            ]
        );
        assert_eq!(
            chunks(Pre::Gpt4o, "!abc a//b .\n/x"),
            ["!abc", " a", "//", "b", " .\n/", "x"]
        );
        // Non-ASCII letters are in both case classes: no split inside "aÉb", and in
        // "ÉCOLE" the lower class can only end at É (llama.cpp's collapsed semantics).
        assert_eq!(chunks(Pre::Gpt4o, "aÉb ÉCOLE"), ["aÉb", " É", "COLE"]);
        assert_eq!(chunks(Pre::Gpt4o, "YOU'RE"), ["YOU'RE"]);
    }

    #[test]
    fn inkling_keeps_marks_with_letters() {
        assert_eq!(chunks(Pre::Gpt4o, "e\u{301}x"), ["e", "\u{301}x"]);
        assert_eq!(chunks(Pre::Inkling, "e\u{301}x"), ["e\u{301}x"]);
        assert_eq!(
            chunks(Pre::Gpt4o, "नमस्ते दुनिया"),
            ["नमस", "्त", "े", " द", "ुन", "िय", "ा"]
        );
        assert_eq!(chunks(Pre::Inkling, "नमस्ते दुनिया"), ["नमस्ते", " दुनिया"]);
        assert_eq!(Pre::Inkling.chunk_ends("a\u{301} b"), [3, 5]);
    }

    #[test]
    fn name_table_resolves_aliases() {
        assert_eq!(
            PreConfig::from_name("llama4").map(|c| c.pre),
            Some(Pre::Gpt4o)
        );
        assert!(PreConfig::from_name("granite-embed-multi-97m")
            .is_some_and(|c| c.pre == Pre::Inkling && c.ignore_merges));
        assert_eq!(
            PreConfig::from_name("deepseek-r1-qwen").map(|c| c.pre),
            Some(Pre::Qwen2)
        );
        assert!(PreConfig::from_name("llama-bpe").is_some_and(|c| c.ignore_merges));
        assert_eq!(PreConfig::from_name("nope"), None);
        assert!(known_names().contains("qwen35"));
    }
}
