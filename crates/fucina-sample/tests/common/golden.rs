//! Reading `tests/goldens/sampling/*.json`: base64 arrays, compact rows
//! rebuilt with the generator's f32 arithmetic, and case parameters.
//! Shared by the parity test and the benchmark example.

// Each user compiles this file into its own crate and uses a different part.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use fucina_sample::SamplingParams;
use serde_json::Value;

pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/goldens/sampling")
}

fn b64(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 byte {c}"),
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c) << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    out
}

pub fn b64_f32(s: &str) -> Vec<f32> {
    b64(s)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn b64_u32(s: &str) -> Vec<u32> {
    b64(s)
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Rebuild a row exactly as the generator did (same f32 operations).
pub fn build_row(enc: &Value) -> Vec<f32> {
    let mut row: Vec<f32> = match enc["kind"].as_str().expect("row kind") {
        "dense" => b64_f32(enc["f32"].as_str().expect("f32")),
        "formula" => {
            let n = enc["n"].as_u64().expect("n");
            let (a, b, m) = (
                enc["a"].as_u64().unwrap(),
                enc["b"].as_u64().unwrap(),
                enc["m"].as_u64().unwrap(),
            );
            let (scale, offset) = (num(&enc["scale"]) as f32, num(&enc["offset"]) as f32);
            (0..n)
                .map(|i| ((i * a + b) % m) as f32 * scale + offset)
                .collect()
        }
        "quant" => {
            let (lo, step) = (num(&enc["lo"]) as f32, num(&enc["step"]) as f32);
            b64(enc["q"].as_str().expect("q"))
                .iter()
                .map(|&q| q as f32 * step + lo)
                .collect()
        }
        k => panic!("unknown row kind {k}"),
    };
    if let Some(ov) = enc.get("overrides") {
        for (id, v) in b64_u32(ov["ids"].as_str().unwrap())
            .into_iter()
            .zip(b64_f32(ov["f32"].as_str().unwrap()))
        {
            row[id as usize] = v;
        }
    }
    row
}

pub fn params(p: &Value) -> SamplingParams {
    let f = |k: &str| num(&p[k]) as f32;
    let i = |k: &str| p[k].as_i64().unwrap_or_else(|| panic!("{k}")) as i32;
    let logit_bias = p["logit_bias"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let bias = match &e[1] {
                Value::String(s) if s == "-inf" => f32::NEG_INFINITY,
                v => num(v) as f32,
            };
            (e[0].as_u64().unwrap() as u32, bias)
        })
        .collect();
    SamplingParams {
        temperature: f("temperature"),
        top_k: p["top_k"]
            .as_i64()
            .unwrap()
            .clamp(i32::MIN as i64, i32::MAX as i64) as i32,
        top_p: f("top_p"),
        min_p: f("min_p"),
        typical_p: f("typical_p"),
        repeat_penalty: f("repeat_penalty"),
        presence_penalty: f("presence_penalty"),
        frequency_penalty: f("frequency_penalty"),
        repeat_last_n: i("repeat_last_n"),
        logit_bias,
        mirostat_mode: p.get("mirostat_mode").and_then(Value::as_u64).unwrap_or(0) as u8,
        mirostat_tau: p.get("mirostat_tau").map_or(5.0, |v| num(v) as f32),
        mirostat_eta: p.get("mirostat_eta").map_or(0.1, |v| num(v) as f32),
        ..SamplingParams::default()
    }
}

/// A golden document's rows by name, rebuilt.
pub fn doc_rows(doc: &Value) -> std::collections::HashMap<String, Vec<f32>> {
    doc["rows"]
        .as_object()
        .expect("rows")
        .iter()
        .map(|(k, v)| (k.clone(), build_row(v)))
        .collect()
}

/// Every sampler-chain golden document (logit rows and cases) in the golden folder, in
/// file-name order.
pub fn documents() -> Vec<Value> {
    let Ok(dir) = std::fs::read_dir(golden_dir()) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            serde_json::from_str::<Value>(&std::fs::read_to_string(f).expect("readable golden"))
                .expect("golden JSON")
        })
        // Whole-generation goldens (`seeded.json`: a model's tokens under a seed, read by
        // tests/test_llama.py) name their model instead of carrying logit rows.
        .filter(|doc| doc.get("model").is_none())
        .collect()
}

/// The real Gemma 3 rows of the goldens (names starting with `gemma3`).
pub fn real_rows() -> Vec<(String, Vec<f32>)> {
    let mut out = Vec::new();
    for doc in documents() {
        if let Some(rows) = doc["rows"].as_object() {
            out.extend(
                rows.iter()
                    .filter(|(k, _)| k.starts_with("gemma3"))
                    .map(|(k, v)| (k.clone(), build_row(v))),
            );
        }
    }
    out
}
