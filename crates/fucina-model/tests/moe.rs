//! Mixture-of-experts loading and forward on the tiny qwen3moe / qwen2moe GGUFs: experts are
//! borrowed from the mapping (no copies), bad files fail at load with an error
//! naming the tensor, and batched prefill equals token-by-token decode.

mod common;

use std::sync::Arc;

use fucina_gguf::{GgmlType, GgufFile, GgufWriter, OpenOptions, Value};
use fucina_model::{BatchRow, FfnWeights, KvDtype, Model, ModelError, ModelOptions, Scratch};

/// `variant` of the tiny qwen3moe ("f32", "f16", "q8_0"), or a whole file stem
/// ("qwen2moe-f32").
fn path(variant: &str) -> std::path::PathBuf {
    let stem = match variant.contains('-') {
        true => variant.to_owned(),
        false => format!("qwen3moe-{variant}"),
    };
    fucina_testdata::repo_root().join(format!("tests/goldens/model/tiny/{stem}.gguf"))
}

/// A tensor to write: type, dims (ggml order), bytes.
type Tensor = (GgmlType, Vec<u64>, Vec<u8>);
/// Maps a tensor (name, type, dims, bytes) to the one to write (`None`: drop it).
type Edit<'a> = &'a dyn Fn(&str, GgmlType, &[u64], &[u8]) -> Option<Tensor>;

/// The tiny model rewritten by `edit(name, type, dims, bytes)`, which returns the
/// tensor to write instead (`None`: drop it); `meta` edits the metadata.
fn rewritten(
    variant: &str,
    meta: &dyn Fn(&mut GgufWriter<'_>),
    edit: Edit<'_>,
) -> Result<Model, ModelError> {
    let file = GgufFile::open(path(variant)).expect("open");
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
fn experts_are_row_blocks_of_the_mapping() {
    let model = Model::load(path("q8_0"), ModelOptions::with_threads(1)).expect("load");
    let file = model.file();
    let info = &file.tensors()["blk.1.ffn_down_exps.weight"];
    let stack = file.info_bytes(info).expect("bytes");
    let FfnWeights::Moe(moe) = &model.layers()[1].ffn else {
        panic!("layer 1 is not MoE")
    };
    assert_eq!(moe.down.len(), 20);
    let per = stack.len() / 20;
    for (e, w) in moe.down.iter().enumerate() {
        assert_eq!((w.rows(), w.cols(), w.ty()), (64, 32, GgmlType::Q8_0));
        assert_eq!(w.name(), format!("blk.1.ffn_down_exps.weight[{e}]"));
        // The same bytes, at the same address: borrowed, not copied.
        assert_eq!(w.bytes().as_ptr(), stack[e * per..].as_ptr());
        assert_eq!(w.bytes().len(), per);
    }
    // A decode token reads the attention, the router and two of the twenty experts
    // per layer, and the head.
    let expert = moe.gate[0].bytes().len() + moe.up[0].bytes().len() + per;
    let per_layer: usize = model
        .layers()
        .iter()
        .map(|l| {
            let attn: usize = l.mixer.matrices().iter().map(|w| w.bytes().len()).sum();
            attn + moe.gate_inp.bytes().len() + 2 * expert
        })
        .sum();
    let head = file
        .info_bytes(&file.tensors()["output.weight"])
        .expect("head")
        .len();
    assert_eq!(model.weight_bytes_per_token(), per_layer + head);
}

#[test]
fn bad_moe_files_name_the_tensor() {
    let none = |_: &mut GgufWriter<'_>| {};
    let missing = rewritten("f32", &none, &|n, t, d, b| {
        (n != "blk.1.ffn_up_exps.weight")
            .then(|| keep(n, t, d, b))
            .flatten()
    });
    assert!(
        matches!(&missing, Err(ModelError::MissingTensor(n)) if n == "blk.1.ffn_up_exps.weight"),
        "{missing:?}"
    );

    let count = rewritten(
        "f32",
        &|w| w.set("qwen3moe.expert_count", Value::U32(16)),
        &keep,
    );
    assert!(
        matches!(&count, Err(ModelError::WeightShape { name, .. }) if name == "blk.0.ffn_gate_inp.weight"),
        "{count:?}"
    );

    // One expert short: 19 blocks where the count says 20.
    let truncated = rewritten("q8_0", &none, &|n, t, d, b| {
        if n == "blk.0.ffn_gate_exps.weight" {
            let per = b.len() / 20;
            Some((t, vec![d[0], d[1], 19], b[..19 * per].to_vec()))
        } else {
            keep(n, t, d, b)
        }
    });
    assert!(
        matches!(&truncated, Err(ModelError::WeightShape { name, found, .. })
            if name == "blk.0.ffn_gate_exps.weight" && found[2] == 19),
        "{truncated:?}"
    );

    // Same bytes, a type without matmul kernels.
    let untyped = rewritten("f32", &none, &|n, t, d, b| {
        let t = if n == "blk.1.ffn_down_exps.weight" {
            GgmlType::I32
        } else {
            t
        };
        Some((t, d.to_vec(), b.to_vec()))
    });
    assert!(
        matches!(&untyped, Err(ModelError::UnsupportedWeightType { name, ty: GgmlType::I32, .. })
            if name == "blk.1.ffn_down_exps.weight"),
        "{untyped:?}"
    );

    // Qwen2-MoE's shared expert and its gate are required.
    for gone in [
        "blk.0.ffn_gate_inp_shexp.weight",
        "blk.1.ffn_down_shexp.weight",
    ] {
        let r = rewritten("qwen2moe-f32", &none, &|n, t, d, b| {
            (n != gone).then(|| keep(n, t, d, b)).flatten()
        });
        assert!(
            matches!(&r, Err(ModelError::MissingTensor(n)) if n == gone),
            "{r:?}"
        );
    }
    let gate_as_matrix = rewritten("qwen2moe-f32", &none, &|n, t, d, b| {
        let d = match n {
            "blk.0.ffn_gate_inp_shexp.weight" => vec![d[0], 1],
            _ => d.to_vec(),
        };
        Some((t, d, b.to_vec()))
    });
    assert!(
        matches!(&gate_as_matrix, Err(ModelError::WeightShape { name, .. })
            if name == "blk.0.ffn_gate_inp_shexp.weight"),
        "{gate_as_matrix:?}"
    );

    let too_many_used = rewritten(
        "f32",
        &|w| w.set("qwen3moe.expert_used_count", Value::U32(21)),
        &keep,
    );
    assert!(
        matches!(&too_many_used, Err(ModelError::InvalidConfig(m)) if m.contains("21 experts used of 20")),
        "{too_many_used:?}"
    );
}

/// A prefill batch (rows grouped by expert, each expert's weights read once for all
/// its rows) gives bitwise the logits of token-by-token decode in pinned mode. In the
/// default mode the F32 router (and the F16 projections) take llama.cpp's batched
/// tinyBLAS order, as llama.cpp does: one ulp there can move a Q8 / F16 rounding
/// downstream, so batch and decode differ by up to 1.1e-3 (measured, f16 weights).
const BATCH_VS_DECODE_REL: f32 = 5e-3;
#[test]
fn grouped_prefill_equals_decode_bitwise() {
    let toks = [1u32, 17, 200, 42, 99, 3, 150, 7, 64, 250, 13, 88];
    for variant in ["f32", "f16", "q8_0"] {
        let model = Model::load(path(variant), ModelOptions::with_threads(2)).expect("load");
        let vocab = model.config().n_vocab;
        let single = common::decode_rows(&model, &toks, KvDtype::F32, 16);
        for pinned in [true, false] {
            let mut c = vec![model.new_cache(16, KvDtype::F32).expect("cache")];
            let mut sc = Scratch::default();
            sc.set_pinned(pinned);
            let rows = BatchRow::sequence(0, 0, &toks, true);
            let out = model.forward(&rows, &mut c, &mut sc).expect("forward");
            assert_eq!(out.len(), toks.len() * vocab);
            if pinned {
                let same = out
                    .iter()
                    .zip(&single)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{variant} pinned");
            } else {
                let worst = out
                    .iter()
                    .zip(&single)
                    .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
                    .fold(0f32, f32::max);
                assert!(
                    worst <= BATCH_VS_DECODE_REL,
                    "{variant} default mode: {worst}"
                );
            }
        }
    }
}

/// `matmul_grouped` over a stacked tensor of each block format with a quantizer here
/// (F32, F16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, TQ2_0, MXFP4; the K-quants but
/// row-count-8 Q4_K take llama.cpp's tiled order from 8 rows on; TQ2_0 and MXFP4 go
/// through the dequantizing path): every expert's block equals `matmul_split` of the
/// gathered rows with no GEMM rows (the order llama.cpp's `mul_mat_id` uses; for F32
/// and F16, where a plain mul_mat would take tinyBLAS, one-row products) bitwise,
/// and the scalar reference (dequantized weights · dequantized activations, f64)
/// within the activation format's rounding.
#[test]
fn grouped_matmul_matches_per_expert_and_scalar_reference() {
    use fucina_model::matmul::{matmul_grouped, matmul_split, GroupedProduct, MatmulScratch};
    use fucina_model::{Linear, ThreadPool};
    let pool = ThreadPool::new(2).expect("pool");
    let (n_exp, cols) = (5usize, 256usize);
    let mut rnd = common::uniform_stream(0x2545_f491_u32);
    let m_src = 11;
    let x: Vec<f32> = (0..m_src * cols).map(|_| rnd()).collect();
    // Expert e gets rows_of[e] gathered rows (0: unused; 9: the tiled order).
    let rows_of = [3usize, 0, 9, 1, 4];
    let gather: Vec<usize> = (0..rows_of.iter().sum())
        .map(|i| (i * 7 + 3) % m_src)
        .collect();
    for (ty, rows) in [
        (GgmlType::F32, 24),
        (GgmlType::F16, 24),
        (GgmlType::Q8_0, 24),
        (GgmlType::Q4_K, 24),
        (GgmlType::Q4_K, 20),
        (GgmlType::Q6_K, 24),
        (GgmlType::Q5_K, 24),
        (GgmlType::Q4_0, 24),
        (GgmlType::TQ2_0, 24),
        (GgmlType::MXFP4, 24),
    ] {
        let w: Vec<f32> = (0..n_exp * rows * cols).map(|_| rnd() * 0.1).collect();
        let mut data = Vec::new();
        fucina_quant::quantize(ty, &w, &mut data).expect("quantize");
        let mut wr = GgufWriter::new();
        wr.set("general.architecture", Value::string("test"));
        let dims = [cols as u64, rows as u64, n_exp as u64];
        wr.add_tensor("exps", ty, &dims, data).expect("add");
        let file = GgufFile::from_bytes(wr.to_bytes().expect("bytes"), OpenOptions::default())
            .expect("open");
        let file = Arc::new(file);
        let stack = Linear::bind_stack(&file, "exps", n_exp, rows, cols).expect("bind");
        let total = gather.len();
        let mut y = vec![0f32; total * rows];
        let mut starts = vec![0usize];
        for r in rows_of {
            starts.push(starts.last().copied().unwrap_or(0) + r);
        }
        {
            let mut rest = &mut y[..];
            let mut products = Vec::new();
            for (e, w) in stack.iter().enumerate() {
                let (a, b) = (starts[e], starts[e + 1]);
                let (head, tail) = std::mem::take(&mut rest).split_at_mut((b - a) * rows);
                rest = tail;
                products.push(GroupedProduct {
                    w,
                    rows: a..b,
                    y: head,
                });
            }
            matmul_grouped(
                &pool,
                &x,
                Some(&gather),
                &mut products,
                &mut MatmulScratch::default(),
            )
            .expect("grouped");
        }
        let act = stack[0].dot().act;
        for (e, w) in stack.iter().enumerate() {
            let (a, b) = (starts[e], starts[e + 1]);
            let m = b - a;
            if m == 0 {
                continue;
            }
            let xg: Vec<f32> = gather[a..b]
                .iter()
                .flat_map(|&r| x[r * cols..(r + 1) * cols].iter().copied())
                .collect();
            let mut want = vec![0f32; m * rows];
            let mut mm = MatmulScratch::default();
            if matches!(ty, GgmlType::F32 | GgmlType::F16) {
                for (xr, yr) in xg.chunks_exact(cols).zip(want.chunks_exact_mut(rows)) {
                    matmul_split(&pool, w, xr, 1, 0, yr, &mut mm).expect("matmul");
                }
            } else {
                matmul_split(&pool, w, &xg, m, 0, &mut want, &mut mm).expect("matmul");
            }
            let got = &y[a * rows..b * rows];
            let same = got
                .iter()
                .zip(&want)
                .all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "{ty} rows {rows} expert {e}");
            // Scalar reference on the dequantized operands.
            let mut wd = vec![0f32; rows * cols];
            fucina_quant::dequantize(ty, w.bytes(), &mut wd).expect("dequantize");
            for (i, xr) in xg.chunks_exact(cols).enumerate() {
                let mut q = Vec::new();
                act.quantize_row(xr, &mut q).expect("act");
                let act_ty = match act {
                    fucina_quant::ActType::F32 => GgmlType::F32,
                    fucina_quant::ActType::F16 => GgmlType::F16,
                    fucina_quant::ActType::Q8_0 => GgmlType::Q8_0,
                    fucina_quant::ActType::Q8_K => GgmlType::Q8_K,
                    other => panic!("activation {other:?}"),
                };
                let mut xd = vec![0f32; cols];
                fucina_quant::dequantize(act_ty, &q, &mut xd).expect("act back");
                for o in 0..rows {
                    let r: f64 = wd[o * cols..(o + 1) * cols]
                        .iter()
                        .zip(&xd)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum();
                    let g = f64::from(got[i * rows + o]);
                    assert!(
                        (g - r).abs() <= 1e-4 * (1.0 + r.abs()),
                        "{ty} e{e} r{i} o{o}: {g} vs {r}"
                    );
                }
            }
        }
    }
}
