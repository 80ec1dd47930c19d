//! The continuous-batching scheduler on the real Gemma 3 270M: requests run
//! together give exactly the tokens they give alone (admission beyond the slots,
//! chunked prefill, batched decode, speculation on a lone stream and verifies inside
//! the batched forward), the queue is
//! bounded, cancellation frees a slot at the next step, one request's failure
//! leaves the others untouched, prompts reuse prefixes across requests (a slot's
//! own and rows copied from a busy slot), and embeddings are unit vectors.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fucina_engine::{
    EngineError, Event, FinishReason, Generation, GenerationOptions, Request, RequestHandle,
    Scheduler, SchedulerConfig, SeqPool, SpecOptions,
};
use fucina_model::{KvDtype, Model, ModelOptions};
use fucina_sample::{LogitProcessor, SampleError, SamplingParams};
use fucina_tokenizer::Tokenizer;

const N_CTX: usize = 512;
/// Longest any test waits for a request (the machine may be loaded).
const PATIENCE: Duration = Duration::from_secs(300);

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

fn encode(text: &str) -> Vec<u32> {
    tokenizer().encode(text, true, false).expect("encode")
}

fn opts(max: usize, temperature: f32, seed: u64) -> GenerationOptions {
    GenerationOptions {
        max_tokens: Some(max),
        sampling: SamplingParams {
            temperature,
            seed,
            ..SamplingParams::default()
        },
        ignore_eos: true,
        ..GenerationOptions::default()
    }
}

fn request(prompt: &[u32], options: GenerationOptions) -> Request {
    Request {
        prompt: prompt.to_vec(),
        options,
        processors: Vec::new(),
        reference: Vec::new(),
    }
}

fn scheduler(n_slots: usize, prefill_chunk: usize, max_queue: usize) -> Scheduler {
    let config = SchedulerConfig {
        n_slots,
        n_ctx: N_CTX,
        kv_dtype: KvDtype::F16,
        max_queue,
        prefill_chunk,
        ..SchedulerConfig::default()
    };
    Scheduler::new(model(), tokenizer(), config).expect("scheduler")
}

/// The tokens `prompt` gives alone, on a pool of its own (pinned numerics).
fn solo(prompt: &[u32], options: GenerationOptions) -> Vec<u32> {
    let mut pool = SeqPool::new(model(), N_CTX, KvDtype::F16).expect("pool");
    pool.set_pinned(true);
    let mut g = Generation::new(&mut pool, tokenizer(), prompt, options, vec![]).expect("gen");
    let mut out = Vec::new();
    while let Some(s) = g.step(&mut pool, &mut [], &mut |_, _| {}).expect("step") {
        out.push(s.token);
    }
    out
}

/// What a request produced, once it ended.
#[derive(Debug, Default)]
struct Run {
    tokens: Vec<u32>,
    cached: Option<usize>,
    finish: Option<FinishReason>,
    cancelled: bool,
    error: Option<String>,
    /// Draft tokens accepted (speculative requests).
    accepted: usize,
}

fn absorb(run: &mut Run, events: Vec<Event>) -> bool {
    let mut ended = false;
    for e in events {
        match e {
            Event::Started { cached, .. } => run.cached = Some(cached),
            Event::Step(s) => run.tokens.push(s.token),
            Event::Finished(o) => {
                run.finish = Some(o.finish);
                run.cancelled = o.cancelled;
                run.accepted = o.spec.map_or(0, |s| s.accepted);
                ended = true;
            }
            Event::Failed(e) => {
                run.error = Some(e.to_string());
                ended = true;
            }
            Event::Embedding(_) => ended = true,
        }
    }
    ended
}

fn wait(h: &RequestHandle) -> Run {
    let mut run = Run::default();
    let deadline = Instant::now() + PATIENCE;
    while !absorb(&mut run, h.wait_events(Duration::from_millis(100))) {
        assert!(Instant::now() < deadline, "request {} never ended", h.id());
    }
    run
}

/// Wait until `h` has committed at least `n` tokens (returns them).
fn wait_tokens(h: &RequestHandle, run: &mut Run, n: usize) {
    let deadline = Instant::now() + PATIENCE;
    while run.tokens.len() < n {
        assert!(
            !absorb(run, h.wait_events(Duration::from_millis(50))),
            "ended early: {run:?}"
        );
        assert!(Instant::now() < deadline, "no progress");
    }
}

/// Submit every prompt with its options at once, wait for all, and check each ran to
/// its length and gave the tokens it gives alone with `alone(options)`.
fn run_together_as_alone(
    s: &Scheduler,
    prompts: &[Vec<u32>],
    options: &[GenerationOptions],
    alone: impl Fn(&GenerationOptions) -> GenerationOptions,
) {
    let handles: Vec<RequestHandle> = prompts
        .iter()
        .zip(options)
        .map(|(p, o)| s.submit(request(p, o.clone())).expect("submit"))
        .collect();
    for ((h, p), o) in handles.iter().zip(prompts).zip(options) {
        let run = wait(h);
        assert_eq!(run.error, None);
        assert_eq!(run.finish, Some(FinishReason::Length));
        assert_eq!(run.tokens, solo(p, alone(o)), "prompt {p:?}");
    }
}

#[test]
fn requests_run_together_give_the_tokens_they_give_alone() {
    let prompts = [
        encode("The capital of France is"),
        encode("Once upon a time, in a land far away, there lived a"),
        encode("def fibonacci(n):"),
        encode("Water boils at"),
        encode("The three primary colours are red, yellow and"),
    ];
    let mut options = vec![
        opts(10, 0.0, 0),
        opts(12, 0.9, 7),
        opts(8, 0.7, 3),
        opts(9, 0.0, 0),
        opts(11, 1.1, 99),
    ];
    options[3].speculation = Some(SpecOptions::default());
    // Two slots for five requests (three wait), prompts prefilled 4 tokens a step.
    let s = scheduler(2, 4, 16);
    run_together_as_alone(&s, &prompts, &options, GenerationOptions::clone);
    let m = s.metrics();
    assert_eq!((m.requests_submitted, m.requests_completed), (5, 5));
    assert_eq!((m.queue_depth, m.slots_busy, m.slots_total), (0, 0, 2));
    let prompt_total: usize = prompts.iter().map(Vec::len).sum();
    assert_eq!(m.prompt_tokens, prompt_total as u64);
    // Every prompt token was either taken from the cache (the shared BOS, at least)
    // or evaluated in a prefill row.
    assert_eq!(
        m.prompt_tokens_evaluated + m.prompt_tokens_cached,
        prompt_total as u64
    );
    assert!(m.decode_rows > 0 && m.steps > 0 && m.generated_tokens == 50);
}

#[test]
fn speculative_requests_verify_their_drafts_in_the_shared_forward() {
    // Texts that repeat, so the drafts come from the prompts and the outputs.
    let prompts = [
        encode("red green blue red green blue red green blue red green blue red"),
        encode("1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2"),
        encode("The cat sat on the mat. The cat sat on the mat. The cat sat on the"),
        encode("abc abc abc abc abc abc abc abc abc abc abc abc"),
    ];
    // Drafting whatever the clock says (`economics` off) for three, the default gate
    // for one; greedy and seeded sampling with a penalty (rows decided from logits).
    let always = SpecOptions {
        economics: false,
        ..SpecOptions::default()
    };
    let mut options = vec![
        opts(40, 0.0, 0),
        opts(40, 0.8, 11),
        opts(40, 0.0, 0),
        opts(40, 0.0, 0),
    ];
    options[1].sampling.repeat_penalty = 1.1;
    for o in &mut options[..3] {
        o.speculation = Some(always.clone());
    }
    options[3].speculation = Some(SpecOptions::default());
    let s = scheduler(4, 64, 16);
    // Each gives the tokens of a plain run alone.
    run_together_as_alone(&s, &prompts, &options, |o| GenerationOptions {
        speculation: None,
        ..o.clone()
    });
    let m = s.metrics();
    assert_eq!(m.generated_tokens, 160);
    // Drafts were verified, and accepted, inside batched steps.
    assert!(m.spec_drafted > 0 && m.spec_accepted > 0, "{m:?}");
    // Each request needs 40 decisions: plain batched steps would be at least 40.
    assert!(m.steps < 40, "{m:?}");
}

/// A request's reference (a predicted output) is drafted from: with the exact
/// continuation as reference, nearly every token comes from an accepted draft, where
/// the same request without one drafts from its own short text only; the tokens are
/// the plain run's either way.
#[test]
fn a_reference_is_drafted_from_and_changes_no_token() {
    let prompt = encode("Once upon a time, in a kingdom by the sea,");
    let plain = solo(&prompt, opts(24, 0.0, 0));
    let always = SpecOptions {
        economics: false,
        ..SpecOptions::default()
    };
    let spec = GenerationOptions {
        speculation: Some(always),
        ..opts(24, 0.0, 0)
    };
    let s = scheduler(2, 64, 8);
    let with = s
        .submit(Request {
            reference: plain.clone(),
            ..request(&prompt, spec.clone())
        })
        .expect("submit");
    let with = wait(&with);
    let without = wait(&s.submit(request(&prompt, spec)).expect("submit"));
    assert_eq!(with.tokens, plain);
    assert_eq!(without.tokens, plain);
    assert!(with.accepted >= 16, "{} of 24 accepted", with.accepted);
    assert!(with.accepted > without.accepted + 8, "{with:?} {without:?}");
}

/// Sampled requests whose decisions read only their rows' top-k (llama.cpp's default
/// chain, no penalty), greedy ones beside them, some speculative: the batch decides
/// from the head's top values, and each request gives the tokens it gives alone.
#[test]
fn top_k_sampled_requests_decided_from_the_head_give_their_tokens_alone() {
    let prompts = [
        encode("red green blue red green blue red green blue red green blue red"),
        encode("Once upon a time, in a land far away, there lived a"),
        encode("The cat sat on the mat. The cat sat on the mat. The cat sat on the"),
        encode("Water boils at"),
    ];
    let mut options = vec![
        opts(24, 0.8, 11),
        opts(16, 1.2, 5),
        opts(24, 0.0, 0),
        opts(16, 0.6, 9),
    ];
    options[1].sampling.top_k = 5;
    options[3].sampling.top_k = 100;
    let always = SpecOptions {
        economics: false,
        ..SpecOptions::default()
    };
    options[0].speculation = Some(always.clone());
    options[2].speculation = Some(always);
    let s = scheduler(4, 64, 16);
    run_together_as_alone(&s, &prompts, &options, |o| GenerationOptions {
        speculation: None,
        ..o.clone()
    });
    let m = s.metrics();
    assert!(m.spec_drafted > 0, "{m:?}");
}

#[test]
fn the_queue_is_bounded_and_bad_requests_are_refused_before_queueing() {
    let s = scheduler(1, 64, 1);
    let long = opts(400, 0.0, 0);
    let a = s
        .submit(request(&encode("Count: one, two,"), long.clone()))
        .expect("a");
    let mut run_a = Run::default();
    wait_tokens(&a, &mut run_a, 1);
    // A holds the only slot; B waits in the one-place queue; C is refused.
    let b = s
        .submit(request(&encode("Hello"), long.clone()))
        .expect("b");
    match s.submit(request(&encode("Hi"), long)) {
        Err(EngineError::QueueFull { capacity: 1 }) => {}
        other => panic!("expected QueueFull, got {other:?}"),
    }
    let m = s.metrics();
    assert_eq!(
        (m.queue_depth, m.slots_busy, m.requests_rejected),
        (1, 1, 1)
    );
    // Cancelling the queued request takes it out of the queue without a start.
    b.cancel();
    let run_b = wait(&b);
    assert!(run_b.cancelled && run_b.cached.is_none() && run_b.tokens.is_empty());
    a.cancel();
    assert!(wait(&a).cancelled);

    let bad = |r: Request| s.submit(r).expect_err("refused").to_string();
    assert!(bad(request(&[], opts(4, 0.0, 0))).contains("prompt"));
    let too_long: Vec<u32> = vec![2; N_CTX];
    assert_eq!(
        bad(request(&too_long, opts(4, 0.0, 0))),
        format!("the prompt has {N_CTX} tokens but the context holds {N_CTX}")
    );
    assert!(bad(request(&[2, 9_999_999], opts(4, 0.0, 0))).contains("9999999"));
    let mut top_p = opts(4, 0.5, 0);
    top_p.sampling.top_p = 2.0;
    assert!(bad(request(&[2, 3], top_p)).contains("top_p"));
    let mut stop = opts(4, 0.0, 0);
    stop.stop = vec![String::new()];
    assert!(bad(request(&[2, 3], stop)).contains("stop"));
    assert_eq!(s.metrics().requests_submitted, 2);
}

#[test]
fn cancellation_frees_the_slot_at_the_next_step_and_the_others_go_on() {
    let s = scheduler(3, 64, 8);
    let long = opts(24, 0.0, 0);
    let prompts = [
        encode("Alpha beta"),
        encode("Gamma delta"),
        encode("Epsilon zeta"),
    ];
    let mut hs: Vec<RequestHandle> = prompts
        .iter()
        .map(|p| s.submit(request(p, long.clone())).expect("submit"))
        .collect();
    let mut runs: Vec<Run> = (0..3).map(|_| Run::default()).collect();
    for (h, r) in hs.iter().zip(&mut runs) {
        wait_tokens(h, r, 2);
    }
    assert_eq!(s.metrics().slots_busy, 3);
    hs[0].cancel();
    let mut rest = Run::default();
    let deadline = Instant::now() + PATIENCE;
    while !absorb(&mut rest, hs[0].wait_events(Duration::from_millis(20))) {
        assert!(Instant::now() < deadline);
    }
    assert!(rest.cancelled);
    assert_eq!(s.metrics().slots_busy, 2);
    assert!(s.metrics().cancel_steps_max <= 1, "{:?}", s.metrics());
    // Dropping a handle cancels too.
    drop(hs.remove(1));
    let deadline = Instant::now() + PATIENCE;
    while s.metrics().slots_busy > 1 {
        assert!(Instant::now() < deadline, "a dropped handle kept its slot");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.metrics().requests_cancelled, 2);
    // The third request ran to its end, with the tokens it gives alone.
    let mut third = std::mem::take(&mut runs[2]);
    let deadline = Instant::now() + PATIENCE;
    while !absorb(&mut third, hs[1].wait_events(Duration::from_millis(50))) {
        assert!(Instant::now() < deadline);
    }
    assert!(!third.cancelled && third.finish == Some(FinishReason::Length));
    assert_eq!(third.tokens, solo(&prompts[2], long));
}

/// Fails on its `fail_at`-th row (a broken grammar, say).
struct FailAt {
    calls: usize,
    fail_at: usize,
}

impl LogitProcessor for FailAt {
    fn process(&mut self, _: &mut [f32], _: &[u32]) -> Result<(), SampleError> {
        self.calls += 1;
        if self.calls == self.fail_at {
            return Err(SampleError::Processor("constraint exploded".into()));
        }
        Ok(())
    }
}

#[test]
fn a_failing_request_fails_alone() {
    let s = scheduler(3, 64, 8);
    let good = [encode("Rivers flow to the"), encode("Mountains are")];
    let o = opts(10, 0.8, 5);
    let handles: Vec<RequestHandle> = good
        .iter()
        .map(|p| s.submit(request(p, o.clone())).expect("submit"))
        .collect();
    let bad = s
        .submit(Request {
            prompt: encode("Bad"),
            options: o.clone(),
            processors: vec![Box::new(FailAt {
                calls: 0,
                fail_at: 3,
            })],
            reference: Vec::new(),
        })
        .expect("submit");
    let failed = wait(&bad);
    assert_eq!(failed.tokens.len(), 2);
    assert!(failed
        .error
        .as_deref()
        .unwrap_or("")
        .contains("constraint exploded"));
    for (h, p) in handles.iter().zip(&good) {
        let run = wait(h);
        assert_eq!(run.error, None);
        assert_eq!(run.tokens, solo(p, o.clone()));
    }
    let m = s.metrics();
    assert_eq!(
        (m.requests_failed, m.requests_completed, m.slots_busy),
        (1, 2, 0)
    );
}

#[test]
fn prompts_reuse_prefixes_across_requests_and_slots() {
    let s = scheduler(2, 32, 8);
    let system = "You are a helpful assistant who answers questions about geography, history and \
                  science in one short sentence.";
    let first = encode(&format!("{system} Q: What is the capital of Italy? A:"));
    let o = opts(6, 0.0, 0);
    let r1 = wait(&s.submit(request(&first, o.clone())).expect("r1"));
    assert_eq!(r1.cached, Some(0));
    // The same slot again: the whole shared prefix is kept.
    let second = encode(&format!("{system} Q: What is the capital of Spain? A:"));
    let common = first
        .iter()
        .zip(&second)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(common > 20);
    let r2 = wait(&s.submit(request(&second, o.clone())).expect("r2"));
    assert_eq!(r2.cached, Some(common));
    assert_eq!(r2.tokens, solo(&second, o.clone()));

    // Rows copied from a busy slot: a long request holds the prefix's slot, a new one
    // lands on the other slot and gets the prefix by copy.
    let long = s.submit(request(&first, opts(300, 0.0, 0))).expect("long");
    let mut run = Run::default();
    wait_tokens(&long, &mut run, 1);
    let third = encode(&format!("{system} Q: What is the capital of Peru? A:"));
    let shared = first.iter().zip(&third).take_while(|(a, b)| a == b).count();
    let r3 = wait(&s.submit(request(&third, o.clone())).expect("r3"));
    assert_eq!(r3.cached, Some(shared));
    assert_eq!(r3.tokens, solo(&third, o));
    let m = s.metrics();
    assert!(m.prompt_tokens_copied >= shared as u64, "{m:?}");
    assert!(m.prefix_cache_hit_rate() > 0.0);
    long.cancel();
    wait(&long);
}

#[test]
fn embeddings_are_unit_vectors_of_the_text() {
    let s = scheduler(1, 64, 4);
    let embed = |text: &str| {
        let h = s.embed(encode(text)).expect("embed");
        let deadline = Instant::now() + PATIENCE;
        loop {
            match h.wait_events(Duration::from_millis(50)).into_iter().next() {
                Some(Event::Embedding(v)) => return v,
                Some(other) => panic!("unexpected {other:?}"),
                None => {}
            }
            assert!(Instant::now() < deadline);
        }
    };
    let a = embed("The cat sat on the mat.");
    assert_eq!(a.len(), model().config().n_embd);
    let norm: f32 = a.iter().map(|v| v * v).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    assert_eq!(a, embed("The cat sat on the mat."));
    let b = embed("Quantum chromodynamics describes quarks.");
    let cos: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    assert!(cos < 0.9999, "{cos}");
    assert!(s.embed(vec![]).is_err());
    assert!(matches!(
        s.embed(vec![2; N_CTX + 1]),
        Err(EngineError::PromptTooLong { .. })
    ));
    assert_eq!(s.metrics().embeddings, 3);
}
