//! Helpers shared by the tiny-model tests (deepseek2, glm4moe, hybrid, moe,
//! tiny_models): the goldens' folder and JSON, model loading, per-position relative
//! error, argmax and logits of a prompt batch or token-by-token decode.

// Each test crate that includes this module uses a different subset.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use fucina_model::{BatchRow, KvDtype, Model, ModelOptions, Scratch};
use serde_json::Value as Json;

pub fn dir() -> PathBuf {
    fucina_testdata::repo_root().join("tests/goldens/model/tiny")
}

pub fn json(name: &str) -> Json {
    let text = std::fs::read_to_string(dir().join(name)).expect("golden json");
    serde_json::from_str(&text).expect("json")
}

/// `<stem>.json`'s llama.cpp golden for the build followed here
/// ([`fucina_testdata::llamacpp_golden`]).
pub fn llamacpp_json(stem: &str) -> Json {
    let avx2 = fucina_quant::GgmlBuild::host() == fucina_quant::GgmlBuild::Avx2;
    let text = std::fs::read_to_string(fucina_testdata::llamacpp_golden(&dir(), stem, avx2))
        .expect("llama.cpp golden");
    serde_json::from_str(&text).expect("json")
}

pub fn ids(v: &Json) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

pub fn floats(v: &Json) -> Vec<f32> {
    v.as_array()
        .expect("row")
        .iter()
        .map(|x| x.as_f64().expect("f") as f32)
        .collect()
}

pub fn load(stem: &str) -> Arc<Model> {
    Arc::new(
        Model::load(
            dir().join(format!("{stem}.gguf")),
            ModelOptions::with_threads(2),
        )
        .expect("load"),
    )
}

/// A xorshift32 stream of uniform values in [-1, 1) from `seed` (nonzero).
pub fn uniform_stream(mut seed: u32) -> impl FnMut() -> f32 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
    }
}

/// max |Δ| / max |reference| of one position.
pub fn rel(want: &[f32], got: &[f32]) -> f64 {
    let scale = want.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
    let d = want
        .iter()
        .zip(got)
        .fold(0f64, |m, (w, o)| m.max(f64::from((w - o).abs())));
    d / scale
}

pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |b, (i, &x)| if x > b.1 { (i, x) } else { b },
        )
        .0
}

/// Logits of every position of `toks`, as one prompt batch or one token per forward.
pub fn logits(model: &Model, toks: &[u32], kv: KvDtype, batch: bool) -> Vec<f32> {
    let mut caches = vec![model.new_cache(96, kv).expect("cache")];
    let mut sc = Scratch::default();
    if batch {
        let rows = BatchRow::sequence(0, 0, toks, true);
        return model
            .forward(&rows, &mut caches, &mut sc)
            .expect("forward")
            .to_vec();
    }
    decode_rows(model, toks, kv, 96)
}

/// Logits of `toks` decoded one row per forward from position 0, into a fresh
/// cache of `capacity` rows (the reference a batch is checked against).
pub fn decode_rows(model: &Model, toks: &[u32], kv: KvDtype, capacity: usize) -> Vec<f32> {
    let mut caches = vec![model.new_cache(capacity, kv).expect("cache")];
    let mut sc = Scratch::default();
    let mut out = Vec::new();
    for (p, &t) in toks.iter().enumerate() {
        let row = BatchRow {
            seq: 0,
            pos: p,
            token: t,
            logits: true,
        };
        out.extend_from_slice(
            model
                .forward(&[row], &mut caches, &mut sc)
                .expect("forward"),
        );
    }
    out
}
