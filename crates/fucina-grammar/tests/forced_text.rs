//! Forced text is committed as exactly the bytes the grammar forces, on a SentencePiece
//! vocabulary whose tokenizer reads a literal `▁` (its space escape) as a space:
//! DeepSeek's call markers (`<｜tool▁calls▁begin｜>`) written as text on Gemma's
//! vocabulary. llguidance took the tokenizer's `▁calls` (bytes ` calls`) as the forced
//! `▁calls`, offered it as the only token of the mask and then rejected it on commit.

use std::sync::Arc;

use fucina_gguf::{Array, Metadata, StringArray, Value};
use fucina_grammar::{Constraint, Grammar, GrammarCompiler, Vocab};
use fucina_sample::{LogitProcessor, SampleError};
use fucina_tokenizer::Tokenizer;

/// A SentencePiece vocabulary: `<unk>`, `<s>`, `</s>`, then (with `bytes`) the 256 byte
/// tokens, then `a`, `b`, `▁`, `▁b`, `ab`.
fn spm(bytes: bool) -> Arc<Tokenizer> {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    if bytes {
        tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
        types.extend([6; 256]);
    }
    for piece in ["a", "b", "▁", "▁b", "ab"] {
        tokens.push(piece.into());
        types.push(1);
    }
    let mut scores = vec![0.0f32; tokens.len()];
    let n = scores.len();
    // "▁b" merges first, then "ab".
    scores[n - 2] = -1.0;
    scores[n - 1] = -2.0;
    let mut md = Metadata::default();
    md.insert("tokenizer.ggml.model", Value::string("llama"));
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    md.insert(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(refs.iter().collect::<StringArray>())),
    );
    md.insert("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    md.insert("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    md.insert("tokenizer.ggml.bos_token_id", Value::U32(1));
    md.insert("tokenizer.ggml.eos_token_id", Value::U32(2));
    md.insert("tokenizer.ggml.add_bos_token", Value::Bool(false));
    md.insert("tokenizer.ggml.add_space_prefix", Value::Bool(false));
    Arc::new(Tokenizer::from_metadata(&md).expect("tiny SentencePiece vocabulary"))
}

/// Follow `c` as the engine does: commit what it forces, else the lowest token its mask
/// allows; the bytes committed, once only the stop token may follow.
fn follow(c: &mut Constraint, tok: &Tokenizer) -> Result<Vec<u8>, String> {
    let eos = tok.eos_id().expect("eos");
    let mut out = Vec::new();
    for _ in 0..64 {
        let forced = c.forced_tokens(&[]);
        let next = if forced.is_empty() {
            let mask = c.mask().map_err(|e| e.to_string())?;
            (0..tok.vocab_size() as u32)
                .find(|&t| mask.is_allowed(t))
                .ok_or("empty mask")?
        } else {
            forced[0]
        };
        if next == eos {
            return Ok(out);
        }
        c.commit(next);
        if let Some(e) = c.error() {
            return Err(e);
        }
        out.extend_from_slice(tok.token_to_piece(next, true).map_err(|e| e.to_string())?);
    }
    Err("no end".into())
}

#[test]
fn tokenizing_forced_bytes_spells_them() {
    let tok = spm(true);
    let env = Vocab::new(Arc::clone(&tok), tok.vocab_size()).into_env();
    let trie = env.tok_trie();
    // The tokenizer reads the escape as a space: [a, ▁b], which spells "a b".
    let model = tok.encode("a▁b", false, false).unwrap();
    assert_eq!(trie.decode_raw(&model), b"a b");
    for text in ["a▁b", "▁", "ab▁▁b", "a b▁", "b"] {
        let ids = env.tokenize_bytes(text.as_bytes());
        assert_eq!(trie.decode_raw(&ids), text.as_bytes(), "{text:?}: {ids:?}");
    }
    // What the tokenizer spells right stays its own tokenization.
    assert_eq!(
        env.tokenize_bytes(b"a b"),
        tok.encode("a b", false, false).unwrap()
    );
    // A continuation byte alone (a forced span may start inside a character).
    let ids = env.tokenize_bytes(&"▁b".as_bytes()[1..]);
    assert_eq!(trie.decode_raw(&ids), &"▁b".as_bytes()[1..]);
}

#[test]
fn a_forced_space_escape_is_committed_as_written() {
    let tok = spm(true);
    let compiler = GrammarCompiler::new(Arc::clone(&tok), tok.vocab_size()).unwrap();
    for grammar in [r#"start: "a▁b""#, r#"start: "b" ("a▁" | "▁a") "b▁ab""#] {
        let mut c = compiler.compile(&Grammar::Lark(grammar.into())).unwrap();
        let text = follow(&mut c, &tok).unwrap_or_else(|e| panic!("{grammar}: {e}"));
        let text = String::from_utf8(text).unwrap();
        assert!(text == "a▁b" || text == "ba▁b▁ab", "{grammar}: {text:?}");
        assert!(c.is_accepting(), "{grammar}");
    }
}

#[test]
fn text_the_vocabulary_cannot_spell_ends_with_a_constraint_error() {
    // Without byte tokens nothing spells a literal `▁`: the constraint cannot go on, and
    // says so as a constraint error (a request the model cannot write), not a panic.
    let tok = spm(false);
    let compiler = GrammarCompiler::new(Arc::clone(&tok), tok.vocab_size()).unwrap();
    let mut c = compiler
        .compile(&Grammar::Lark(r#"start: "a▁b""#.into()))
        .unwrap();
    let e = follow(&mut c, &tok).unwrap_err();
    assert!(e.contains("grammar constraint failed"), "{e}");
    let mut logits = vec![0.0; tok.vocab_size()];
    match c.process(&mut logits, &[]) {
        Err(SampleError::Constraint(m)) => assert!(m.contains("grammar constraint failed"), "{m}"),
        other => panic!("{other:?}"),
    }
}
