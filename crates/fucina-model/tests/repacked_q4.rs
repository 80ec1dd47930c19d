//! Q4_0, IQ4_NL and IQ4_XS models against llama.cpp, which repacks the first two (rows % 8 ==
//! 0) on every x86-64 CPU with AVX2 and multiplies them in its whole-block order
//! (`fucina_quant::whole_block`). The tiny qwen3 and qwen3moe models requantized by
//! llama.cpp's own quantizer (every matrix of the type: embedding, attention, FFN or
//! expert stacks, output), and llama.cpp's logits for them with every f32 exact
//! (`tools/gen_tiny_repacked_goldens.py`, an AVX-512 build): every logit of every
//! prompt position is llama.cpp's bit for bit, whichever kernels run (measured with
//! `FUCINA_ISA` = avx512, avx2 and scalar), and the greedy continuations (one token per
//! forward) are its tokens. Likewise IQ4_XS (a random-weight qwen3 256 wide, for its
//! 256-weight super-blocks), whose prompt batches of 8 rows or more llama.cpp
//! multiplies in its tiled order (`TileDot::new_tiled`). Its own binary: it follows the
//! goldens' build (`FUCINA_GGML_BUILD=avx512`: the build's orders are arithmetic, run
//! on any CPU), which no other test may see.

mod common;

use std::sync::Arc;

use fucina_engine::Session;
use fucina_model::{KvDtype, Model, ModelOptions};
use serde_json::Value;

#[test]
fn q4_0_iq4_nl_and_iq4_xs_logits_are_llama_cpps_bitwise() {
    std::env::set_var(fucina_quant::GGML_BUILD_ENV, "avx512");
    let mut report = Vec::new();
    // (golden, model family, variants)
    let cases: [(&str, &str, &[&str]); 3] = [
        ("qwen3-repacked-llamacpp.json", "qwen3", &["q4_0", "iq4_nl"]),
        (
            "qwen3moe-repacked-llamacpp.json",
            "qwen3moe",
            &["q4_0", "iq4_nl"],
        ),
        ("qwen3w256-iq4_xs-llamacpp.json", "qwen3w256", &["iq4_xs"]),
    ];
    for (golden, family, variants) in cases {
        let golden = common::json(golden);
        for &variant in variants {
            let path = common::dir().join(format!("{family}-{variant}.gguf"));
            let model = Arc::new(Model::load(&path, ModelOptions::with_threads(2)).expect("load"));
            let vocab = model.config().n_vocab;
            let (mut differ, mut total, mut rel) = (0usize, 0usize, 0f64);
            let prompts: &Vec<Value> = golden["variants"][variant]["prompts"]
                .as_array()
                .expect("prompts");
            for p in prompts {
                let toks = common::ids(&p["tokens"]);
                let mut s = Session::new(Arc::clone(&model), 64, KvDtype::F16).expect("session");
                let ours = s.eval(&toks, true).expect("eval").to_vec();
                for (i, row) in p["logits"].as_array().expect("logits").iter().enumerate() {
                    let want = common::floats(row);
                    let got = &ours[i * vocab..(i + 1) * vocab];
                    differ += want
                        .iter()
                        .zip(got)
                        .filter(|(w, g)| w.to_bits() != g.to_bits())
                        .count();
                    total += vocab;
                    rel = rel.max(common::rel(&want, got));
                }
                s.reset();
                let want = common::ids(&p["greedy"]);
                let got = s
                    .generate_greedy(&toks, want.len(), |_| false)
                    .expect("generate");
                assert_eq!(got, want, "{family}-{variant}: greedy continuation");
            }
            eprintln!("{family}-{variant}: {differ} of {total} logits differ, worst {rel:.2e}");
            report.push((format!("{family}-{variant}"), differ, rel));
        }
    }
    for (name, differ, rel) in report {
        assert_eq!(
            differ, 0,
            "{name}: logits not llama.cpp's bitwise ({rel:.2e})"
        );
    }
}
