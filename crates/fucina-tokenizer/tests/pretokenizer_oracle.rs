//! The o200k-family chunkers against an independent oracle: chunk boundaries written by
//! tools/gen_pretokenizer_goldens.py, which runs the regex itself through Python's
//! `regex` module on every valid-UTF-8 corpus text. `inkling` has no llama.cpp
//! reference; `gpt-4o` has one (tests/parity.rs), which cross-checks the oracle.

mod common;

use std::collections::BTreeSet;

use common::{corpus, goldens, show};
use fucina_tokenizer::Pre;

/// `(text index, chunk ends)` per line of `<name>_chunks.txt`.
fn oracle(name: &str) -> Vec<(usize, Vec<usize>)> {
    let p = goldens().join(format!("{name}_chunks.txt"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let mut nums = l
                .split(' ')
                .map(|x| x.parse::<usize>().unwrap_or_else(|e| panic!("{l:?}: {e}")));
            let index = nums.next().expect("text index");
            (index, nums.collect())
        })
        .collect()
}

fn valid_texts() -> Vec<(usize, &'static str)> {
    corpus()
        .iter()
        .enumerate()
        .filter_map(|(i, t)| std::str::from_utf8(t).ok().map(|s| (i, s)))
        .collect()
}

/// Every valid-UTF-8 text has an oracle line and our chunk ends equal it.
fn check(pre: Pre, name: &str) {
    let texts = corpus();
    let golden = oracle(name);
    let want: Vec<usize> = valid_texts().iter().map(|&(i, _)| i).collect();
    let got: Vec<usize> = golden.iter().map(|g| g.0).collect();
    assert_eq!(
        got, want,
        "{name}: the oracle must cover exactly the valid-UTF-8 texts"
    );
    let mut bad = Vec::new();
    for (i, ends) in &golden {
        let text = std::str::from_utf8(&texts[*i]).expect("valid UTF-8");
        let ours = pre.chunk_ends(text);
        if &ours != ends {
            bad.push((*i, ends.clone(), ours));
        }
    }
    eprintln!(
        "{name}: {} of {} texts chunk differently from the regex oracle",
        bad.len(),
        golden.len()
    );
    for (i, want, got) in bad.iter().take(8) {
        eprintln!(
            "  text {i} {}\n    oracle: {want:?}\n    ours:   {got:?}",
            show(&texts[*i])
        );
    }
    assert!(bad.is_empty(), "{name}: {} texts differ", bad.len());
}

#[test]
fn inkling_chunks_like_the_regex_oracle() {
    check(Pre::Inkling, "inkling");
}

#[test]
fn gpt4o_chunks_like_the_regex_oracle() {
    check(Pre::Gpt4o, "gpt-4o");
}

#[test]
fn inkling_differs_from_gpt4o_exactly_where_marks_attach() {
    // Where the two chunkers disagree on the corpus, the two oracles disagree too.
    let ours: BTreeSet<usize> = valid_texts()
        .into_iter()
        .filter(|&(_, t)| Pre::Inkling.chunk_ends(t) != Pre::Gpt4o.chunk_ends(t))
        .map(|(i, _)| i)
        .collect();
    let oracle_diff: BTreeSet<usize> = oracle("inkling")
        .into_iter()
        .zip(oracle("gpt-4o"))
        .filter(|(a, b)| a != b)
        .map(|(a, _)| a.0)
        .collect();
    eprintln!(
        "inkling and gpt-4o chunk {} corpus texts differently",
        ours.len()
    );
    assert_eq!(ours, oracle_diff);
    assert!(
        ours.len() >= 20,
        "only {} texts tell the two apart",
        ours.len()
    );

    // Combining marks: gpt-4o (llama.cpp) cuts before each one, inkling keeps them.
    let split = |pre: Pre, s: &'static str| -> Vec<&'static str> {
        let mut start = 0;
        pre.chunk_ends(s)
            .into_iter()
            .map(|e| {
                let c = &s[start..e];
                start = e;
                c
            })
            .collect()
    };
    for (text, gpt4o, inkling) in [
        (
            "cafe\u{301} na\u{308}ive",
            &["cafe", "\u{301}", " na", "\u{308}ive"][..],
            &["cafe\u{301}", " na\u{308}ive"][..],
        ),
        (
            "कि हिंदी",
            &["क", "ि", " ह", "िं", "द", "ी"],
            &["कि", " हिंदी"],
        ),
        (
            "كَتَبَ الولدُ",
            &["ك", "َت", "َب", "َ", " الولد", "ُ"],
            &["كَتَبَ", " الولدُ"],
        ),
    ] {
        assert_eq!(split(Pre::Gpt4o, text), gpt4o, "gpt-4o on {text:?}");
        assert_eq!(split(Pre::Inkling, text), inkling, "inkling on {text:?}");
    }
    // Without marks the two are the same chunker.
    for text in [
        "Hello, WORLD! I'm HTTPServer 12345\n\n  x",
        "!abc a//b .\n/x",
    ] {
        assert_eq!(Pre::Inkling.chunk_ends(text), Pre::Gpt4o.chunk_ends(text));
    }
}
