//! Malformed tokenizer metadata gets a clear error (never a panic), and small
//! hand-built vocabularies behave as specified.

use fucina_gguf::{Array, Metadata, StringArray, Value};
use fucina_tokenizer::{Pre, Tokenizer, TokenizerError};
use proptest::prelude::*;

fn strings(items: &[&str]) -> Value {
    Value::Array(Array::String(items.iter().collect::<StringArray>()))
}

/// A tiny byte-level BPE vocabulary: every printable ASCII byte, "hi", "<|im_end|>".
fn bpe_metadata() -> Metadata {
    let mut tokens: Vec<String> = (0x21u8..=0x7E).map(|b| (b as char).to_string()).collect();
    tokens.push("Ġ".into()); // space, byte-level encoded
    tokens.push("hi".into());
    tokens.push("Ġhi".into());
    tokens.push("<|im_end|>".into());
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut md = Metadata::default();
    md.insert("tokenizer.ggml.model", Value::string("gpt2"));
    md.insert("tokenizer.ggml.pre", Value::string("qwen2"));
    md.insert("tokenizer.ggml.tokens", strings(&refs));
    md.insert("tokenizer.ggml.merges", strings(&["h i", "Ġ hi"]));
    md.insert(
        "tokenizer.ggml.token_type",
        Value::Array(Array::I32(vec![1; tokens.len()])),
    );
    md
}

fn spm_metadata() -> Metadata {
    let mut md = Metadata::default();
    md.insert("tokenizer.ggml.model", Value::string("llama"));
    md.insert(
        "tokenizer.ggml.tokens",
        strings(&["<unk>", "a", "b", "ab", "abc", "c", "<0x78>"]),
    );
    md.insert(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.0, -1.0, -1.0, -3.0, -2.5, -1.0, -5.0])),
    );
    md.insert("tokenizer.ggml.add_bos_token", Value::Bool(false));
    md.insert("tokenizer.ggml.add_space_prefix", Value::Bool(false));
    md
}

fn err(md: &Metadata) -> TokenizerError {
    Tokenizer::from_metadata(md).expect_err("malformed metadata must be refused")
}

#[test]
fn spec_examples_hold() {
    let t = Tokenizer::from_metadata(&bpe_metadata()).expect("bpe");
    let hi = t.token_id(b"hi").expect("hi");
    let end = t.token_id(b"<|im_end|>").expect("marker");
    // "<|im_end|>" is recognised as end-of-turn by text and made CONTROL, as llama.cpp does.
    assert_eq!(
        t.encode("hi<|im_end|>", false, true).expect("encode"),
        [hi, end]
    );
    assert_eq!(t.decode(&[hi, end], true).expect("decode"), b"hi<|im_end|>");
    assert_eq!(t.decode(&[hi, end], false).expect("decode"), b"hi");
    assert_eq!(t.eot_id(), Some(end));
    assert!(t.is_eog(end));
    let plain = t.encode("hi<|im_end|>", false, false).expect("encode");
    assert!(
        plain.len() > 2 && !plain.contains(&end),
        "parse_special off: the marker is text"
    );

    let t = Tokenizer::from_metadata(&spm_metadata()).expect("spm");
    // "abc" (-2.5) outscores "ab" (-3) as a final piece; 'x' falls back to <0x78>.
    assert_eq!(t.encode("abcx", true, false).expect("encode"), [4, 6]);
}

#[test]
fn merges_through_tokens_missing_from_the_vocabulary() {
    // llama.cpp merges by rank whether or not the result is a token; a final symbol
    // that is not a token falls back to its bytes' one-character tokens.
    let mut md = Metadata::default();
    md.insert("tokenizer.ggml.model", Value::string("gpt2"));
    md.insert("tokenizer.ggml.pre", Value::string("gpt-2"));
    md.insert("tokenizer.ggml.tokens", strings(&["a", "b", "c", "abc"]));
    md.insert("tokenizer.ggml.merges", strings(&["a b", "ab c"]));
    let t = Tokenizer::from_metadata(&md).expect("bpe");
    assert_eq!(
        t.encode("abc", false, false).expect("encode"),
        [3],
        "via the non-token 'ab'"
    );
    assert_eq!(
        t.encode("ab", false, false).expect("encode"),
        [0, 1],
        "'ab' falls back to bytes"
    );
    assert_eq!(t.encode("ba", false, false).expect("encode"), [1, 0]);
}

#[test]
fn missing_or_unsupported_model() {
    let mut md = bpe_metadata();
    md.remove("tokenizer.ggml.model");
    assert!(
        matches!(err(&md), TokenizerError::MissingKey { key } if key == "tokenizer.ggml.model")
    );
    md.insert("tokenizer.ggml.model", Value::string("bert"));
    let e = err(&md);
    assert!(matches!(&e, TokenizerError::UnsupportedModel { model, .. } if model == "bert"));
    assert!(e.to_string().contains("gpt2"), "{e}");
    md.insert("tokenizer.ggml.model", Value::U32(3));
    assert!(
        matches!(err(&md), TokenizerError::Gguf(_)),
        "a non-string model is a typed-metadata error"
    );
}

#[test]
fn unknown_pretokenizer_lists_the_known_ones() {
    let mut md = bpe_metadata();
    md.insert("tokenizer.ggml.pre", Value::string("no-such-pre"));
    let e = err(&md);
    let msg = e.to_string();
    assert!(matches!(&e, TokenizerError::UnknownPretokenizer { pre, .. } if pre == "no-such-pre"));
    for known in [
        "qwen2",
        "deepseek-r1-qwen",
        "qwen35",
        "llama-bpe",
        "gpt-2",
        "glm4",
        "deepseek-v3",
        "gpt-4o",
        "inkling",
        "tekken",
        "default",
    ] {
        assert!(msg.contains(known), "{msg} should list {known}");
    }
}

#[test]
fn missing_pretokenizer_is_llama_cpps_default_with_a_warning() {
    // llama.cpp loads such a file with its DEFAULT pretokenizer and a warning.
    let mut md = bpe_metadata();
    md.remove("tokenizer.ggml.pre");
    let t = Tokenizer::from_metadata(&md).expect("missing pre loads");
    assert_eq!(t.pretokenizer(), Some(Pre::Default));
    assert!(
        t.warnings()
            .iter()
            .any(|w| w.contains("tokenizer.ggml.pre")),
        "{:?}",
        t.warnings()
    );
    md.insert("tokenizer.ggml.pre", Value::string(""));
    let empty = Tokenizer::from_metadata(&md).expect("empty pre loads");
    assert_eq!(empty.pretokenizer(), Some(Pre::Default));
    md.insert("tokenizer.ggml.pre", Value::string("default"));
    let named = Tokenizer::from_metadata(&md).expect("default");
    assert_eq!(named.pretokenizer(), Some(Pre::Default));
    assert!(named.warnings().is_empty());
    // The default splits punctuation runs before GPT-2's rules: "hi!!" is "hi" + "!!".
    let hi = t.token_id(b"hi").expect("hi");
    let bang = t.token_id(b"!").expect("!");
    assert_eq!(
        t.encode("hi!!", false, false).expect("encode"),
        [hi, bang, bang]
    );
}

#[test]
fn missing_or_malformed_merges() {
    let mut md = bpe_metadata();
    md.remove("tokenizer.ggml.merges");
    assert!(
        matches!(err(&md), TokenizerError::MissingKey { key } if key == "tokenizer.ggml.merges")
    );
    // llama.cpp lets Kimi-K2 go without merges: every chunk falls back to its bytes.
    md.insert("tokenizer.ggml.pre", Value::string("kimi-k2"));
    let t = Tokenizer::from_metadata(&md).expect("kimi-k2 without merges");
    let (h, i) = (t.token_id(b"h").expect("h"), t.token_id(b"i").expect("i"));
    assert_eq!(t.encode("hi", false, false).expect("encode"), [h, i]);
    md.insert("tokenizer.ggml.pre", Value::string("qwen2"));
    md.insert(
        "tokenizer.ggml.merges",
        Value::Array(Array::I32(vec![1, 2])),
    );
    assert!(
        matches!(err(&md), TokenizerError::InvalidMetadata { key, .. } if key == "tokenizer.ggml.merges")
    );
    md.insert("tokenizer.ggml.merges", strings(&["h i", "nospace"]));
    let e = err(&md);
    assert!(e.to_string().contains("merge 1"), "{e}");
    md.insert("tokenizer.ggml.merges", Value::string("h i"));
    assert!(matches!(err(&md), TokenizerError::Gguf(_)));
}

#[test]
fn mismatched_array_lengths() {
    let mut md = bpe_metadata();
    md.insert(
        "tokenizer.ggml.token_type",
        Value::Array(Array::I32(vec![1; 5])),
    );
    let e = err(&md);
    assert!(
        matches!(&e, TokenizerError::LengthMismatch { key, len: 5, .. } if key == "tokenizer.ggml.token_type")
    );
    assert!(e.to_string().contains("5 entries"), "{e}");
    md.insert(
        "tokenizer.ggml.token_type",
        Value::Array(Array::F32(vec![1.0; 98])),
    );
    assert!(matches!(err(&md), TokenizerError::InvalidMetadata { .. }));

    let mut md = spm_metadata();
    md.insert(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.0; 3])),
    );
    assert!(
        matches!(err(&md), TokenizerError::LengthMismatch { key, len: 3, expected: 7 } if key == "tokenizer.ggml.scores")
    );
    md.insert(
        "tokenizer.ggml.scores",
        Value::Array(Array::String(StringArray::default())),
    );
    assert!(matches!(err(&md), TokenizerError::InvalidMetadata { .. }));
}

#[test]
fn ids_out_of_range() {
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
    ] {
        let mut md = bpe_metadata();
        md.insert(key, Value::U32(1_000_000));
        let e = err(&md);
        assert!(
            matches!(&e, TokenizerError::IdOutOfRange { id: 1_000_000, .. }),
            "{key}: {e}"
        );
        assert!(e.to_string().contains(key), "{e}");
        md.insert(key, Value::I32(-1));
        assert!(
            matches!(err(&md), TokenizerError::Gguf(_)),
            "{key}: negative id"
        );
    }
    let t = Tokenizer::from_metadata(&bpe_metadata()).expect("bpe");
    let n = t.vocab_size() as u32;
    assert!(
        matches!(t.decode(&[0, n], false), Err(TokenizerError::InvalidTokenId { id, .. }) if id == n)
    );
    assert!(t.token_to_piece(u32::MAX, true).is_err());
    let mut d = t.stream_decoder(false);
    assert!(d.push(n).is_err());
}

#[test]
fn bad_vocab_arrays() {
    let mut md = bpe_metadata();
    md.insert("tokenizer.ggml.tokens", strings(&[]));
    assert!(matches!(err(&md), TokenizerError::InvalidMetadata { .. }));
    md.insert(
        "tokenizer.ggml.tokens",
        Value::Array(Array::U8(vec![1, 2, 3])),
    );
    assert!(
        matches!(err(&md), TokenizerError::InvalidMetadata { key, .. } if key == "tokenizer.ggml.tokens")
    );
    md.remove("tokenizer.ggml.tokens");
    assert!(
        matches!(err(&md), TokenizerError::MissingKey { key } if key == "tokenizer.ggml.tokens")
    );
    let mut md = bpe_metadata();
    md.insert("tokenizer.ggml.add_bos_token", Value::U8(1));
    assert!(
        matches!(err(&md), TokenizerError::InvalidMetadata { key, .. } if key == "tokenizer.ggml.add_bos_token")
    );
}

#[test]
fn encode_time_errors() {
    // chatglm-bpe has no default BOS; asking for it without one is an error, not a panic.
    let mut md = bpe_metadata();
    md.insert("tokenizer.ggml.pre", Value::string("chatglm-bpe"));
    md.insert("tokenizer.ggml.add_bos_token", Value::Bool(true));
    let t = Tokenizer::from_metadata(&md).expect("bpe");
    assert!(matches!(
        t.encode("hi", true, false),
        Err(TokenizerError::MissingSpecialToken { which: "BOS" })
    ));
    assert!(t.encode("hi", false, false).is_ok());
    // SentencePiece byte fallback without a byte token for 'z'.
    let t = Tokenizer::from_metadata(&spm_metadata()).expect("spm");
    assert!(matches!(
        t.encode("az", false, false),
        Err(TokenizerError::MissingByteToken { byte: b'z' })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(text in proptest::collection::vec(any::<u8>(), 0..64), parse in any::<bool>()) {
        let t = Tokenizer::from_metadata(&bpe_metadata()).expect("bpe");
        let ids = t.encode(&text, true, parse).expect("the byte-level vocabulary covers every printable byte");
        let back = t.decode(&ids, true).expect("decode");
        if std::str::from_utf8(&text).is_ok() && text.iter().all(|&b| (0x20..0x7F).contains(&b)) {
            prop_assert_eq!(&back, &text);
        }
        let t = Tokenizer::from_metadata(&spm_metadata()).expect("spm");
        let _ = t.encode(&text, true, parse);
    }
}
