//! Token-ID parity with llama.cpp on the committed corpus (goldens written by
//! tools/gen_tokenizer_goldens.py from llama-cpp-python), for both real vocabularies
//! and for every pretokenizer family on the Qwen2 vocabulary.

mod common;

use common::{corpus, gemma, ids_file, qwen, show, Golden, Mode};
use fucina_gguf::{Array, GgufFile, Metadata, StringArray, Value};
use fucina_tokenizer::Pre;
use fucina_tokenizer::Tokenizer;

/// Compare every golden line with our ids; for full files also check that texts with
/// no `s` line tokenize the same with `parse_special` (llama.cpp did). Returns the
/// mismatches, printing the first few.
fn mismatches(tok: &Tokenizer, goldens: &[Golden], full: bool, what: &str) -> usize {
    mismatches_in(tok, corpus(), goldens, full, what)
}

/// [`mismatches`] over another list of texts.
pub fn mismatches_in(
    tok: &Tokenizer,
    texts: &[Vec<u8>],
    goldens: &[Golden],
    full: bool,
    what: &str,
) -> usize {
    let mut mismatches = Vec::new();
    let mut compared = 0usize;
    let with_s: std::collections::HashSet<usize> = goldens
        .iter()
        .filter(|g| g.mode == Mode::Special)
        .map(|g| g.index)
        .collect();
    let mut compare = |index: usize, mode: Mode, want: &[u32]| {
        let (add, parse) = mode.flags();
        let got = tok
            .encode(&texts[index], add, parse)
            .unwrap_or_else(|e| panic!("{what}: text {index}: {e}"));
        compared += 1;
        if got != want {
            mismatches.push((index, mode, want.to_vec(), got));
        }
    };
    for g in goldens {
        compare(g.index, g.mode, &g.ids);
        if full && g.mode == Mode::Plain && !with_s.contains(&g.index) {
            compare(g.index, Mode::Special, &g.ids);
        }
    }
    eprintln!(
        "{what}: {} of {compared} encodings differ from llama.cpp",
        mismatches.len()
    );
    for (i, mode, want, got) in mismatches.iter().take(8) {
        eprintln!(
            "  text {i} {mode:?} {}\n    llama.cpp: {want:?}\n    ours:      {got:?}",
            show(&texts[*i])
        );
    }
    mismatches.len()
}

fn check(tok: &Tokenizer, goldens: &[Golden], full: bool, what: &str) {
    let n = mismatches(tok, goldens, full, what);
    assert_eq!(n, 0, "{what}: {n} encodings differ from llama.cpp");
}

#[test]
fn corpus_is_large_and_varied() {
    let texts = corpus();
    assert!(texts.len() >= 2000, "corpus has {} texts", texts.len());
    let invalid = texts
        .iter()
        .filter(|t| std::str::from_utf8(t).is_err())
        .count();
    assert!(invalid >= 100, "only {invalid} non-UTF-8 texts");
}

#[test]
fn qwen2_matches_llama_cpp() {
    let g = ids_file("qwen2.ids");
    assert!(g.iter().filter(|g| g.mode == Mode::Plain).count() == corpus().len());
    check(qwen(), &g, true, "qwen2");
}

#[test]
fn gemma3_matches_llama_cpp() {
    let g = ids_file("gemma3.ids");
    assert!(g.iter().filter(|g| g.mode == Mode::Plain).count() == corpus().len());
    check(gemma(), &g, true, "gemma3");
}

fn qwen_metadata() -> Metadata {
    GgufFile::open_header(fucina_testdata::qwen2_vocab_header())
        .expect("qwen header")
        .metadata()
        .clone()
}

fn with_pre(md: &Metadata, pre: &str) -> Tokenizer {
    let mut md = md.clone();
    md.insert("tokenizer.ggml.pre", Value::string(pre));
    Tokenizer::from_metadata(&md).unwrap_or_else(|e| panic!("{pre}: {e}"))
}

/// The generator's `digit_extension`: tokens "00".."99", "000".."999"; merges for every
/// digit pair and for the triples whose first digit is below 5.
fn with_digit_tokens(md: &Metadata) -> Metadata {
    let d = b"0123456789";
    let mut tokens: Vec<Vec<u8>> = Vec::new();
    for &a in d {
        for &b in d {
            tokens.push(vec![a, b]);
        }
    }
    for &a in d {
        for &b in d {
            for &c in d {
                tokens.push(vec![a, b, c]);
            }
        }
    }
    let mut merges: Vec<Vec<u8>> = Vec::new();
    for &a in d {
        for &b in d {
            merges.push(vec![a, b' ', b]);
        }
    }
    for &a in d {
        for &b in d {
            for &c in d {
                if a < b'5' {
                    merges.push(vec![a, b, b' ', c]);
                }
            }
        }
    }
    let extend = |key: &str, extra: &[Vec<u8>]| -> Value {
        let old = md
            .get_array(key)
            .ok()
            .flatten()
            .and_then(Array::as_strings)
            .expect("string array");
        let all: StringArray = old.iter().chain(extra.iter().map(Vec::as_slice)).collect();
        Value::Array(Array::String(all))
    };
    let mut out = md.clone();
    out.insert(
        "tokenizer.ggml.tokens",
        extend("tokenizer.ggml.tokens", &tokens),
    );
    out.insert(
        "tokenizer.ggml.merges",
        extend("tokenizer.ggml.merges", &merges),
    );
    let Some(Array::I32(types)) = md.get_array("tokenizer.ggml.token_type").ok().flatten() else {
        panic!("token_type")
    };
    let mut types = types.clone();
    types.extend(std::iter::repeat_n(1, tokens.len()));
    out.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    out
}

/// Every `tokenizer.ggml.pre` with a golden file (one per chunking behaviour), and the
/// aliases llama.cpp maps to the same behaviour, checked against their family's file.
const PRE_GOLDENS: &[(&str, &[&str])] = &[
    ("qwen35", &[]),
    ("gpt-2", &["phi-2", "mpt", "olmo", "jais"]),
    ("starcoder", &["refact", "command-r", "smollm"]),
    ("deepseek-v3", &["hunyuan-dense", "joyai-llm"]),
    ("gpt-4o", &["llama4", "minimax-m2"]),
    // llama.cpp's name for the o200k regex with \p{M} in both word classes: our
    // `inkling` chunker (with ignore_merges), which llama.cpp does not name.
    ("granite-embed-multi-97m", &[]),
    ("default", &[]),
    ("falcon", &[]),
    ("tekken", &[]),
    ("deepseek-llm", &[]),
    ("deepseek-coder", &[]),
    ("seed-coder", &[]),
    ("bloom", &["poro-chat", "gpt3-finnish"]),
    ("viking", &[]),
    ("superbpe", &[]),
    ("chameleon", &[]),
    ("tiny_aya", &["cohere2moe"]),
    ("bailingmoe", &["bailingmoe2", "llada-moe"]),
    ("kimi-k2", &[]),
    ("minicpm5", &[]),
    ("spark2_5", &[]),
    ("youtu", &[]),
    ("jais-2", &[]),
    ("exaone-moe", &[]),
    ("hy_v4", &[]),
    ("ufakzeka", &[]),
    ("afmoe", &[]),
    ("laguna", &[]),
    // SentencePiece-style BPE on a byte-level vocabulary, as llama.cpp runs it; the
    // gemma4 type differs only by its newline rule, which no Qwen2 token can trigger.
    ("sarvam-moe", &["granite-embed-multi-311m"]),
];

#[test]
fn every_pretokenizer_family_matches_llama_cpp() {
    let md = qwen_metadata();
    let mut report = Vec::new();
    for &(pre, aliases) in PRE_GOLDENS {
        let g = ids_file(&format!("qwen2_pre_{pre}.ids"));
        assert!(g.len() > 600, "{pre}: only {} goldens", g.len());
        for name in std::iter::once(pre).chain(aliases.iter().copied()) {
            check(
                &with_pre(&md, name),
                &g,
                false,
                &format!("qwen2 vocabulary as pre={name}"),
            );
            report.push(format!("{name} {n}/{n}", n = g.len()));
        }
    }
    eprintln!("pretokenizers matching llama.cpp: {}", report.join(", "));
}

#[test]
fn a_missing_pretokenizer_is_the_default_one() {
    let mut md = qwen_metadata();
    md.remove("tokenizer.ggml.pre");
    let tok = Tokenizer::from_metadata(&md).expect("loads");
    assert_eq!(tok.pretokenizer(), Some(Pre::Default));
    assert_eq!(tok.warnings().len(), 1, "{:?}", tok.warnings());
    check(
        &tok,
        &ids_file("qwen2_pre_default.ids"),
        false,
        "qwen2 vocabulary without tokenizer.ggml.pre",
    );
}

#[test]
fn digit_grouping_and_ignore_merges_match_llama_cpp() {
    let md = with_digit_tokens(&qwen_metadata());
    for pre in [
        "qwen2",
        "llama-bpe",
        "dbrx",
        "glm4",
        "gpt-2",
        "deepseek-v3",
        "gpt-4o",
        "superbpe",
        "afmoe",
        "minicpm5",
        "tekken",
    ] {
        let g = ids_file(&format!("qwen2_digits_{pre}.ids"));
        assert!(g.len() > 600, "{pre}: only {} goldens", g.len());
        check(
            &with_pre(&md, pre),
            &g,
            false,
            &format!("qwen2 vocabulary + digit tokens as pre={pre}"),
        );
    }
}

#[test]
fn goldens_catch_a_wrong_pretokenizer() {
    // Each family's goldens must reject its neighbours: the comparisons above would
    // pass vacuously if the families chunked these texts alike.
    let md = qwen_metadata();
    let g = ids_file("qwen2.ids");
    for pre in [
        "qwen35",
        "gpt-2",
        "starcoder",
        "deepseek-v3",
        "default",
        "deepseek-llm",
        "bloom",
        "chameleon",
        "kimi-k2",
        "sarvam-moe",
        "laguna",
        "exaone-moe",
    ] {
        let n = mismatches(
            &with_pre(&md, pre),
            &g,
            false,
            &format!("qwen2 goldens vs pre={pre} (expected to differ)"),
        );
        assert!(
            n > 10,
            "pre={pre}: only {n} mismatches; the goldens do not discriminate"
        );
    }
    // Combining marks: llama.cpp's gpt-4o splits them from their base letters, the
    // \p{M} variant (our inkling) does not.
    for (golden, wrong) in [
        ("granite-embed-multi-97m", "gpt-4o"),
        ("gpt-4o", "granite-embed-multi-97m"),
        ("gpt-4o", "inkling"),
    ] {
        let g = ids_file(&format!("qwen2_pre_{golden}.ids"));
        let what = format!("pre={golden} goldens vs pre={wrong} (expected to differ)");
        let n = mismatches(&with_pre(&md, wrong), &g, false, &what);
        assert!(n > 10, "{what}: only {n} mismatches");
    }
    for (golden, wrong) in [
        ("default", "falcon"),
        ("deepseek-llm", "deepseek-coder"),
        ("bloom", "viking"),
        ("spark2_5", "deepseek-v3"),
        ("afmoe", "deepseek-v3"),
        ("youtu", "tiny_aya"),
        ("jais-2", "llama-bpe"),
        ("seed-coder", "qwen2"),
        ("tekken", "qwen2"),
    ] {
        let g = ids_file(&format!("qwen2_pre_{golden}.ids"));
        let what = format!("pre={golden} goldens vs pre={wrong} (expected to differ)");
        let n = mismatches(&with_pre(&md, wrong), &g, false, &what);
        // Viking differs from BLOOM only by splitting digits, which Qwen2's one-digit
        // tokens mostly hide: one text tells them apart.
        assert!(n > 0, "{what}: no mismatches");
    }
    let digits = with_digit_tokens(&md);
    for (golden, wrong) in [
        ("llama-bpe", "qwen2"),
        ("llama-bpe", "dbrx"),
        ("dbrx", "qwen2"),
        ("glm4", "deepseek-v3"),
        ("gpt-4o", "qwen2"),
        ("superbpe", "afmoe"),
        ("afmoe", "superbpe"),
        ("minicpm5", "llama-bpe"),
        ("tekken", "gpt-4o"),
    ] {
        let g = ids_file(&format!("qwen2_digits_{golden}.ids"));
        let what = format!("digit goldens of {golden} vs pre={wrong} (expected to differ)");
        let n = mismatches(&with_pre(&digits, wrong), &g, false, &what);
        assert!(n > 10, "{what}: only {n} mismatches");
    }
}
