//! Shared helpers for the integration tests: the real tokenizers (loaded once) and
//! parsers for the committed goldens under tests/goldens/tokenizer/.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use fucina_tokenizer::Tokenizer;

pub fn goldens() -> PathBuf {
    fucina_testdata::repo_root().join("tests/goldens/tokenizer")
}

pub fn qwen() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        Tokenizer::from_gguf(fucina_testdata::qwen2_vocab_header()).expect("Qwen2 vocabulary")
    })
}

pub fn gemma() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        Tokenizer::from_gguf(fucina_testdata::gemma3_270m()).expect("Gemma 3 vocabulary")
    })
}

fn read(name: &str) -> String {
    let p = goldens().join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn data_lines(text: &str) -> impl Iterator<Item = &str> {
    text.strip_suffix('\n')
        .unwrap_or(text)
        .split('\n')
        .filter(|l| !l.starts_with('#'))
}

/// Undo the generator's `escape`.
fn unescape(line: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next() {
            Some('\\') => out.push(b'\\'),
            Some('n') => out.push(b'\n'),
            Some('r') => out.push(b'\r'),
            Some('t') => out.push(b'\t'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(u8::from_str_radix(&hex, 16).expect("\\xHH"));
            }
            Some('u') => {
                assert_eq!(chars.next(), Some('{'));
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let c = char::from_u32(u32::from_str_radix(&hex, 16).expect("\\u{X}"))
                    .expect("codepoint");
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            other => panic!("bad escape \\{other:?} in corpus line {line:?}"),
        }
    }
    out
}

/// The corpus texts.
pub fn corpus() -> &'static [Vec<u8>] {
    static C: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    C.get_or_init(|| data_lines(&read("corpus.txt")).map(unescape).collect())
}

/// Encoding mode of a golden line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// add_special = false, parse_special = false.
    Plain,
    /// add_special = false, parse_special = true.
    Special,
    /// add_special = true, parse_special = false.
    AddSpecial,
}

impl Mode {
    pub fn flags(self) -> (bool, bool) {
        match self {
            Mode::Plain => (false, false),
            Mode::Special => (false, true),
            Mode::AddSpecial => (true, false),
        }
    }
}

pub struct Golden {
    pub index: usize,
    pub mode: Mode,
    pub ids: Vec<u32>,
}

/// The lines of a `.ids` golden file; `<i> =` lines take the plain ids of qwen2.ids.
pub fn ids_file(name: &str) -> Vec<Golden> {
    let base = (name != "qwen2.ids").then(|| {
        ids_file("qwen2.ids")
            .into_iter()
            .filter(|g| g.mode == Mode::Plain)
            .map(|g| (g.index, g.ids))
            .collect::<std::collections::HashMap<_, _>>()
    });
    data_lines(&read(name))
        .map(|l| {
            let mut f = l.split(' ');
            let index = f.next().and_then(|x| x.parse().ok()).expect("text index");
            let mode = match f.next() {
                Some("p") => Mode::Plain,
                Some("s") => Mode::Special,
                Some("a") => Mode::AddSpecial,
                Some("=") => {
                    let ids = base
                        .as_ref()
                        .and_then(|b| b.get(&index))
                        .expect("base ids for '='");
                    return Golden {
                        index,
                        mode: Mode::Plain,
                        ids: ids.clone(),
                    };
                }
                m => panic!("bad mode {m:?} in {name}"),
            };
            let ids = f
                .filter(|x| !x.is_empty())
                .map(|x| x.parse().expect("id"))
                .collect();
            Golden { index, mode, ids }
        })
        .collect()
}

/// `key -> values` lines of a `.vocab` facts file (repeated keys kept in order).
pub fn facts(name: &str) -> Vec<(String, Vec<String>)> {
    data_lines(&read(name))
        .map(|l| {
            let mut f = l.split(' ');
            let key = f.next().unwrap_or_default().to_string();
            (
                key,
                f.filter(|x| !x.is_empty()).map(str::to_string).collect(),
            )
        })
        .collect()
}

/// Printable form of a text for failure messages.
pub fn show(t: &[u8]) -> String {
    let s = format!("{:?}", String::from_utf8_lossy(t));
    if s.len() > 160 {
        format!(
            "{}...",
            &s[..s
                .char_indices()
                .take_while(|(i, _)| *i < 160)
                .last()
                .map_or(0, |(i, _)| i)]
        )
    } else {
        s
    }
}
