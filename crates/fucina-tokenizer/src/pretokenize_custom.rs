//! Ports of the splitters llama.cpp hand-rolls in unicode.cpp for regexes it does not
//! hand to `std::regex`: kimi-k2's (`unicode_regex_split_custom_kimi_k2`), afmoe's and
//! tiny_aya's digit grouping (`_afmoe`) and Gemma 4's newline runs (`_newlines`). They
//! work on real codepoint flags, not on the collapsed string, and keep llama.cpp's
//! quirks (afmoe glues the text before a number to its first group).

use crate::pretokenize::Cps;
use crate::unicode::{self, LETTER, NUMBER, WHITESPACE_FLAG};

const OOR: u32 = u32::MAX;

/// llama.cpp's `_add_token`: a chunk ends at `end` unless it would be empty.
struct Chunks {
    prev: usize,
}

impl Chunks {
    #[inline]
    fn add(&mut self, end: usize, out: &mut Vec<u32>) {
        if end > self.prev {
            out.push(end as u32);
        }
        self.prev = end;
    }
}

/// llama.cpp's `unicode_cpt_is_han`.
fn is_han(cp: u32) -> bool {
    matches!(cp, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0x2CEB0..=0x2EBEF | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// `[^\n]+|[\n]+`: runs of newlines and runs of anything else.
pub(crate) fn newline_runs(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let mut pos = ini;
    while pos < end {
        let nl = cps.cp[pos] == 0x0A;
        while pos < end && (cps.cp[pos] == 0x0A) == nl {
            pos += 1;
        }
        out.push(pos as u32);
    }
}

/// `\p{AFMoE_digits}` (and tiny_aya's `\d{1,3}(?=(?:\d{3})*\b)`): each number run splits
/// into a leading group of `len % 3` then groups of three; the text since the previous
/// boundary joins the first group, as in llama.cpp.
pub(crate) fn afmoe_digits(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let num = |i: usize| i < end && cps.fl[i] & NUMBER != 0;
    let mut c = Chunks { prev: ini };
    let mut pos = ini;
    while pos < end {
        if !num(pos) {
            pos += 1;
            continue;
        }
        let start = pos;
        while num(pos) {
            pos += 1;
        }
        let mut cur = start + (pos - start) % 3;
        if cur > start {
            c.add(cur, out);
        }
        while cur < pos {
            cur += 3;
            c.add(cur, out);
        }
    }
    c.add(end, out);
}

/// kimi-k2's splitter: Han runs, then the o200k shape with Han excluded from letters
/// (`[^\r\n\p{L}\p{N}]?<letters>+` with an optional case-insensitive contraction),
/// `\p{N}{1,3}`, ` ?[^\s\p{L}\p{N}]+[\r\n]*` and the usual whitespace rules.
pub(crate) fn kimi_k2(cps: &Cps, ini: usize, end: usize, out: &mut Vec<u32>) {
    let cpt = |i: usize| if i < end { cps.cp[i] } else { OOR };
    let flags = |i: usize| if i < end { cps.fl[i] } else { 0 };
    let word = |i: usize| flags(i) & LETTER != 0 && !is_han(cpt(i));
    let mut c = Chunks { prev: ini };
    let mut pos = ini;
    while pos < end {
        let cp = cpt(pos);
        let fl = flags(pos);
        if is_han(cp) {
            while is_han(cpt(pos)) {
                pos += 1;
            }
            c.add(pos, out);
            continue;
        }
        let leading = !(cp == 0x0D || cp == 0x0A || fl & (LETTER | NUMBER) != 0);
        if word(pos) || (leading && word(pos + 1)) {
            pos += leading as usize;
            while word(pos) {
                pos += 1;
            }
            if cpt(pos) == b'\'' as u32 && pos + 1 < end {
                let n1 = unicode::lower_ascii(cpt(pos + 1));
                if matches!(n1, Some(b's' | b't' | b'm' | b'd')) {
                    pos += 2;
                } else if pos + 2 < end {
                    let n2 = unicode::lower_ascii(cpt(pos + 2));
                    if matches!(
                        (n1, n2),
                        (Some(b'r'), Some(b'e'))
                            | (Some(b'v'), Some(b'e'))
                            | (Some(b'l'), Some(b'l'))
                    ) {
                        pos += 3;
                    }
                }
            }
            c.add(pos, out);
            continue;
        }
        if fl & NUMBER != 0 {
            let mut ini_n = pos;
            while flags(pos) & NUMBER != 0 {
                pos += 1;
                if pos - ini_n >= 3 {
                    c.add(pos, out);
                    ini_n = pos;
                }
            }
            c.add(pos, out);
            continue;
        }
        let other = |f: u8| f & (WHITESPACE_FLAG | LETTER | NUMBER) == 0 && f != 0;
        let mut f2 = if cp == b' ' as u32 {
            flags(pos + 1)
        } else {
            fl
        };
        if other(f2) {
            pos += (cp == b' ' as u32) as usize;
            while other(f2) {
                pos += 1;
                f2 = flags(pos);
            }
            while matches!(cpt(pos), 0x0D | 0x0A) {
                pos += 1;
            }
            c.add(pos, out);
            continue;
        }
        let mut nws = 0;
        let mut last_rn = None;
        while flags(pos + nws) & WHITESPACE_FLAG != 0 {
            if matches!(cpt(pos + nws), 0x0D | 0x0A) {
                last_rn = Some(pos + nws + 1);
            }
            nws += 1;
        }
        if let Some(e) = last_rn {
            pos = e;
        } else if nws > 1 && cpt(pos + nws) != OOR {
            pos += nws - 1;
        } else if nws > 0 {
            pos += nws;
        } else {
            pos += 1;
        }
        c.add(pos, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(f: fn(&Cps, usize, usize, &mut Vec<u32>), s: &str) -> Vec<u32> {
        let mut cps = Cps::default();
        cps.load(s.as_bytes());
        let mut out = Vec::new();
        f(&cps, 0, cps.cp.len(), &mut out);
        out
    }

    #[test]
    fn afmoe_glues_the_text_before_a_number_to_its_first_group() {
        // "ab1" | "234" | "cd"; with a length that divides by 3, "x123" | "456".
        assert_eq!(ends(afmoe_digits, "ab1234cd"), [3, 6, 8]);
        assert_eq!(ends(afmoe_digits, "x123456"), [4, 7]);
        assert_eq!(ends(afmoe_digits, "abc"), [3]);
    }

    #[test]
    fn newline_runs_alternate() {
        assert_eq!(ends(newline_runs, "\n\nab\nc"), [2, 4, 5, 6]);
        assert_eq!(ends(newline_runs, "abc"), [3]);
    }
}
