//! Hybrid and newest families (Qwen3.5: Gated DeltaNet + gated attention; Gemma 4:
//! per-layer geometry, shared-KV layers, per-layer embeddings) on tiny random-weight
//! GGUFs written by `tools/gen_tiny_hybrid.py` (llama.cpp's tensor names and
//! conversion rules): logits at every position of a 64- and a 100-token prompt
//! against transformers' float32 forward and llama.cpp's, greedy continuations,
//! decode against prefill, bitwise batching in pinned mode, and load errors that
//! name the offending key or tensor.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use fucina_engine::Session;
use fucina_model::{BatchRow, KvDtype, Model, ModelError, ModelOptions, Scratch};
use serde_json::Value;

const HYBRID: [&str; 5] = ["qwen35", "gemma4", "qwen35moe", "qwen3next", "gemma4-moe"];
/// Families whose logits move continuously with rounding: a mixture of experts
/// does not (f16 or Q8_0 rounding flips near-tied routing choices; llama.cpp's own
/// f16 logits on the tiny qwen35moe are 2.2e-1 from transformers'), so the MoE
/// hybrids are checked against transformers with f32 weights and cache, and
/// against llama.cpp on every variant.
const CONTINUOUS: [&str; 2] = ["qwen35", "gemma4"];

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

fn load(family: &str, variant: &str) -> Arc<Model> {
    load_with(family, variant, ModelOptions::with_threads(2))
}

/// For the comparisons with transformers: Gemma 4's GELU in f32, as
/// `gelu_pytorch_tanh` computes it (the default is llama.cpp's f16 table).
fn load_transformers(family: &str, variant: &str) -> Arc<Model> {
    let options = ModelOptions {
        f32_gelu: true,
        ..ModelOptions::with_threads(2)
    };
    load_with(family, variant, options)
}

fn load_with(family: &str, variant: &str, options: ModelOptions) -> Arc<Model> {
    Arc::new(Model::load(dir().join(format!("{family}-{variant}.gguf")), options).expect("load"))
}

/// max over positions of max |Δlogit| / max |reference logit|.
fn worst_rel(want_rows: &[Value], ours: &[f32], vocab: usize) -> f64 {
    let mut worst = 0f64;
    for (i, row) in want_rows.iter().enumerate() {
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
    worst
}

/// Issue 17: f32 weights and cache match transformers' f32 logits within 1e-4
/// relative over 64-token prompts (and a 100-token one: two delta-rule chunks).
const F32_REL: f64 = 1e-4;
/// f16 weights (activations rounded to f16 by the f16 dot, as llama.cpp does) with
/// the default f16 cache: the recurrence and the tiny models carry the rounding
/// along; llama.cpp's own f16 logits on these files are 8.1e-3 (qwen35) and 1.5e-2
/// (gemma4) from transformers'.
const F16_REL: f64 = 2e-2;

fn check(family: &str, variant: &str, kv: KvDtype, bound: f64) {
    check_file(family, variant, kv, bound);
}

fn check_file(family: &str, variant: &str, kv: KvDtype, bound: f64) {
    let model = load_transformers(family, variant);
    let g = golden(family);
    let vocab = model.config().n_vocab;
    let (mut worst, mut greedy_ok) = (0f64, true);
    for p in g["prompts"].as_array().expect("prompts") {
        let toks = ids(&p["tokens"]);
        let mut s = Session::new(Arc::clone(&model), 128, kv).expect("session");
        let ours = s.eval(&toks, true).expect("eval").to_vec();
        worst = worst.max(worst_rel(
            p["logits"].as_array().expect("logits"),
            &ours,
            vocab,
        ));
        s.reset();
        greedy_ok &= greedy_until_tie(&mut s, &toks, &ids(&p["greedy"]), vocab, bound);
    }
    eprintln!(
        "{family}-{variant} kv={kv:?}: max |dlogit|/max|logit| {worst:.2e}, \
         greedy identical up to the first near-tie: {greedy_ok}"
    );
    assert!(worst <= bound, "{family}-{variant}: {worst} > {bound}");
    assert!(greedy_ok, "{family}-{variant}: greedy continuation differs");
}

/// Greedy decoding after `prompt` follows `want` up to its end or up to the first
/// near-tie: a step where our choice differs from `want`'s but `want`'s token is
/// within `tie · max|logit|` of ours (a difference in the last bits of the logits,
/// which rounding of the reference or of ours may flip).
fn greedy_until_tie(s: &mut Session, prompt: &[u32], want: &[u32], vocab: usize, tie: f64) -> bool {
    let mut logits = s.eval(prompt, false).expect("eval").to_vec();
    for &w in want {
        let top = fucina_engine::argmax(&logits[..vocab]);
        if top != w {
            let scale = logits[..vocab].iter().fold(0f32, |m, v| m.max(v.abs()));
            let gap = f64::from(logits[top as usize] - logits[w as usize]);
            eprintln!(
                "greedy: {top} where the reference has {w}, gap {:.2e} of max|logit|",
                gap / f64::from(scale)
            );
            return gap <= tie * f64::from(scale);
        }
        logits = s.eval(&[w], false).expect("eval").to_vec();
    }
    true
}

#[test]
fn f32_weights_match_transformers() {
    for f in HYBRID {
        check(f, "f32", KvDtype::F32, F32_REL);
    }
    // Qwen3-Next's older fused `ssm_in` layout, against the same goldens.
    check_file("qwen3next", "legacy-f32", KvDtype::F32, F32_REL);
}

/// Q8_0 weights are checked against llama.cpp only
/// ([`tiny_hybrids_match_llama_cpp`]): with Q8_0 activations llama.cpp's own logits
/// are 2.0e-1 from transformers' and its greedy continuations differ.
#[test]
fn f16_weights() {
    for f in CONTINUOUS {
        check(f, "f16", KvDtype::F16, F16_REL);
    }
}

/// One variant against llama.cpp on the same file (`<family>-llamacpp.json`,
/// `tools/gen_tiny_llamacpp_goldens.py`; f32 cache for f32 weights, f16 otherwise):
/// worst relative error, fraction of positions whose argmax agrees, whether the
/// greedy continuations are identical, and the ISA whose kernels made the goldens
/// (goldens written before the generator recorded it came from an AVX-512 host).
/// A position whose argmax differs counts as agreeing when llama.cpp's own top-2
/// margin there is within twice `tie_rel` of its largest logit: a near-tie that an
/// error inside the variant's relative bound can swap (the f16 DeltaNet recurrence
/// carries each engine's last-bit roundings along, 1.6e-3 on qwen3next, which
/// swaps ties of 2.4e-4).
fn against_llama_cpp(family: &str, variant: &str, tie_rel: f64) -> (f64, f64, bool, String) {
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
    let model = load(family, variant);
    let vocab = model.config().n_vocab;
    let (mut rel, mut agree, mut total, mut greedy_ok) = (0f64, 0usize, 0usize, true);
    for p in v["prompts"].as_array().expect("prompts") {
        let toks = ids(&p["tokens"]);
        let mut s = Session::new(Arc::clone(&model), 128, kv).expect("session");
        let ours = s.eval(&toks, true).expect("eval").to_vec();
        let rows = p["logits"].as_array().expect("logits");
        rel = rel.max(worst_rel(rows, &ours, vocab));
        for (i, row) in rows.iter().enumerate() {
            let want: Vec<f32> = row
                .as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_f64().expect("f") as f32)
                .collect();
            total += 1;
            let (a, b) = (
                fucina_engine::argmax(&want),
                fucina_engine::argmax(&ours[i * vocab..(i + 1) * vocab]),
            );
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            let second = want
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != a as usize)
                .fold(f32::NEG_INFINITY, |m, (_, &v)| m.max(v));
            let tie = f64::from(want[a as usize] - second) <= 2.0 * tie_rel * f64::from(scale);
            if a != b && tie {
                eprintln!("{family}-{variant}: near-tie at position {i} goes the other way");
            }
            agree += usize::from(a == b || tie);
        }
        s.reset();
        let want = ids(&p["greedy"]);
        let got = s
            .generate_greedy(&toks, want.len(), |_| false)
            .expect("generate");
        greedy_ok &= got == want;
    }
    let frac = agree as f64 / total as f64;
    eprintln!(
        "{family}-{variant} vs llama.cpp: {rel:.2e} relative, argmax agrees at {:.1}%, \
         greedy identical: {greedy_ok}",
        100.0 * frac
    );
    let isa = g["isa"].as_str().unwrap_or("avx512").to_owned();
    (rel, frac, greedy_ok, isa)
}

/// Bounds against llama.cpp: (family, variant, relative error, argmax agreement).
/// Qwen3.5 f32: both engines are within a few 1e-6 of transformers; f16 and Q8_0
/// weights: each engine rounds activations and the recurrence in its own last bits,
/// which the recurrent state carries along. Gemma 4 looks GELU up in ggml's f16
/// table as llama.cpp does: with Q8_0 weights (the same dot products in both
/// engines) its logits are llama.cpp's to the goldens' printed precision (4.7e-8; the
/// final soft cap multiplies by the rounded 1/c as ggml_scale does, where a division
/// left 2.8e-7); with f32 weights the two
/// engines' f32 dot products differ in their last bits, which the table turns into
/// an occasional whole f16 step (5.7e-4). The MoE hybrids: f32 as Qwen3.5; with f16
/// weights one near-tied routing choice of the tiny qwen35moe goes the other way in
/// each engine (1.8e-1 at that position, argmax and greedy unchanged); its Q8_0
/// logits match llama.cpp's to 2e-8. Gemma 4's MoE variant: 4.8e-6 at f32, its
/// routing far from ties.
const LLAMA_CPP: [(&str, &str, f64, f64); 15] = [
    ("qwen35", "f32", 1e-5, 0.99),
    ("qwen35", "f16", 2e-2, 0.99),
    ("qwen35", "q8_0", 1e-1, 0.99),
    ("gemma4", "f32", 2e-3, 0.99),
    ("gemma4", "f16", 1e-4, 0.99),
    ("gemma4", "q8_0", 1e-7, 0.99),
    ("qwen35moe", "f32", 1e-5, 0.99),
    ("qwen35moe", "f16", 3e-1, 0.99),
    ("qwen35moe", "q8_0", 1e-1, 0.99),
    ("qwen3next", "f32", 1e-5, 0.99),
    ("qwen3next", "f16", 2e-2, 0.99),
    ("qwen3next", "q8_0", 1e-1, 0.99),
    ("gemma4-moe", "f32", 5e-5, 0.99),
    ("gemma4-moe", "f16", 1e-4, 0.99),
    ("gemma4-moe", "q8_0", 1e-7, 0.99),
];

/// The bound of an f16-weight variant whose llama.cpp goldens were made by another
/// ISA's kernels than the ones running here: fucina's f16 weight dots follow the host
/// ISA's ggml order (bitwise llama.cpp built for the same host), so against goldens
/// from another ISA they differ in the last bits, which Gemma 4's f16 GELU table
/// turns into whole f16 steps (6.1e-3 for the AVX-512 goldens on an AVX2 host).
const CROSS_ISA_F16: f64 = 2e-2;

#[test]
fn tiny_hybrids_match_llama_cpp() {
    let mut failures = Vec::new();
    let host = fucina_quant::Kernels::from_env()
        .map_or_else(|_| fucina_quant::Isa::best(), |k| k.isa())
        .name();
    for (family, variant, bound, min_agree) in LLAMA_CPP {
        let bound = |isa: &str| match variant == "f16" && isa != host {
            true => bound.max(CROSS_ISA_F16),
            false => bound,
        };
        let (rel, agree, greedy, isa) = against_llama_cpp(family, variant, bound(host));
        let bound = bound(&isa);
        if rel > bound || agree < min_agree {
            failures.push(format!(
                "{family}-{variant}: {rel:.2e} > {bound:.0e} or argmax agreement {agree:.3}"
            ));
        }
        if !greedy {
            failures.push(format!("{family}-{variant}: greedy differs"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Decode (one row per forward: DeltaNet's recurrent form) against the prefill of
/// the same prompt (chunked form, batched attention): equal within f32 rounding.
/// Gemma 4 runs with the f32 GELU here: the default f16 table turns last-bit
/// differences between the two forms into whole f16 steps (4.3e-4 on this model),
/// which says nothing about the forms.
const FORMS_REL: f64 = 1e-5;

#[test]
fn recurrent_decode_tracks_chunked_prefill() {
    for f in HYBRID {
        let model = load_transformers(f, "f32");
        let vocab = model.config().n_vocab;
        let g = golden(f);
        let toks = ids(&g["prompts"][1]["tokens"]);
        let mut s = Session::new(Arc::clone(&model), 128, KvDtype::F32).expect("session");
        let batch = s.eval(&toks, true).expect("eval").to_vec();
        s.reset();
        let mut worst = 0f64;
        for (i, &t) in toks.iter().enumerate() {
            let row = s.eval(&[t], true).expect("decode");
            let want = &batch[i * vocab..(i + 1) * vocab];
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = want
                .iter()
                .zip(row)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            worst = worst.max(f64::from(d / scale));
        }
        eprintln!("{f}: decode vs prefill {worst:.2e}");
        assert!(worst < FORMS_REL, "{f}: {worst}");
    }
}

/// Several sequences of different lengths in one pinned batch: each row's logits
/// equal its single-row forward bitwise (DeltaNet rows run the recurrent form).
#[test]
fn pinned_multi_sequence_batch_equals_single_rows() {
    for f in HYBRID {
        let model = load(f, "q8_0");
        let vocab = model.config().n_vocab;
        let seqs: [&[u32]; 3] = [&[5, 9, 200, 31, 7, 77, 140], &[1, 2], &[250, 3, 3, 3, 18]];
        let mut single = Vec::new();
        for toks in seqs {
            single.push(common::decode_rows(&model, toks, KvDtype::F16, 16));
        }
        let mut rows: Vec<BatchRow> = seqs
            .iter()
            .enumerate()
            .flat_map(|(i, t)| BatchRow::sequence(i, 0, t, true))
            .collect();
        rows.sort_by_key(|r| (r.pos, r.seq));
        let mut caches: Vec<_> = (0..3)
            .map(|_| model.new_cache(16, KvDtype::F16).expect("cache"))
            .collect();
        let mut sc = Scratch::default();
        sc.set_pinned(true);
        let out = model.forward(&rows, &mut caches, &mut sc).expect("forward");
        for (i, r) in rows.iter().enumerate() {
            let got = &out[i * vocab..(i + 1) * vocab];
            let want = &single[r.seq][r.pos * vocab..(r.pos + 1) * vocab];
            assert!(
                got.iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{f} row {i}"
            );
        }
    }
}

/// The family's q8_0 file with `edit` applied to its metadata and tensor `drop`
/// (if any) left out, loaded.
fn rewritten(
    family: &str,
    drop: Option<&str>,
    edit: impl FnOnce(&mut fucina_gguf::Metadata),
) -> Result<Model, ModelError> {
    use fucina_gguf::{GgufFile, GgufWriter, OpenOptions};
    let file = GgufFile::open(dir().join(format!("{family}-q8_0.gguf"))).expect("open");
    let mut w = GgufWriter::new();
    *w.metadata_mut() = file.metadata().clone();
    edit(w.metadata_mut());
    let mut names: Vec<&String> = file.tensors().keys().collect();
    names.sort();
    for name in names {
        if Some(name.as_str()) == drop {
            continue;
        }
        let info = &file.tensors()[name];
        let bytes = file.info_bytes(info).expect("bytes");
        w.add_tensor(name, info.ggml_type, &info.dims, bytes)
            .expect("tensor");
    }
    let f =
        GgufFile::from_bytes(w.to_bytes().expect("bytes"), OpenOptions::default()).expect("reopen");
    Model::from_file(Arc::new(f), ModelOptions::with_threads(1))
}

/// Bad hybrid files fail at load with an error naming the key or tensor.
#[test]
fn bad_hybrid_files_name_the_key_or_tensor() {
    use fucina_gguf::Value as V;
    let msg = |r: Result<Model, ModelError>| match r {
        Ok(_) => panic!("loaded a bad file"),
        Err(e) => e.to_string(),
    };
    assert!(
        rewritten("qwen35", None, |_| {}).is_ok(),
        "the unedited file loads"
    );
    let e = msg(rewritten("qwen35", Some("blk.2.ssm_a"), |_| {}));
    assert!(e.contains("blk.2.ssm_a"), "{e}");
    let e = msg(rewritten("qwen35", Some("blk.0.ssm_conv1d.weight"), |_| {}));
    assert!(e.contains("blk.0.ssm_conv1d.weight"), "{e}");
    let e = msg(rewritten("qwen35", None, |m| {
        m.insert("qwen35.ssm.group_count", V::U32(3));
    }));
    assert!(e.contains("qwen35.ssm.group_count"), "{e}");
    let e = msg(rewritten("qwen35", None, |m| {
        m.insert("qwen35.ssm.inner_size", V::U32(96));
    }));
    assert!(e.contains("qwen35.ssm.inner_size"), "{e}");
    let e = msg(rewritten("qwen35", None, |m| {
        m.insert(
            "qwen35.attention.recurrent_layers",
            V::Array(fucina_gguf::Array::Bool(vec![true, false, true])),
        );
    }));
    assert!(e.contains("qwen35.attention.recurrent_layers"), "{e}");
    // A layer the pattern calls attention, whose file has DeltaNet tensors only.
    let e = msg(rewritten("qwen35", None, |m| {
        m.insert(
            "qwen35.attention.recurrent_layers",
            V::Array(fucina_gguf::Array::Bool(vec![false, false, true, true])),
        );
    }));
    assert!(e.contains("blk.0.attn_q.weight"), "{e}");

    // The MoE hybrids: a missing expert stack, a missing fused β/α projection.
    let e = msg(rewritten(
        "qwen35moe",
        Some("blk.1.ffn_up_exps.weight"),
        |_| {},
    ));
    assert!(e.contains("blk.1.ffn_up_exps.weight"), "{e}");
    let e = msg(rewritten("qwen3next", Some("blk.3.ssm_ba.weight"), |_| {}));
    assert!(e.contains("blk.3.ssm_"), "{e}");
    let e = msg(rewritten("qwen3next", None, |m| {
        m.insert("qwen3next.expert_used_count", V::U32(9));
    }));
    assert!(e.contains("expert"), "{e}");

    // Gemma 4's MoE block: the router's input scale, a fused expert stack.
    let e = msg(rewritten(
        "gemma4-moe",
        Some("blk.2.ffn_gate_inp.scale"),
        |_| {},
    ));
    assert!(e.contains("blk.2.ffn_gate_inp.scale"), "{e}");
    let e = msg(rewritten(
        "gemma4-moe",
        Some("blk.0.ffn_gate_up_exps.weight"),
        |_| {},
    ));
    assert!(e.contains("blk.0.ffn_gate_exps.weight"), "{e}");

    // Gemma 4: a missing per-layer-embedding tensor, inconsistent kv heads, a
    // shared-KV layer without an earlier layer of its kind, a missing RoPE table.
    assert!(
        rewritten("gemma4", None, |_| {}).is_ok(),
        "the unedited file loads"
    );
    let e = msg(rewritten("gemma4", Some("blk.3.inp_gate.weight"), |_| {}));
    assert!(e.contains("blk.3.inp_gate.weight"), "{e}");
    let e = msg(rewritten(
        "gemma4",
        Some("per_layer_token_embd.weight"),
        |_| {},
    ));
    assert!(e.contains("per_layer_token_embd.weight"), "{e}");
    let e = msg(rewritten("gemma4", Some("rope_freqs.weight"), |_| {}));
    assert!(e.contains("rope_freqs.weight"), "{e}");
    let e = msg(rewritten("gemma4", None, |m| {
        m.insert(
            "gemma4.attention.head_count_kv",
            V::Array(fucina_gguf::Array::U32(vec![2, 2, 3, 1, 2, 1])),
        );
    }));
    assert!(e.contains("gemma4.attention.head_count_kv"), "{e}");
    let e = msg(rewritten("gemma4", None, |m| {
        m.insert("gemma4.attention.shared_kv_layers", V::U32(3));
    }));
    assert!(e.contains("gemma4.attention.shared_kv_layers"), "{e}");
    let e = msg(rewritten("gemma4", None, |m| {
        m.remove("gemma4.attention.sliding_window_pattern");
    }));
    assert!(e.contains("gemma4.attention.sliding_window_pattern"), "{e}");
}
