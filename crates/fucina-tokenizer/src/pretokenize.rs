//! Byte-level BPE pretokenizers: the chunkers llama.cpp selects by `tokenizer.ggml.pre`,
//! hand-written (no regex engine) and split-for-split identical to llama.cpp's.
//!
//! llama.cpp has hand-rolled loops for the gpt2, llama3 and qwen2/qwen35 regexes
//! (`unicode_regex_split_custom_*`, here in this file and, for kimi-k2, afmoe digits and
//! Gemma 4's newlines, in [`crate::pretokenize_custom`]) and runs every other regex
//! through `std::regex`: on a "collapsed" string (one byte per codepoint, non-ASCII
//! codepoints replaced by a per-category byte) when it uses `\p{..}`, else as a wide
//! regex on the codepoints. Those chunkers ([`crate::pretokenize_regex`],
//! [`crate::pretokenize_ecma`]) reproduce ECMAScript leftmost-first alternation over
//! what that route sees, including how unmatched stretches become chunks of their own.
//! A family with several regexes applies each to every chunk of the one before.
//!
//! All chunkers work on a decoded codepoint array ([`Cps`]) and append chunk end
//! positions (codepoint indices) to `ends`.

use crate::pretokenize_custom as custom;
use crate::pretokenize_ecma as ecma;
use crate::pretokenize_regex as rx;
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
    /// llama.cpp's default (also a missing `tokenizer.ggml.pre`): punctuation runs, then
    /// GPT-2, then `\p{N}+`, then ASCII digit triples.
    Default,
    /// Falcon: as [`Pre::Default`] with the backtick among the punctuation and no
    /// `\p{N}+` stage.
    Falcon,
    /// DeepSeek LLM: `[\r\n]`, a fixed letter class, ASCII/full-width punctuation runs,
    /// trailing whitespace, CJK/Hangul runs, `\p{N}+`, in that order.
    DeepseekLlm,
    /// DeepSeek Coder: `[\r\n]`, `\s?\p{L}+`, `\s?\p{P}+`, CJK/Hangul runs, `\p{N}`.
    DeepseekCoder,
    /// Seed-Coder: [`Pre::Qwen2`]'s regex with punctuation runs that take no newlines.
    SeedCoder,
    /// BLOOM (also poro-chat, gpt3-finnish): ` ?[^(\s|.,!?…。，、।۔،)]+`.
    Bloom,
    /// Viking: [`Pre::Bloom`], then every `\p{N}` alone.
    Viking,
    /// SuperBPE: `\p{N}+`, then digit runs in groups of three counted from the right.
    Superbpe,
    /// Chameleon: sentinel and image tokens, tab/newline and space pairs, each `\p{N}`,
    /// each punctuation character, then GPT-2.
    Chameleon,
    /// Tiny Aya (also cohere2moe): afmoe digit grouping, then an o200k regex whose case
    /// classes collapse into one "letters and marks" class.
    TinyAya,
    /// Bailing MoE (also bailingmoe2, llada-moe): the [`Pre::Qwen2`] regex as
    /// `std::regex` runs it on the collapsed string.
    Bailingmoe,
    /// Kimi K2: Han runs, then an o200k-like split with Han excluded from letters.
    KimiK2,
    /// MiniCPM 5: `\p{N}{1,3}`, then [`Pre::Llama3`]'s regex with `\p{N}+`.
    Minicpm5,
    /// Spark 2.5: [`Pre::DeepseekV3`]'s stages with a newline-free punctuation run and
    /// `[\r\n]` alone, then every `\p{N}` alone.
    Spark25,
    /// Youtu: Hangul/CJK/full-width punctuation runs, then [`Pre::TinyAya`]'s regex with
    /// `\p{N}` alone.
    Youtu,
    /// Jais 2: [`Pre::Llama3`]'s regex with whitespace runs cut at 512, 256, ..., 4, 2, 1.
    Jais2,
    /// EXAONE MoE: words keep single spaces between letters (`a b c` is one chunk).
    ExaoneMoe,
    /// Ufakzeka: [`Pre::Qwen2`]'s regex without the contractions (Turkish suffixes after
    /// an apostrophe stay attached).
    Ufakzeka,
    /// AFMoE: afmoe digit grouping, runs of CJK/Southeast-Asian scripts, then
    /// [`Pre::DeepseekV3`]'s main regex.
    Afmoe,
    /// Laguna: newline runs, then [`Pre::Qwen2`].
    Laguna,
    /// Tekken (Mistral Nemo, Small 3, Ministral, Devstral): [`Pre::Gpt4o`] without the
    /// contractions and with every `\p{N}` alone.
    Tekken,
    /// Gemma 4 (also granite-embed-multi-311m, sarvam-moe): SentencePiece-style BPE that
    /// splits only into newline runs and the text between them.
    Gemma4,
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
    let n = cps.cp.len();
    ends.clear();
    if n == 0 {
        return;
    }
    match pre {
        Pre::Gpt2 => gpt2(cps, 0, n, ends),
        Pre::Llama3 => llama3::<3, false>(cps, 0, n, ends),
        Pre::Qwen2 => llama3::<1, false>(cps, 0, n, ends),
        Pre::Qwen35 => llama3::<1, true>(cps, 0, n, ends),
        Pre::Starcoder => {
            tmp.clear();
            rx::digits_each(cps, 0, n, tmp);
            stage(cps, tmp, ends, gpt2);
        }
        Pre::DeepseekV3 => {
            ends.clear();
            rx::digit_triples(cps, 0, n, ends);
            tmp.clear();
            stage(cps, ends, tmp, rx::cjk_runs);
            ends.clear();
            stage(cps, tmp, ends, rx::deepseek_v3_main::<false>);
        }
        Pre::Gpt4o => rx::o200k_main::<false, true, 3>(cps, 0, n, ends),
        Pre::Inkling => rx::o200k_main::<true, true, 3>(cps, 0, n, ends),
        Pre::Default => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[
                ecma::punct_runs,
                gpt2,
                ecma::digit_runs,
                ecma::ascii_triples,
            ],
        ),
        Pre::Falcon => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[ecma::punct_runs_falcon, gpt2, ecma::ascii_triples],
        ),
        Pre::DeepseekLlm => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[
                ecma::each_newline,
                ecma::deepseek_llm_letters,
                ecma::deepseek_llm_punct,
                ecma::trailing_space,
                ecma::deepseek_cjk_runs,
                ecma::digit_runs,
            ],
        ),
        Pre::DeepseekCoder => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[
                ecma::each_newline,
                ecma::space_letters,
                ecma::space_punct,
                ecma::deepseek_cjk_runs,
                rx::digits_each,
            ],
        ),
        Pre::SeedCoder => ecma::seed_coder(cps, 0, n, ends),
        Pre::Bloom => ecma::bloom(cps, 0, n, ends),
        Pre::Viking => pipeline(cps, n, ends, tmp, &[ecma::bloom, rx::digits_each]),
        Pre::Superbpe => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[ecma::digit_runs, ecma::superbpe_groups],
        ),
        Pre::Chameleon => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[
                ecma::chameleon_sentinels,
                ecma::chameleon_images,
                ecma::chameleon_spaces,
                rx::digits_each,
                ecma::chameleon_punct,
                gpt2,
            ],
        ),
        Pre::TinyAya => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[custom::afmoe_digits, ecma::o200k_caseless::<3>],
        ),
        Pre::Bailingmoe => ecma::bailingmoe(cps, 0, n, ends),
        Pre::KimiK2 => custom::kimi_k2(cps, 0, n, ends),
        Pre::Minicpm5 => pipeline(cps, n, ends, tmp, &[rx::digit_triples, ecma::minicpm5_main]),
        Pre::Spark25 => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[
                rx::digit_triples,
                rx::cjk_runs,
                rx::deepseek_v3_main::<true>,
                rx::digits_each,
            ],
        ),
        Pre::Youtu => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[ecma::youtu_scripts, ecma::o200k_caseless::<1>],
        ),
        Pre::Jais2 => ecma::jais2(cps, 0, n, ends),
        Pre::ExaoneMoe => ecma::exaone_moe(cps, 0, n, ends),
        Pre::Ufakzeka => ecma::ufakzeka(cps, 0, n, ends),
        Pre::Afmoe => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[
                custom::afmoe_digits,
                ecma::afmoe_scripts,
                rx::deepseek_v3_main::<false>,
            ],
        ),
        Pre::Laguna => pipeline(
            cps,
            n,
            ends,
            tmp,
            &[custom::newline_runs, llama3::<1, false>],
        ),
        Pre::Tekken => rx::o200k_main::<false, false, 1>(cps, 0, n, ends),
        Pre::Gemma4 => custom::newline_runs(cps, 0, n, ends),
    }
}

/// A chunker over `[ini, end)` of a decoded string, appending chunk ends.
type Chunker = fn(&Cps, usize, usize, &mut Vec<u32>);

/// Run `stages` in order, each refining every chunk of the one before (llama.cpp's list
/// of regexes), leaving the final chunk ends in `ends`.
fn pipeline(cps: &Cps, n: usize, ends: &mut Vec<u32>, tmp: &mut Vec<u32>, stages: &[Chunker]) {
    ends.clear();
    let Some((first, rest)) = stages.split_first() else {
        return;
    };
    first(cps, 0, n, ends);
    for f in rest {
        tmp.clear();
        stage(cps, ends, tmp, *f);
        std::mem::swap(ends, tmp);
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
/// Always inlined: the hot families call it from [`split`], where it was inlined
/// before laguna's pipeline also took it by address.
#[inline(always)]
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
    fn more_llama_cpp_families() {
        // Punctuation runs go first in llama.cpp's default, so "it's" loses its contraction.
        assert_eq!(
            chunks(Pre::Default, "Hello!! it's 12345"),
            ["Hello", "!!", " it", "'", "s", " ", "123", "45"]
        );
        assert_eq!(
            chunks(Pre::Superbpe, "1234567 x12"),
            ["1", "234", "567", " x", "12"]
        );
        assert_eq!(
            chunks(Pre::ExaoneMoe, "hello big world, ok"),
            ["hello big world", ",", " ok"]
        );
        assert_eq!(chunks(Pre::Jais2, "a      b"), ["a", "    ", " ", " b"]);
        assert_eq!(
            chunks(Pre::Bloom, "Hello, world... (yes)"),
            ["Hello", ",", " world", "... (", "yes", ")"]
        );
        assert_eq!(
            chunks(Pre::KimiK2, "中文Hello's 123456"),
            ["中文", "Hello's", " ", "123", "456"]
        );
        assert_eq!(
            chunks(Pre::Tekken, "HTTPServer I'm 123"),
            ["HTTPServer", " I", "'m", " ", "1", "2", "3"]
        );
        assert_eq!(
            chunks(Pre::Gemma4, "a b\n\nc\n"),
            ["a b", "\n\n", "c", "\n"]
        );
        assert_eq!(
            chunks(Pre::Youtu, "한국어，中文 ok"),
            ["한국어", "，", "中文", " ok"]
        );
    }
}
