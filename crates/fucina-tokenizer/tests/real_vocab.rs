//! Smoke tests on the two real vocabularies (Qwen2 byte-level BPE, Gemma 3 SentencePiece).

use fucina_tokenizer::{Kind, Pre, Tokenizer};

fn qwen() -> Tokenizer {
    Tokenizer::from_gguf(fucina_testdata::qwen2_vocab_header()).expect("qwen2 vocab")
}

fn gemma() -> Tokenizer {
    Tokenizer::from_gguf(fucina_testdata::gemma3_270m()).expect("gemma vocab")
}

#[test]
fn qwen2_basics() {
    let t = qwen();
    assert_eq!(t.kind(), Kind::Bpe);
    assert_eq!(t.pretokenizer(), Some(Pre::Qwen2));
    assert_eq!(t.vocab_size(), 152_064);
    assert_eq!(t.bos_id(), Some(151_646));
    assert_eq!(t.eos_id(), Some(151_643));
    let ids = t.encode("Hello, world!", false, false).unwrap();
    assert_eq!(ids, [9707, 11, 1879, 0]);
    let with_bos = t.encode("Hello, world!", true, false).unwrap();
    assert_eq!(with_bos[0], 151_646);
    assert_eq!(t.decode(&ids, false).unwrap(), b"Hello, world!");
}

#[test]
fn gemma_basics() {
    let t = gemma();
    assert_eq!(t.kind(), Kind::Spm);
    assert_eq!(t.vocab_size(), 262_144);
    assert_eq!(t.bos_id(), Some(2));
    assert_eq!(t.eos_id(), Some(1));
    assert!(!t.add_space_prefix());
    let ids = t.encode("Hello, world!", true, false).unwrap();
    assert_eq!(ids[0], 2);
    assert_eq!(t.decode(&ids, false).unwrap(), b"Hello, world!");
    let ids = t.encode("<start_of_turn>user\n", false, true).unwrap();
    assert_eq!(t.token_text(ids[0]), Some(&b"<start_of_turn>"[..]));
}
