//! The engine on the real Gemma 3 270M: sequence-pool operations keep numerics
//! exact, and a Generation's loop (greedy and sampled, stop rules, cancellation,
//! argument checks) behaves as documented.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use fucina_engine::{
    EngineError, FinishReason, Generation, GenerationOptions, SeqPool, Session, Step,
};
use fucina_model::{KvDtype, Model, ModelOptions};
use fucina_sample::{LogitProcessor, SampleError, SamplingParams};
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
    Arc::new(Tokenizer::from_metadata(model().file().metadata()).expect("tokenizer"))
}

fn prompt(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text, true, false).expect("encode")
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn run(pool: &mut SeqPool, g: &mut Generation) -> Vec<Step> {
    let mut steps = Vec::new();
    while let Some(s) = g.step(pool, &mut [], &mut |_, _| {}).expect("step") {
        steps.push(s);
    }
    g.release(pool);
    steps
}

fn greedy(max: usize) -> GenerationOptions {
    GenerationOptions {
        max_tokens: Some(max),
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        ..GenerationOptions::default()
    }
}

#[test]
fn fork_truncate_and_copy_prefix_give_bitwise_equal_logits() {
    let tok = tokenizer();
    let ids = prompt(&tok, "The quick brown fox jumps over the lazy dog");
    let mut pool = SeqPool::new(model(), 64, KvDtype::F16).unwrap();
    let a = pool.alloc().unwrap();
    pool.eval(a, &ids, &mut |_, _| {}).unwrap();
    let b = pool.fork(a).unwrap();
    assert_eq!(pool.tokens(b).unwrap(), &ids[..]);
    let la = bits(pool.eval(a, &[1234], &mut |_, _| {}).unwrap());
    let lb = bits(pool.eval(b, &[1234], &mut |_, _| {}).unwrap());
    assert_eq!(la, lb, "a fork continues exactly like its source");

    // Prefix sharing: dst gets a's first 5 positions; a truncated to 5 and dst then
    // evaluate the same token on identical caches.
    let dst = pool.alloc().unwrap();
    pool.copy_prefix(a, dst, 5).unwrap();
    pool.truncate(a, 5).unwrap();
    assert_eq!(pool.tokens(dst).unwrap(), &ids[..5]);
    let la = bits(pool.eval(a, &[77], &mut |_, _| {}).unwrap());
    let ld = bits(pool.eval(dst, &[77], &mut |_, _| {}).unwrap());
    assert_eq!(la, ld);
    assert!(
        pool.copy_prefix(a, dst, 100).is_err(),
        "longer than the source"
    );

    // Removal recycles the slot; stale ids are errors, never another sequence's data.
    assert_eq!(pool.n_live(), 3);
    pool.remove(b);
    assert!(matches!(
        pool.tokens(b),
        Err(EngineError::UnknownSequence(_))
    ));
    let c = pool.alloc().unwrap();
    assert_eq!(c.index(), b.index());
    assert!(pool.tokens(c).unwrap().is_empty());
}

#[test]
fn greedy_generation_equals_the_session_loop() {
    let tok = tokenizer();
    let ids = prompt(&tok, "The capital of France is");
    let mut s = Session::new(model(), 128, KvDtype::F16).unwrap();
    let want = s.generate_greedy(&ids, 20, |t| tok.is_eog(t)).unwrap();

    let mut pool = SeqPool::new(model(), 128, KvDtype::F16).unwrap();
    let mut g = Generation::new(&mut pool, tok.clone(), &ids, greedy(20), vec![]).unwrap();
    let steps = run(&mut pool, &mut g);
    let got: Vec<u32> = steps.iter().map(|s| s.token).collect();
    assert_eq!(got, want);
    assert_eq!(g.draws(), 0, "greedy never touches the RNG");
    let text: String = steps.iter().map(|s| s.text.as_str()).collect();
    let emitted: Vec<u32> = steps
        .iter()
        .filter(|s| s.emitted)
        .map(|s| s.token)
        .collect();
    assert_eq!(text, tok.decode_lossy(&emitted, false).unwrap());
    let last = steps.last().unwrap();
    assert!(last.finish.is_some());
    if last.finish == Some(FinishReason::Length) {
        assert_eq!(steps.len(), 20);
    } else {
        assert!(!last.emitted && tok.is_eog(last.token));
    }
    assert_eq!(pool.n_live(), 0);
}

#[test]
fn sampled_generation_is_a_function_of_the_seed_with_one_draw_per_token() {
    let tok = tokenizer();
    let ids = prompt(&tok, "Once upon a time");
    let mut pool = SeqPool::new(model(), 128, KvDtype::F16).unwrap();
    let opts = |seed| GenerationOptions {
        max_tokens: Some(16),
        sampling: SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplingParams::default()
        },
        ignore_eos: true,
        ..GenerationOptions::default()
    };
    let tokens = |pool: &mut SeqPool, seed| {
        let mut g = Generation::new(pool, tok.clone(), &ids, opts(seed), vec![]).unwrap();
        let t: Vec<u32> = run(pool, &mut g).iter().map(|s| s.token).collect();
        assert_eq!(g.draws(), t.len() as u64);
        t
    };
    let a = tokens(&mut pool, 42);
    assert_eq!(a.len(), 16);
    assert_eq!(tokens(&mut pool, 42), a);
    assert_ne!(tokens(&mut pool, 43), a);
}

#[test]
fn stop_strings_cancellation_and_limits() {
    let tok = tokenizer();
    let ids = prompt(&tok, "Once upon a time, in a small village by the sea,");
    let mut pool = SeqPool::new(model(), 128, KvDtype::F16).unwrap();
    let mut g = Generation::new(&mut pool, tok.clone(), &ids, greedy(40), vec![]).unwrap();
    let full: String = run(&mut pool, &mut g)
        .iter()
        .map(|s| s.text.clone())
        .collect();
    let word = full.split_whitespace().nth(3).expect("a few words");
    let stop = format!(" {word}");
    let opts = GenerationOptions {
        stop: vec!["zzz".into(), stop.clone()],
        ..greedy(40)
    };
    let mut g = Generation::new(&mut pool, tok.clone(), &ids, opts, vec![]).unwrap();
    let steps = run(&mut pool, &mut g);
    let cut: String = steps.iter().map(|s| s.text.clone()).collect();
    assert_eq!(cut, full[..full.find(&stop).unwrap()]);
    let last = steps.last().unwrap();
    assert_eq!(
        (last.finish, last.stop_index),
        (Some(FinishReason::Stop), Some(1))
    );

    // Cancellation between tokens: no further step, no further forward.
    let mut g = Generation::new(&mut pool, tok.clone(), &ids, greedy(40), vec![]).unwrap();
    assert!(g
        .step(&mut pool, &mut [], &mut |_, _| {})
        .unwrap()
        .is_some());
    g.cancel_handle().store(true, Ordering::Relaxed);
    let len = pool.len(g.seq()).unwrap();
    assert!(g
        .step(&mut pool, &mut [], &mut |_, _| {})
        .unwrap()
        .is_none());
    assert_eq!(pool.len(g.seq()).unwrap(), len);
    g.release(&mut pool);

    // max_tokens 0 finishes at once; the context bounds max_tokens.
    let mut g = Generation::new(&mut pool, tok.clone(), &ids, greedy(0), vec![]).unwrap();
    assert!(run(&mut pool, &mut g).is_empty());
    let mut small = SeqPool::new(model(), ids.len() + 3, KvDtype::F16).unwrap();
    let opts = GenerationOptions {
        ignore_eos: true,
        ..greedy(100)
    };
    let mut g = Generation::new(&mut small, tok.clone(), &ids, opts, vec![]).unwrap();
    let steps = run(&mut small, &mut g);
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[2].finish, Some(FinishReason::Length));
}

#[test]
fn prefill_reports_progress_in_chunks() {
    let tok = tokenizer();
    let ids: Vec<u32> = (0..1100).map(|i| 1000 + (i * 7) % 5000).collect();
    let mut pool = SeqPool::new(model(), 1200, KvDtype::F16).unwrap();
    let mut g = Generation::new(&mut pool, tok, &ids, greedy(1), vec![]).unwrap();
    let mut seen = Vec::new();
    g.step(&mut pool, &mut [], &mut |d, t| seen.push((d, t)))
        .unwrap();
    assert_eq!(seen, vec![(512, 1100), (1024, 1100), (1100, 1100)]);
}

struct BanAll;
impl LogitProcessor for BanAll {
    fn process(&mut self, logits: &mut [f32], _: &[u32]) -> Result<(), SampleError> {
        logits.fill(f32::NEG_INFINITY);
        Ok(())
    }
}

struct Ban(u32);
impl LogitProcessor for Ban {
    fn process(&mut self, logits: &mut [f32], _: &[u32]) -> Result<(), SampleError> {
        logits[self.0 as usize] = f32::NEG_INFINITY;
        Ok(())
    }
}

#[test]
fn processors_and_bad_arguments() {
    let tok = tokenizer();
    let ids = prompt(&tok, "The capital of France is");
    let mut pool = SeqPool::new(model(), 64, KvDtype::F16).unwrap();
    let mut g = Generation::new(&mut pool, tok.clone(), &ids, greedy(8), vec![]).unwrap();
    let plain: Vec<u32> = run(&mut pool, &mut g).iter().map(|s| s.token).collect();

    let ban: Vec<Box<dyn LogitProcessor>> = vec![Box::new(Ban(plain[0]))];
    let mut g = Generation::new(&mut pool, tok.clone(), &ids, greedy(8), ban).unwrap();
    let banned: Vec<u32> = run(&mut pool, &mut g).iter().map(|s| s.token).collect();
    assert!(!banned.contains(&plain[0]));

    let mut g = Generation::new(
        &mut pool,
        tok.clone(),
        &ids,
        greedy(8),
        vec![Box::new(BanAll)],
    )
    .unwrap();
    let err = g.step(&mut pool, &mut [], &mut |_, _| {}).unwrap_err();
    assert!(
        matches!(err, EngineError::Sample(SampleError::AllTokensMasked)),
        "{err}"
    );
    assert!(g.is_finished());
    g.release(&mut pool);

    let mut extra = BanAll;
    let mut g = Generation::new(&mut pool, tok.clone(), &ids, greedy(8), vec![]).unwrap();
    assert!(g
        .step(&mut pool, &mut [&mut extra], &mut |_, _| {})
        .is_err());
    g.release(&mut pool);

    let n_vocab = model().config().n_vocab as u32;
    let bad: Vec<(Vec<u32>, GenerationOptions)> = vec![
        (vec![], greedy(4)),
        (vec![2, n_vocab], greedy(4)),
        ((0..64).collect(), greedy(4)),
        (
            ids.clone(),
            GenerationOptions {
                stop: vec![String::new()],
                ..greedy(4)
            },
        ),
        (
            ids.clone(),
            GenerationOptions {
                logprobs: Some(10_000),
                ..greedy(4)
            },
        ),
        (
            ids.clone(),
            GenerationOptions {
                sampling: SamplingParams {
                    top_p: 1.5,
                    ..SamplingParams::default()
                },
                ..greedy(4)
            },
        ),
    ];
    for (p, o) in bad {
        let e = Generation::new(&mut pool, tok.clone(), &p, o, vec![]).unwrap_err();
        assert!(
            matches!(
                e,
                EngineError::InvalidArgument { .. }
                    | EngineError::PromptTooLong { .. }
                    | EngineError::Sample(SampleError::InvalidParam { .. })
            ),
            "{e}"
        );
    }
    assert_eq!(pool.n_live(), 0, "failed starts allocate no sequence");
}

#[test]
fn pending_and_decide_drive_a_generation_like_step() {
    let tok = tokenizer();
    let ids = prompt(&tok, "The capital of France is");
    let mut pool = SeqPool::new(model(), 64, KvDtype::F16).unwrap();
    let mut g = Generation::new(&mut pool, tok.clone(), &ids, greedy(10), vec![]).unwrap();
    let want: Vec<u32> = run(&mut pool, &mut g).iter().map(|s| s.token).collect();

    let mut g = Generation::new(&mut pool, tok.clone(), &ids, greedy(10), vec![]).unwrap();
    assert_eq!(g.pending(), &ids[..]);
    let mut got = Vec::new();
    loop {
        let pending = g.pending().to_vec();
        if pending.is_empty() {
            break;
        }
        let logits = pool.eval(g.seq(), &pending, &mut |_, _| {}).unwrap();
        match g.decide(logits, &mut []).unwrap() {
            Some(step) => got.push(step.token),
            None => break,
        }
    }
    g.release(&mut pool);
    assert_eq!(got, want);
}
