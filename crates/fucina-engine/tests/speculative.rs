//! Speculative decoding is lossless: on the real Gemma 3 270M, for repetitive and
//! plain prompts, greedy and seeded sampling with the whole filter chain, stop strings
//! and max_tokens edges, the speculative run commits exactly the plain run's tokens,
//! text, finish reason and RNG draws, and leaves a bitwise-identical KV cache.

use std::sync::{Arc, OnceLock};

use fucina_engine::{Conversation, GenerationOptions, SeqPool, SpecOptions, Step};
use fucina_model::{KvDtype, Model, ModelOptions};
use fucina_sample::SamplingParams;
use fucina_tokenizer::Tokenizer;

fn model() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| {
        let path = fucina_testdata::gemma3_270m();
        Arc::new(Model::load(path, ModelOptions::with_threads(2)).expect("load gemma"))
    })
    .clone()
}

fn tokenizer() -> Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        Arc::new(Tokenizer::from_metadata(model().file().metadata()).expect("tokenizer"))
    })
    .clone()
}

/// What a run produced: steps, draws, and the cache's tokens and KV bytes after it.
#[derive(Debug, PartialEq)]
struct Outcome {
    steps: Vec<(u32, bool, String, Option<&'static str>)>,
    draws: u64,
    cache_tokens: Vec<u32>,
    cache_bytes: Vec<u8>,
}

fn run(prompt: &[u32], opts: GenerationOptions) -> (Outcome, Option<fucina_engine::SpecStats>) {
    let mut pool = SeqPool::new(model(), 512, KvDtype::F16).unwrap();
    let mut conv = Conversation::new(&mut pool).unwrap();
    let mut g = conv
        .turn(&mut pool, tokenizer(), prompt, opts, vec![])
        .unwrap();
    let mut steps = Vec::new();
    while let Some(s) = g.step(&mut pool, &mut [], &mut |_, _| {}).unwrap() {
        let Step {
            token,
            emitted,
            text,
            finish,
            ..
        } = s;
        steps.push((token, emitted, text, finish.map(|f| f.as_str())));
    }
    let stats = g.spec_stats();
    let draws = g.draws();
    g.release(&mut pool);
    let cache = pool.cache(conv.seq()).unwrap();
    let mut bytes = Vec::new();
    for pos in 0..cache.len() {
        cache.read_record(pos, &mut bytes).unwrap();
    }
    let out = Outcome {
        steps,
        draws,
        cache_tokens: conv.tokens(&pool).unwrap().to_vec(),
        cache_bytes: bytes,
    };
    (out, stats)
}

fn opts(max: usize, sampling: SamplingParams, stop: &[&str]) -> GenerationOptions {
    GenerationOptions {
        max_tokens: Some(max),
        sampling,
        stop: stop.iter().map(|s| s.to_string()).collect(),
        ..GenerationOptions::default()
    }
}

fn check(prompt: &str, o: GenerationOptions) -> fucina_engine::SpecStats {
    let ids = tokenizer().encode(prompt, true, false).unwrap();
    let (plain, none) = run(&ids, o.clone());
    assert!(none.is_none());
    let mut first = None;
    // With the economics (the default) and without them (every proposed draft
    // verified, so sampled and low-acceptance text goes through the verify path too).
    for economics in [true, false] {
        let spec_opts = GenerationOptions {
            speculation: Some(SpecOptions {
                economics,
                ..SpecOptions::default()
            }),
            ..o.clone()
        };
        let (spec, stats) = run(&ids, spec_opts);
        assert_eq!(
            spec.steps, plain.steps,
            "speculative != plain for {prompt:?}"
        );
        assert_eq!(spec.draws, plain.draws, "draws for {prompt:?}");
        assert_eq!(
            spec.cache_tokens, plain.cache_tokens,
            "cache tokens for {prompt:?}"
        );
        assert!(
            spec.cache_bytes == plain.cache_bytes,
            "the KV bytes differ for {prompt:?}"
        );
        first.get_or_insert(stats.expect("speculation was on"));
    }
    first.expect("two runs")
}

const REPEAT: &str = "The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog";
const COUNT: &str = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,";

fn greedy() -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    }
}

#[test]
fn greedy_speculation_equals_plain_and_accepts_drafts_on_repetitive_text() {
    let stats = check(REPEAT, opts(48, greedy(), &[]));
    eprintln!(
        "repetitive greedy: {stats:?}, {:.2} tokens/step",
        stats.tokens_per_step()
    );
    assert!(stats.spec_steps > 0 && stats.accepted > 0, "{stats:?}");
    assert!(
        stats.committed > stats.steps,
        "more than one token per step: {stats:?}"
    );
    let stats = check(COUNT, opts(40, greedy(), &[]));
    assert!(stats.accepted > 0, "{stats:?}");
}

#[test]
fn sampled_speculation_equals_plain_draw_for_draw() {
    for (seed, temperature) in [(1, 0.8), (7, 0.3), (42, 1.2)] {
        let sampling = SamplingParams {
            temperature,
            seed,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.05,
            repeat_penalty: 1.1,
            presence_penalty: 0.2,
            frequency_penalty: 0.1,
            ..SamplingParams::default()
        };
        check(REPEAT, opts(40, sampling.clone(), &[]));
        check("Once upon a time", opts(24, sampling, &[]));
    }
}

/// Samplers whose decision reads only a row's top-k (no penalty, bias or processor):
/// their verify rows are decided from the head's top values (most logits never
/// computed) and give the plain run's tokens, draws and cache.
#[test]
fn top_k_sampled_speculation_equals_plain_draw_for_draw() {
    for (seed, temperature, top_k, top_p, min_p) in [
        (1, 0.8, 40, 0.95, 0.05),
        (7, 0.3, 40, 1.0, 0.0),
        (42, 1.5, 5, 0.9, 0.0),
        (3, 1.0, 128, 1.0, 0.1),
        (5, 0.7, 1, 1.0, 0.0),
    ] {
        let sampling = SamplingParams {
            temperature,
            seed,
            top_k,
            top_p,
            min_p,
            ..SamplingParams::default()
        };
        let stats = check(REPEAT, opts(40, sampling.clone(), &[]));
        assert!(stats.spec_steps > 0, "top-k {top_k}: {stats:?}");
        check("Once upon a time", opts(24, sampling, &[]));
    }
}

#[test]
fn stop_strings_and_max_tokens_edges_are_the_same() {
    check(REPEAT, opts(48, greedy(), &["log"]));
    check(REPEAT, opts(48, greedy(), &[" mat."]));
    check(COUNT, opts(40, greedy(), &[", 9"]));
    for max in [1, 2, 3, 5, 17] {
        check(COUNT, opts(max, greedy(), &[]));
    }
}

/// A verify batch's greedy picks and top-8 ids (the head's shortcut: most logits never
/// computed exactly), or its top-41 ids and values (a top-40 sampler's request), are
/// the first argmax and the top of the same batch's full pinned logits, row by row,
/// and leave the same cache: on the real model's 262k-row Q8_0 head, for rows of a
/// prompt and of its repetition (confident picks) and of filler tokens (flat ones).
#[test]
fn greedy_verify_picks_are_the_argmax_of_the_verify_logits() {
    let tok = tokenizer();
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(3);
    let mut ids = tok.encode(&text, true, false).unwrap();
    ids.extend([100u32, 7, 7, 7, 262_000, 3, 15_000]);
    let mut pool = SeqPool::new(model(), 512, KvDtype::F16).unwrap();
    let a = pool.alloc().unwrap();
    let b = pool.alloc().unwrap();
    let (head, rest) = ids.split_at(8);
    pool.eval(a, head, &mut |_, _| {}).unwrap();
    pool.eval(b, head, &mut |_, _| {}).unwrap();
    let n_vocab = model().config().n_vocab;
    for (c, chunk) in rest.chunks(17).enumerate() {
        let logits = pool.eval_verify_from(a, chunk, 0).unwrap().to_vec();
        // Greedy picks with the guesses' top 8; on every other chunk a top-40 sampler's
        // request: 41 top values, distinct.
        let (k, distinct) = if c % 2 == 0 { (8, 0) } else { (41, 41) };
        let picks = pool
            .eval_verify_top_from(b, chunk, 0, k, distinct)
            .unwrap()
            .clone();
        assert_eq!(picks.pick.len(), chunk.len());
        let mut ids = Vec::new();
        for (r, row) in logits.chunks_exact(n_vocab).enumerate() {
            assert_eq!(
                picks.pick[r],
                fucina_model::greedy::first_argmax(row),
                "row {r}"
            );
            fucina_model::greedy::top_k(row, k, &mut ids);
            assert_eq!(picks.top[r], ids, "row {r}");
            let vals: Vec<u32> = ids.iter().map(|&i| row[i as usize].to_bits()).collect();
            let got: Vec<u32> = picks.vals[r].iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, vals, "row {r}: top values");
            let distinct_ok = vals
                .iter()
                .zip(&vals[1..])
                .take(distinct.saturating_sub(1))
                .all(|(&a, &b)| f32::from_bits(a) > f32::from_bits(b));
            match &picks.full[r] {
                Some(full) => {
                    assert!(
                        distinct > 0 && !distinct_ok,
                        "row {r}: a whole row without a tie"
                    );
                    assert!(full
                        .iter()
                        .zip(row)
                        .all(|(x, y)| x.to_bits() == y.to_bits()));
                }
                None => assert!(
                    distinct == 0 || distinct_ok,
                    "row {r}: a tie without the row"
                ),
            }
        }
    }
    let (ca, cb) = (pool.cache(a).unwrap(), pool.cache(b).unwrap());
    assert_eq!(ca.len(), cb.len());
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for pos in 0..ca.len() {
        ca.read_record(pos, &mut ra).unwrap();
        cb.read_record(pos, &mut rb).unwrap();
        assert!(ra == rb, "cache record {pos} differs");
    }
}
