//! Gemma 4 (`tokenizer.ggml.model = "gemma4"`): SentencePiece-style BPE, token-exact
//! with llama.cpp. The vocabulary is Gemma 3's presented as a Gemma 4 one (built in
//! memory as tools/make_gemma4_vocab.py writes it); the goldens are llama.cpp's ids,
//! vocabulary facts and `llama_detokenize` output for it. A hand-made vocabulary pins
//! the rules the real one cannot show (newline runs, dropped fallback bytes).

mod common;

use std::collections::HashMap;

use common::{
    check_facts, corpus, fnv, gemma4, gemma4_metadata, ids_file, show, texts, Golden, Mode,
};
use fucina_gguf::{Array, Metadata, StringArray, Value};
use fucina_tokenizer::{Kind, Pre, Tokenizer};

/// Compare our ids with every golden line (and, for texts without an `s` line, the
/// `parse_special` encoding with the plain one, as llama.cpp's were equal).
fn check_ids(tok: &Tokenizer, texts: &[Vec<u8>], goldens: &[Golden], what: &str) -> usize {
    let with_s: std::collections::HashSet<usize> = goldens
        .iter()
        .filter(|g| g.mode == Mode::Special)
        .map(|g| g.index)
        .collect();
    let mut compared = 0;
    let mut bad = Vec::new();
    let mut compare = |index: usize, mode: Mode, want: &[u32]| {
        let (add, parse) = mode.flags();
        let got = tok.encode(&texts[index], add, parse).expect("encode");
        compared += 1;
        if got != want {
            bad.push((index, mode, want.to_vec(), got));
        }
    };
    for g in goldens {
        compare(g.index, g.mode, &g.ids);
        if g.mode == Mode::Plain && !with_s.contains(&g.index) {
            compare(g.index, Mode::Special, &g.ids);
        }
    }
    eprintln!(
        "{what}: {} of {compared} encodings equal llama.cpp's",
        compared - bad.len()
    );
    for (i, mode, want, got) in bad.iter().take(8) {
        eprintln!(
            "  text {i} {mode:?} {}\n    llama.cpp: {want:?}\n    ours:      {got:?}",
            show(&texts[*i])
        );
    }
    assert!(bad.is_empty(), "{what}: {} encodings differ", bad.len());
    compared
}

#[test]
fn loads_as_spm_style_bpe() {
    let t = gemma4();
    assert_eq!(t.kind(), Kind::Bpe);
    assert_eq!(t.pretokenizer(), Some(Pre::Gemma4));
    assert!(t.spm_style_bpe());
    assert!(t.add_bos() && !t.add_space_prefix());
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
}

#[test]
fn corpus_matches_llama_cpp() {
    let g = ids_file("gemma4.ids");
    let plain = g.iter().filter(|g| g.mode == Mode::Plain).count();
    assert_eq!(plain, corpus().len(), "a plain line per corpus text");
    let n = check_ids(gemma4(), corpus(), &g, "gemma4 corpus");
    assert!(n > 2 * corpus().len());
}

#[test]
fn gemma4_texts_match_llama_cpp() {
    let extra = texts("gemma4_extra.txt");
    let g = ids_file("gemma4_extra.ids");
    assert_eq!(
        g.iter().filter(|g| g.mode == Mode::Plain).count(),
        extra.len()
    );
    check_ids(gemma4(), &extra, &g, "gemma4 extra texts");
    // The chat tokens parse as special tokens: <|turn> is CONTROL, <|channel> renders.
    let t = gemma4();
    let ids = t
        .encode("<|turn>model\n<|channel>x<channel|>", false, true)
        .expect("encode");
    assert_eq!(t.token_text(ids[0]), Some(&b"<|turn>"[..]));
    assert_eq!(
        t.decode(&ids, false).expect("decode"),
        b"model\n<|channel>x<channel|>"
    );
    let turn_end = t.token_id(b"<turn|>").expect("<turn|>");
    assert!(t.is_eog(turn_end));
    // Gemma 4's </s> is an ordinary token, not an end of generation (llama.cpp PR 21492).
    let s = t.token_id(b"</s>").expect("</s>");
    assert!(!t.is_eog(s));
}

#[test]
fn vocab_facts_and_merges_match_llama_cpp() {
    check_facts(gemma4(), "gemma4.vocab");
}

/// Ids of `tokenize(text, add_special = true, parse_special = true)` from the goldens:
/// BOS (always added for Gemma 4), then the `s` ids, or the `p` ids where equal.
fn special_ids(goldens: &[Golden], bos: u32) -> HashMap<usize, Vec<u32>> {
    let mut out: HashMap<usize, Vec<u32>> = HashMap::new();
    for g in goldens {
        if g.mode == Mode::Special || (g.mode == Mode::Plain && !out.contains_key(&g.index)) {
            out.insert(g.index, std::iter::once(bos).chain(g.ids.clone()).collect());
        }
    }
    out
}

#[test]
fn detokenize_matches_llama_cpp() {
    let t = gemma4();
    let bos = t.bos_id().expect("bos");
    let corpus_ids = special_ids(&ids_file("gemma4.ids"), bos);
    let extra_ids = special_ids(&ids_file("gemma4_extra.ids"), bos);
    let text = std::fs::read_to_string(common::goldens().join("gemma4.detok")).expect("detok");
    let h = |b: &[u8]| format!("{:016x}", fnv(b, 0xCBF2_9CE4_8422_2325));
    let (mut n, mut bad) = (0, 0);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(' ').collect();
        let i: usize = f[1].parse().expect("index");
        let ids = match f[0] {
            "c" => &corpus_ids[&i],
            _ => &extra_ids[&i],
        };
        let plain = t.detokenize(ids, false, false).expect("detokenize");
        let special = t.detokenize(ids, true, true).expect("detokenize");
        n += 1;
        if h(&plain) != f[2] || h(&special) != f[3] {
            bad += 1;
            if bad <= 5 {
                eprintln!(
                    "{} {i}: ours {:?} / {:?}",
                    f[0],
                    String::from_utf8_lossy(&plain),
                    String::from_utf8_lossy(&special)
                );
            }
        }
    }
    eprintln!("gemma4 llama_detokenize: {} of {n} texts equal", n - bad);
    assert!(n > corpus().len());
    assert_eq!(bad, 0);
}

#[test]
fn decode_round_trips_and_streams() {
    // Pieces render U+2581 as a space, so a literal U+2581 in the input comes back as
    // a space, as with SentencePiece.
    let t = gemma4();
    let mut n = 0;
    for text in corpus().iter().filter(|x| std::str::from_utf8(x).is_ok()) {
        let want = String::from_utf8_lossy(text).replace('\u{2581}', " ");
        let ids = t.encode(text, true, false).expect("encode");
        let got = t.decode(&ids, false).expect("decode");
        assert_eq!(
            String::from_utf8_lossy(&got),
            want,
            "round trip of {}",
            show(text)
        );
        let mut dec = t.stream_decoder(false);
        let mut streamed = String::new();
        for &id in &ids {
            streamed.push_str(&dec.push(id).expect("push"));
        }
        streamed.push_str(&dec.flush());
        assert_eq!(streamed, want, "stream of {}", show(text));
        n += 1;
    }
    assert!(n > 1800);
}

#[test]
fn tokenizer_ggml_pre_is_ignored_for_the_gemma4_model() {
    // llama.cpp's "gemma4" model always uses its gemma4 pretokenizer.
    let mut md = gemma4_metadata().clone();
    md.insert("tokenizer.ggml.pre", Value::string("qwen2"));
    md.insert("tokenizer.ggml.add_bos_token", Value::Bool(false));
    let t = Tokenizer::from_metadata(&md).expect("loads");
    assert_eq!(t.pretokenizer(), Some(Pre::Gemma4));
    // add_bos = false is overridden, with a warning, as llama.cpp does (PR 21500).
    assert!(t.add_bos());
    assert!(t.warnings().iter().any(|w| w.contains("add_bos")));
}

/// A hand-made gemma4 vocabulary: "\n" and "\n\n\n" without a merge between them,
/// merges "a b", "▁ ab" and "b a" (whose result is no token), and only some
/// `<0xXX>` tokens.
fn tiny() -> Tokenizer {
    let tokens = [
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "\n",
        "\n\n\n",
        "a",
        "b",
        "ab",
        "\u{2581}",
        "\u{2581}ab",
        "<0x0A>",
        "<0xC3>",
        "<0xA9>",
        "<0x62>",
        "<start_of_turn>",
    ];
    let types = vec![3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 6, 6, 6, 6, 3];
    let strings = |v: &[&str]| Value::Array(Array::String(v.iter().collect::<StringArray>()));
    let mut md = Metadata::default();
    md.insert("tokenizer.ggml.model", Value::string("gemma4"));
    md.insert("tokenizer.ggml.tokens", strings(&tokens));
    md.insert(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.0; tokens.len()])),
    );
    md.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.insert(
        "tokenizer.ggml.merges",
        strings(&["a b", "\u{2581} ab", "b a"]),
    );
    for (k, v) in [
        ("bos_token_id", 2),
        ("eos_token_id", 1),
        ("unknown_token_id", 3),
        ("padding_token_id", 0),
    ] {
        md.insert(format!("tokenizer.ggml.{k}"), Value::U32(v));
    }
    md.insert("tokenizer.ggml.add_bos_token", Value::Bool(false));
    md.insert("tokenizer.ggml.add_space_prefix", Value::Bool(false));
    Tokenizer::from_metadata(&md).expect("tiny gemma4")
}

#[test]
fn hand_made_vocabulary_follows_llama_cpp() {
    // Every expectation below is llama.cpp's output for the same vocabulary written as a
    // GGUF (llama-cpp-python 0.3.36, tokenize and llama_detokenize).
    let t = tiny();
    assert!(t.add_bos(), "forced on for Gemma 4");
    let enc = |s: &[u8], add: bool, parse: bool| t.encode(s, add, parse).expect("encode");
    // A newline run that is a token is taken whole; "\n\n" is not a token and no merge
    // joins newlines; "é" is no token and falls back to <0xC3> <0xA9>.
    assert_eq!(
        enc(b" ab\n\n\nab\n\n\xC3\xA9", true, true),
        [2, 10, 5, 8, 4, 4, 12, 13]
    );
    // "b a" merges into "ba", which is no token: its bytes fall back, and 'a' has no
    // <0x61> token, so it is dropped.
    assert_eq!(enc(b"ba", false, false), [14]);
    assert_eq!(enc(b"\n\n\n\n", false, false), [4, 4, 4, 4]);
    assert_eq!(enc(b"x y", true, true), [2, 9]);
    assert_eq!(enc(b"<start_of_turn>ab", true, true), [2, 15, 8]);
    assert_eq!(enc(b"<start_of_turn>ab", false, false), [6, 8]);
    assert_eq!(enc(b"abab ba", false, false), [8, 8, 9, 14]);
    let ids = [2, 10, 5, 8, 15, 14];
    assert_eq!(
        t.detokenize(&ids, false, false).expect("detok"),
        b" ab\n\n\nabb"
    );
    assert_eq!(
        t.detokenize(&ids, true, true).expect("detok"),
        b" ab\n\n\nab<start_of_turn>b"
    );
    assert_eq!(
        t.detokenize(&[6, 9, 7], false, false).expect("detok"),
        b"a b"
    );
}
