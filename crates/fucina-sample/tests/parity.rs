//! Parity with llama.cpp: every case in `tests/goldens/sampling/` (written by
//! `tools/gen_sampler_goldens.py` from llama-cpp-python's own sampler chain)
//! must keep the same token ids, with the same post-temperature logits, and
//! probabilities within [`P_TOLERANCE`].

use std::path::{Path, PathBuf};

use fucina_sample::{Sampler, SamplingParams};
use serde_json::Value;

/// Probability budget per candidate. Ours are computed with llama.cpp's own
/// operation order (f32 `expf` of `logit - max`, an f64 sum, an f64 divide
/// rounded to f32), so they should agree to the last bit; 1e-6 leaves room
/// only for a libm whose `expf` rounds a last bit differently, which moves a
/// probability by about one f32 ulp of 1.0 (6e-8) per term summed.
const P_TOLERANCE: f32 = 1e-6;

fn golden_dir() -> PathBuf {
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

fn f32s(s: &str) -> Vec<f32> {
    b64(s)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn u32s(s: &str) -> Vec<u32> {
    b64(s)
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Rebuild a row exactly as the generator did (same f32 operations).
fn build_row(enc: &Value) -> Vec<f32> {
    let mut row: Vec<f32> = match enc["kind"].as_str().expect("row kind") {
        "dense" => f32s(enc["f32"].as_str().expect("f32")),
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
        for (id, v) in u32s(ov["ids"].as_str().unwrap())
            .into_iter()
            .zip(f32s(ov["f32"].as_str().unwrap()))
        {
            row[id as usize] = v;
        }
    }
    row
}

fn params(p: &Value) -> SamplingParams {
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
        ..SamplingParams::default()
    }
}

#[test]
fn candidates_match_llama_cpp() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("golden dir")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no goldens in {}",
        golden_dir().display()
    );
    let (mut n_cases, mut n_real, mut n_nan, mut failures) = (0, 0, 0, Vec::new());
    let mut worst_p = 0.0f32;
    for file in &files {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let rows: std::collections::HashMap<String, Vec<f32>> = doc["rows"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), build_row(v)))
            .collect();
        for case in doc["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let row = &rows[case["row"].as_str().unwrap()];
            n_cases += 1;
            n_real += usize::from(name.starts_with("gemma3"));
            let history: Vec<u32> = case["history"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let mut sampler = Sampler::new(params(&case["params"]), row.len()).unwrap();
            sampler.set_penalty_start(case["penalty_start"].as_u64().unwrap() as usize);
            let mut logits = row.clone();
            let got = sampler
                .candidates(&mut logits, &history, &mut [])
                .unwrap()
                .to_vec();
            let exp = &case["expect"];
            let (ids, lg, p) = (
                u32s(exp["ids"].as_str().unwrap()),
                f32s(exp["logits"].as_str().unwrap()),
                f32s(exp["p"].as_str().unwrap()),
            );
            let mut want: Vec<(u32, f32, f32)> = ids
                .iter()
                .zip(&lg)
                .zip(&p)
                .map(|((&i, &l), &p)| (i, l, p))
                .collect();
            let mut have: Vec<(u32, f32, f32)> = got.iter().map(|c| (c.id, c.logit, c.p)).collect();
            if !exp["sorted"].as_bool().unwrap() {
                want.sort_by_key(|x| x.0);
                have.sort_by_key(|x| x.0);
            }
            let same_ids =
                want.len() == have.len() && want.iter().zip(&have).all(|(w, h)| w.0 == h.0);
            if !same_ids {
                failures.push(format!(
                    "{name}: {} kept by llama.cpp, {} by us; first {:?} vs {:?}",
                    want.len(),
                    have.len(),
                    &want.iter().map(|x| x.0).take(8).collect::<Vec<_>>(),
                    &have.iter().map(|x| x.0).take(8).collect::<Vec<_>>()
                ));
                continue;
            }
            if want.iter().any(|w| w.2.is_nan()) {
                // llama.cpp's own probabilities are NaN here (logits past the range
                // of its bucket sort); ours must be a distribution.
                let total: f32 = have.iter().map(|h| h.2).sum();
                if have.iter().any(|h| !h.2.is_finite()) || (total - 1.0).abs() > 1e-4 {
                    failures.push(format!("{name}: llama.cpp NaN case, ours sums to {total}"));
                }
                n_nan += 1;
                continue;
            }
            for (w, h) in want.iter().zip(&have) {
                if w.1.to_bits() != h.1.to_bits() {
                    failures.push(format!(
                        "{name}: token {} logit {} vs llama.cpp {}",
                        w.0, h.1, w.1
                    ));
                    break;
                }
                let d = (w.2 - h.2).abs();
                worst_p = worst_p.max(d);
                if d > P_TOLERANCE || d.is_nan() {
                    failures.push(format!(
                        "{name}: token {} p {} vs llama.cpp {}",
                        w.0, h.2, w.2
                    ));
                    break;
                }
            }
        }
    }
    println!(
        "{n_cases} cases ({n_real} on real Gemma 3 rows, {n_nan} where llama.cpp's p is NaN), worst |Δp| = {worst_p:e}"
    );
    assert!(n_cases >= 200, "only {n_cases} golden cases");
    assert!(
        failures.is_empty(),
        "{} of {n_cases} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
