//! Helpers shared by the engine's integration tests.

use fucina_gguf::{Array, Metadata, StringArray, Value};
use fucina_tokenizer::Tokenizer;

/// A SentencePiece vocabulary of `n` entries: `<unk>`, `<s>`, `</s>`, then byte
/// tokens `<0x03>`.. for the ids after them (the tiny test models carry no vocabulary).
pub fn byte_tokenizer(n: u32) -> Tokenizer {
    let len = n as usize;
    let mut tokens = StringArray::with_capacity(len, len * 6);
    let mut types = Vec::with_capacity(len);
    for i in 0..n {
        match i {
            0 => tokens.push(b"<unk>"),
            1 => tokens.push(b"<s>"),
            2 => tokens.push(b"</s>"),
            _ => tokens.push(format!("<0x{i:02X}>").as_bytes()),
        }
        types.push(match i {
            0 => 2,
            1 | 2 => 3,
            _ => 6,
        });
    }
    let mut md = Metadata::with_capacity(8);
    md.insert("tokenizer.ggml.model", Value::String(b"llama".to_vec()));
    md.insert("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    md.insert(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.0; len])),
    );
    md.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.insert("tokenizer.ggml.bos_token_id", Value::U32(1));
    md.insert("tokenizer.ggml.eos_token_id", Value::U32(2));
    Tokenizer::from_metadata(&md).expect("byte tokenizer")
}
