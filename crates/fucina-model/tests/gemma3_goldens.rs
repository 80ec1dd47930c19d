//! Gemma 3 270M Q4_K_M against llama.cpp's logits goldens
//! (`tests/goldens/model/gemma3-270m/logits.json`, made by
//! `tools/gen_logits_goldens.py` with llama-cpp-python): per-position argmax
//! agreement, max |Δlogit| over llama.cpp's top-64 relative to its logit range,
//! and 64-token greedy continuations.

use std::sync::Arc;

use fucina_engine::{argmax, Session};
use fucina_model::{KvDtype, Model, ModelOptions};
use serde_json::Value;

// Issue 5 asks for >= 99% argmax agreement, >= 18/20 identical greedy-64
// continuations and divergences only where llama.cpp's top-2 margin < 0.1. On this
// model that needs llama.cpp's exact kernel arithmetic: an f64 forward with the
// same dequantized weights is ~1.0 logit (3% of the range) away from BOTH engines,
// because activations are re-quantized to Q8 before every matmul and one flipped
// rounding cascades through 18 layers. fucina follows the float ops llama.cpp
// executes on x86-64 (x86 Q8_0 activation rounding, ggml's lane/FMA order in the
// Q4_0/Q5_0/Q8_0/Q4_K/Q6_K dots, ggml_v_expf softmax, tinyBLAS f16 attention dots,
// FMA-contracted RoPE and GELU), including llama.cpp's batch-dependent orders
// (default numerics, see `fucina_model::matmul`): for Q4_K ggml's repacked GEMM order,
// one FMA per sub-block pair, for the first m - m%4 rows of a mul_mat, its GEMV order
// for the rest; for Q6_K (here the ffn_down of 9 layers) ggml-cpu's tiled K-quant
// order (ggml-cpu/tiled/, every row of a mul_mat of >= 8 rows: per super-block
// `r = f32(isum)·d_w`, `out = fma(r, d_a, out)`, the FMA being GCC's contraction of the
// kernel's mul + add); llama.cpp's single-token f16 attention order
// (ggml_vec_dot_f16) for one-row batches, tinyBLAS's for prompt batches.
// Measured (scalar, AVX2, AVX-512 alike): every logit of llama.cpp's top-64 is
// bit-identical at all 192 positions, so 192/192 argmax, and 20/20 identical greedy-64
// continuations. (Before the tiled epilogue was an FMA: 190/192 argmax, 130/192
// bit-identical, 17/20 greedy; the ulp-level ffn_down differences were absorbed by the
// Q8 activation rounding until one flipped, e.g. prompt 2 layer 8 ffn_gate row 1.)
// The bounds below demand exact parity.

/// Fraction of positions whose argmax must equal llama.cpp's.
const MIN_ARGMAX_AGREEMENT: f64 = 1.0;
/// Bound on max |Δlogit| / (logit range) over llama.cpp's top-64 ids.
/// (Not 0: the JSON floats may parse an f64 ulp off the f32 logits; exactness is
/// checked on the f32 bits, [`MIN_BIT_IDENTICAL`].)
const MAX_REL_LOGIT_DIFF: f64 = 1e-9;
/// Positions (of 192) whose top-64 logits must equal llama.cpp's bit for bit.
const MIN_BIT_IDENTICAL: usize = 192;
/// Greedy continuations that must be identical (of 20).
const MIN_IDENTICAL_GREEDY: usize = 20;
/// llama.cpp top-2 margin below which a greedy divergence counts as a near-tie.
const TIE_MARGIN: f64 = 0.15;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| u32::try_from(x.as_u64().expect("id")).expect("u32"))
        .collect()
}

#[test]
fn logits_and_greedy_match_llama_cpp() {
    let path = fucina_testdata::llamacpp_golden(
        &fucina_testdata::repo_root().join("tests/goldens/model/gemma3-270m"),
        "logits",
        fucina_quant::GgmlBuild::host() == fucina_quant::GgmlBuild::Avx2,
    );
    let text = std::fs::read_to_string(&path).expect("goldens");
    let golden: Value = serde_json::from_str(&text).expect("json");
    let model = Arc::new(
        Model::load(
            fucina_testdata::gemma3_270m(),
            ModelOptions::with_threads(2),
        )
        .expect("load"),
    );
    // Parity of the kernels the model settles on (the interleaved Q4_K ones where
    // the ISA has them; tests/gemma3_real.rs shows the switch changes no bit).
    model.wait_repacked();
    let vocab = model.config().n_vocab;
    let prompts = golden["prompts"].as_array().expect("prompts");
    assert_eq!(prompts.len(), 20);

    let (mut positions, mut agree, mut worst) = (0usize, 0usize, 0f64);
    let mut exact = 0usize;
    let mut identical = 0usize;
    let mut bad_divergences = Vec::new();
    for (pi, p) in prompts.iter().enumerate() {
        let toks = ids(&p["tokens"]);
        let mut s = Session::new(Arc::clone(&model), 256, KvDtype::F16).expect("session");
        let logits = s.eval(&toks, true).expect("eval").to_vec();
        for (i, pos) in p["positions"]
            .as_array()
            .expect("positions")
            .iter()
            .enumerate()
        {
            let ours = &logits[i * vocab..(i + 1) * vocab];
            let range = pos["max"].as_f64().expect("max") - pos["min"].as_f64().expect("min");
            let top = ids(&pos["top_ids"]);
            let top_l = pos["top_logits"].as_array().expect("top_logits");
            let mut pos_worst = 0f64;
            let mut pos_exact = true;
            for (&id, l) in top.iter().zip(top_l) {
                let l = l.as_f64().expect("logit");
                let d = (f64::from(ours[id as usize]) - l).abs();
                pos_worst = pos_worst.max(d / range);
                // The goldens are f32 values; compare as f32 (JSON parsing may be an f64
                // ulp off).
                pos_exact &= ours[id as usize].to_bits() == (l as f32).to_bits();
            }
            worst = worst.max(pos_worst);
            exact += usize::from(pos_exact);
            if std::env::var_os("FUCINA_GOLDENS_VERBOSE").is_some() {
                eprintln!(
                    "prompt {pi} ({} tokens) position {i}: max |dlogit|/range {pos_worst:.2e}",
                    toks.len()
                );
            }
            positions += 1;
            if u64::from(argmax(ours)) == pos["argmax"].as_u64().expect("argmax") {
                agree += 1;
            } else {
                let margin = pos["margin"].as_f64().expect("margin");
                eprintln!(
                    "prompt {pi} position {i}: argmax differs (llama.cpp top-2 margin {margin:.4})"
                );
            }
        }

        let want = ids(&p["greedy"]);
        let margins: Vec<f64> = p["greedy_margins"]
            .as_array()
            .expect("margins")
            .iter()
            .map(|m| m.as_f64().expect("margin"))
            .collect();
        s.reset();
        let got = s
            .generate_greedy(&toks, want.len(), |_| false)
            .expect("generate");
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None => identical += 1,
            Some(k) => {
                eprintln!(
                    "prompt {pi}: greedy diverges at step {k} (llama.cpp margin {:.4})",
                    margins[k]
                );
                if margins[k] >= TIE_MARGIN {
                    bad_divergences.push((pi, k, margins[k]));
                }
            }
        }
    }
    let rate = agree as f64 / positions as f64;
    eprintln!(
        "gemma3-270m vs llama.cpp: argmax agreement {agree}/{positions} ({:.2}%), max |dlogit|/range {worst:.4}, bit-identical top-64 at {exact}/{positions} positions, identical greedy-64 {identical}/20",
        rate * 100.0
    );
    assert!(
        bad_divergences.is_empty(),
        "divergences where llama.cpp's top-2 margin >= {TIE_MARGIN}: {bad_divergences:?}"
    );
    assert!(rate >= MIN_ARGMAX_AGREEMENT, "argmax agreement {rate}");
    assert!(worst <= MAX_REL_LOGIT_DIFF, "max |dlogit|/range {worst}");
    assert!(
        exact >= MIN_BIT_IDENTICAL,
        "{exact} positions bit-identical over the top-64"
    );
    assert!(
        identical >= MIN_IDENTICAL_GREEDY,
        "{identical} identical greedy continuations"
    );
}
