//! Shared helpers for the integration tests: the real tokenizers (loaded once), the
//! Gemma 3 vocabulary presented as a "gemma4" model, and parsers for the committed
//! goldens under tests/goldens/tokenizer/.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use fucina_gguf::{Array, GgufFile, Metadata, Value};
use fucina_tokenizer::{attr, Tokenizer};

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

/// tools/make_gemma4_vocab.py's `GEMMA4_TOKENS`: Gemma 4's chat tokens in place of
/// `<unused0>`.. (ids 6..), with their token types (3 CONTROL, 4 USER_DEFINED).
const GEMMA4_TOKENS: [(&str, i32); 15] = [
    ("<|turn>", 3),
    ("<turn|>", 3),
    ("<|think|>", 3),
    ("<|channel>", 4),
    ("<channel|>", 4),
    ("<|tool>", 3),
    ("<tool|>", 3),
    ("<|tool_call>", 4),
    ("<tool_call|>", 4),
    ("<|tool_response>", 4),
    ("<tool_response|>", 4),
    ("<|\"|>", 4),
    ("<|image|>", 3),
    ("<|audio|>", 3),
    ("<|video|>", 3),
];

/// tools/make_gemma4_vocab.py's `gemma4_merges` (transformers' `generate_merges`):
/// every split of a token into two tokens, ordered by the merged token's score, then
/// the left and the right piece's length in characters, all descending, ties in token
/// order and, within a token, by the pieces' ids.
pub fn gemma4_merges(tokens: &[String], scores: &[f32]) -> Vec<String> {
    let vocab: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    assert_eq!(vocab.len(), tokens.len(), "duplicate token texts");
    // (left, right, score, left chars, right chars)
    let mut merges: Vec<(&str, &str, f32, usize, usize)> = Vec::new();
    let mut local = Vec::new();
    for (t, &score) in tokens.iter().zip(scores) {
        local.clear();
        for (k, _) in t.char_indices().skip(1) {
            let (l, r) = t.split_at(k);
            if let (Some(&a), Some(&b)) = (vocab.get(l), vocab.get(r)) {
                local.push(((a, b), (l, r)));
            }
        }
        local.sort_by_key(|x| x.0);
        merges.extend(
            local
                .iter()
                .map(|&(_, (l, r))| (l, r, score, l.chars().count(), r.chars().count())),
        );
    }
    merges.sort_by(|a, b| {
        b.2.partial_cmp(&a.2)
            .expect("scores are numbers")
            .then(b.3.cmp(&a.3))
            .then(b.4.cmp(&a.4))
    });
    merges.iter().map(|m| format!("{} {}", m.0, m.1)).collect()
}

/// FNV-1a 64.
pub fn fnv(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h = (h ^ b as u64).wrapping_mul(0x100000001B3);
    }
    h
}

/// `(count, hash)` of merges as gemma4.vocab's `merges` line records them.
pub fn merges_fingerprint(merges: &[String]) -> (usize, String) {
    let joined = merges.join("\n");
    (
        merges.len(),
        format!("{:016x}", fnv(joined.as_bytes(), 0xCBF2_9CE4_8422_2325)),
    )
}

/// Gemma 3's metadata with the vocabulary rewritten as tools/make_gemma4_vocab.py
/// writes it: model "gemma4", Gemma 4's chat tokens, derived merges, no
/// tokenizer.ggml.pre, add_space_prefix false, add_bos true.
pub fn gemma4_metadata() -> &'static Metadata {
    static M: OnceLock<Metadata> = OnceLock::new();
    M.get_or_init(|| {
        let md = GgufFile::open_header(fucina_testdata::gemma3_270m())
            .expect("Gemma 3 header")
            .metadata()
            .clone();
        let mut tokens: Vec<String> = md
            .get_array("tokenizer.ggml.tokens")
            .ok()
            .flatten()
            .and_then(Array::as_strings)
            .expect("tokens")
            .iter()
            .map(|t| String::from_utf8(t.to_vec()).expect("UTF-8 token"))
            .collect();
        let Some(Array::I32(types)) = md.get_array("tokenizer.ggml.token_type").ok().flatten()
        else {
            panic!("token types")
        };
        let Some(Array::F32(scores)) = md.get_array("tokenizer.ggml.scores").ok().flatten() else {
            panic!("scores")
        };
        let mut types = types.clone();
        for (k, &(text, ty)) in GEMMA4_TOKENS.iter().enumerate() {
            assert_eq!(tokens[6 + k], format!("<unused{k}>"));
            tokens[6 + k] = text.to_string();
            types[6 + k] = ty;
        }
        let merges = gemma4_merges(&tokens, scores);
        let strings =
            |v: &[String]| Value::Array(Array::String(v.iter().map(String::as_str).collect()));
        let mut out = Metadata::default();
        for (k, v) in md.iter() {
            if !k.starts_with("tokenizer.ggml.") {
                out.insert(k, v.clone());
            }
        }
        out.insert("tokenizer.ggml.model", Value::string("gemma4"));
        out.insert("tokenizer.ggml.tokens", strings(&tokens));
        out.insert(
            "tokenizer.ggml.scores",
            Value::Array(Array::F32(scores.clone())),
        );
        out.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
        out.insert("tokenizer.ggml.merges", strings(&merges));
        for k in [
            "bos_token_id",
            "eos_token_id",
            "unknown_token_id",
            "padding_token_id",
        ] {
            let key = format!("tokenizer.ggml.{k}");
            out.insert(key.clone(), md.get(&key).expect("special id").clone());
        }
        out.insert("tokenizer.ggml.add_space_prefix", Value::Bool(false));
        out.insert("tokenizer.ggml.add_bos_token", Value::Bool(true));
        out
    })
}

/// The "gemma4" tokenizer of [`gemma4_metadata`].
pub fn gemma4() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::from_metadata(gemma4_metadata()).expect("gemma4 vocabulary"))
}

/// The merges of [`gemma4_metadata`].
pub fn gemma4_merge_list() -> Vec<String> {
    gemma4_metadata()
        .get_array("tokenizer.ggml.merges")
        .ok()
        .flatten()
        .and_then(Array::as_strings)
        .expect("merges")
        .iter()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect()
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

/// The texts of an escaped text golden (one per line).
pub fn texts(name: &str) -> Vec<Vec<u8>> {
    data_lines(&read(name)).map(unescape).collect()
}

/// The corpus texts.
pub fn corpus() -> &'static [Vec<u8>] {
    static C: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    C.get_or_init(|| texts("corpus.txt"))
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

/// The plain ids of a `.ids` file by text index.
fn plain_of(name: &str) -> HashMap<usize, Vec<u32>> {
    ids_file(name)
        .into_iter()
        .filter(|g| g.mode == Mode::Plain)
        .map(|g| (g.index, g.ids))
        .collect()
}

/// The lines of a `.ids` golden file; `<i> =` lines take the plain ids of the file the
/// header names ("same as the p line of <file>").
pub fn ids_file(name: &str) -> Vec<Golden> {
    let text = read(name);
    let base_name = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.split("same as the p line of ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .map(str::to_string);
    let mut base: Option<HashMap<usize, Vec<u32>>> = None;
    data_lines(&text)
        .map(|l| {
            let mut f = l.split(' ');
            let index = f.next().and_then(|x| x.parse().ok()).expect("text index");
            let mode = match f.next() {
                Some("p") => Mode::Plain,
                Some("s") => Mode::Special,
                Some("a") => Mode::AddSpecial,
                Some("=") => {
                    let file = base_name.as_deref().expect("a base file for '=' lines");
                    let ids = base
                        .get_or_insert_with(|| plain_of(file))
                        .get(&index)
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

/// Compare a tokenizer with a `.vocab` facts golden: special ids, add-BOS/EOS policy,
/// end-of-generation ids, every token's attributes and every token's piece (hashed in
/// chunks of 4096), and for gemma4.vocab the merges the test derived.
pub fn check_facts(tok: &Tokenizer, name: &str) {
    let mut attrs_checked = std::collections::HashMap::new();
    let opt =
        |v: &str| -> Option<u32> { v.parse::<i64>().ok().and_then(|x| u32::try_from(x).ok()) };
    let mut chunks = 0;
    for (key, vals) in facts(name) {
        let v0 = vals.first().map(String::as_str).unwrap_or("");
        match key.as_str() {
            "n_tokens" => assert_eq!(tok.vocab_size().to_string(), v0, "{name}: n_tokens"),
            "bos" => assert_eq!(tok.bos_id(), opt(v0), "{name}: bos"),
            "eos" => assert_eq!(tok.eos_id(), opt(v0), "{name}: eos"),
            "eot" => assert_eq!(tok.eot_id(), opt(v0), "{name}: eot"),
            "add_bos" => assert_eq!(tok.add_bos(), v0 == "1", "{name}: add_bos"),
            "add_eos" => assert_eq!(tok.add_eos(), v0 == "1", "{name}: add_eos"),
            "eog" => {
                let want: Vec<u32> = vals.iter().filter_map(|v| opt(v)).collect();
                assert_eq!(tok.eog_ids(), &want[..], "{name}: end-of-generation ids");
            }
            "attr" => {
                let (id, a) = (opt(v0).expect("id"), vals[1].parse::<u16>().expect("attr"));
                attrs_checked.insert(id, a);
            }
            "pieces" => {
                let chunk: u32 = v0.parse().expect("chunk");
                let lo = chunk * 4096;
                let hi = (lo + 4096).min(tok.vocab_size() as u32);
                let mut h = 0xCBF2_9CE4_8422_2325u64;
                for id in lo..hi {
                    let p = tok.token_to_piece(id, true).expect("piece");
                    h = fnv(&(p.len() as u32).to_le_bytes(), h);
                    h = fnv(p, h);
                }
                assert_eq!(
                    format!("{h:016x}"),
                    vals[1],
                    "{name}: pieces of tokens {lo}..{hi} differ from llama.cpp"
                );
                chunks += 1;
            }
            "merges" => {
                let (n, h) = merges_fingerprint(&gemma4_merge_list());
                assert_eq!(
                    (n.to_string(), h),
                    (v0.to_string(), vals[1].clone()),
                    "{name}: the tests' merges differ from tools/make_gemma4_vocab.py's"
                );
            }
            other => panic!("{name}: unknown fact {other}"),
        }
    }
    assert_eq!(
        chunks as usize,
        tok.vocab_size().div_ceil(4096),
        "{name}: piece chunks"
    );
    for id in 0..tok.vocab_size() as u32 {
        let want = attrs_checked.get(&id).copied().unwrap_or(attr::NORMAL);
        assert_eq!(
            tok.token_attr(id),
            Some(want),
            "{name}: attributes of token {id} {:?}",
            tok.token_text(id)
        );
    }
}
