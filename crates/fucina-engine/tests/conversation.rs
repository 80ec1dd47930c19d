//! Conversations on the real Gemma 3 270M: turns reuse the sequence's prefix and
//! equal a stateless run of the same history token for token, lockstep batches equal
//! sequential runs, and the KV sidecar resumes bit for bit (and refuses what it must).

use std::io::{Seek, SeekFrom, Write};
use std::sync::{Arc, OnceLock};

use fucina_engine::{step_batch, Conversation, Generation, GenerationOptions, SeqPool, Step};
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
    Arc::new(Tokenizer::from_metadata(model().file().metadata()).expect("tokenizer"))
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

fn run(pool: &mut SeqPool, g: &mut Generation) -> Vec<Step> {
    let mut steps = Vec::new();
    while let Some(s) = g.step(pool, &mut [], &mut |_, _| {}).expect("step") {
        steps.push(s);
    }
    g.release(pool);
    steps
}

fn emitted(steps: &[Step]) -> Vec<u32> {
    steps
        .iter()
        .filter(|s| s.emitted)
        .map(|s| s.token)
        .collect()
}

/// Gemma's turn format, rendered from (user, reply) pairs and a final user message.
fn render(tok: &Tokenizer, turns: &[(&str, Vec<u32>)], user: &str) -> Vec<u32> {
    let mut ids = vec![tok.bos_id().expect("bos")];
    let sp = |t: &str| tok.encode(t, false, true).expect("encode");
    for (u, reply) in turns {
        ids.extend(sp(&format!(
            "<start_of_turn>user\n{u}<end_of_turn>\n<start_of_turn>model\n"
        )));
        ids.extend(reply);
        ids.extend(sp("<end_of_turn>\n"));
    }
    ids.extend(sp(&format!(
        "<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n"
    )));
    ids
}

const USERS: [&str; 3] = ["Name a colour.", "And a fruit?", "Now a city in Italy."];

fn pinned_pool(n_ctx: usize) -> SeqPool {
    let mut pool = SeqPool::new(model(), n_ctx, KvDtype::F16).unwrap();
    pool.set_pinned(true);
    pool
}

#[test]
fn turns_reuse_the_prefix_and_equal_a_stateless_run_of_the_same_history() {
    let tok = tokenizer();
    let mut pool = pinned_pool(1024);
    let mut conv = Conversation::new(&mut pool).unwrap();
    let mut turns: Vec<(&str, Vec<u32>)> = Vec::new();
    let mut last = Vec::new();
    for (i, user) in USERS.iter().enumerate() {
        let ids = render(&tok, &turns, user);
        let held = conv.tokens(&pool).unwrap().to_vec();
        let mut g = conv
            .turn(&mut pool, tok.clone(), &ids, opts(12, 0.8, 7), vec![])
            .unwrap();
        // Everything the sequence held is a prefix of the new render: all of it is kept.
        assert_eq!(conv.last_reused(), held.len(), "turn {i}");
        assert_eq!(ids[..held.len()], held[..]);
        if i > 0 {
            assert!(conv.last_reused() > 0);
        }
        let steps = run(&mut pool, &mut g);
        last = emitted(&steps);
        turns.push((user, last.clone()));
    }
    // Stateless: the whole history in one prefill on a fresh sequence (same seed).
    let ids = render(&tok, &turns[..2], USERS[2]);
    let mut fresh = Conversation::new(&mut pool).unwrap();
    let mut g = fresh
        .turn(&mut pool, tok.clone(), &ids, opts(12, 0.8, 7), vec![])
        .unwrap();
    assert_eq!(fresh.last_reused(), 0);
    assert_eq!(emitted(&run(&mut pool, &mut g)), last);

    // An edited history reuses exactly the common prefix.
    let edited = render(&tok, &[("Name a flower.", turns[0].1.clone())], USERS[1]);
    let common = ids.iter().zip(&edited).take_while(|(a, b)| a == b).count();
    let g = conv
        .turn(&mut pool, tok.clone(), &edited, opts(4, 0.0, 0), vec![])
        .unwrap();
    assert_eq!(conv.last_reused(), common);
    assert_eq!(g.pending().len(), edited.len() - common);
}

#[test]
fn a_lockstep_batch_equals_sequential_runs_token_for_token() {
    let tok = tokenizer();
    let prompts: Vec<Vec<u32>> = ["Once upon a time", "The capital of France is", "1, 2, 3,"]
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let cfg = |i: usize| opts(10 + 3 * i, if i == 1 { 0.0 } else { 0.9 }, 11 + i as u64);
    let mut pool = SeqPool::new(model(), 256, KvDtype::F16).unwrap();
    let sequential: Vec<Vec<u32>> = (0..3)
        .map(|i| {
            let mut c = Conversation::new(&mut pool).unwrap();
            let mut g = c
                .turn(&mut pool, tok.clone(), &prompts[i], cfg(i), vec![])
                .unwrap();
            let out = emitted(&run(&mut pool, &mut g));
            c.release(&mut pool);
            out
        })
        .collect();
    let convs: Vec<Conversation> = (0..3)
        .map(|_| Conversation::new(&mut pool).unwrap())
        .collect();
    let mut gens: Vec<Generation> = convs
        .iter()
        .zip(&prompts)
        .enumerate()
        .map(|(i, (c, p))| {
            Generation::on_sequence(&mut pool, c.seq(), tok.clone(), p, cfg(i), vec![]).unwrap()
        })
        .collect();
    let mut out = vec![Vec::new(); 3];
    loop {
        let mut refs: Vec<&mut Generation> = gens.iter_mut().collect();
        let steps = step_batch(&mut pool, &mut refs).unwrap();
        if steps.iter().all(|s| matches!(s, Ok(None))) {
            break;
        }
        for (i, s) in steps.into_iter().enumerate() {
            if let Some(s) = s.unwrap() {
                if s.emitted {
                    out[i].push(s.token);
                }
            }
        }
    }
    assert_eq!(out, sequential);
    assert!(out
        .iter()
        .map(Vec::len)
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| w[0] != w[1]));
}

#[test]
fn a_failing_stream_does_not_stop_its_siblings() {
    let tok = tokenizer();
    let mut pool = SeqPool::new(model(), 64, KvDtype::F16).unwrap();
    let ok = tok.encode("Hello", true, false).unwrap();
    let a = Conversation::new(&mut pool).unwrap();
    let b = Conversation::new(&mut pool).unwrap();
    let mut ga = Generation::on_sequence(
        &mut pool,
        a.seq(),
        tok.clone(),
        &ok,
        opts(5, 0.0, 0),
        vec![],
    )
    .unwrap();
    // A processor error on one stream: a bias that masks everything.
    let mut masked = opts(5, 0.0, 0);
    masked.sampling.logit_bias = (0..model().config().n_vocab as u32)
        .map(|t| (t, f32::NEG_INFINITY))
        .collect();
    let mut gb =
        Generation::on_sequence(&mut pool, b.seq(), tok.clone(), &ok, masked, vec![]).unwrap();
    let mut done_a = 0;
    let mut b_failed = false;
    for _ in 0..8 {
        let steps = step_batch(&mut pool, &mut [&mut ga, &mut gb]).unwrap();
        match &steps[0] {
            Ok(Some(s)) if s.emitted => done_a += 1,
            Ok(_) => {}
            Err(e) => panic!("healthy stream failed: {e}"),
        }
        b_failed |= steps[1].is_err();
    }
    assert!(b_failed);
    assert_eq!(done_a, 5);
}

#[test]
fn the_sidecar_resumes_bit_for_bit_and_ignores_what_is_not_its_own() {
    let tok = tokenizer();
    let dir = std::env::temp_dir().join(format!("fucina-persist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("chat.fuxkv");
    let _ = std::fs::remove_file(&path);
    let mut pool = pinned_pool(512);
    let mut conv = Conversation::new(&mut pool).unwrap();
    assert_eq!(
        conv.enable_persistence(&mut pool, &path).unwrap().positions,
        0
    );
    let ids = render(&tok, &[], USERS[0]);
    let mut g = conv
        .turn(&mut pool, tok.clone(), &ids, opts(8, 0.0, 0), vec![])
        .unwrap();
    let reply = emitted(&run(&mut pool, &mut g));
    conv.sync(&pool).unwrap();
    let held = conv.tokens(&pool).unwrap().to_vec();
    let next = render(&tok, &[(USERS[0], reply)], USERS[1]);
    let mut g = conv
        .turn(&mut pool, tok.clone(), &next, opts(8, 0.0, 0), vec![])
        .unwrap();
    let expected = emitted(&run(&mut pool, &mut g));

    // Reopen in another pool: the same tokens and the same continuation.
    let mut pool2 = pinned_pool(512);
    let mut c2 = Conversation::new(&mut pool2).unwrap();
    let r = c2.enable_persistence(&mut pool2, &path).unwrap();
    assert_eq!((r.positions, r.ignored), (held.len(), None));
    assert_eq!(c2.tokens(&pool2).unwrap(), &held[..]);
    for il in 0..model().config().layers.len() {
        let (a, b) = (
            pool.cache(conv.seq()).unwrap(),
            pool2.cache(c2.seq()).unwrap(),
        );
        assert_eq!(
            a.layer(il).k_rows(0, 0, held.len()),
            b.layer(il).k_rows(0, 0, held.len())
        );
    }
    let mut g = c2
        .turn(&mut pool2, tok.clone(), &next, opts(8, 0.0, 0), vec![])
        .unwrap();
    assert_eq!(c2.last_reused(), held.len());
    assert_eq!(emitted(&run(&mut pool2, &mut g)), expected);
    c2.release(&mut pool2);

    let reopen = |pool: &mut SeqPool| {
        let mut c = Conversation::new(pool).unwrap();
        let r = c.enable_persistence(pool, &path).unwrap();
        c.release(pool);
        r
    };
    // A torn tail: the published count over fewer bytes resumes the prefix there.
    let len = std::fs::metadata(&path).unwrap().len();
    let header = 48 + 12 * model().config().layers.len() as u64;
    let record = (len - header) / held.len() as u64;
    assert_eq!((len - header) % held.len() as u64, 0);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - record - 3).unwrap();
    assert_eq!(reopen(&mut pool2).positions, held.len() - 2);
    assert_eq!(
        reopen(&mut pool2).positions,
        held.len() - 2,
        "the torn count was repaired"
    );
    // A corrupted header: ignored with a reason, and the file reset.
    let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.seek(SeekFrom::Start(30)).unwrap();
    f.write_all(&[0xff]).unwrap();
    let r = reopen(&mut pool2);
    assert_eq!(r.positions, 0);
    assert!(r.ignored.unwrap().contains("corrupted"));
    assert_eq!(reopen(&mut pool2).positions, 0);
    // Another geometry (a q8_0 cache) and garbage are ignored the same way.
    let mut c = Conversation::new(&mut pool2).unwrap();
    c.enable_persistence(&mut pool2, &path).unwrap();
    let mut g = c
        .turn(&mut pool2, tok.clone(), &ids, opts(2, 0.0, 0), vec![])
        .unwrap();
    run(&mut pool2, &mut g);
    c.sync(&pool2).unwrap();
    let mut q8 = SeqPool::new(model(), 512, KvDtype::Q8_0).unwrap();
    let r = reopen(&mut q8);
    assert!(r.ignored.unwrap().contains("geometry"), "q8_0 cache");
    std::fs::write(&path, "not a sidecar at all. ".repeat(40)).unwrap();
    let r = reopen(&mut pool2);
    assert!(r.ignored.unwrap().contains("magic"));
    std::fs::remove_dir_all(&dir).unwrap();
}
