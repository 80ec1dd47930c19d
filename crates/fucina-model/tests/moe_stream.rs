//! Streaming MoE experts through the expert store on the tiny MoE GGUFs: logits of a
//! prompt batch and greedy decode are bitwise the resident model's for cache
//! budgets of 10%, 50% and 100% of the expert bytes; a replay of the recorded
//! trace reproduces the live hit counts; a file truncated under a streaming model
//! gives an error, not garbage; a flat usage histogram declines auto-pin.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fucina_experts::{replay_live, Eviction, ExpertError, Histogram, StoreOptions, Trace};
use fucina_gguf::{GgufFile, GgufWriter};
use fucina_model::{BatchRow, KvDtype, Model, ModelError, ModelOptions, Scratch};

/// The tiny MoE models (qwen2moe has a gated shared expert, deepseek2 MLA and a
/// leading dense layer, deepseek2v3 sigmoid group routing, qwen35moe hybrid
/// layers, gemma4-moe fused gate/up stacks).
const MODELS: [&str; 7] = [
    "qwen3moe-q8_0",
    "qwen3moe-f32",
    "qwen2moe-q8_0",
    "deepseek2-q8_0",
    "deepseek2v3-q8_0",
    "qwen35moe-q8_0",
    "gemma4-moe-q8_0",
];

fn path(stem: &str) -> PathBuf {
    fucina_testdata::repo_root().join(format!("tests/goldens/model/tiny/{stem}.gguf"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fm-stream-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn load(p: &Path, stream: Option<StoreOptions>) -> Model {
    let options = ModelOptions {
        moe_stream: stream,
        ..ModelOptions::with_threads(2)
    };
    Model::load(p, options).expect("load")
}

fn prompt(model: &Model) -> Vec<u32> {
    let v = model.config().n_vocab as u32;
    (0..24u32).map(|i| (i * 37 + 5) % v).collect()
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// Every prompt position's logits as one batch, then 12 greedy tokens decoded
/// one by one (their logits too), as bits.
fn run(model: &Model) -> Result<(Vec<u32>, Vec<u32>), ModelError> {
    let toks = prompt(model);
    let mut caches = vec![model.new_cache(64, KvDtype::F16)?];
    let mut sc = Scratch::default();
    let rows = BatchRow::sequence(0, 0, &toks, true);
    let mut bits: Vec<u32> = Vec::new();
    let logits = model.forward(&rows, &mut caches, &mut sc)?.to_vec();
    bits.extend(logits.iter().map(|x| x.to_bits()));
    let n_vocab = model.config().n_vocab;
    let mut next = argmax(&logits[logits.len() - n_vocab..]);
    let mut greedy = Vec::new();
    for p in toks.len()..toks.len() + 12 {
        greedy.push(next);
        let row = BatchRow {
            seq: 0,
            pos: p,
            token: next,
            logits: true,
        };
        let l = model.forward(&[row], &mut caches, &mut sc)?;
        bits.extend(l.iter().map(|x| x.to_bits()));
        next = argmax(l);
    }
    Ok((bits, greedy))
}

fn expert_bytes(model: &Model) -> u64 {
    model
        .expert_store()
        .map(|s| s.stats().expert_bytes)
        .expect("a store")
}

#[test]
fn streamed_outputs_are_bitwise_resident_at_10_50_100_percent() {
    for stem in MODELS {
        let p = path(stem);
        let want = run(&load(&p, None)).expect("resident");
        let all = expert_bytes(&load(&p, Some(StoreOptions::default())));
        for (pct, eviction, io_threads, prefetch) in [
            (10, Eviction::default(), 0, false),
            (50, Eviction::Lru, 2, true),
            (100, Eviction::default(), 2, true),
        ] {
            let options = StoreOptions {
                cache_bytes: Some(all * pct / 100),
                eviction: Some(eviction),
                io_threads,
                prefetch,
                ..StoreOptions::default()
            };
            let model = load(&p, Some(options));
            let got = run(&model).expect("streamed");
            assert!(
                got.0 == want.0,
                "{stem} at {pct}%: logits differ from resident"
            );
            assert_eq!(got.1, want.1, "{stem} at {pct}%: greedy tokens");
            let stats = model.expert_store().expect("store").stats();
            assert!(stats.counts.misses > 0, "{stem}: {stats:?}");
            if pct == 10 {
                assert!(stats.cache_bytes < all / 2, "{stem}: {}", stats.report());
            }
        }
    }
}

#[test]
fn a_replayed_trace_reproduces_the_live_hit_counts() {
    let dir = tmp("trace");
    for (stem, prefetch, eviction) in [
        ("qwen3moe-q8_0", false, Eviction::default()),
        ("deepseek2-q8_0", true, Eviction::default()),
        ("qwen2moe-q8_0", true, Eviction::Lru),
    ] {
        let trace = dir.join(format!("{stem}.trace"));
        let model = load(
            &path(stem),
            Some(StoreOptions {
                slots_per_layer: Some(3),
                eviction: Some(eviction),
                prefetch,
                trace: Some(trace.clone()),
                ..StoreOptions::default()
            }),
        );
        run(&model).expect("run");
        let live = model.expert_store().expect("store").stats().counts;
        drop(model);
        let t = Trace::load(&trace).expect("trace written at teardown");
        assert_eq!(t.eviction, eviction);
        assert_eq!(replay_live(&t).expect("replay"), live, "{stem}");
        assert!(live.hits > 0 && live.misses > 0, "{stem}: {live:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The tiny qwen3moe rewritten with every expert stack after the other tensors,
/// so cutting the file's tail truncates experts only (the mapped dense weights,
/// which the forward reads through the mapping, stay whole).
fn experts_last(dst: &Path) {
    let file = GgufFile::open(path("qwen3moe-q8_0")).expect("open");
    let mut w = GgufWriter::new();
    *w.metadata_mut() = file.metadata().clone();
    let (exps, rest): (Vec<_>, Vec<_>) = file
        .tensors()
        .iter()
        .partition(|(n, _)| n.contains("_exps"));
    for (name, info) in rest.into_iter().chain(exps) {
        let bytes = file.info_bytes(info).expect("bytes");
        w.add_tensor(name, info.ggml_type, &info.dims, bytes.to_vec())
            .expect("add");
    }
    std::fs::write(dst, w.to_bytes().expect("bytes")).expect("write");
}

#[test]
fn a_truncated_file_under_a_streaming_model_is_an_error() {
    let dir = tmp("trunc");
    let p = dir.join("experts-last.gguf");
    experts_last(&p);
    let full = std::fs::metadata(&p).expect("stat").len();
    for io_threads in [0, 2] {
        let model = load(
            &p,
            Some(StoreOptions {
                slots_per_layer: Some(2),
                io_threads,
                ..StoreOptions::default()
            }),
        );
        // Cut off half of the file's last expert stack.
        let last = model.file().tensors()
            [&format!("blk.{}.ffn_down_exps.weight", model.config().n_layer - 1)]
            .clone();
        let bytes = model.file().info_bytes(&last).expect("bytes").len() as u64;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .expect("open");
        f.set_len(full - bytes / 2).expect("truncate");
        let err = (0..4)
            .find_map(|_| run(&model).err())
            .expect("some expert of the cut region is read");
        assert!(
            matches!(err, ModelError::Experts(ExpertError::ShortRead { .. })),
            "{err}"
        );
        drop(model);
        experts_last(&p);
    }
    // A file already truncated fails at load, naming the stack.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .expect("open");
    f.set_len(full - 64).expect("truncate");
    let options = ModelOptions {
        moe_stream: Some(StoreOptions::default()),
        ..ModelOptions::with_threads(1)
    };
    let err = Model::load(&p, options).expect_err("truncated");
    assert!(err.to_string().contains("ffn_"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_flat_histogram_declines_auto_pin_and_teardown_writes_usage() {
    let dir = tmp("hist");
    let p = dir.join("m.gguf");
    std::fs::copy(path("qwen3moe-q8_0"), &p).expect("copy");
    let hist = fucina_experts::histogram_path(&p);
    let options = |cache| StoreOptions {
        cache_bytes: Some(cache),
        histogram: Some(hist.clone()),
        ..StoreOptions::default()
    };
    let model = load(&p, Some(StoreOptions::default()));
    let all = expert_bytes(&model);
    let n_layer = model.config().n_layer;
    let n_expert: Vec<usize> = (0..n_layer)
        .map(|il| {
            model.layers()[il]
                .ffn
                .moe()
                .map_or(0, |m| m.config.n_expert)
        })
        .collect();
    drop(model);
    let mut flat = Histogram::zeros(&n_expert);
    flat.counts.iter_mut().for_each(|c| {
        c.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = 100 + (i as u64 % 3))
    });
    flat.save(&hist).expect("save");
    let model = load(&p, Some(options(all / 2)));
    let stats = model.expert_store().expect("store").stats();
    assert!(
        stats.pins_declined_flat && stats.pinned == 0,
        "{}",
        stats.report()
    );
    run(&model).expect("run");
    drop(model);
    let after = Histogram::load(&hist).expect("read").expect("written");
    let (before, now): (u64, u64) = (
        flat.counts.iter().flatten().sum(),
        after.counts.iter().flatten().sum(),
    );
    assert!(now > before, "teardown adds this session's usage");
    // A skewed histogram pins.
    let mut skewed = flat.clone();
    for c in skewed.counts.iter_mut().filter(|c| !c.is_empty()) {
        c[0] = 100_000;
        c[1] = 90_000;
    }
    skewed.save(&hist).expect("save");
    let stats = load(&p, Some(options(all / 2)))
        .expert_store()
        .expect("store")
        .stats();
    assert!(
        !stats.pins_declined_flat && stats.pinned > 0,
        "{}",
        stats.report()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Opening a model streamed from memory is an error (the store reads files).
#[test]
fn streaming_needs_a_file() {
    let bytes = std::fs::read(path("qwen3moe-q8_0")).expect("read");
    let file = GgufFile::from_bytes(bytes, fucina_gguf::OpenOptions::default()).expect("parse");
    let options = ModelOptions {
        moe_stream: Some(StoreOptions::default()),
        ..ModelOptions::with_threads(1)
    };
    let err = Model::from_file(Arc::new(file), options).expect_err("in memory");
    assert!(err.to_string().contains("file"), "{err}");
}
