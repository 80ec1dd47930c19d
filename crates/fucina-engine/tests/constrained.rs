//! Grammar-constrained decoding on the real Gemma 3 270M: the output matches the
//! grammar, forced spans are committed without sampling, and constrained speculative
//! decoding (drafts cut to what the grammar accepts, forced tokens riding in the
//! verify batch) commits exactly the plain constrained run's tokens, draws and cache.
//! Constrained speculative requests batched by the scheduler commit their plain lone
//! (pinned) runs' tokens.

use std::sync::{Arc, OnceLock};

use fucina_engine::{Conversation, GenerationOptions, SeqPool, SpecOptions, Step};
use fucina_grammar::{Grammar, GrammarCompiler, GrammarError};
use fucina_model::{KvDtype, Model, ModelOptions};
use fucina_sample::{LogitProcessor, SamplingParams};
use fucina_tokenizer::Tokenizer;
use serde_json::{json, Value};

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

fn compiler() -> &'static GrammarCompiler {
    static C: OnceLock<GrammarCompiler> = OnceLock::new();
    C.get_or_init(|| GrammarCompiler::new(tokenizer(), model().config().n_vocab).unwrap())
}

fn chat_prompt(user: &str) -> Vec<u32> {
    let text = format!("<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n");
    tokenizer().encode(text, true, true).unwrap()
}

#[derive(Debug, PartialEq)]
struct Outcome {
    steps: Vec<(u32, bool, String, Option<&'static str>)>,
    draws: u64,
    forced: usize,
    cache_tokens: Vec<u32>,
    cache_bytes: Vec<u8>,
}

impl Outcome {
    fn text(&self) -> String {
        self.steps.iter().map(|s| s.2.as_str()).collect()
    }
}

fn run(prompt: &[u32], grammar: &Grammar, opts: GenerationOptions) -> Outcome {
    let mut pool = SeqPool::new(model(), 1024, KvDtype::F16).unwrap();
    let mut conv = Conversation::new(&mut pool).unwrap();
    let procs: Vec<Box<dyn LogitProcessor>> = vec![Box::new(compiler().compile(grammar).unwrap())];
    let mut g = conv
        .turn(&mut pool, tokenizer(), prompt, opts, procs)
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
    let (draws, forced) = (g.draws(), g.forced_count());
    g.release(&mut pool);
    let cache = pool.cache(conv.seq()).unwrap();
    let mut cache_bytes = Vec::new();
    for pos in 0..cache.len() {
        cache.read_record(pos, &mut cache_bytes).unwrap();
    }
    Outcome {
        steps,
        draws,
        forced,
        cache_tokens: conv.tokens(&pool).unwrap().to_vec(),
        cache_bytes,
    }
}

/// `spec`: speculation with the cost gate's economics off, so every draft the
/// (grammar-cut) source proposes goes through the verify path.
fn opts(seed: Option<u64>, max_tokens: usize, spec: bool) -> GenerationOptions {
    let sampling = match seed {
        None => SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        Some(seed) => SamplingParams {
            temperature: 0.7,
            seed,
            ..SamplingParams::default()
        },
    };
    GenerationOptions {
        max_tokens: Some(max_tokens),
        sampling,
        speculation: spec.then(|| SpecOptions {
            economics: false,
            ..SpecOptions::default()
        }),
        ..GenerationOptions::default()
    }
}

fn schemas() -> Vec<(&'static str, Value)> {
    vec![
        (
            "Describe a fictional person as JSON.",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 24},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "role": {"enum": ["engineer", "artist", "doctor"]},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3}
                },
                "required": ["name", "age", "role", "tags"],
                "additionalProperties": false
            }),
        ),
        (
            "List three points as JSON.",
            json!({
                "type": "object",
                "properties": {
                    "points": {
                        "type": "array",
                        "items": {"$ref": "#/$defs/point"},
                        "minItems": 3, "maxItems": 3
                    }
                },
                "required": ["points"],
                "additionalProperties": false,
                "$defs": {"point": {
                    "type": "object",
                    "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9}, "y": {"type": "integer", "minimum": -9, "maximum": 9}},
                    "required": ["x", "y"], "additionalProperties": false
                }}
            }),
        ),
    ]
}

#[test]
fn constrained_output_matches_the_schema_and_speculation_is_lossless() {
    for (user, schema) in schemas() {
        let grammar = Grammar::json_schema(schema.clone()).unwrap();
        let prompt = chat_prompt(user);
        for seed in [None, Some(7), Some(1234)] {
            let plain = run(&prompt, &grammar, opts(seed, 160, false));
            let spec = run(&prompt, &grammar, opts(seed, 160, true));
            assert_eq!(plain, spec, "{user} seed {seed:?}");
            let text = plain.text();
            assert_eq!(
                plain.steps.last().and_then(|s| s.3),
                Some("stop"),
                "{user} seed {seed:?}: {text}"
            );
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{user} seed {seed:?}: not JSON ({e}): {text}"));
            assert!(v.is_object(), "{text}");
            for key in schema["required"].as_array().unwrap() {
                assert!(
                    v.get(key.as_str().unwrap()).is_some(),
                    "{key} missing: {text}"
                );
            }
            assert!(
                plain.forced > 0,
                "a schema this rigid forces tokens: {text}"
            );
        }
    }
}

#[test]
fn regex_and_lark_outputs_match_and_speculation_is_lossless() {
    let cases = [
        (
            "What is the date of the moon landing?",
            Grammar::Regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}".into()),
        ),
        (
            "Say yes or no, with a reason.",
            Grammar::Lark(
                "start: answer \" because \" reason\nanswer: \"yes\" | \"no\"\nreason: /[a-z ]{1,40}/".into(),
            ),
        ),
    ];
    for (user, grammar) in cases {
        let prompt = chat_prompt(user);
        for seed in [None, Some(3)] {
            let plain = run(&prompt, &grammar, opts(seed, 48, false));
            let spec = run(&prompt, &grammar, opts(seed, 48, true));
            assert_eq!(plain, spec, "{user} seed {seed:?}");
            let text = plain.text();
            match &grammar {
                Grammar::Regex(_) => {
                    let b = text.as_bytes();
                    assert!(
                        b.len() == 10
                            && b[4] == b'-'
                            && b[7] == b'-'
                            && b.iter()
                                .enumerate()
                                .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit()),
                        "{text:?}"
                    );
                }
                _ => {
                    let (answer, reason) = text.split_once(" because ").expect("because");
                    assert!(answer == "yes" || answer == "no", "{text:?}");
                    assert!(
                        !reason.is_empty()
                            && reason.len() <= 40
                            && reason.bytes().all(|c| c == b' ' || c.is_ascii_lowercase()),
                        "{text:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_grammar_that_cannot_finish_in_max_tokens_ends_with_length() {
    let grammar = Grammar::Regex("[a-z]{200}".into());
    let out = run(
        &chat_prompt("Write letters."),
        &grammar,
        opts(None, 12, true),
    );
    assert_eq!(out.steps.len(), 12);
    assert_eq!(out.steps.last().and_then(|s| s.3), Some("length"));
    assert!(out.text().bytes().all(|c| c.is_ascii_lowercase()));
}

#[test]
fn bad_grammars_fail_at_compile_time_naming_the_problem() {
    let c = compiler();
    // Unimplemented keywords compile leniently (as llama.cpp reads schemas), named in
    // the warning; a schema asking to be strict is refused naming them.
    let not = json!({"type": "object", "not": {"type": "string"}});
    let warning = c
        .check(&Grammar::json_schema(not.clone()).unwrap())
        .unwrap();
    assert!(warning.is_some_and(|w| w.contains("not")));
    let mut strict = not;
    strict["x-guidance"] = json!({"lenient": false});
    let e = c.check(&Grammar::json_schema(strict).unwrap()).unwrap_err();
    assert_eq!(
        e,
        GrammarError::Unsupported {
            keywords: vec!["not".into()]
        }
    );
    assert!(e.to_string().contains("not"), "{e}");
    let e = c.check(&Grammar::Regex("[a-".into())).unwrap_err();
    assert!(
        matches!(e, GrammarError::Invalid { kind: "regex", .. }),
        "{e}"
    );
    let e = c
        .check(&Grammar::Lark("start: undefined_rule".into()))
        .unwrap_err();
    assert!(e.to_string().contains("undefined_rule"), "{e}");
    assert!(Grammar::json_schema_str("{not json").is_err());
    assert!(Grammar::json_schema(json!(3)).is_err());
}

#[test]
fn control_tokens_cannot_be_spelled_by_a_grammar() {
    // A regex that would match the text of Gemma's turn marker must not produce the
    // control token itself (its text is never reachable through the vocabulary).
    let grammar = Grammar::Regex("<start_of_turn>".into());
    let out = run(&chat_prompt("Hi"), &grammar, opts(None, 16, false));
    let t = tokenizer();
    let marker = t.token_id(b"<start_of_turn>").unwrap();
    assert!(out.steps.iter().all(|s| s.0 != marker || !s.1));
    assert_eq!(out.text(), "<start_of_turn>");
}

#[test]
fn call_markers_written_as_text_are_forced_as_written() {
    // DeepSeek's markers are not tokens of Gemma's vocabulary: they are text, and their
    // `▁` is SentencePiece's space escape, which Gemma's tokenizer reads as a space. The
    // forced call must come out byte for byte (it failed on the forced `▁calls`).
    let grammar = Grammar::Lark(
        "start: \"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\\\"a\\\": \" \
         /[0-9]{1,3}/ \"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>\""
            .into(),
    );
    let prompt = chat_prompt("Add 2 and 3 with the add tool.");
    for seed in [None, Some(5)] {
        let plain = run(&prompt, &grammar, opts(seed, 96, false));
        let spec = run(&prompt, &grammar, opts(seed, 96, true));
        assert_eq!(plain, spec, "seed {seed:?}");
        let text = plain.text();
        let digits = text
            .strip_prefix("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": ")
            .and_then(|t| t.strip_suffix("}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"))
            .unwrap_or_else(|| panic!("seed {seed:?}: {text:?}"));
        assert!(
            !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()),
            "{text:?}"
        );
        assert_eq!(plain.steps.last().and_then(|s| s.3), Some("stop"));
        assert!(plain.forced > 0, "{text:?}");
    }
}

/// Constrained requests with speculation run together on the scheduler: their drafts
/// (cut to the grammar) are verified as rows of shared batched forwards, forced
/// tokens ride in those rows, and each request commits exactly its plain lone
/// constrained run's tokens.
#[test]
fn constrained_speculative_requests_run_together_give_the_plain_tokens() {
    use fucina_engine::{Event, Generation, Request, Scheduler, SchedulerConfig};
    use std::time::{Duration, Instant};
    let config = SchedulerConfig {
        n_slots: 4,
        n_ctx: 1024,
        kv_dtype: KvDtype::F16,
        max_queue: 8,
        prefill_chunk: 256,
        ..SchedulerConfig::default()
    };
    let s = Scheduler::new(model(), tokenizer(), config).unwrap();
    let mut cases = Vec::new();
    for (user, schema) in schemas() {
        let grammar = Grammar::json_schema(schema).unwrap();
        for seed in [None, Some(7)] {
            cases.push((chat_prompt(user), grammar.clone(), seed));
        }
    }
    let handles: Vec<_> = cases
        .iter()
        .map(|(prompt, grammar, seed)| {
            let processors: Vec<Box<dyn LogitProcessor>> =
                vec![Box::new(compiler().compile(grammar).unwrap())];
            let request = Request {
                prompt: prompt.clone(),
                options: opts(*seed, 160, true),
                processors,
                reference: Vec::new(),
            };
            s.submit(request).unwrap()
        })
        .collect();
    for (h, (prompt, grammar, seed)) in handles.iter().zip(&cases) {
        let (mut tokens, mut ended) = (Vec::new(), false);
        let deadline = Instant::now() + Duration::from_secs(300);
        while !ended {
            assert!(Instant::now() < deadline, "request {} never ended", h.id());
            for e in h.wait_events(Duration::from_millis(100)) {
                match e {
                    Event::Step(step) => tokens.push(step.token),
                    Event::Finished(_) => ended = true,
                    Event::Failed(e) => panic!("seed {seed:?}: {e}"),
                    _ => {}
                }
            }
        }
        // The plain constrained run alone, with the scheduler's pinned numerics (its
        // prompt prefilled row-for-row as a batch prefills it).
        let mut pool = SeqPool::new(model(), 1024, KvDtype::F16).unwrap();
        pool.set_pinned(true);
        let procs: Vec<Box<dyn LogitProcessor>> =
            vec![Box::new(compiler().compile(grammar).unwrap())];
        let opts = opts(*seed, 160, false);
        let mut g = Generation::new(&mut pool, tokenizer(), prompt, opts, procs).unwrap();
        let mut want = Vec::new();
        while let Some(step) = g.step(&mut pool, &mut [], &mut |_, _| {}).unwrap() {
            want.push(step.token);
        }
        assert_eq!(tokens, want, "seed {seed:?}");
    }
    let m = s.metrics();
    assert!(m.spec_drafted > 0, "{m:?}");
}
