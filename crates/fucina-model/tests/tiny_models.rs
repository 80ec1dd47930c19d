//! Tiny random-weight qwen3 / qwen2 / llama / gemma3 / qwen3moe / qwen2moe models (written by
//! `tools/gen_tiny_models.py` with gguf-py under llama.cpp's tensor names) against
//! transformers' float32 logits at every position, and greedy continuations; qwen3
//! and the mixture-of-experts models also against llama.cpp's logits on the same files
//! (`tools/gen_tiny_llamacpp_goldens.py`).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use fucina_engine::{argmax, Session};
use fucina_model::{KvDtype, Model, ModelOptions};
use serde_json::Value;

const FAMILIES: [&str; 6] = ["qwen3", "qwen2", "llama", "gemma3", "qwen3moe", "qwen2moe"];
/// Families whose logits move continuously with rounding. A mixture of experts does
/// not: f16 or Q8_0 rounding (of weights or the cache) flips near-tied routing
/// choices (the tiny qwen3moe's 2nd/3rd router logits come within 0.003), and
/// llama.cpp's own Q8_0 logits are as far from transformers' (3.2e-1 relative) as
/// ours; whether a flip happens depends on the ISA's rounding (qwen2moe's f16 cache
/// flips one on the scalar path: 9.4e-2). The MoE models are checked against
/// transformers with f32 weights and cache, and against llama.cpp on every variant
/// ([`tiny_models_match_llama_cpp`]).
const CONTINUOUS: [&str; 4] = ["qwen3", "qwen2", "llama", "gemma3"];

fn dir() -> PathBuf {
    fucina_testdata::repo_root().join("tests/goldens/model/tiny")
}

fn golden(family: &str) -> Value {
    let text = std::fs::read_to_string(dir().join(format!("{family}.json"))).expect("golden json");
    serde_json::from_str(&text).expect("json")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Worst over prompts and positions of max |Δlogit| / max |reference logit| of the
/// position, and whether every greedy continuation matched.
fn compare(family: &str, variant: &str, kv: KvDtype) -> (f64, bool) {
    let model = Arc::new(
        Model::load(
            dir().join(format!("{family}-{variant}.gguf")),
            ModelOptions::with_threads(2),
        )
        .expect("load"),
    );
    let g = golden(family);
    let vocab = model.config().n_vocab;
    let (mut worst, mut greedy_ok) = (0f64, true);
    for p in g["prompts"].as_array().expect("prompts") {
        let toks = ids(&p["tokens"]);
        let mut s = Session::new(Arc::clone(&model), 64, kv).expect("session");
        let ours = s.eval(&toks, true).expect("eval").to_vec();
        for (i, row) in p["logits"].as_array().expect("logits").iter().enumerate() {
            let want: Vec<f64> = row
                .as_array()
                .expect("row")
                .iter()
                .map(|v| v.as_f64().expect("f"))
                .collect();
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            let d = want
                .iter()
                .zip(&ours[i * vocab..(i + 1) * vocab])
                .fold(0f64, |m, (w, o)| m.max((w - f64::from(*o)).abs()));
            worst = worst.max(d / scale);
        }
        s.reset();
        let want = ids(&p["greedy"]);
        let got = s
            .generate_greedy(&toks, want.len(), |_| false)
            .expect("generate");
        greedy_ok &= got == want;
        // Sanity: the first greedy token is the argmax of the last prompt position.
        assert_eq!(argmax(&ours[(toks.len() - 1) * vocab..]), got[0]);
    }
    eprintln!("{family}-{variant} kv={kv:?}: max |dlogit|/max|logit| {worst:.2e}, greedy identical: {greedy_ok}");
    (worst, greedy_ok)
}

/// Issue 5: f32 weights match transformers' float32 forward within 1e-3 relative.
/// With an f32 KV cache what remains is f32 summation order (~5e-7) and, for
/// Gemma, ggml's f16-table GELU (~2e-4).
const F32_REL: f64 = 1e-3;
/// The default f16 cache rounds K, V, the query and the softmax weights to f16
/// (llama.cpp's numerics): measured <= 6.3e-4.
const F16_KV_REL: f64 = 2e-3;
/// f16 weights (activations rounded to f16 as llama.cpp's F16 vec_dot does):
/// measured <= 1.3e-3.
const F16_WEIGHTS_REL: f64 = 3e-3;
/// Q8_0 weights with Q8_0 activations: measured <= 2.9e-2.
const Q8_0_WEIGHTS_REL: f64 = 6e-2;
/// q8_0 KV cache with f32 weights: measured <= 9e-3.
const Q8_0_KV_REL: f64 = 2e-2;

fn check(family: &str, variant: &str, kv: KvDtype, bound: f64) {
    let (worst, greedy) = compare(family, variant, kv);
    assert!(
        worst <= bound,
        "{family}-{variant} kv={kv:?}: {worst} > {bound}"
    );
    assert!(
        greedy,
        "{family}-{variant} kv={kv:?}: greedy continuation differs"
    );
}

#[test]
fn f32_weights_match_transformers() {
    for f in FAMILIES {
        check(f, "f32", KvDtype::F32, F32_REL);
    }
}

#[test]
fn f32_weights_with_the_default_f16_cache() {
    for f in CONTINUOUS {
        check(f, "f32", KvDtype::F16, F16_KV_REL);
    }
}

#[test]
fn f16_and_q8_0_weights() {
    for f in CONTINUOUS {
        check(f, "f16", KvDtype::F16, F16_WEIGHTS_REL);
        check(f, "q8_0", KvDtype::F16, Q8_0_WEIGHTS_REL);
    }
}

#[test]
fn q8_0_cache() {
    // qwen2's tiny heads are 32 wide too (hidden 64 / 2 heads).
    for f in CONTINUOUS {
        check(f, "f32", KvDtype::Q8_0, Q8_0_KV_REL);
    }
}

/// Several sequences with different lengths in one batch, on every family and KV
/// dtype: each row's logits equal its single-row forward bitwise (pinned numerics;
/// these Q8_0 models have no Q4_K matrix, so the default mode gives the same bits,
/// except the MoE models' F32 routers, which batches take through llama.cpp's
/// tinyBLAS order: pinned only there).
#[test]
fn multi_sequence_batch_equals_single_rows() {
    use fucina_model::{BatchRow, Scratch};
    for f in FAMILIES {
        let model = Model::load(
            dir().join(format!("{f}-q8_0.gguf")),
            ModelOptions::with_threads(2),
        )
        .expect("load");
        let vocab = model.config().n_vocab;
        let seqs: [&[u32]; 3] = [&[5, 9, 200, 31, 7, 77, 140], &[1, 2], &[250, 3, 3, 3, 18]];
        for kv in [KvDtype::F16, KvDtype::Q8_0, KvDtype::F32] {
            let mut single = Vec::new();
            for toks in seqs {
                single.push(common::decode_rows(&model, toks, kv, 16));
            }
            let mut rows: Vec<BatchRow> = seqs
                .iter()
                .enumerate()
                .flat_map(|(i, t)| BatchRow::sequence(i, 0, t, true))
                .collect();
            rows.sort_by_key(|r| (r.pos, r.seq));
            let modes: &[bool] = if f.ends_with("moe") {
                &[true]
            } else {
                &[true, false]
            };
            for &pinned in modes {
                let mut caches: Vec<_> = (0..3)
                    .map(|_| model.new_cache(16, kv).expect("cache"))
                    .collect();
                let mut sc = Scratch::default();
                sc.set_pinned(pinned);
                let out = model.forward(&rows, &mut caches, &mut sc).expect("forward");
                for (i, r) in rows.iter().enumerate() {
                    let got = &out[i * vocab..(i + 1) * vocab];
                    let want = &single[r.seq][r.pos * vocab..(r.pos + 1) * vocab];
                    assert!(
                        got.iter()
                            .zip(want)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{f} {kv:?} row {i} (pinned: {pinned})"
                    );
                }
            }
        }
    }
}

#[test]
fn unsupported_architecture_and_bad_batches_are_errors() {
    use fucina_gguf::{GgufFile, GgufWriter, OpenOptions, Value};
    use fucina_model::{BatchRow, ModelError, Scratch};
    let file = GgufFile::open(dir().join("qwen3-q8_0.gguf")).expect("open");
    let mut w = GgufWriter::from_part(&file, 0).expect("writer");
    w.set("general.architecture", Value::string("mamba"));
    let renamed =
        GgufFile::from_bytes(w.to_bytes().expect("bytes"), OpenOptions::default()).expect("reopen");
    match Model::from_file(Arc::new(renamed), ModelOptions::default()) {
        Err(ModelError::UnsupportedArchitecture { arch, supported }) => {
            assert_eq!(arch, "mamba");
            assert_eq!(
                supported,
                [
                    "gemma3",
                    "qwen3",
                    "qwen2",
                    "llama",
                    "qwen3moe",
                    "qwen2moe",
                    "qwen35",
                    "qwen35moe",
                    "qwen3next",
                    "gemma4",
                    "deepseek2",
                    "glm4moe"
                ]
            );
        }
        other => panic!("expected UnsupportedArchitecture, got {other:?}"),
    }

    let model =
        Model::load(dir().join("qwen3-q8_0.gguf"), ModelOptions::with_threads(1)).expect("load");
    let mut caches = vec![model.new_cache(4, KvDtype::F16).expect("cache")];
    let mut sc = Scratch::default();
    let row = |pos, token| BatchRow {
        seq: 0,
        pos,
        token,
        logits: true,
    };
    for bad in [
        vec![],
        vec![row(1, 3)],
        vec![row(0, 256)],
        vec![row(0, 1), row(2, 1)],
        vec![BatchRow {
            seq: 1,
            ..row(0, 1)
        }],
    ] {
        assert!(
            model.forward(&bad, &mut caches, &mut sc).is_err(),
            "{bad:?}"
        );
        assert_eq!(caches[0].len(), 0);
    }
    let full: Vec<BatchRow> = (0..5).map(|p| row(p, 1)).collect();
    assert!(matches!(
        model.forward(&full, &mut caches, &mut sc),
        Err(ModelError::KvCacheOverflow { .. })
    ));
    let other = Model::load(
        dir().join("gemma3-q8_0.gguf"),
        ModelOptions::with_threads(1),
    )
    .expect("load");
    let mut wrong = vec![other.new_cache(4, KvDtype::F16).expect("cache")];
    let r = model.forward(&[row(0, 1)], &mut wrong, &mut sc).map(|_| ());
    assert!(
        matches!(r, Err(ModelError::KvCacheShapeMismatch(_))),
        "{r:?}"
    );
}

/// A `final_logit_softcapping` key caps logits as c·tanh(l/c).
#[test]
fn final_logit_softcap_from_metadata() {
    use fucina_gguf::{GgufFile, GgufWriter, OpenOptions, Value};
    let path = dir().join("gemma3-f32.gguf");
    let toks = [2u32, 9, 77, 180];
    let plain = Arc::new(Model::load(&path, ModelOptions::with_threads(1)).expect("load"));
    let file = GgufFile::open(&path).expect("open");
    let mut w = GgufWriter::from_part(&file, 0).expect("writer");
    w.set("gemma3.final_logit_softcapping", Value::F32(2.0));
    let capped =
        GgufFile::from_bytes(w.to_bytes().expect("bytes"), OpenOptions::default()).expect("reopen");
    let capped =
        Arc::new(Model::from_file(Arc::new(capped), ModelOptions::with_threads(1)).expect("bind"));
    assert_eq!(capped.config().final_softcap, Some(2.0));
    let run = |m: &Arc<Model>| {
        let mut s = Session::new(Arc::clone(m), 8, KvDtype::F32).expect("session");
        s.eval(&toks, true).expect("eval").to_vec()
    };
    let (a, b) = (run(&plain), run(&capped));
    assert!(
        a.iter().any(|v| v.abs() > 2.0),
        "uncapped logits exceed the cap"
    );
    for (x, y) in a.iter().zip(&b) {
        assert!(
            y.abs() < 2.0 && (y - 2.0 * (x / 2.0).tanh()).abs() < 1e-6,
            "{x} -> {y}"
        );
    }
}

/// One variant of a tiny model against llama.cpp on the same file
/// (`<family>-llamacpp.json`; its cache type: f32 for f32 weights, f16 otherwise):
/// worst max |Δlogit| / max |logit| over prompts and positions, worst absolute
/// |Δlogit|, and whether the 12-token greedy continuations are identical.
fn against_llama_cpp(family: &str, variant: &str) -> (f64, f64, bool) {
    let path = fucina_testdata::llamacpp_golden(
        &dir(),
        &format!("{family}-llamacpp"),
        fucina_quant::GgmlBuild::host() == fucina_quant::GgmlBuild::Avx2,
    );
    let text = std::fs::read_to_string(path).expect("llama.cpp golden");
    let g: Value = serde_json::from_str(&text).expect("json");
    let v = &g["variants"][variant];
    let kv = match v["kv"].as_str().expect("kv") {
        "f32" => KvDtype::F32,
        _ => KvDtype::F16,
    };
    let model = Arc::new(
        Model::load(
            dir().join(format!("{family}-{variant}.gguf")),
            ModelOptions::with_threads(2),
        )
        .expect("load"),
    );
    let vocab = model.config().n_vocab;
    let (mut rel, mut abs, mut greedy_ok) = (0f64, 0f64, true);
    for p in v["prompts"].as_array().expect("prompts") {
        let toks = ids(&p["tokens"]);
        let mut s = Session::new(Arc::clone(&model), 64, kv).expect("session");
        let ours = s.eval(&toks, true).expect("eval").to_vec();
        for (i, row) in p["logits"].as_array().expect("logits").iter().enumerate() {
            let want: Vec<f64> = row
                .as_array()
                .expect("row")
                .iter()
                .map(|v| v.as_f64().expect("f"))
                .collect();
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            let d = want
                .iter()
                .zip(&ours[i * vocab..(i + 1) * vocab])
                .fold(0f64, |m, (w, o)| m.max((w - f64::from(*o)).abs()));
            rel = rel.max(d / scale);
            abs = abs.max(d);
        }
        s.reset();
        let want = ids(&p["greedy"]);
        let got = s
            .generate_greedy(&toks, want.len(), |_| false)
            .expect("generate");
        greedy_ok &= got == want;
    }
    eprintln!(
        "{family}-{variant} vs llama.cpp: max |dlogit| {abs:.2e} ({rel:.2e} relative), \
         greedy identical: {greedy_ok}"
    );
    (rel, abs, greedy_ok)
}

/// Bounds against llama.cpp, relative to the position's largest logit, on the ISA its
/// goldens were made with (AVX-512). F16 and Q8_0 weights (f16 cache) match to the
/// goldens' 8 significant digits (measured 2.2e-8). F32 weights run with an f32 cache,
/// whose batched attention products llama.cpp computes through tinyBLAS in an order
/// fucina's f32-cache attention does not follow: measured 4.0e-7.
const LLAMA_CPP_REL: [(&str, f64); 3] = [("f32", 1e-6), ("f16", 1e-7), ("q8_0", 1e-7)];
/// On the other ISAs (other kernels' summation orders; f16 conversions in software on
/// the scalar path): the transformers bounds of the weight type. Measured worst
/// (scalar): f32 5.9e-7, f16 6.2e-4, q8_0 2.1e-8; (AVX2) f32 3.6e-7, f16 3.6e-4,
/// q8_0 2.1e-8.
const OTHER_ISA_REL: [(&str, f64); 3] = [
    ("f32", F32_REL),
    ("f16", F16_WEIGHTS_REL),
    ("q8_0", Q8_0_WEIGHTS_REL),
];

#[test]
fn tiny_models_match_llama_cpp() {
    let isa = fucina_quant::Kernels::from_env().expect("kernels").isa();
    let bounds = if isa == fucina_quant::Isa::Avx512 {
        LLAMA_CPP_REL
    } else {
        OTHER_ISA_REL
    };
    let mut failures = Vec::new();
    for family in ["qwen3", "qwen3moe", "qwen2moe"] {
        for (variant, bound) in bounds {
            let (rel, _, greedy) = against_llama_cpp(family, variant);
            if rel > bound || !greedy {
                failures.push(format!("{family}-{variant} ({isa:?}): {rel:.2e} > {bound:.0e} or greedy differs ({greedy})"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
