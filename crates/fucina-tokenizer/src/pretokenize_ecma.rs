//! More chunkers for pretokenizer regexes that llama.cpp runs through `std::regex`
//! (see [`crate::pretokenize_regex`] for the rules: leftmost-first ECMAScript matches,
//! unmatched stretches as chunks of their own).
//!
//! A regex with a `\p{..}` class runs on the collapsed string ([`collapsed`]); one
//! without runs as `std::wregex` on the codepoints themselves, except that non-ASCII
//! whitespace is replaced by `\v` ([`wide`]). Which of the two a regex gets decides
//! what a non-ASCII character can match, so each function below says which it is.

use crate::pretokenize::Cps;
use crate::pretokenize_regex::{
    collapsed, contraction, is_l, is_n, is_rn, is_ws, scan, ws_tail, C_MARK, C_PUNCT,
};
use crate::unicode::WHITESPACE_FLAG;

/// Codepoint `i` as llama.cpp's `std::wregex` path sees it: itself, except non-ASCII
/// whitespace, which is `\v`.
#[inline]
fn wide(cps: &Cps, i: usize) -> u32 {
    let cp = cps.cp[i];
    if cp >= 0x80 && cps.fl[i] & WHITESPACE_FLAG != 0 {
        0x0B
    } else {
        cp
    }
}

/// ECMAScript `\s` on a [`wide`] value.
#[inline]
fn wide_ws(x: u32) -> bool {
    matches!(x, 0x09..=0x0D | 0x20)
}

/// `\p{P}` on the collapsed string: the non-ASCII punctuation byte, and llama.cpp's
/// ASCII list `!-#%-*,-/:-;?-@[-]_{}`.
#[inline]
fn is_p(c: u8) -> bool {
    c == C_PUNCT || (c.is_ascii_punctuation() && !b"$+<=>^`|~".contains(&c))
}

/// End of the run of positions from `i` (below `end`) that satisfy `pred`.
#[inline]
fn run(mut i: usize, end: usize, pred: impl Fn(usize) -> bool) -> usize {
    while i < end && pred(i) {
        i += 1;
    }
    i
}

/// `\s?[X]+` where `x(i)` tests membership of position `i` and `ws(i)` is `\s`.
#[inline]
fn opt_space_run(
    p: usize,
    end: usize,
    ws: impl Fn(usize) -> bool,
    x: impl Fn(usize) -> bool + Copy,
) -> Option<usize> {
    if ws(p) && p + 1 < end && x(p + 1) {
        Some(run(p + 1, end, x))
    } else if x(p) {
        Some(run(p, end, x))
    } else {
        None
    }
}

/// `[\r\n]` (wide): each carriage return and line feed alone.
pub(crate) fn each_newline(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    scan(ini, end, out, |p| {
        matches!(cps.cp[p], 0x0A | 0x0D).then_some(p + 1)
    });
}

/// `\p{N}+` (collapsed): runs of numbers.
pub(crate) fn digit_runs(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    scan(ini, end, out, |p| {
        is_n(collapsed(cps, p)).then(|| run(p, end, |i| is_n(collapsed(cps, i))))
    });
}

/// `[0-9][0-9][0-9]` (wide): ASCII digit triples, left to right.
pub(crate) fn ascii_triples(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let digit = |i: usize| i < end && (0x30..=0x39).contains(&cps.cp[i]);
    scan(ini, end, out, |p| {
        (digit(p) && digit(p + 1) && digit(p + 2)).then_some(p + 3)
    });
}

/// The default pretokenizer's `[\p{P}\$\+<=>\^~\|]+` (collapsed): punctuation runs, with
/// every ASCII punctuation character but the backtick.
pub(crate) fn punct_runs(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let x = |i: usize| {
        let c = collapsed(cps, i);
        c == C_PUNCT || (c.is_ascii_punctuation() && c != b'`')
    };
    scan(ini, end, out, |p| x(p).then(|| run(p, end, x)));
}

/// Falcon's ``[\p{P}\$\+<=>\^~\|`]+`` (collapsed): as [`punct_runs`] with the backtick.
pub(crate) fn punct_runs_falcon(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let x = |i: usize| {
        let c = collapsed(cps, i);
        c == C_PUNCT || c.is_ascii_punctuation()
    };
    scan(ini, end, out, |p| x(p).then(|| run(p, end, x)));
}

/// Letters of deepseek-llm's `\s?[A-Za-zµÀ-ÖØ-ö...]+` (its class, verbatim, sorted).
const DEEPSEEK_LLM_LETTERS: &[(u32, u32)] = &[
    (0x41, 0x5A),
    (0x61, 0x7A),
    (0xB5, 0xB5),
    (0xC0, 0xD6),
    (0xD8, 0xF6),
    (0xF8, 0x1BA),
    (0x1BC, 0x1BF),
    (0x1C4, 0x293),
    (0x295, 0x2AF),
    (0x370, 0x373),
    (0x376, 0x377),
    (0x37B, 0x37D),
    (0x37F, 0x37F),
    (0x386, 0x386),
    (0x388, 0x38A),
    (0x38C, 0x38C),
    (0x38E, 0x3A1),
    (0x3A3, 0x3F5),
    (0x3F7, 0x481),
    (0x48A, 0x52F),
    (0x531, 0x556),
    (0x10A0, 0x10C5),
    (0x13A0, 0x13F5),
    (0x13F8, 0x13FD),
    (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF),
    (0x1D00, 0x1D2B),
    (0x1D6B, 0x1D77),
    (0x1D79, 0x1D9A),
    (0x1E00, 0x1F15),
    (0x1F18, 0x1F1D),
    (0x1F20, 0x1F45),
    (0x1F48, 0x1F4D),
    (0x1F50, 0x1F57),
    (0x1F59, 0x1F59),
    (0x1F5B, 0x1F5B),
    (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D),
    (0x1F80, 0x1FB4),
    (0x1FB6, 0x1FBC),
    (0x1FBE, 0x1FBE),
    (0x1FC2, 0x1FC4),
    (0x1FC6, 0x1FCC),
    (0x1FD0, 0x1FD3),
    (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC),
    (0x1FF2, 0x1FF4),
    (0x1FF6, 0x1FFC),
    (0x2102, 0x2102),
    (0x2107, 0x2107),
    (0x210A, 0x2113),
    (0x2115, 0x2115),
    (0x2119, 0x211D),
    (0x2124, 0x2124),
    (0x2126, 0x2126),
    (0x2128, 0x2128),
    (0x212A, 0x212D),
    (0x212F, 0x2134),
    (0x2139, 0x2139),
    (0x213C, 0x213F),
    (0x2145, 0x2149),
    (0x214E, 0x214E),
    (0x2183, 0x2184),
    (0x2C00, 0x2C7B),
    (0x2C7E, 0x2CE4),
    (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF3),
    (0xA640, 0xA66D),
    (0xA680, 0xA69B),
    (0xA722, 0xA76F),
    (0xA771, 0xA787),
    (0xA78B, 0xA78E),
    (0xAB70, 0xABBF),
    (0xFB00, 0xFB06),
    (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A),
    (0xFF41, 0xFF5A),
    (0x10400, 0x1044F),
    (0x104B0, 0x104D3),
    (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2),
    (0x10CC0, 0x10CF2),
    (0x118A0, 0x118DF),
    (0x1E900, 0x1E943),
];

fn in_ranges(ranges: &[(u32, u32)], x: u32) -> bool {
    let i = ranges.partition_point(|&(_, hi)| hi < x);
    ranges.get(i).is_some_and(|&(lo, _)| lo <= x)
}

/// deepseek-llm's `\s?[A-Za-zµÀ-ÖØ-ö...]+` (wide).
pub(crate) fn deepseek_llm_letters(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let ws = |i: usize| wide_ws(wide(cps, i));
    let x = |i: usize| in_ranges(DEEPSEEK_LLM_LETTERS, wide(cps, i));
    scan(ini, end, out, |p| opt_space_run(p, end, ws, x));
}

/// deepseek-llm's `\s?[!-/:-~！-／：-～‘-‟　-。]+` (wide; the ideographic space is `\v`
/// there, so only U+3001 and U+3002 of the last range can match).
pub(crate) fn deepseek_llm_punct(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let ws = |i: usize| wide_ws(wide(cps, i));
    let x = |i: usize| {
        matches!(wide(cps, i), 0x21..=0x2F | 0x3A..=0x7E | 0xFF01..=0xFF0F | 0xFF1A..=0xFF5E
            | 0x2018..=0x201F | 0x3000..=0x3002)
    };
    scan(ini, end, out, |p| opt_space_run(p, end, ws, x));
}

/// `\s+$` (wide): the whitespace that ends the chunk.
pub(crate) fn trailing_space(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let mut t = end;
    while t > ini && wide_ws(wide(cps, t - 1)) {
        t -= 1;
    }
    scan(ini, end, out, |p| (p >= t).then_some(end));
}

/// `[一-龥ࠀ-一가-퟿]+` (wide) of deepseek-llm and deepseek-coder: U+0800..=U+9FA5 (its
/// first two ranges joined) and U+AC00..=U+D7FF.
pub(crate) fn deepseek_cjk_runs(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let x = |i: usize| matches!(wide(cps, i), 0x0800..=0x9FA5 | 0xAC00..=0xD7FF);
    scan(ini, end, out, |p| x(p).then(|| run(p, end, x)));
}

/// deepseek-coder's `\s?\p{L}+` (collapsed).
pub(crate) fn space_letters(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let ws = |i: usize| is_ws(collapsed(cps, i));
    let x = |i: usize| is_l(collapsed(cps, i));
    scan(ini, end, out, |p| opt_space_run(p, end, ws, x));
}

/// deepseek-coder's `\s?\p{P}+` (collapsed).
pub(crate) fn space_punct(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let ws = |i: usize| is_ws(collapsed(cps, i));
    let x = |i: usize| is_p(collapsed(cps, i));
    scan(ini, end, out, |p| opt_space_run(p, end, ws, x));
}

/// How a regex of the llama3 shape varies (see [`llama3_shape`]).
#[derive(Clone, Copy)]
struct Shape {
    /// Starts with `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|`.
    contractions: bool,
    /// `\p{N}` (1), `\p{N}{1,3}` (3) or `\p{N}+` (`usize::MAX`).
    num_max: usize,
    /// The punctuation run is followed by `[\r\n]*`.
    punct_newlines: bool,
    /// jais-2's whitespace cascade instead of `\s+(?!\S)|\s+`.
    jais: bool,
}

/// `(?:contractions)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{..}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+
/// |\s+(?!\S)|\s+` on the collapsed string (llama.cpp hand-rolls this shape only for the
/// exact qwen2 and llama3 strings; every variant takes the `std::regex` route).
fn llama3_shape(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>, s: Shape) {
    let c = |i: usize| collapsed(cps, i);
    let letter = |i: usize| is_l(c(i));
    let other = |i: usize| {
        let x = c(i);
        !(is_ws(x) || is_l(x) || is_n(x))
    };
    scan(ini, end, out, |p| {
        let c0 = c(p);
        if s.contractions {
            let e = contraction(c, p, end);
            if e > p {
                return Some(e);
            }
        }
        if !(is_rn(c0) || is_l(c0) || is_n(c0)) && p + 1 < end && letter(p + 1) {
            return Some(run(p + 1, end, letter));
        }
        if is_l(c0) {
            return Some(run(p, end, letter));
        }
        if is_n(c0) {
            return Some(run(p, end, |i| i - p < s.num_max && is_n(c(i))));
        }
        let start = if c0 == b' ' && p + 1 < end && other(p + 1) {
            Some(p + 1)
        } else if other(p) {
            Some(p)
        } else {
            None
        };
        if let Some(q) = start {
            let e = run(q, end, other);
            return Some(if s.punct_newlines {
                run(e, end, |i| is_rn(c(i)))
            } else {
                e
            });
        }
        if is_ws(c0) {
            return Some(if s.jais {
                jais_ws(c, p, end)
            } else {
                ws_tail(c, p, end)
            });
        }
        None
    });
}

/// jais-2's `\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|...|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}`.
fn jais_ws(c: impl Fn(usize) -> u8, p: usize, end: usize) -> usize {
    let mut q = p;
    let mut last_rn = None;
    while q < end && is_ws(c(q)) {
        if is_rn(c(q)) {
            last_rn = Some(q + 1);
        }
        q += 1;
    }
    if let Some(r) = last_rn {
        return r;
    }
    // `\s{k}(?!\S)`: k spaces, then more whitespace or the end of the chunk.
    let fits = |k: usize| q - p > k || (q - p == k && q == end);
    [512, 256, 128, 64, 32, 16, 8, 4, 2, 1]
        .into_iter()
        .find(|&k| fits(k))
        .map_or(p + 1, |k| p + k)
}

/// seed-coder: the qwen2 regex with ` ?[^\s\p{L}\p{N}\r\n]+` (no trailing newlines).
pub(crate) fn seed_coder(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let s = Shape {
        contractions: true,
        num_max: 1,
        punct_newlines: false,
        jais: false,
    };
    llama3_shape(cps, ini, end, out, s);
}

/// bailingmoe: the qwen2 regex with `\s*[\r\n]` (which ends where `\s*[\r\n]+` does).
pub(crate) fn bailingmoe(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let s = Shape {
        contractions: true,
        num_max: 1,
        punct_newlines: true,
        jais: false,
    };
    llama3_shape(cps, ini, end, out, s);
}

/// ufakzeka: the qwen2 regex without the contractions.
pub(crate) fn ufakzeka(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let s = Shape {
        contractions: false,
        num_max: 1,
        punct_newlines: true,
        jais: false,
    };
    llama3_shape(cps, ini, end, out, s);
}

/// minicpm5's second regex: the llama3 regex with `\p{N}+`.
pub(crate) fn minicpm5_main(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let s = Shape {
        contractions: true,
        num_max: usize::MAX,
        punct_newlines: true,
        jais: false,
    };
    llama3_shape(cps, ini, end, out, s);
}

/// jais-2: the llama3 regex with a cascade of whitespace run lengths.
pub(crate) fn jais2(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let s = Shape {
        contractions: true,
        num_max: 3,
        punct_newlines: true,
        jais: true,
    };
    llama3_shape(cps, ini, end, out, s);
}

/// exaone-moe: `(?:contractions)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}
/// | ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+` (collapsed): words keep single
/// spaces between letters, so "a b c" is one chunk.
pub(crate) fn exaone_moe(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let c = |i: usize| collapsed(cps, i);
    let letter = |i: usize| i < end && is_l(c(i));
    let other = |i: usize| i < end && !(is_ws(c(i)) || is_l(c(i)) || is_n(c(i)));
    // From a letter at `q`: letters, marks and " <letter>" pairs, greedily.
    let word = |q: usize| {
        let mut e = q + 1;
        loop {
            if letter(e) || (e < end && c(e) == C_MARK) {
                e += 1;
            } else if e < end && c(e) == b' ' && letter(e + 1) {
                e += 2;
            } else {
                return e;
            }
        }
    };
    scan(ini, end, out, |p| {
        let c0 = c(p);
        let e = contraction(c, p, end);
        if e > p {
            return Some(e);
        }
        if !(is_rn(c0) || is_l(c0) || is_n(c0)) && letter(p + 1) {
            return Some(word(p + 1));
        }
        if is_l(c0) {
            return Some(word(p));
        }
        if is_n(c0) {
            return Some(p + 1);
        }
        let start = if c0 == b' ' && other(p + 1) {
            Some(p + 1)
        } else if other(p) {
            Some(p)
        } else {
            None
        };
        if let Some(q) = start {
            let e = run(q, end, other);
            // `[\r\n/]?`: a '/' would already be in the run.
            return Some(if e < end && is_rn(c(e)) { e + 1 } else { e });
        }
        is_ws(c0).then(|| ws_tail(c, p, end))
    });
}

/// The o200k-like regex of tiny_aya (`NUM_MAX = 3`) and youtu (`NUM_MAX = 1`):
/// `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+C?|...`.
/// Collapsing maps every `\p{L..}` to the whole letter class, so both case classes are
/// "letters and marks" and the case split vanishes, for ASCII too.
pub(crate) fn o200k_caseless<const NUM_MAX: usize>(
    cps: &Cps,
    ini: usize,
    end: usize,
    out: &mut Vec<u32>,
) {
    let c = |i: usize| collapsed(cps, i);
    let w = |i: usize| i < end && (is_l(c(i)) || c(i) == C_MARK);
    let other = |i: usize| i < end && !(is_ws(c(i)) || is_l(c(i)) || is_n(c(i)));
    scan(ini, end, out, |p| {
        let c0 = c(p);
        let prefix = !(is_rn(c0) || is_l(c0) || is_n(c0));
        let word = if prefix && w(p + 1) {
            Some(run(p + 1, end, w))
        } else if w(p) {
            Some(run(p, end, w))
        } else {
            None
        };
        if let Some(e) = word {
            return Some(contraction(c, e, end));
        }
        if is_n(c0) {
            return Some(run(p, end, |i| i - p < NUM_MAX && is_n(c(i))));
        }
        let start = if c0 == b' ' && other(p + 1) {
            Some(p + 1)
        } else if other(p) {
            Some(p)
        } else {
            None
        };
        if let Some(q) = start {
            let e = run(q, end, other);
            return Some(run(e, end, |i| matches!(c(i), b'\r' | b'\n' | b'/')));
        }
        is_ws(c0).then(|| ws_tail(c, p, end))
    });
}

/// youtu's first regex (wide): `[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+`,
/// four disjoint classes.
pub(crate) fn youtu_scripts(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let class = |i: usize| match wide(cps, i) {
        0xAC00..=0xD7A3 | 0x3131..=0x318E => 1,
        0xFF01
        | 0x2026
        | 0x201C
        | 0x201D
        | 0x2018
        | 0x2019
        | 0x2014
        | 0xFF1A
        | 0xFF1B
        | 0xFF0C
        | 0x3001..=0x303F
        | 0xFE30..=0xFE4F => 2,
        0x3105..=0x312F => 3,
        0x4E00..=0x9FA5 | 0x3040..=0x309F | 0x30A0..=0x30FF => 4,
        _ => 0,
    };
    scan(ini, end, out, |p| {
        let k = class(p);
        (k != 0).then(|| run(p, end, |i| class(i) == k))
    });
}

/// afmoe's second regex (wide): runs of CJK, kana, Thai, Lao, Khmer, Myanmar, Hangul, ...
/// Its class is `[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]`, where `豈` is
/// U+8C48 (not the compatibility ideograph U+F900), so the third range swallows the
/// ranges from U+8C48 to U+FAFF; below are the joined ranges.
pub(crate) fn afmoe_scripts(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let x = |i: usize| {
        matches!(wide(cps, i), 0x0E40..=0x0EFF | 0x1000..=0x109F | 0x1100..=0x11FF
            | 0x1780..=0x17FF | 0x2F00..=0x2FDF | 0x3040..=0x30FF | 0x3400..=0x4DBF
            | 0x4E00..=0xFAFF | 0xFF65..=0xFF9F)
    };
    scan(ini, end, out, |p| x(p).then(|| run(p, end, x)));
}

/// bloom, poro-chat and gpt3-finnish: ` ?[^(\s|.,!?…。，、।۔،)]+` (wide).
pub(crate) fn bloom(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let x = |i: usize| {
        let v = wide(cps, i);
        !(wide_ws(v)
            || matches!(
                v,
                0x28 | 0x29
                    | 0x7C
                    | 0x2E
                    | 0x2C
                    | 0x21
                    | 0x3F
                    | 0x2026
                    | 0x3002
                    | 0xFF0C
                    | 0x3001
                    | 0x0964
                    | 0x06D4
                    | 0x060C
            ))
    };
    scan(ini, end, out, |p| {
        if cps.cp[p] == 0x20 && p + 1 < end && x(p + 1) {
            Some(run(p + 1, end, x))
        } else if x(p) {
            Some(run(p, end, x))
        } else {
            None
        }
    });
}

/// superbpe's `(?=(\d{3})+(?!\d))` (wide): an empty match wherever the ASCII digits from
/// there to the end of their run are a positive multiple of three, so a digit run splits
/// into groups of three counted from its end. Empty chunks carry no text, so only the
/// boundaries are kept.
pub(crate) fn superbpe_groups(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let digit = |i: usize| (0x30..=0x39).contains(&cps.cp[i]);
    let mut p = ini;
    while p < end {
        if !digit(p) {
            p += 1;
            continue;
        }
        let e = run(p, end, digit);
        for b in p..e {
            if b > ini && (e - b) % 3 == 0 {
                out.push(b as u32);
            }
        }
        p = e;
    }
    out.push(end as u32);
}

/// chameleon's `<sentinel:[0-9]+>` (wide).
pub(crate) fn chameleon_sentinels(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    const LIT: &[u8] = b"<sentinel:";
    scan(ini, end, out, |p| {
        let lit = (0..LIT.len()).all(|k| p + k < end && cps.cp[p + k] == LIT[k] as u32);
        if !lit {
            return None;
        }
        let d = p + LIT.len();
        let e = run(d, end, |i| (0x30..=0x39).contains(&cps.cp[i]));
        (e > d && e < end && cps.cp[e] == b'>' as u32).then_some(e + 1)
    });
}

/// chameleon's `(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z` (wide).
pub(crate) fn chameleon_images(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    const LIT: &[u8] = b"IMGIMG";
    scan(ini, end, out, |p| {
        let lit = (0..LIT.len()).all(|k| p + k < end && cps.cp[p + k] == LIT[k] as u32);
        if !lit {
            return None;
        }
        let d = p + LIT.len();
        let e = run(d, end.min(d + 4), |i| (0x41..=0x49).contains(&cps.cp[i]));
        (e > d && e < end && cps.cp[e] == b'Z' as u32).then_some(e + 1)
    });
}

/// chameleon's `([\t\n]|    |  )` (wide): a tab or newline, four spaces, two spaces.
pub(crate) fn chameleon_spaces(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let space = |i: usize| i < end && cps.cp[i] == 0x20;
    scan(ini, end, out, |p| match cps.cp[p] {
        0x09 | 0x0A => Some(p + 1),
        _ if (p..p + 4).all(space) => Some(p + 4),
        _ if (p..p + 2).all(space) => Some(p + 2),
        _ => None,
    });
}

/// chameleon's ``[\p{P}!-/:-@\[-`{-~]`` (collapsed): one punctuation character.
pub(crate) fn chameleon_punct(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    scan(ini, end, out, |p| {
        let c = collapsed(cps, p);
        (c == C_PUNCT || c.is_ascii_punctuation()).then_some(p + 1)
    });
}
