//! The sequence state of a hybrid model (tiny random-weight Qwen3.5: Gated DeltaNet
//! layers with a recurrent state beside attention K/V rows) and of Gemma 4 (per-layer
//! K/V geometry, shared-KV layers): speculative decoding equals plain decoding token
//! for token, draw for draw and bit for bit in the state it leaves; rewinds, forks and
//! prefix copies restore the state a plain run has; Conversation turns reuse their
//! prefix; the sidecar resumes bit for bit and refuses a recurrent state that does
//! not match its records.

mod common;

use std::sync::{Arc, OnceLock};

use fucina_engine::{Conversation, Generation, GenerationOptions, SeqPool, SpecOptions, Step};
use fucina_model::{KvCache, KvDtype, Model, ModelOptions};
use fucina_sample::SamplingParams;
use fucina_tokenizer::Tokenizer;
use proptest::prelude::*;

fn load(family: &str) -> Arc<Model> {
    let path =
        fucina_testdata::repo_root().join(format!("tests/goldens/model/tiny/{family}-f16.gguf"));
    Arc::new(Model::load(path, ModelOptions::with_threads(2)).expect("tiny model"))
}

fn model() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| load("qwen35")).clone()
}

fn gemma4() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| load("gemma4")).clone()
}

/// A SentencePiece vocabulary of `<unk>`, `<s>`, `</s>` and byte tokens for ids 3..256.
fn tokenizer() -> Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| Arc::new(common::byte_tokenizer(256)))
        .clone()
}

/// Every byte of a cache's state: each position's K/V record, then the recurrent
/// state at its length.
fn state_bytes(cache: &KvCache) -> Vec<u8> {
    let mut out = Vec::new();
    for pos in 0..cache.len() {
        cache.read_record(pos, &mut out).expect("record");
    }
    cache.read_recurrent_state(&mut out);
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
    let mut pool = SeqPool::new(model, 320, KvDtype::F16).unwrap();
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

fn prompt_strategy() -> impl Strategy<Value = Vec<u32>> {
    (
        prop::collection::vec(3u32..256, 1..40),
        0usize..5,
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

#[test]
fn speculative_equals_plain_bitwise_on_a_hybrid_model() {
    speculative_equals_plain(model(), 80);
}

#[test]
fn speculative_equals_plain_bitwise_on_gemma4() {
    speculative_equals_plain(gemma4(), 40);
    // The MoE variant: verify rows are routed and grouped by expert like decode rows.
    speculative_equals_plain(load("gemma4-moe"), 20);
}

fn speculative_equals_plain(model: Arc<Model>, cases: u32) {
    let strategy = (
        prompt_strategy(),
        prop_oneof![Just(0.0f32), 0.3f32..1.2],
        any::<u64>(),
        prop_oneof![4usize..16, 16usize..48],
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
                prop_assert!(a.3 == b.3, "K/V and recurrent state bytes");
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
    // Verifies were rewound to their base and replayed into (random weights rarely
    // accept a whole draft: keeping every row is covered by the rewind test below).
    assert!(
        t.spec_steps > 30 && t.accepted > 0 && t.rejected_steps > 0,
        "{t:?}"
    );
}

fn prompt(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 3 + (i.wrapping_mul(2_654_435_761) ^ seed) % 253)
        .collect()
}

/// Rewinds land where a plain run's state is: within a verify (replayed from its
/// base), at its base, at a prompt-chunk checkpoint below it; forks and prefix
/// copies carry the same state.
#[test]
fn rewinds_forks_and_prefix_copies_restore_the_plain_state() {
    let p = prompt(90, 7);
    let more = [11u32, 22, 33, 44, 55, 66];
    let mut pool = SeqPool::new(model(), 256, KvDtype::F16).unwrap();

    // The plain run: the prompt, then one decode step per token.
    let a = pool.alloc().unwrap();
    pool.eval(a, &p, &mut |_, _| {}).unwrap();
    let after_prompt = state_bytes(pool.cache(a).unwrap());
    let mut plain = vec![after_prompt.clone()];
    let mut plain_logits = Vec::new();
    for &t in &more {
        plain_logits.push(pool.eval(a, &[t], &mut |_, _| {}).unwrap().to_vec());
        plain.push(state_bytes(pool.cache(a).unwrap()));
    }

    // A verify of every token, rewound to each length in turn.
    let b = pool.alloc().unwrap();
    pool.eval(b, &p, &mut |_, _| {}).unwrap();
    for keep in (0..=more.len()).rev() {
        pool.truncate(b, p.len()).unwrap();
        let rows = pool.eval_verify(b, &more).unwrap().to_vec();
        for (i, want) in plain_logits.iter().enumerate() {
            let got = &rows[i * want.len()..(i + 1) * want.len()];
            assert!(
                got.iter()
                    .zip(want)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "verify row {i}"
            );
        }
        pool.truncate(b, p.len() + keep).unwrap();
        assert_eq!(pool.len(b).unwrap(), p.len() + keep);
        assert!(
            state_bytes(pool.cache(b).unwrap()) == plain[keep],
            "keep {keep}"
        );
        // Decoding on from there equals the plain run.
        if keep < more.len() {
            let next = pool.eval(b, &[more[keep]], &mut |_, _| {}).unwrap();
            assert!(next
                .iter()
                .zip(&plain_logits[keep])
                .all(|(x, y)| x.to_bits() == y.to_bits()));
            assert!(state_bytes(pool.cache(b).unwrap()) == plain[keep + 1]);
        }
    }

    // Below the latest forward: the prompt's checkpoint (its chunked prefill end).
    assert_eq!(pool.len(b).unwrap(), p.len() + 1);
    pool.eval(b, &[more[1]], &mut |_, _| {}).unwrap();
    pool.eval(b, &[more[2]], &mut |_, _| {}).unwrap();
    pool.truncate(b, p.len() + 1).unwrap();
    assert_eq!(
        pool.len(b).unwrap(),
        p.len(),
        "landed on the prompt checkpoint"
    );
    assert!(state_bytes(pool.cache(b).unwrap()) == after_prompt);
    assert_eq!(pool.tokens(b).unwrap(), &p[..]);
    // Below every checkpoint: back to the start.
    pool.truncate(b, 10).unwrap();
    assert_eq!(pool.len(b).unwrap(), 0);

    // Forks and prefix copies.
    let f = pool.fork(a).unwrap();
    assert!(state_bytes(pool.cache(f).unwrap()) == plain[more.len()]);
    pool.truncate(a, p.len()).unwrap();
    pool.eval_verify(a, &more).unwrap();
    let c = pool.alloc().unwrap();
    pool.copy_prefix(a, c, p.len() + 3).unwrap();
    assert_eq!(pool.len(c).unwrap(), p.len() + 3);
    assert!(state_bytes(pool.cache(c).unwrap()) == plain[3]);
    assert!(
        state_bytes(pool.cache(a).unwrap()) == plain[more.len()],
        "the source is unchanged"
    );
    pool.copy_prefix(a, c, 40).unwrap();
    assert_eq!(pool.len(c).unwrap(), 0, "no state to copy at 40");
    assert!(pool.cache_bytes() > 0);
}

/// Gemma 4's per-layer K/V (shared-KV layers hold none) saves and loads bit for bit.
#[test]
fn gemma4_state_round_trips_bit_for_bit() {
    let mut s = fucina_engine::Session::new(gemma4(), 128, KvDtype::F16).unwrap();
    let p = prompt(50, 11);
    s.eval(&p, false).unwrap();
    let image = s.save_state().unwrap();
    let next = s.eval(&[7], false).unwrap().to_vec();
    let mut t = fucina_engine::Session::new(gemma4(), 128, KvDtype::F16).unwrap();
    t.load_state(&image).unwrap();
    assert_eq!(t.tokens(), &p[..]);
    let again = t.eval(&[7], false).unwrap();
    assert!(again
        .iter()
        .zip(&next)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

fn opts(max: usize, temperature: f32, seed: u64) -> GenerationOptions {
    GenerationOptions {
        max_tokens: Some(max),
        sampling: SamplingParams {
            temperature,
            seed,
            ..SamplingParams::default()
        },
        ..GenerationOptions::default()
    }
}

fn emitted(steps: &[Step]) -> Vec<u32> {
    steps
        .iter()
        .filter(|s| s.emitted)
        .map(|s| s.token)
        .collect()
}

/// Turns reuse what the sequence holds and equal a stateless run of the same
/// history (pinned numerics: prefill rows are then bitwise decode steps), and the
/// sidecar resumes the state (K/V rows, and recurrent state where the model has
/// DeltaNet layers) bit for bit; returns the sidecar's path.
fn conversation_reuse_and_resume(model: Arc<Model>, name: &str) -> std::path::PathBuf {
    let tok = tokenizer();
    let mut pool = SeqPool::new(Arc::clone(&model), 512, KvDtype::F16).unwrap();
    pool.set_pinned(true);
    let mut conv = Conversation::new(&mut pool).unwrap();
    let dir = std::env::temp_dir().join(format!("fucina-hybrid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("chat-{name}.fuxkv"));
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        conv.enable_persistence(&mut pool, &path).unwrap().positions,
        0
    );

    let mut history = prompt(70, 3);
    let mut g = conv
        .turn(&mut pool, tok.clone(), &history, opts(10, 0.8, 5), vec![])
        .unwrap();
    history.extend(emitted(&drain(&mut pool, &mut g)));
    g.release(&mut pool);
    conv.sync(&pool).unwrap();
    let held = conv.tokens(&pool).unwrap().to_vec();
    let saved = state_bytes(pool.cache(conv.seq()).unwrap());
    history.extend(prompt(20, 9));
    let mut g = conv
        .turn(&mut pool, tok.clone(), &history, opts(10, 0.8, 6), vec![])
        .unwrap();
    assert_eq!(conv.last_reused(), held.len());
    let second = emitted(&drain(&mut pool, &mut g));
    g.release(&mut pool);

    let mut fresh = Conversation::new(&mut pool).unwrap();
    let mut g = fresh
        .turn(&mut pool, tok.clone(), &history, opts(10, 0.8, 6), vec![])
        .unwrap();
    assert_eq!(fresh.last_reused(), 0);
    assert_eq!(emitted(&drain(&mut pool, &mut g)), second, "stateless run");
    g.release(&mut pool);
    fresh.release(&mut pool);

    // Resume the synced first turn elsewhere: the same bytes, the same second turn.
    let mut pool2 = SeqPool::new(model, 512, KvDtype::F16).unwrap();
    pool2.set_pinned(true);
    let mut c2 = Conversation::new(&mut pool2).unwrap();
    let r = c2.enable_persistence(&mut pool2, &path).unwrap();
    assert_eq!((r.positions, r.ignored), (held.len(), None));
    assert!(state_bytes(pool2.cache(c2.seq()).unwrap()) == saved);
    let mut g = c2
        .turn(&mut pool2, tok.clone(), &history, opts(10, 0.8, 6), vec![])
        .unwrap();
    assert_eq!(c2.last_reused(), held.len());
    assert_eq!(emitted(&drain(&mut pool2, &mut g)), second);
    g.release(&mut pool2);
    c2.release(&mut pool2);
    path
}

/// Gemma 4 (per-layer K/V geometry, shared-KV layers): prefix reuse and the sidecar.
#[test]
fn conversation_turns_and_the_sidecar_on_gemma4() {
    conversation_reuse_and_resume(gemma4(), "gemma4");
}

/// Qwen3.5: prefix reuse and the sidecar as above; the sidecar refuses a recurrent
/// state that does not match its records, and an edited history rewinds to a
/// checkpoint.
#[test]
fn conversation_turns_and_the_sidecar_on_a_hybrid_model() {
    let tok = tokenizer();
    let path = conversation_reuse_and_resume(model(), "qwen35");
    let mut pool2 = SeqPool::new(model(), 512, KvDtype::F16).unwrap();
    pool2.set_pinned(true);

    // A recurrent state that is not at the published count: ignored, file reset.
    {
        use std::io::{Seek, SeekFrom, Write};
        let header = 48 + 12 * model().config().layers.len() as u64;
        let recurrent = model()
            .config()
            .layers
            .iter()
            .filter(|l| matches!(l.mixer, fucina_model::Mixer::DeltaNet(_)))
            .count() as u64;
        let at = header + 4 + 24 * recurrent + 8;
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(&3u64.to_le_bytes()).unwrap();
    }
    let mut c3 = Conversation::new(&mut pool2).unwrap();
    let r = c3.enable_persistence(&mut pool2, &path).unwrap();
    assert_eq!(r.positions, 0);
    assert!(r.ignored.expect("a reason").contains("recurrent state"));
    c3.release(&mut pool2);

    // Unpinned: an edited history that diverges inside the reply rewinds to the
    // checkpoint at the end of the prompt's prefill.
    let mut pool3 = SeqPool::new(model(), 512, KvDtype::F16).unwrap();
    let mut c4 = Conversation::new(&mut pool3).unwrap();
    let first = prompt(70, 3);
    let mut g = c4
        .turn(&mut pool3, tok.clone(), &first, opts(10, 0.0, 0), vec![])
        .unwrap();
    let reply = emitted(&drain(&mut pool3, &mut g));
    g.release(&mut pool3);
    let mut edited = first.clone();
    edited.extend_from_slice(&reply[..4]);
    edited.push(if reply[4] == 9 { 10 } else { 9 });
    edited.extend(prompt(5, 1));
    let mut g = c4
        .turn(&mut pool3, tok.clone(), &edited, opts(4, 0.0, 0), vec![])
        .unwrap();
    assert_eq!(c4.last_reused(), first.len());
    assert_eq!(g.pending().len(), edited.len() - first.len());
    drain(&mut pool3, &mut g);
    g.release(&mut pool3);
}
