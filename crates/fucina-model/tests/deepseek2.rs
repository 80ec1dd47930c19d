//! The tiny random-weight DeepSeek-V2 (plain query, softmax routing) and V3-style
//! (low-rank query, sigmoid routing with selection bias and expert groups) GGUFs of
//! `tools/gen_tiny_deepseek2.py`: Multi-head Latent Attention with YaRN against
//! transformers' float32 logits (prompt batch and token-by-token decode) and against
//! llama.cpp's on the Q8_0 files; batched rows against single rows; bad files fail
//! at load naming the key or tensor.

mod common;

use std::sync::Arc;

use common::*;
use fucina_engine::Session;
use fucina_gguf::{GgmlType, GgufFile, GgufWriter, OpenOptions, Value};
use fucina_model::{BatchRow, KvDtype, Mixer, Model, ModelError, ModelOptions, Scratch};

const MODELS: [&str; 2] = ["deepseek2", "deepseek2v3"];

/// Issue 16: f32 weights with an f32 cache match transformers' float32 forward
/// within 1e-4 relative (per position, to its largest logit) over the 64-token
/// prompt, as a batch and token by token; greedy continuations are identical.
const TRANSFORMERS_REL: f64 = 1e-4;

#[test]
fn f32_weights_match_transformers_batch_and_decode() {
    for name in MODELS {
        let model = load(&format!("{name}-f32"));
        let g = json(&format!("{name}.json"));
        let vocab = model.config().n_vocab;
        let mut worst = [0f64; 2];
        for p in g["prompts"].as_array().expect("prompts") {
            let toks = ids(&p["tokens"]);
            for (k, batch) in [true, false].into_iter().enumerate() {
                let ours = logits(&model, &toks, KvDtype::F32, batch);
                for (i, row) in p["logits"].as_array().expect("logits").iter().enumerate() {
                    let r = rel(&floats(row), &ours[i * vocab..(i + 1) * vocab]);
                    worst[k] = worst[k].max(r);
                }
            }
            let mut s = Session::new(Arc::clone(&model), 96, KvDtype::F32).expect("session");
            let want = ids(&p["greedy"]);
            let got = s
                .generate_greedy(&toks, want.len(), |_| false)
                .expect("generate");
            assert_eq!(got, want, "{name}: greedy continuation");
        }
        eprintln!(
            "{name}-f32 vs transformers: batch {:.2e}, decode {:.2e}",
            worst[0], worst[1]
        );
        for w in worst {
            assert!(
                w <= TRANSFORMERS_REL,
                "{name}: {w:.3e} > {TRANSFORMERS_REL}"
            );
        }
    }
}

/// Fewest positions whose argmax agrees with llama.cpp's (issue 16: 99%).
const LLAMA_CPP_ARGMAX: f64 = 0.99;

#[test]
fn q8_0_matches_llama_cpp() {
    for name in MODELS {
        let model = load(&format!("{name}-q8_0"));
        let g = llamacpp_json(&format!("{name}-llamacpp"));
        let vocab = model.config().n_vocab;
        let (mut n, mut agree, mut exact, mut worst) = (0usize, 0usize, 0usize, 0f64);
        for p in g["prompts"].as_array().expect("prompts") {
            let toks = ids(&p["tokens"]);
            let ours = logits(&model, &toks, KvDtype::F16, true);
            for (i, row) in p["logits"].as_array().expect("logits").iter().enumerate() {
                let want = floats(row);
                let got = &ours[i * vocab..(i + 1) * vocab];
                n += 1;
                agree += usize::from(argmax(&want) == argmax(got));
                exact += usize::from(
                    want.iter()
                        .zip(got)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                );
                worst = worst.max(rel(&want, got));
            }
            let mut s = Session::new(Arc::clone(&model), 96, KvDtype::F16).expect("session");
            let want = ids(&p["greedy"]);
            let got = s
                .generate_greedy(&toks, want.len(), |_| false)
                .expect("generate");
            assert_eq!(got, want, "{name}: greedy continuation vs llama.cpp");
        }
        eprintln!(
            "{name}-q8_0 vs llama.cpp: argmax {agree}/{n}, bitwise positions {exact}/{n}, \
             worst rel {worst:.2e}"
        );
        assert!(
            agree as f64 >= LLAMA_CPP_ARGMAX * n as f64,
            "{name}: {agree}/{n}"
        );
    }
}

/// Several sequences of different lengths in one batch (pinned numerics): each row's
/// logits equal its single-row forward bitwise, for both models and every cache type.
#[test]
fn multi_sequence_batch_equals_single_rows() {
    for name in MODELS {
        let model = load(&format!("{name}-q8_0"));
        let vocab = model.config().n_vocab;
        let seqs: [&[u32]; 3] = [&[5, 9, 100, 31, 7, 77, 120], &[1, 2], &[50, 3, 3, 3, 18]];
        for kv in [KvDtype::F16, KvDtype::Q8_0, KvDtype::F32] {
            let single: Vec<Vec<f32>> = seqs.iter().map(|t| logits(&model, t, kv, false)).collect();
            let mut rows: Vec<BatchRow> = seqs
                .iter()
                .enumerate()
                .flat_map(|(i, t)| BatchRow::sequence(i, 0, t, true))
                .collect();
            rows.sort_by_key(|r| (r.pos, r.seq));
            let mut caches: Vec<_> = (0..3)
                .map(|_| model.new_cache(16, kv).expect("cache"))
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
                    "{name} {kv:?} row {i}"
                );
            }
        }
    }
}

/// The tiny V2 model's layers are MLA over a one-head latent cache.
#[test]
fn layers_are_mla_over_a_latent_cache() {
    let model = load("deepseek2-q8_0");
    for l in &model.config().layers {
        let Mixer::Mla(g) = l.mixer else {
            panic!("{:?}", l.mixer)
        };
        assert_eq!(
            (
                g.q_lora_rank,
                g.kv_lora_rank,
                g.qk_nope,
                g.qk_rope,
                g.v_head
            ),
            (0, 64, 32, 32, 32)
        );
        assert_eq!((l.n_head_kv, l.head_dim_k, l.head_dim_v), (1, 96, 64));
    }
    let v3 = load("deepseek2v3-q8_0");
    assert!(matches!(v3.config().layers[0].mixer, Mixer::Mla(g) if g.q_lora_rank == 32));
}

/// A tensor to write: type, dims (ggml order), bytes.
type Tensor = (GgmlType, Vec<u64>, Vec<u8>);
/// Maps a tensor (name, type, dims, bytes) to the one to write (`None`: drop it).
type Edit<'a> = &'a dyn Fn(&str, GgmlType, &[u64], &[u8]) -> Option<Tensor>;

/// The tiny V2 q8_0 model rewritten: `meta` edits the metadata, `edit` each tensor.
fn rewritten(meta: &dyn Fn(&mut GgufWriter<'_>), edit: Edit<'_>) -> Result<Model, ModelError> {
    let file = GgufFile::open(dir().join("deepseek2-q8_0.gguf")).expect("open");
    let mut w = GgufWriter::new();
    *w.metadata_mut() = file.metadata().clone();
    meta(&mut w);
    for (name, info) in file.tensors() {
        let bytes = file.info_bytes(info).expect("bytes");
        if let Some((ty, dims, data)) = edit(name, info.ggml_type, &info.dims, bytes) {
            w.add_tensor(name, ty, &dims, data).expect("add");
        }
    }
    let bytes = w.to_bytes().expect("bytes");
    let file = GgufFile::from_bytes(bytes, OpenOptions::default()).expect("reopen");
    Model::from_file(Arc::new(file), ModelOptions::with_threads(1))
}

fn keep(_: &str, ty: GgmlType, dims: &[u64], b: &[u8]) -> Option<Tensor> {
    Some((ty, dims.to_vec(), b.to_vec()))
}

#[test]
fn bad_files_name_the_key_or_tensor() {
    let none = |_: &mut GgufWriter<'_>| {};
    assert!(rewritten(&none, &keep).is_ok(), "the unedited file loads");
    for gone in [
        "blk.1.attn_kv_a_mqa.weight",
        "blk.0.attn_k_b.weight",
        "blk.2.attn_v_b.weight",
        "blk.1.attn_kv_a_norm.weight",
        "blk.2.ffn_gate_shexp.weight",
    ] {
        let r = rewritten(&none, &|n, t, d, b| {
            (n != gone).then(|| keep(n, t, d, b)).flatten()
        });
        assert!(
            matches!(&r, Err(ModelError::MissingTensor(n)) if n == gone),
            "{gone}: {r:?}"
        );
    }

    // A kv_lora_rank the cache geometry keys disagree with.
    let rank = rewritten(
        &|w| w.set("deepseek2.attention.kv_lora_rank", Value::U32(32)),
        &keep,
    );
    assert!(
        matches!(&rank, Err(ModelError::InvalidConfig(m)) if m.contains("kv_lora_rank")
            && m.contains("deepseek2.attention.key_length")),
        "{rank:?}"
    );
    // ... and one they agree with but the tensors do not.
    let rank = rewritten(
        &|w| {
            w.set("deepseek2.attention.kv_lora_rank", Value::U32(32));
            w.set("deepseek2.attention.key_length", Value::U32(64));
            w.set("deepseek2.attention.value_length", Value::U32(32));
        },
        &keep,
    );
    assert!(
        matches!(&rank, Err(ModelError::WeightShape { name, .. }) if name == "blk.0.attn_kv_a_mqa.weight"),
        "{rank:?}"
    );
    let no_mla = rewritten(
        &|w| {
            w.metadata_mut()
                .remove("deepseek2.attention.key_length_mla");
        },
        &keep,
    );
    assert!(
        matches!(&no_mla, Err(ModelError::InvalidConfig(m)) if m.contains("key_length_mla")),
        "{no_mla:?}"
    );

    // A wrong expert count is reported on the router of the first MoE layer.
    let count = rewritten(&|w| w.set("deepseek2.expert_count", Value::U32(6)), &keep);
    assert!(
        matches!(&count, Err(ModelError::WeightShape { name, .. }) if name == "blk.1.ffn_gate_inp.weight"),
        "{count:?}"
    );

    // One expert short: 7 blocks where the count says 8.
    let truncated = rewritten(&none, &|n, t, d, b| {
        if n == "blk.2.ffn_down_exps.weight" {
            let per = b.len() / 8;
            Some((t, vec![d[0], d[1], 7], b[..7 * per].to_vec()))
        } else {
            keep(n, t, d, b)
        }
    });
    assert!(
        matches!(&truncated, Err(ModelError::WeightShape { name, found, .. })
            if name == "blk.2.ffn_down_exps.weight" && found[2] == 7),
        "{truncated:?}"
    );
    // A per-head stack short of heads.
    let heads = rewritten(&none, &|n, t, d, b| {
        if n == "blk.0.attn_k_b.weight" {
            let per = b.len() / 4;
            Some((t, vec![d[0], d[1], 3], b[..3 * per].to_vec()))
        } else {
            keep(n, t, d, b)
        }
    });
    assert!(
        matches!(&heads, Err(ModelError::WeightShape { name, .. }) if name == "blk.0.attn_k_b.weight"),
        "{heads:?}"
    );
}

/// MLA's per-head `attn_k_b` / `attn_v_b` are 3-D `mul_mat` weights, which ggml never
/// repacks: a Q4_K head matrix takes `ggml_vec_dot_q4_K_q8_K`'s order for fewer than
/// 8 rows and the tiled kernel's from 8 on, where a 2-D Q4_K matrix with rows % 8 == 0
/// (repacked by ggml) takes the repacked GEMV's. Each checked bitwise against the
/// scalar reference of that order; the stack is never repacked at load.
#[test]
fn mla_head_matrices_take_ggml_unrepacked_q4_k_order() {
    use fucina_model::matmul::{matmul_heads, matmul_split, GroupedProduct, MatmulScratch};
    use fucina_model::{Linear, ThreadPool};
    use fucina_quant::{Isa, Kernels, TileDot};
    let pool = ThreadPool::new(2).expect("pool");
    let (n, rows, cols) = (3usize, 24usize, 512usize);
    let mut rnd = common::uniform_stream(0x9e37_79b9_u32);
    let w: Vec<f32> = (0..n * rows * cols).map(|_| rnd() * 0.1).collect();
    let mut data = Vec::new();
    fucina_quant::quantize(GgmlType::Q4_K, &w, &mut data).expect("quantize");
    let mut wr = GgufWriter::new();
    wr.set("general.architecture", Value::string("test"));
    let first = data[..data.len() / n].to_vec();
    wr.add_tensor(
        "heads",
        GgmlType::Q4_K,
        &[cols as u64, rows as u64, n as u64],
        data,
    )
    .expect("add");
    wr.add_tensor("plain", GgmlType::Q4_K, &[cols as u64, rows as u64], first)
        .expect("add");
    let file =
        GgufFile::from_bytes(wr.to_bytes().expect("bytes"), OpenOptions::default()).expect("open");
    let file = Arc::new(file);
    let heads = Linear::bind_stack(&file, "heads", n, rows, cols).expect("bind");
    let plain = Linear::bind(&file, "plain", rows, cols).expect("bind");
    assert!(heads.iter().all(|h| !h.repackable()));
    let scalar = Kernels::for_isa(Isa::Scalar).expect("scalar");
    let entry = scalar.entry(GgmlType::Q4_K).expect("Q4_K");
    let unpacked = TileDot::new_unpacked(&entry).expect("unpacked");
    let tiled = TileDot::new_tiled(&entry).expect("tiled");
    let single = TileDot::new(&entry);
    let (mut differs, mut checked) = (0usize, 0usize);
    for m in [1usize, 3, 9] {
        let x: Vec<f32> = (0..n * m * cols)
            .map(|_| rnd() * (1.0 + m as f32))
            .collect();
        let mut y = vec![f32::NAN; n * m * rows];
        {
            let mut products: Vec<GroupedProduct<'_>> = Vec::new();
            let mut rest = &mut y[..];
            for (h, w) in heads.iter().enumerate() {
                let (yh, tail) = std::mem::take(&mut rest).split_at_mut(m * rows);
                rest = tail;
                products.push(GroupedProduct {
                    w,
                    rows: h * m..(h + 1) * m,
                    y: yh,
                });
            }
            matmul_heads(&pool, &x, &mut products, &mut MatmulScratch::default()).expect("heads");
        }
        let order = if m >= 8 { &tiled } else { &unpacked };
        for (h, w) in heads.iter().enumerate() {
            let mut acts = Vec::new();
            for r in 0..m {
                let row = &x[(h * m + r) * cols..(h * m + r + 1) * cols];
                entry.act.quantize_row(row, &mut acts).expect("act");
            }
            let stride = entry.act.row_bytes(cols);
            let ws: Vec<&[u8]> = w.bytes().chunks_exact(w.row_bytes()).collect();
            let mut want = vec![0f32; m * rows];
            order.dots(&ws, &acts, stride, &mut want);
            let mut repacked_order = vec![0f32; m * rows];
            single.dots(&ws, &acts, stride, &mut repacked_order);
            for (k, (g, e)) in y[h * m * rows..(h + 1) * m * rows]
                .iter()
                .zip(&want)
                .enumerate()
            {
                // `want` is token-major; `y` token-major too (m rows of `rows` outputs).
                assert_eq!(
                    g.to_bits(),
                    e.to_bits(),
                    "m {m} head {h} output {k}: {g} vs {e}"
                );
                differs += usize::from(g.to_bits() != repacked_order[k].to_bits());
                checked += 1;
            }
        }
    }
    assert!(
        differs > 0,
        "no output of {checked} differed from the repacked order"
    );
    // The 2-D matrix with rows % 8 == 0 keeps the repacked GEMV's order in decode.
    let x: Vec<f32> = (0..cols).map(|_| rnd()).collect();
    let mut y = vec![0f32; rows];
    matmul_split(
        &pool,
        &plain,
        &x,
        1,
        0,
        &mut y,
        &mut MatmulScratch::default(),
    )
    .expect("plain");
    let mut acts = Vec::new();
    entry.act.quantize_row(&x, &mut acts).expect("act");
    let ws: Vec<&[u8]> = plain.bytes().chunks_exact(plain.row_bytes()).collect();
    let mut want = vec![0f32; rows];
    single.dots(&ws, &acts, acts.len(), &mut want);
    assert!(y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
}
