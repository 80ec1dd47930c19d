//! Parity with llama.cpp: every case in `tests/goldens/sampling/` (written by
//! `tools/gen_sampler_goldens.py` from llama-cpp-python's own sampler chain)
//! must keep the same token ids, with the same post-temperature logits, and
//! probabilities within [`P_TOLERANCE`].

mod common;

use common::golden::{b64_f32, b64_u32, doc_rows, golden_dir, params};
use fucina_sample::Sampler;

/// Probability budget per candidate. Ours are computed with llama.cpp's own
/// operation order (f32 `expf` of `logit - max`, an f64 sum, an f64 divide
/// rounded to f32), so they should agree to the last bit; 1e-6 leaves room
/// only for a libm whose `expf` rounds a last bit differently, which moves a
/// probability by about one f32 ulp of 1.0 (6e-8) per term summed.
const P_TOLERANCE: f32 = 1e-6;

#[test]
fn candidates_match_llama_cpp() {
    let docs = common::golden::documents();
    assert!(!docs.is_empty(), "no goldens in {}", golden_dir().display());
    let (mut n_cases, mut n_real, mut n_nan, mut failures) = (0, 0, 0, Vec::new());
    let mut worst_p = 0.0f32;
    for doc in &docs {
        let rows = doc_rows(doc);
        for case in doc["cases"].as_array().into_iter().flatten() {
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
                b64_u32(exp["ids"].as_str().unwrap()),
                b64_f32(exp["logits"].as_str().unwrap()),
                b64_f32(exp["p"].as_str().unwrap()),
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

/// Mirostat v1 and v2 (`tools/gen_sampler_goldens.py --mirostat`): three applies per case,
/// each from the `mu` llama.cpp's sampler left after its own draw (ours updated with
/// [`Sampler::mirostat_accept`] on llama.cpp's drawn token), so the kept sets check the
/// truncation and the update alike.
#[test]
fn mirostat_matches_llama_cpp() {
    let (mut n_cases, mut n_applies, mut worst_p, mut failures) = (0, 0, 0.0f32, Vec::new());
    for doc in common::golden::documents() {
        let Some(cases) = doc["mirostat_cases"].as_array() else {
            continue;
        };
        let rows = doc_rows(&doc);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let row = &rows[case["row"].as_str().unwrap()];
            let mut sampler = Sampler::new(params(&case["params"]), row.len()).unwrap();
            n_cases += 1;
            for (k, step) in case["steps"].as_array().unwrap().iter().enumerate() {
                let mut logits = row.clone();
                let got = sampler
                    .candidates(&mut logits, &[], &mut [])
                    .unwrap()
                    .to_vec();
                let ids = b64_u32(step["ids"].as_str().unwrap());
                let lg = b64_f32(step["logits"].as_str().unwrap());
                let p = b64_f32(step["p"].as_str().unwrap());
                n_applies += 1;
                if got.len() == ids.len() {
                    for (c, &p) in got.iter().zip(&p) {
                        worst_p = worst_p.max((c.p - p).abs());
                    }
                }
                let same = got.len() == ids.len()
                    && got
                        .iter()
                        .zip(&ids)
                        .zip(&lg)
                        .zip(&p)
                        .all(|(((c, &i), &l), &p)| {
                            c.id == i
                                && c.logit.to_bits() == l.to_bits()
                                && (c.p - p).abs() <= P_TOLERANCE
                        });
                if !same {
                    failures.push(format!(
                        "{name} step {k}: {} kept by llama.cpp, {} by us; first {:?} vs {:?}",
                        ids.len(),
                        got.len(),
                        &ids[..ids.len().min(6)],
                        got.iter().map(|c| c.id).take(6).collect::<Vec<_>>()
                    ));
                    break;
                }
                let drawn = step["selected"].as_u64().unwrap() as u32;
                assert!(
                    sampler.mirostat_accept(drawn),
                    "{name}: llama.cpp drew {drawn}, outside the kept set"
                );
            }
        }
    }
    println!("{n_cases} Mirostat cases, {n_applies} applies, worst |Δp| = {worst_p:e}");
    assert!(n_cases >= 50, "only {n_cases} Mirostat cases");
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
