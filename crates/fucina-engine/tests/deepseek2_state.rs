//! The latent cache of the tiny DeepSeek-V2 / V3-style models (Multi-head Latent
//! Attention: one `kv_lora_rank + qk_rope` row per position and layer): speculative
//! decoding equals plain decoding token for token, draw for draw and bit for bit in
//! the cache it leaves; verify rows equal decode rows bitwise; rewinds and prefix
//! copies restore the plain state; the FUXKV001 image round-trips bit for bit.

mod common;

use std::sync::{Arc, OnceLock};

use fucina_engine::{Conversation, Generation, GenerationOptions, SeqPool, SpecOptions, Step};
use fucina_model::{KvCache, KvDtype, Model, ModelOptions};
use fucina_sample::SamplingParams;
use fucina_tokenizer::Tokenizer;
use proptest::prelude::*;

/// The tiny models' vocabulary.
const VOCAB: u32 = 128;

fn load(stem: &str) -> Arc<Model> {
    let path =
        fucina_testdata::repo_root().join(format!("tests/goldens/model/tiny/{stem}-q8_0.gguf"));
    Arc::new(Model::load(path, ModelOptions::with_threads(2)).expect("tiny model"))
}

fn v2() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| load("deepseek2")).clone()
}

fn v3() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| load("deepseek2v3")).clone()
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

fn drain(pool: &mut SeqPool, g: &mut Generation) -> Vec<Step> {
    let mut steps = Vec::new();
    while let Some(s) = g.step(pool, &mut [], &mut |_, _| {}).expect("step") {
        steps.push(s);
    }
    steps
}

type Run = (
    Vec<(u32, bool, String)>,
    u64,
    Vec<u32>,
    Vec<u8>,
    Option<fucina_engine::SpecStats>,
);

fn run(model: Arc<Model>, prompt: &[u32], opts: GenerationOptions) -> Run {
    let mut pool = SeqPool::new(model, 160, KvDtype::F16).unwrap();
    let mut conv = Conversation::new(&mut pool).unwrap();
    let mut g = conv
        .turn(&mut pool, tokenizer(), prompt, opts, vec![])
        .unwrap();
    let steps = drain(&mut pool, &mut g)
        .into_iter()
        .map(|s| (s.token, s.emitted, s.text))
        .collect();
    let (draws, stats) = (g.draws(), g.spec_stats());
    g.release(&mut pool);
    let cache = pool.cache(conv.seq()).unwrap();
    (
        steps,
        draws,
        conv.tokens(&pool).unwrap().to_vec(),
        state_bytes(cache),
        stats,
    )
}

/// Repetitive prompts, so the suffix-automaton drafts get accepted sometimes.
fn prompt_strategy() -> impl Strategy<Value = Vec<u32>> {
    (
        prop::collection::vec(3u32..VOCAB, 1..24),
        0usize..4,
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
fn speculative_equals_plain_bitwise_on_deepseek2() {
    speculative_equals_plain(v2(), 40);
    speculative_equals_plain(v3(), 24);
}

fn speculative_equals_plain(model: Arc<Model>, cases: u32) {
    let strategy = (
        prompt_strategy(),
        prop_oneof![Just(0.0f32), 0.3f32..1.2],
        any::<u64>(),
        prop_oneof![4usize..16, 16usize..40],
        prop_oneof![Just(16usize), 2usize..8],
    );
    let totals = std::cell::RefCell::new(fucina_engine::SpecStats::default());
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    runner
        .run(
            &strategy,
            |(prompt, temperature, seed, max_tokens, max_draft)| {
                let plain = GenerationOptions {
                    max_tokens: Some(max_tokens),
                    sampling: SamplingParams {
                        temperature,
                        seed,
                        top_k: 40,
                        ..SamplingParams::default()
                    },
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
                let a = run(Arc::clone(&model), &prompt, plain);
                let b = run(Arc::clone(&model), &prompt, spec);
                prop_assert_eq!(&a.0, &b.0, "steps");
                prop_assert_eq!(a.1, b.1, "draws");
                prop_assert_eq!(&a.2, &b.2, "cache tokens");
                prop_assert!(a.3 == b.3, "latent cache bytes");
                let s = b.4.expect("speculation on");
                let mut t = totals.borrow_mut();
                t.spec_steps += s.spec_steps;
                t.accepted += s.accepted;
                t.rejected_steps += s.rejected_steps;
                t.bonus += s.bonus;
                Ok(())
            },
        )
        .unwrap();
    let t = totals.into_inner();
    eprintln!("over {cases} cases: {t:?}");
    assert!(
        t.spec_steps > 10 && t.accepted > 0 && t.rejected_steps > 0,
        "{t:?}"
    );
}

fn prompt(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 3 + (i.wrapping_mul(2_654_435_761) ^ seed) % (VOCAB - 3))
        .collect()
}

fn bitwise(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Verify rows equal decode rows; rewinding a verify to each length leaves the
/// plain run's cache; prefix copies carry the same rows and leave the source alone.
#[test]
fn rewinds_and_prefix_copies_restore_the_plain_state() {
    for model in [v2(), v3()] {
        let p = prompt(40, 7);
        let more = [11u32, 22, 33, 44, 55, 66];
        let mut pool = SeqPool::new(model, 128, KvDtype::F16).unwrap();

        let a = pool.alloc().unwrap();
        pool.eval(a, &p, &mut |_, _| {}).unwrap();
        let mut plain = vec![state_bytes(pool.cache(a).unwrap())];
        let mut plain_logits = Vec::new();
        for &t in &more {
            plain_logits.push(pool.eval(a, &[t], &mut |_, _| {}).unwrap().to_vec());
            plain.push(state_bytes(pool.cache(a).unwrap()));
        }

        let b = pool.alloc().unwrap();
        pool.eval(b, &p, &mut |_, _| {}).unwrap();
        for keep in (0..=more.len()).rev() {
            pool.truncate(b, p.len()).unwrap();
            let rows = pool.eval_verify(b, &more).unwrap().to_vec();
            for (i, want) in plain_logits.iter().enumerate() {
                let got = &rows[i * want.len()..(i + 1) * want.len()];
                assert!(bitwise(got, want), "verify row {i}");
            }
            pool.truncate(b, p.len() + keep).unwrap();
            assert_eq!(pool.len(b).unwrap(), p.len() + keep);
            assert!(
                state_bytes(pool.cache(b).unwrap()) == plain[keep],
                "keep {keep}"
            );
            if keep < more.len() {
                let next = pool.eval(b, &[more[keep]], &mut |_, _| {}).unwrap();
                assert!(bitwise(next, &plain_logits[keep]));
                assert!(state_bytes(pool.cache(b).unwrap()) == plain[keep + 1]);
            }
        }

        let c = pool.alloc().unwrap();
        pool.copy_prefix(a, c, p.len() + 3).unwrap();
        assert_eq!(pool.len(c).unwrap(), p.len() + 3);
        assert!(state_bytes(pool.cache(c).unwrap()) == plain[3]);
        let next = pool.eval(c, &[more[3]], &mut |_, _| {}).unwrap();
        assert!(bitwise(next, &plain_logits[3]));
        assert!(state_bytes(pool.cache(a).unwrap()) == plain[more.len()]);
        // The latent rows are what the pool accounts: one key row of
        // kv_lora_rank + qk_rope and one value row of kv_lora_rank f16 values per
        // position and layer (the tiny models: 64 + 32 and 64, 3 layers).
        let per_seq = 128 * 3 * ((64 + 32) + 64) * 2;
        assert_eq!(pool.cache_bytes(), 3 * per_seq);
    }
}

/// The FUXKV001 image of a latent cache saves and loads bit for bit, and the loaded
/// session decodes on exactly as the original.
#[test]
fn latent_state_round_trips_bit_for_bit() {
    for model in [v2(), v3()] {
        let mut s = fucina_engine::Session::new(Arc::clone(&model), 96, KvDtype::F16).unwrap();
        let p = prompt(50, 11);
        s.eval(&p, false).unwrap();
        let image = s.save_state().unwrap();
        assert_eq!(&image[..8], b"FUXKV001");
        let next = s.eval(&[7], false).unwrap().to_vec();
        let mut t = fucina_engine::Session::new(Arc::clone(&model), 96, KvDtype::F16).unwrap();
        t.load_state(&image).unwrap();
        assert_eq!(t.tokens(), &p[..]);
        let again = t.eval(&[7], false).unwrap();
        assert!(bitwise(again, &next));
        assert!(state_bytes(t.cache()) == state_bytes(s.cache()));
    }
}
