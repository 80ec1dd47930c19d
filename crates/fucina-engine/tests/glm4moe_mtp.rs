//! Self-speculation with the tiny GLM-4.5-style model's MTP (`nextn`) head as the
//! draft source: speculative decoding equals plain decoding token for token, draw for
//! draw and bit for bit in the cache it leaves (greedy and seeded sampling, one turn
//! and a second turn reusing the first's prefix); the head's own cache never runs
//! ahead of the trunk's by more than the carried token's row.

mod common;

use std::sync::{Arc, OnceLock};

use fucina_engine::{Conversation, Generation, GenerationOptions, SeqPool, SpecOptions};
use fucina_model::{KvCache, KvDtype, Model, ModelOptions};
use fucina_sample::SamplingParams;
use fucina_tokenizer::Tokenizer;
use proptest::prelude::*;

/// The tiny model's vocabulary.
const VOCAB: u32 = 128;

fn model() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| {
        let path = fucina_testdata::repo_root().join("tests/goldens/model/tiny/glm4moe-q8_0.gguf");
        Arc::new(Model::load(path, ModelOptions::with_threads(2)).expect("tiny model"))
    })
    .clone()
}

/// A SentencePiece vocabulary of `<unk>`, `<s>`, `</s>` and byte tokens for ids 3..128.
fn tokenizer() -> Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| Arc::new(common::byte_tokenizer(VOCAB)))
        .clone()
}

/// Every byte of a cache's state: each position's record of every layer.
fn state_bytes(cache: &KvCache) -> Vec<u8> {
    let mut out = Vec::new();
    for pos in 0..cache.len() {
        cache.read_record(pos, &mut out).expect("record");
    }
    out
}

/// Step `g` to the end, checking after every step that the MTP head's cache holds at
/// most the sequence's positions plus the carried token's row.
fn drain(pool: &mut SeqPool, g: &mut Generation) -> Vec<(u32, bool, String)> {
    let mut steps = Vec::new();
    while let Some(s) = g.step(pool, &mut [], &mut |_, _| {}).expect("step") {
        if let Some(n) = g.mtp_cache_len() {
            let held = pool.len(g.seq()).expect("len");
            assert!(n <= held + 1, "MTP cache {n} ahead of the trunk's {held}");
        }
        steps.push((s.token, s.emitted, s.text));
    }
    steps
}

type Run = (
    Vec<Vec<(u32, bool, String)>>,
    Vec<u64>,
    Vec<u32>,
    Vec<u8>,
    fucina_engine::SpecStats,
);

/// Two turns on one Conversation (the second reuses the first's prefix).
fn run(prompts: &[Vec<u32>], opts: &GenerationOptions) -> Run {
    let mut pool = SeqPool::new(model(), 192, KvDtype::F16).unwrap();
    let mut conv = Conversation::new(&mut pool).unwrap();
    let (mut steps, mut draws, mut stats) = (vec![], vec![], fucina_engine::SpecStats::default());
    let mut history: Vec<u32> = Vec::new();
    for p in prompts {
        history.extend_from_slice(p);
        let mut g = conv
            .turn(&mut pool, tokenizer(), &history, opts.clone(), vec![])
            .unwrap();
        assert_eq!(g.drafts_with_mtp(), opts.speculation.is_some());
        steps.push(drain(&mut pool, &mut g));
        draws.push(g.draws());
        if let Some(s) = g.spec_stats() {
            stats.spec_steps += s.spec_steps;
            stats.steps += s.steps;
            stats.drafted += s.drafted;
            stats.accepted += s.accepted;
            stats.committed += s.committed;
            stats.rejected_steps += s.rejected_steps;
            stats.bonus += s.bonus;
        }
        history.extend(g.generated().iter().copied());
        g.release(&mut pool);
        history = conv.tokens(&pool).unwrap().to_vec();
    }
    let cache = pool.cache(conv.seq()).unwrap();
    (
        steps,
        draws,
        conv.tokens(&pool).unwrap().to_vec(),
        state_bytes(cache),
        stats,
    )
}

fn prompt_strategy() -> impl Strategy<Value = Vec<u32>> {
    (
        prop::collection::vec(3u32..VOCAB, 1..16),
        0usize..3,
        prop::collection::vec(3u32..VOCAB, 0..8),
    )
        .prop_map(|(unit, repeats, tail)| {
            let mut p = vec![1];
            for _ in 0..=repeats {
                p.extend_from_slice(&unit);
            }
            p.extend(tail);
            p
        })
}

#[test]
fn mtp_speculation_equals_plain_bitwise() {
    let strategy = (
        prompt_strategy(),
        prop::collection::vec(3u32..VOCAB, 1..6),
        prop_oneof![Just(0.0f32), 0.3f32..1.2],
        any::<u64>(),
        prop_oneof![4usize..16, 16usize..40],
        prop_oneof![Just(16usize), 2usize..6],
    );
    let totals = std::cell::RefCell::new(fucina_engine::SpecStats::default());
    let config = ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    runner
        .run(
            &strategy,
            |(first, second, temperature, seed, max_tokens, max_draft)| {
                let plain = GenerationOptions {
                    max_tokens: Some(max_tokens),
                    sampling: SamplingParams {
                        temperature,
                        seed,
                        top_k: 40,
                        ..SamplingParams::default()
                    },
                    ignore_eos: true,
                    ..GenerationOptions::default()
                };
                let spec = GenerationOptions {
                    speculation: Some(SpecOptions {
                        max_draft,
                        economics: false,
                        ..SpecOptions::default()
                    }),
                    ..plain.clone()
                };
                let prompts = [first, second];
                let a = run(&prompts, &plain);
                let b = run(&prompts, &spec);
                prop_assert_eq!(&a.0, &b.0, "steps");
                prop_assert_eq!(&a.1, &b.1, "draws");
                prop_assert_eq!(&a.2, &b.2, "cache tokens");
                prop_assert!(a.3 == b.3, "cache bytes");
                let s = b.4;
                let mut t = totals.borrow_mut();
                t.spec_steps += s.spec_steps;
                t.steps += s.steps;
                t.drafted += s.drafted;
                t.accepted += s.accepted;
                t.committed += s.committed;
                t.rejected_steps += s.rejected_steps;
                t.bonus += s.bonus;
                Ok(())
            },
        )
        .unwrap();
    let t = totals.into_inner();
    eprintln!(
        "MTP drafts over 24 cases: {t:?}; {:.2} tokens per verify step",
        t.committed as f64 / t.steps.max(1) as f64
    );
    assert!(
        t.spec_steps > 10 && t.accepted > 0 && t.rejected_steps > 0,
        "{t:?}"
    );
}

/// Without `SpecOptions::mtp` the text-matching sources draft, and a model without a
/// head drafts with them whatever the option says.
#[test]
fn mtp_option_selects_the_source() {
    let mut pool = SeqPool::new(model(), 64, KvDtype::F16).unwrap();
    for (mtp, want) in [(true, true), (false, false)] {
        let opts = GenerationOptions {
            max_tokens: Some(4),
            speculation: Some(SpecOptions {
                mtp,
                ..SpecOptions::default()
            }),
            ..GenerationOptions::default()
        };
        let mut g = Generation::new(&mut pool, tokenizer(), &[1, 5, 6], opts, vec![]).unwrap();
        assert_eq!(g.drafts_with_mtp(), want);
        g.release(&mut pool);
    }
    let dense = fucina_testdata::repo_root().join("tests/goldens/model/tiny/qwen3-q8_0.gguf");
    let dense = Arc::new(Model::load(dense, ModelOptions::with_threads(1)).unwrap());
    let mut pool = SeqPool::new(dense, 64, KvDtype::F16).unwrap();
    let opts = GenerationOptions {
        speculation: Some(SpecOptions::default()),
        ..GenerationOptions::default()
    };
    let mut g = Generation::new(&mut pool, tokenizer(), &[1, 5, 6], opts, vec![]).unwrap();
    assert!(!g.drafts_with_mtp());
    g.release(&mut pool);
}
