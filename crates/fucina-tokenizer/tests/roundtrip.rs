//! Decoding against the corpus: decode(encode(x)) == x, streaming == decode, and the
//! vocabulary facts (special ids, attributes, every token's piece) against llama.cpp.

mod common;

use common::{check_facts, corpus, gemma, qwen, show};
use fucina_tokenizer::{attr, SpecialOverrides, Tokenizer};

#[test]
fn qwen2_vocab_facts_match_llama_cpp() {
    check_facts(qwen(), "qwen2.vocab");
}

#[test]
fn gemma3_vocab_facts_match_llama_cpp() {
    check_facts(gemma(), "gemma3.vocab");
}

/// decode(encode(x)) == x for valid UTF-8: with parse_special off, rendering without
/// special tokens (drops the BOS that add_special adds); with it on, rendering them.
/// SentencePiece writes spaces as U+2581 and renders U+2581 as a space, so for it a
/// U+2581 in the input comes back as a space (`spm_marks`).
fn round_trip(tok: &Tokenizer, name: &str, spm_marks: bool) {
    let mut n = 0;
    for t in corpus().iter().filter(|t| std::str::from_utf8(t).is_ok()) {
        let want = match spm_marks {
            true => String::from_utf8_lossy(t)
                .replace('\u{2581}', " ")
                .into_bytes(),
            false => t.clone(),
        };
        let ids = tok.encode(t, true, false).expect("encode");
        assert_eq!(
            tok.decode(&ids, false).expect("decode"),
            want,
            "{name}: round trip of {}",
            show(t)
        );
        let ids = tok.encode(t, false, true).expect("encode");
        let got = tok.decode(&ids, true).expect("decode");
        if spm_marks {
            // Control tokens render verbatim: compare with the marks mapped on both sides.
            let got = String::from_utf8_lossy(&got)
                .replace('\u{2581}', " ")
                .into_bytes();
            assert_eq!(got, want, "{name}: special round trip of {}", show(t));
        } else {
            assert_eq!(&got, t, "{name}: special round trip of {}", show(t));
        }
        n += 1;
    }
    assert!(n > 1800, "{name}: only {n} valid texts");
}

#[test]
fn qwen2_round_trips() {
    round_trip(qwen(), "qwen2", false);
}

#[test]
fn gemma3_round_trips() {
    round_trip(gemma(), "gemma3", true);
}

#[test]
fn add_space_prefix_rule() {
    // SentencePiece with add_space_prefix inserts one space before the first text
    // fragment (and after every special token): decode(encode(x)) == " " + x when x
    // contains no special tokens (U+2581 reads back as a space, as above). Gemma 3
    // turns the prefix off; force it on.
    let file = fucina_gguf::GgufFile::open_header(fucina_testdata::gemma3_270m()).expect("gemma");
    let ov = SpecialOverrides {
        add_space_prefix: Some(true),
        ..Default::default()
    };
    let tok = Tokenizer::from_metadata_with(file.metadata(), ov).expect("tokenizer");
    assert!(tok.add_space_prefix());
    let mut n = 0;
    for t in corpus().iter().filter(|t| std::str::from_utf8(t).is_ok()) {
        let ids = tok.encode(t, false, false).expect("encode");
        if t.is_empty()
            || ids.iter().any(|&id| {
                tok.token_attr(id)
                    .is_some_and(|a| a & attr::USER_DEFINED != 0)
            })
        {
            continue;
        }
        let want = format!(" {}", String::from_utf8_lossy(t).replace('\u{2581}', " ")).into_bytes();
        assert_eq!(
            tok.decode(&ids, false).expect("decode"),
            want,
            "{}",
            show(t)
        );
        n += 1;
    }
    assert!(n > 1000, "only {n} texts without special tokens");
}

fn stream_equals_decode(tok: &Tokenizer, name: &str) {
    for t in corpus() {
        let ids = tok.encode(t, true, true).expect("encode");
        for special in [false, true] {
            let mut d = tok.stream_decoder(special);
            let mut got = String::new();
            for &id in &ids {
                got.push_str(&d.push(id).expect("push"));
            }
            got.push_str(&d.flush());
            let want = tok.decode_lossy(&ids, special).expect("decode");
            assert_eq!(
                got,
                want,
                "{name}: stream of {} (special={special})",
                show(t)
            );
        }
    }
}

#[test]
fn qwen2_stream_decoder_equals_decode() {
    stream_equals_decode(qwen(), "qwen2");
}

#[test]
fn gemma3_stream_decoder_equals_decode() {
    stream_equals_decode(gemma(), "gemma3");
}

#[test]
fn batch_equals_sequential() {
    let texts: Vec<&[u8]> = corpus().iter().map(Vec::as_slice).collect();
    for tok in [qwen(), gemma()] {
        let batch = tok
            .encode_batch_threads(&texts, true, false, 3)
            .expect("batch");
        for (t, ids) in texts.iter().zip(&batch) {
            assert_eq!(&tok.encode(t, true, false).expect("encode"), ids);
        }
    }
}

/// `encode_batch_on` runs on the caller's parallel runner (a model's thread pool);
/// here a scoped-thread runner, and one that skips indices, which must still give
/// every text's ids.
#[test]
fn batch_on_a_callers_runner_equals_sequential() {
    let texts: Vec<&[u8]> = corpus().iter().map(Vec::as_slice).collect();
    let threads = |n: usize, f: &(dyn Fn(usize) + Sync)| {
        std::thread::scope(|s| {
            for part in 0..3 {
                s.spawn(move || (part..n).step_by(3).for_each(f));
            }
        })
    };
    let skipping = |n: usize, f: &(dyn Fn(usize) + Sync)| (0..n).step_by(2).for_each(f);
    for tok in [qwen(), gemma()] {
        let want: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| tok.encode(t, true, false).expect("encode"))
            .collect();
        assert_eq!(
            tok.encode_batch_on(&texts, true, false, &threads).unwrap(),
            want
        );
        assert_eq!(
            tok.encode_batch_on(&texts, true, false, &skipping).unwrap(),
            want
        );
    }
}
