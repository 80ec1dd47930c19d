//! Chunkers for the pretokenizers llama.cpp runs through `std::regex` rather than a
//! hand-rolled loop, written by hand with the same results.
//!
//! llama.cpp matches such a regex on a "collapsed" string: ASCII stays itself,
//! non-ASCII whitespace becomes `\v`, any other non-ASCII codepoint becomes one byte
//! per category (`\p{N}` 0xD1, `\p{L}` 0xD2, `\p{P}` 0xD3, `\p{M}` 0xD4, `\p{S}` 0xD5,
//! anything else 0xD0), and each `\p{X}` in the regex becomes `[<that byte><ASCII
//! members>]`. `std::regex_iterator` then yields leftmost-first (ECMAScript) matches,
//! and every stretch between two matches becomes a chunk of its own. The functions
//! below apply exactly those rules to one chunk `[ini, end)` and append chunk ends.

use crate::pretokenize::Cps;
use crate::unicode::{LETTER, MARK, NUMBER, PUNCT, SYMBOL, WHITESPACE_FLAG};

const C_NUMBER: u8 = 0xD1;
const C_LETTER: u8 = 0xD2;
pub(crate) const C_PUNCT: u8 = 0xD3;
pub(crate) const C_MARK: u8 = 0xD4;
const C_SYMBOL: u8 = 0xD5;
const C_OTHER: u8 = 0xD0;

/// The collapsed byte for codepoint `i` (see the module docs).
#[inline]
pub(crate) fn collapsed(cps: &Cps, i: usize) -> u8 {
    let cp = cps.cp[i];
    if cp < 0x80 {
        return cp as u8;
    }
    let f = cps.fl[i];
    if f & WHITESPACE_FLAG != 0 {
        0x0B
    } else if f & NUMBER != 0 {
        C_NUMBER
    } else if f & LETTER != 0 {
        C_LETTER
    } else if f & PUNCT != 0 {
        C_PUNCT
    } else if f & MARK != 0 {
        C_MARK
    } else if f & SYMBOL != 0 {
        C_SYMBOL
    } else {
        C_OTHER
    }
}

#[inline]
pub(crate) fn is_n(c: u8) -> bool {
    c == C_NUMBER || c.is_ascii_digit()
}
#[inline]
pub(crate) fn is_l(c: u8) -> bool {
    c == C_LETTER || c.is_ascii_alphabetic()
}
/// `[\p{P}\p{S}]`: ASCII punctuation and symbols together are exactly the ASCII
/// punctuation class.
#[inline]
pub(crate) fn is_ps(c: u8) -> bool {
    c == C_PUNCT || c == C_SYMBOL || c.is_ascii_punctuation()
}
/// ECMAScript `\s` on `char` in the C locale.
#[inline]
pub(crate) fn is_ws(c: u8) -> bool {
    matches!(c, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ')
}
#[inline]
pub(crate) fn is_rn(c: u8) -> bool {
    c == b'\r' || c == b'\n'
}

/// Emit the matches `m(p) -> Some(end)` of a leftmost-first scan over `[ini, end)`,
/// with unmatched stretches as chunks of their own (`unicode_regex_split_stl`).
#[inline]
pub(crate) fn scan(
    ini: usize,
    end: usize,
    out: &mut Vec<u32>,
    mut m: impl FnMut(usize) -> Option<usize>,
) {
    let mut gap = ini;
    let mut p = ini;
    while p < end {
        match m(p) {
            Some(e) => {
                if gap < p {
                    out.push(p as u32);
                }
                out.push(e as u32);
                p = e;
                gap = e;
            }
            None => p += 1,
        }
    }
    if gap < end {
        out.push(end as u32);
    }
}

/// `\p{N}`: every number codepoint alone.
pub(crate) fn digits_each(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    scan(ini, end, out, |p| is_n(collapsed(cps, p)).then_some(p + 1));
}

/// `\p{N}{1,3}`: greedy groups of up to three numbers.
pub(crate) fn digit_triples(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    scan(ini, end, out, |p| {
        if !is_n(collapsed(cps, p)) {
            return None;
        }
        let mut e = p + 1;
        while e < end && e - p < 3 && is_n(collapsed(cps, e)) {
            e += 1;
        }
        Some(e)
    });
}

#[inline]
fn is_cjk(cp: u32) -> bool {
    matches!(cp, 0x4E00..=0x9FA5 | 0x3040..=0x309F | 0x30A0..=0x30FF)
}

/// `[一-龥぀-ゟ゠-ヿ]+` (no `\p{..}`, so llama.cpp matches it on codepoints directly).
pub(crate) fn cjk_runs(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    scan(ini, end, out, |p| {
        if !is_cjk(cps.cp[p]) {
            return None;
        }
        let mut e = p + 1;
        while e < end && is_cjk(cps.cp[e]) {
            e += 1;
        }
        Some(e)
    });
}

/// DeepSeek-V3's main regex (`SPARK = false`; also afmoe's third stage):
/// `[!-/:-@\[-`{-~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ?[\p{P}\p{S}]+[\r\n]*
///  | \s*[\r\n]+ | \s+(?!\S) | \s+`, alternatives tried in that order. With `SPARK` it is
/// spark2_5's: ` ?[\p{P}\p{S}]+` without the newlines, and `[\r\n]` alone instead of
/// `\s*[\r\n]+`.
pub(crate) fn deepseek_v3_main<const SPARK: bool>(
    cps: &Cps,
    ini: usize,
    end: usize,
    out: &mut Vec<u32>,
) {
    let c = |i: usize| collapsed(cps, i);
    let lm = |i: usize| i < end && (is_l(c(i)) || c(i) == C_MARK);
    let run = |mut i: usize, pred: &dyn Fn(u8) -> bool| {
        while i < end && pred(c(i)) {
            i += 1;
        }
        i
    };
    scan(ini, end, out, |p| {
        let c0 = c(p);
        if c0.is_ascii_punctuation() && p + 1 < end && c(p + 1).is_ascii_alphabetic() {
            return Some(run(p + 1, &|x| x.is_ascii_alphabetic()));
        }
        let optional_prefix = !(is_rn(c0) || is_l(c0) || is_ps(c0));
        if optional_prefix && lm(p + 1) || lm(p) {
            let mut e = p + 1;
            while lm(e) {
                e += 1;
            }
            return Some(e);
        }
        let ps_start = if c0 == b' ' && p + 1 < end && is_ps(c(p + 1)) {
            Some(p + 1)
        } else if is_ps(c0) {
            Some(p)
        } else {
            None
        };
        if let Some(s) = ps_start {
            let e = run(s, &is_ps);
            return Some(if SPARK { e } else { run(e, &is_rn) });
        }
        if SPARK && is_rn(c0) {
            return Some(p + 1);
        }
        if is_ws(c0) {
            return Some(if SPARK {
                ws_run_tail(c, p, end)
            } else {
                ws_tail(c, p, end)
            });
        }
        None
    });
}

/// `\s*[\r\n]+|\s+(?!\S)|\s+` at a whitespace position `p`: where the match ends.
#[inline]
pub(crate) fn ws_tail(c: impl Fn(usize) -> u8, p: usize, end: usize) -> usize {
    let mut q = p;
    let mut last_rn = None;
    while q < end && is_ws(c(q)) {
        if is_rn(c(q)) {
            last_rn = Some(q + 1);
        }
        q += 1;
    }
    match last_rn {
        Some(r) => r,
        None if q == end => q,
        None if q - p >= 2 => q - 1,
        None => q,
    }
}

/// `\s+(?!\S)|\s+` at a whitespace position `p` (no newline alternative before them).
#[inline]
pub(crate) fn ws_run_tail(c: impl Fn(usize) -> u8, p: usize, end: usize) -> usize {
    let mut q = p;
    while q < end && is_ws(c(q)) {
        q += 1;
    }
    if q < end && q - p >= 2 {
        q - 1
    } else {
        q
    }
}

/// `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?` at `e`: where it ends.
#[inline]
pub(crate) fn contraction(c: impl Fn(usize) -> u8, e: usize, end: usize) -> usize {
    if e + 1 >= end || c(e) != b'\'' {
        return e;
    }
    let n1 = c(e + 1).to_ascii_lowercase();
    if matches!(n1, b's' | b't' | b'm' | b'd') {
        return e + 2;
    }
    if e + 2 < end {
        let n2 = c(e + 2).to_ascii_lowercase();
        if matches!((n1, n2), (b'r', b'e') | (b'v', b'e') | (b'l', b'l')) {
            return e + 3;
        }
    }
    e
}

/// The o200k regex as llama.cpp runs it (`LLAMA_VOCAB_PRE_TYPE_GPT4O` for `MARKS =
/// false`, and with `\p{M}` added to both lookaheads, `GRANITE_EMB_MULTI` / the spec's
/// `inkling`, for `MARKS = true`):
///
/// `[^\r\n\p{L}\p{N}]?((?=[W])([^a-z]))*((?=[W])([^A-Z]))+C? | [^\r\n\p{L}\p{N}]?((?=[W])([^a-z]))+((?=[W])([^A-Z]))*C?
///  | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+`
///
/// with `W` = `\p{L}` (or `\p{L}\p{M}`) and `C` the ASCII contractions. On the collapsed
/// string every non-ASCII letter (and mark, with `MARKS`) is one byte that is neither
/// `a-z` nor `A-Z`, so it belongs to both the "upper" and the "lower" word class: the
/// case split of the tokenizer.json regex survives only for ASCII letters.
///
/// `CONTRACTIONS = false, NUM_MAX = 1` is Mistral's tekken regex (no `C`, `\p{N}` alone).
pub(crate) fn o200k_main<const MARKS: bool, const CONTRACTIONS: bool, const NUM_MAX: usize>(
    cps: &Cps,
    ini: usize,
    end: usize,
    out: &mut Vec<u32>,
) {
    let c = |i: usize| collapsed(cps, i);
    let word = |x: u8| is_l(x) || (MARKS && x == C_MARK);
    let up = |i: usize| i < end && word(c(i)) && !c(i).is_ascii_lowercase();
    let lo = |i: usize| i < end && word(c(i)) && !c(i).is_ascii_uppercase();
    let run = |mut i: usize, pred: &dyn Fn(usize) -> bool| {
        while pred(i) {
            i += 1;
        }
        i
    };
    // `[^\r\n\p{L}\p{N}]`
    let prefix = |x: u8| !(is_rn(x) || is_l(x) || is_n(x));
    // `[^\s\p{L}\p{N}]`
    let other = |i: usize| i < end && !(is_ws(c(i)) || is_l(c(i)) || is_n(c(i)));
    // Alternative 1 from `q`: `U*L+`, backtracking `U*` until `L+` can start.
    let upper_then_lower = |q: usize| -> Option<usize> {
        let r = run(q, &up);
        (q..=r).rev().find(|&k| lo(k)).map(|k| run(k, &lo))
    };
    // Alternative 2 from `q`: `U+L*`.
    let upper_plus = |q: usize| -> Option<usize> {
        let r = run(q, &up);
        (r > q).then(|| run(r, &lo))
    };
    scan(ini, end, out, |p| {
        let c0 = c(p);
        let starts: &[usize] = if prefix(c0) { &[p + 1, p] } else { &[p] };
        for alt in [
            &upper_then_lower as &dyn Fn(usize) -> Option<usize>,
            &upper_plus,
        ] {
            for &q in starts {
                if let Some(e) = alt(q) {
                    return Some(if CONTRACTIONS {
                        contraction(c, e, end)
                    } else {
                        e
                    });
                }
            }
        }
        if is_n(c0) {
            return Some(run(p, &|i| i < end && i - p < NUM_MAX && is_n(c(i))));
        }
        let punct_start = if c0 == b' ' && other(p + 1) {
            Some(p + 1)
        } else if other(p) {
            Some(p)
        } else {
            None
        };
        if let Some(s) = punct_start {
            let e = run(s, &other);
            return Some(run(e, &|i| i < end && matches!(c(i), b'\r' | b'\n' | b'/')));
        }
        if is_ws(c0) {
            return Some(ws_tail(c, p, end));
        }
        None
    });
}

#[cfg(test)]
mod tests {
    use crate::pretokenize::{split, Cps, Pre};

    fn chunks(s: &str) -> Vec<String> {
        let mut cps = Cps::default();
        cps.load(s.as_bytes());
        let (mut ends, mut tmp) = (Vec::new(), Vec::new());
        split(Pre::DeepseekV3, &cps, &mut ends, &mut tmp);
        let mut out = Vec::new();
        let mut start = 0usize;
        for &e in &ends {
            out.push(s[cps.offs[start] as usize..cps.offs[e as usize] as usize].to_string());
            start = e as usize;
        }
        assert_eq!(out.concat(), s);
        out
    }

    #[test]
    fn deepseek_v3_follows_its_regex() {
        assert_eq!(
            chunks("Hello, world 12345!"),
            ["Hello", ",", " world", " ", "123", "45", "!"]
        );
        assert_eq!(
            chunks("x.Net 中文字 ok\n\n"),
            ["x", ".Net", " ", "中文字", " ok", "\n\n"]
        );
        assert_eq!(chunks("e\u{301}t\u{e9}  a"), ["e\u{301}t\u{e9}", " ", " a"]);
        assert_eq!(
            chunks("a \u{1F600}\u{1F600}\r\n"),
            ["a", " \u{1F600}\u{1F600}\r\n"]
        );
    }
}
