//! Decoding against the corpus: decode(encode(x)) == x, streaming == decode, and the
//! vocabulary facts (special ids, attributes, every token's piece) against llama.cpp.

mod common;

use common::{corpus, facts, gemma, qwen, show};
use fucina_tokenizer::{attr, SpecialOverrides, Tokenizer};

fn fnv(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h = (h ^ b as u64).wrapping_mul(0x100000001B3);
    }
    h
}

fn check_facts(tok: &Tokenizer, name: &str) {
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
