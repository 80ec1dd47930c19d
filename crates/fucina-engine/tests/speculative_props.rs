//! Losslessness over many generated cases: on a tiny random-weight llama (vocabulary
//! 256, a byte tokenizer built here) a speculative run equals the plain run — the
//! committed tokens, text, finish reason, RNG draws and the KV bytes left behind — for
//! prompts with and without repetitions, greedy and seeded sampling with top-k, top-p,
//! min-p and penalties, stop strings, max_tokens edges, and a logit processor active.

mod common;

use std::sync::{Arc, OnceLock};

use fucina_engine::{Conversation, GenerationOptions, SeqPool, SpecOptions};
use fucina_model::{KvDtype, Model, ModelOptions};
use fucina_sample::{LogitProcessor, SampleError, SamplingParams};
use fucina_tokenizer::Tokenizer;
use proptest::prelude::*;

fn model() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| {
        let path = fucina_testdata::repo_root().join("tests/goldens/model/tiny/llama-f16.gguf");
        Arc::new(Model::load(path, ModelOptions::with_threads(2)).expect("tiny llama"))
    })
    .clone()
}

/// A SentencePiece vocabulary of `<unk>`, `<s>`, `</s>` and byte tokens for ids 3..256.
fn tokenizer() -> Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| Arc::new(common::byte_tokenizer(256)))
        .clone()
}

/// Bans one token and nudges another: a deterministic processor with state.
#[derive(Clone)]
struct Ban {
    banned: u32,
    seen: usize,
}

impl LogitProcessor for Ban {
    fn process(&mut self, logits: &mut [f32], history: &[u32]) -> Result<(), SampleError> {
        logits[self.banned as usize] = f32::NEG_INFINITY;
        logits[(self.banned as usize + history.len() + self.seen) % 256] += 0.5;
        Ok(())
    }

    fn commit(&mut self, _token: u32) {
        self.seen += 1;
    }
}

type Run = (
    Vec<(u32, bool, String, Option<&'static str>)>,
    u64,
    Vec<u32>,
    Vec<u8>,
    Option<fucina_engine::SpecStats>,
);

fn run(prompt: &[u32], opts: GenerationOptions, ban: Option<u32>) -> Run {
    let mut pool = SeqPool::new(model(), 256, KvDtype::F16).unwrap();
    let mut conv = Conversation::new(&mut pool).unwrap();
    let procs: Vec<Box<dyn LogitProcessor>> = match ban {
        Some(banned) => vec![Box::new(Ban { banned, seen: 0 })],
        None => Vec::new(),
    };
    let mut g = conv
        .turn(&mut pool, tokenizer(), prompt, opts, procs)
        .unwrap();
    let mut steps = Vec::new();
    while let Some(s) = g.step(&mut pool, &mut [], &mut |_, _| {}).unwrap() {
        steps.push((s.token, s.emitted, s.text, s.finish.map(|f| f.as_str())));
    }
    let draws = g.draws();
    let stats = g.spec_stats();
    g.release(&mut pool);
    let cache = pool.cache(conv.seq()).unwrap();
    let mut bytes = Vec::new();
    for pos in 0..cache.len() {
        cache.read_record(pos, &mut bytes).unwrap();
    }
    (
        steps,
        draws,
        conv.tokens(&pool).unwrap().to_vec(),
        bytes,
        stats,
    )
}

fn prompt_strategy() -> impl Strategy<Value = Vec<u32>> {
    (
        prop::collection::vec(3u32..256, 1..24),
        0usize..6,
        prop::collection::vec(3u32..256, 0..8),
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

fn sampling_strategy() -> impl Strategy<Value = SamplingParams> {
    (
        prop_oneof![Just(0.0f32), 0.2f32..1.5],
        any::<u64>(),
        prop_oneof![Just(0i32), 1i32..50],
        prop_oneof![Just(1.0f32), 0.5f32..1.0],
        prop_oneof![Just(0.0f32), 0.01f32..0.2],
        prop_oneof![Just(1.0f32), 1.0f32..1.3],
        prop_oneof![Just(0.0f32), 0.0f32..0.5],
    )
        .prop_map(
            |(temperature, seed, top_k, top_p, min_p, repeat_penalty, presence_penalty)| {
                SamplingParams {
                    temperature,
                    seed,
                    top_k,
                    top_p,
                    min_p,
                    repeat_penalty,
                    presence_penalty,
                    ..SamplingParams::default()
                }
            },
        )
}

#[test]
fn speculative_equals_plain_over_240_generated_cases() {
    let strategy = (
        prompt_strategy(),
        sampling_strategy(),
        prop_oneof![1usize..4, 4usize..64],
        prop::option::of(prop::collection::vec(3u8..=255, 1..3)),
        prop::option::of(3u32..256),
        prop_oneof![Just(16usize), 2usize..8],
    );
    let totals = std::cell::RefCell::new(fucina_engine::SpecStats::default());
    let config = ProptestConfig {
        cases: 240,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    runner
        .run(
            &strategy,
            |(prompt, sampling, max_tokens, stop, ban, max_draft)| {
                let stop: Vec<String> = stop
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .into_iter()
                    .collect();
                let plain = GenerationOptions {
                    max_tokens: Some(max_tokens),
                    sampling,
                    stop,
                    ..GenerationOptions::default()
                };
                // Every proposed draft verified: the point is the verify path, not its
                // economics.
                let spec = GenerationOptions {
                    speculation: Some(SpecOptions {
                        max_draft,
                        economics: false,
                        ..SpecOptions::default()
                    }),
                    ..plain.clone()
                };
                let a = run(&prompt, plain, ban);
                let b = run(&prompt, spec, ban);
                prop_assert_eq!(&a.0, &b.0, "steps");
                prop_assert_eq!(a.1, b.1, "draws");
                prop_assert_eq!(&a.2, &b.2, "cache tokens");
                prop_assert!(a.3 == b.3, "KV bytes");
                let s = b.4.expect("speculation on");
                let mut t = totals.borrow_mut();
                t.spec_steps += s.spec_steps;
                t.accepted += s.accepted;
                t.drafted += s.drafted;
                t.rejected_steps += s.rejected_steps;
                t.bonus += s.bonus;
                Ok(())
            },
        )
        .unwrap();
    let t = totals.into_inner();
    eprintln!("over 240 cases: {t:?}");
    // The cases exercised every verify outcome: accepted drafts, rejections, bonus tokens.
    assert!(
        t.spec_steps > 100 && t.accepted > 0 && t.rejected_steps > 0 && t.bonus > 0,
        "{t:?}"
    );
}
