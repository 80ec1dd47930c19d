//! The real files the project ships against: Gemma 3 270M (full model) and the
//! truncated DeepSeek-R1-Distill-Qwen-7B first chunk (header only).

use fucina_gguf::{Array, GgmlType, GgufError, GgufFile, GgufWriter, ZeroPolicy};

#[test]
fn gemma_opens_and_round_trips_byte_for_byte() {
    let path = fucina_testdata::gemma3_270m();
    let f = GgufFile::open(&path).unwrap();
    let md = f.metadata();
    assert_eq!(md.architecture(), Some("gemma3"));
    assert_eq!(
        md.meta_int("gemma3", "block_count", ZeroPolicy::RejectZero)
            .unwrap(),
        18
    );
    assert_eq!(
        md.meta_int("gemma3", "embedding_length", ZeroPolicy::RejectZero)
            .unwrap(),
        640
    );
    let tokens = md.get_array("tokenizer.ggml.tokens").unwrap().unwrap();
    assert_eq!(tokens.len(), 262_144);
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.ggml_type, GgmlType::Q8_0);
    assert_eq!(embd.dims, vec![640, 262_144]);
    assert_eq!(
        f.tensor_bytes("token_embd.weight").unwrap().len() as u64,
        embd.n_bytes
    );

    // llama.cpp writes the same layout as our writer, so a rewrite is identical.
    let original = std::fs::read(&path).unwrap();
    let rewritten = GgufWriter::from_part(&f, 0).unwrap().to_bytes().unwrap();
    assert_eq!(rewritten.len(), original.len());
    assert!(
        rewritten == original,
        "rewritten Gemma file differs from the original"
    );
}

#[test]
fn truncated_qwen_full_open_names_first_missing_tensor() {
    let path = fucina_testdata::qwen2_vocab_header();
    let file_len = std::fs::metadata(&path).unwrap().len();
    let header = GgufFile::open_header(&path).unwrap();
    let data_offset = header.parts()[0].header().data_offset;
    let first_missing = header
        .tensors()
        .values()
        .find(|t| data_offset + t.offset + t.n_bytes > file_len)
        .expect("the chunk cuts off some tensor");
    match GgufFile::open(&path).unwrap_err() {
        GgufError::Tensor { name, message } => {
            assert_eq!(name, first_missing.name);
            assert!(message.contains("past the end of the file"), "{message}");
        }
        other => panic!("expected a tensor error, got {other}"),
    }
}

#[test]
fn qwen_header_only_reads_the_vocabulary() {
    let f = GgufFile::open_header(fucina_testdata::qwen2_vocab_header()).unwrap();
    let md = f.metadata();
    assert_eq!(md.len(), 27);
    assert_eq!(md.architecture(), Some("qwen2"));
    assert_eq!(md.get_str("tokenizer.ggml.model").unwrap(), Some("gpt2"));
    let tokens = md.get_array("tokenizer.ggml.tokens").unwrap().unwrap();
    assert_eq!(tokens.len(), 152_064);
    let merges = md.get_array("tokenizer.ggml.merges").unwrap().unwrap();
    assert!(matches!(merges, Array::String(m) if m.len() > 100_000));
    assert!(md
        .get_str("tokenizer.chat_template")
        .unwrap()
        .unwrap()
        .contains("<｜Assistant｜>"));
    assert!(!f.is_full());
}
