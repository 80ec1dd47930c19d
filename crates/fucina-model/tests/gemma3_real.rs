//! The real Gemma 3 270M Q4_K_M model: sensible greedy continuations, batched ==
//! single-row bitwise, q8_0 KV cache close to f16, and (once committed) per-position
//! parity with llama.cpp goldens.

use std::sync::{Arc, OnceLock};

use fucina_engine::{argmax, Session};
use fucina_model::{BatchRow, KvDtype, Model, ModelOptions, Scratch};
use fucina_tokenizer::Tokenizer;

fn model() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| {
        let path = fucina_testdata::gemma3_270m();
        Arc::new(Model::load(path, ModelOptions::with_threads(2)).expect("load gemma"))
    })
    .clone()
}

fn tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::from_gguf(fucina_testdata::gemma3_270m()).expect("tokenizer"))
}

fn greedy(ids: &[u32], n: usize) -> Vec<u32> {
    let mut s = Session::new(model(), 256, KvDtype::F16).expect("session");
    s.generate_greedy(ids, n, |_| false).expect("generate")
}

/// Greedy 8-token continuations from llama.cpp (llama-cpp-python 0.3.36,
/// `Llama(gemma, n_ctx=256, n_threads=2, logits_all=True)`, argmax after
/// `eval(tokenize(prompt, add_bos=True))`), with the prompt token ids it used.
const LLAMA_CPP_GREEDY: [(&str, &[u32], &[u32]); 2] = [
    (
        "The capital of France is",
        &[2, 818, 5279, 529, 7001, 563],
        &[506, 5279, 529, 506, 2891, 529, 7001, 236761],
    ),
    (
        "1, 2, 3, 4, 5,",
        &[
            2, 236770, 236764, 236743, 236778, 236764, 236743, 236800, 236764, 236743, 236812,
            236764, 236743, 236810, 236764,
        ],
        &[
            236743, 236825, 236764, 236743, 236832, 236764, 236743, 236828,
        ],
    ),
];

#[test]
fn greedy_continuations_match_llama_cpp() {
    let m = model();
    let c = m.config();
    assert_eq!((c.n_layer, c.n_embd, c.n_vocab), (18, 640, 262_144));
    let tok = tokenizer();
    for (prompt, ids, want) in LLAMA_CPP_GREEDY {
        assert_eq!(
            tok.encode(prompt, true, false).expect("encode"),
            ids,
            "{prompt}"
        );
        let got = greedy(ids, want.len());
        let text = tok.decode_lossy(&got, false).expect("decode");
        eprintln!("{prompt:?} -> {text:?}");
        assert_eq!(got, want, "{prompt:?} -> {text:?}");
    }
}

fn eval_rows(
    rows: &[BatchRow],
    caches: &mut [fucina_model::KvCache],
    scratch: &mut Scratch,
) -> Vec<f32> {
    model()
        .forward(rows, caches, scratch)
        .expect("forward")
        .to_vec()
}

/// The pinned-kernel property: with pinned numerics a batch of m rows gives bitwise
/// the logits of m single-row forwards, also when two sequences share the batch.
#[test]
fn batched_forward_equals_single_rows_bitwise() {
    let m = model();
    let a: &[u32] = LLAMA_CPP_GREEDY[1].1;
    let b: &[u32] = LLAMA_CPP_GREEDY[0].1;
    let vocab = m.config().n_vocab;

    // Reference: every row alone, in order.
    let mut single = Vec::new();
    for toks in [a, b] {
        let mut caches = vec![m.new_cache(64, KvDtype::F16).expect("cache")];
        let mut sc = Scratch::default();
        let mut out = Vec::new();
        for (p, &t) in toks.iter().enumerate() {
            out.extend(eval_rows(
                &[BatchRow {
                    seq: 0,
                    pos: p,
                    token: t,
                    logits: true,
                }],
                &mut caches,
                &mut sc,
            ));
        }
        single.push(out);
    }

    // Both sequences interleaved in one batch (prefill of two conversations).
    let mut caches = vec![
        m.new_cache(64, KvDtype::F16).expect("cache"),
        m.new_cache(64, KvDtype::F16).expect("cache"),
    ];
    let mut rows = BatchRow::sequence(0, 0, a, true);
    rows.extend(BatchRow::sequence(1, 0, b, true));
    rows.sort_by_key(|r| (r.pos, r.seq));
    let mut sc = Scratch::default();
    sc.set_pinned(true);
    let batched = eval_rows(&rows, &mut caches, &mut sc);
    assert_eq!(caches[0].len(), a.len());
    assert_eq!(caches[1].len(), b.len());
    for (i, r) in rows.iter().enumerate() {
        let got = &batched[i * vocab..(i + 1) * vocab];
        let want = &single[r.seq][r.pos * vocab..(r.pos + 1) * vocab];
        assert!(
            got.iter()
                .zip(want)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "row {i} (seq {}, pos {}) differs from its single-row forward",
            r.seq,
            r.pos
        );
    }

    // A decode step after a batched prefill equals the same step after single rows.
    let next = argmax(&batched[(rows.len() - 1) * vocab..]);
    let step = BatchRow {
        seq: 0,
        pos: b.len(),
        token: next,
        logits: true,
    };
    let after_batch = eval_rows(&[step], &mut caches[1..], &mut sc);
    let mut c1 = vec![m.new_cache(64, KvDtype::F16).expect("cache")];
    eval_rows(&BatchRow::sequence(0, 0, b, false), &mut c1, &mut sc);
    let after_prefill = eval_rows(&[step], &mut c1, &mut sc);
    assert!(after_batch
        .iter()
        .zip(&after_prefill)
        .all(|(x, y)| x.to_bits() == y.to_bits()));
}

/// Default numerics follow llama.cpp's batch-dependent orders: one row is exactly
/// the pinned (single-row) arithmetic; from 2 rows attention takes tinyBLAS's order
/// instead of ggml_vec_dot_f16's (on 2-3 keys that changes at most the last bits of
/// a score, which the f16 rounding of the probabilities usually absorbs, so 2-3 rows
/// are not asserted either way); from 4 rows the Q4_K matmuls of the first
/// `m - m % 4` rows take ggml's GEMM order, so the logits differ from the pinned ones.
#[test]
fn default_numerics_differ_from_pinned_only_from_four_rows() {
    let m = model();
    let toks: Vec<u32> = LLAMA_CPP_GREEDY
        .iter()
        .flat_map(|(_, ids, _)| ids.iter())
        .copied()
        .take(6)
        .collect();
    assert_eq!(toks.len(), 6);
    for n in 1..=6 {
        let run = |pinned| {
            let mut caches = vec![m.new_cache(64, KvDtype::F16).expect("cache")];
            let mut sc = Scratch::default();
            sc.set_pinned(pinned);
            eval_rows(
                &BatchRow::sequence(0, 0, &toks[..n], true),
                &mut caches,
                &mut sc,
            )
        };
        let (pinned, default) = (run(true), run(false));
        let same = pinned
            .iter()
            .zip(&default)
            .all(|(x, y)| x.to_bits() == y.to_bits());
        if n == 1 || n >= 4 {
            assert_eq!(same, n == 1, "{n} rows: default == pinned is {same}");
        }
    }
}

/// At the last layer llama.cpp projects the attention of every row through `wo` before
/// dropping the rows without logits, so a kept row keeps its place in the Q4_K
/// GEMM / GEMV split: the last row's logits are the same whether all rows or only it
/// ask for logits (this model's last `ffn_down` is Q6_K, whose order does not depend
/// on the batch), for every prompt length mod 4.
#[test]
fn last_row_logits_do_not_depend_on_which_rows_want_logits() {
    let m = model();
    let vocab = m.config().n_vocab;
    let toks: Vec<u32> = LLAMA_CPP_GREEDY
        .iter()
        .flat_map(|(_, ids, _)| ids.iter())
        .copied()
        .take(9)
        .collect();
    for n in 1..=toks.len() {
        let run = |all| {
            let mut caches = vec![m.new_cache(64, KvDtype::F16).expect("cache")];
            let mut sc = Scratch::default();
            let out = eval_rows(
                &BatchRow::sequence(0, 0, &toks[..n], all),
                &mut caches,
                &mut sc,
            );
            out[out.len() - vocab..].to_vec()
        };
        let (all, last) = (run(true), run(false));
        assert!(
            all.iter()
                .zip(&last)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{n} rows: last-row logits depend on which rows want logits"
        );
    }
}

/// q8_0 KV cache: half the bytes of f16, logits within a stated distance of f16.
#[test]
fn q8_0_cache_is_close_to_f16_and_half_the_bytes() {
    let m = model();
    let vocab = m.config().n_vocab;
    let toks: Vec<u32> = LLAMA_CPP_GREEDY
        .iter()
        .flat_map(|(_, ids, more)| ids.iter().chain(more.iter()))
        .copied()
        .collect();
    let run = |dtype| {
        let mut s = Session::new(model(), 128, dtype).expect("session");
        let bytes = s.cache().byte_size();
        (s.eval(&toks, true).expect("eval").to_vec(), bytes)
    };
    let (f16, f16_bytes) = run(KvDtype::F16);
    let (q8, q8_bytes) = run(KvDtype::Q8_0);
    assert!(
        q8_bytes * 100 <= f16_bytes * 54,
        "{q8_bytes} vs {f16_bytes}"
    );
    let mut worst = 0f32;
    let mut agree = 0;
    for p in 0..toks.len() {
        let (x, y) = (
            &f16[p * vocab..(p + 1) * vocab],
            &q8[p * vocab..(p + 1) * vocab],
        );
        let range =
            x.iter().cloned().fold(f32::MIN, f32::max) - x.iter().cloned().fold(f32::MAX, f32::min);
        let d = x
            .iter()
            .zip(y)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        worst = worst.max(d / range);
        agree += usize::from(argmax(x) == argmax(y));
    }
    eprintln!(
        "q8_0 vs f16: max |dlogit|/range {worst:.4}, argmax agreement {agree}/{}",
        toks.len()
    );
    assert!(worst <= Q8_0_KV_MAX_REL_DIFF, "{worst}");
    assert!(agree * 100 >= toks.len() * 90, "{agree}/{}", toks.len());
}

/// Bound on max |Δlogit| / logit range between q8_0 and f16 KV caches on Gemma 3
/// 270M: the model's own kernel-order noise floor (scalar vs SIMD dot kernels) is
/// ~3% of the range, and q8_0 K/V rounding (~0.4% per value) stays within 3× that.
const Q8_0_KV_MAX_REL_DIFF: f32 = 0.10;

/// llama.cpp's tiled K-quant order (ggml-cpu `tiled/`): a mul_mat of >= 8 rows over
/// Q6_K weights (this model's Q6_K `ffn_down`s) takes it for every row, so default
/// numerics differ from pinned exactly from 8 rows and equal the tiled tile kernel
/// row by row; Q4_K matrices with rows % 8 == 0 (repacked by llama.cpp) keep their
/// GEMM / GEMV split, whatever the row count.
#[test]
fn tiled_order_applies_to_q6_k_matmuls_of_eight_rows_or_more() {
    use fucina_gguf::{GgmlType, GgufFile};
    use fucina_model::matmul::{matmul, MatmulScratch};
    use fucina_model::parallel::ThreadPool;
    use fucina_model::Linear;

    let file = Arc::new(GgufFile::open(fucina_testdata::gemma3_270m()).expect("gguf"));
    let pick = |ty: GgmlType| {
        let (name, info) = file
            .tensors()
            .iter()
            .find(|(n, i)| n.ends_with("ffn_down.weight") && i.ggml_type == ty)
            .expect("a ffn_down of the type");
        let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
        Linear::bind(&file, name, rows, cols).expect("bind")
    };
    let pool = ThreadPool::new(2).expect("pool");
    for ty in [GgmlType::Q6_K, GgmlType::Q4_K] {
        let w = pick(ty);
        let (rows, cols) = (w.rows(), w.cols());
        for m in [1usize, 4, 7, 8, 9, 13] {
            let x: Vec<f32> = (0..m * cols)
                .map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 3.0)
                .collect();
            let run = |pinned| {
                let mut sc = MatmulScratch::default();
                sc.set_pinned(pinned);
                let mut y = vec![0f32; m * rows];
                matmul(&pool, &w, &x, m, &mut y, &mut sc).expect("matmul");
                y
            };
            let (pinned, default) = (run(true), run(false));
            let same = pinned
                .iter()
                .zip(&default)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            let want_same = match ty {
                GgmlType::Q6_K => m < 8,
                _ => m < 4,
            };
            assert_eq!(
                same, want_same,
                "{ty:?}, {m} rows: default == pinned is {same}"
            );
            if ty == GgmlType::Q6_K && m >= 8 {
                let entry = w.dot();
                let tiled = fucina_quant::TileDot::new_tiled(entry).expect("Q6_K tiled form");
                let stride = entry.act.row_bytes(cols);
                let mut acts = Vec::new();
                for r in 0..m {
                    entry
                        .act
                        .quantize_row(&x[r * cols..(r + 1) * cols], &mut acts)
                        .expect("quantize");
                }
                let rb = w.row_bytes();
                for o in (0..rows).step_by(97) {
                    let mut got = vec![0f32; m];
                    tiled.dots(&[&w.bytes()[o * rb..(o + 1) * rb]], &acts, stride, &mut got);
                    for (r, g) in got.iter().enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            default[r * rows + o].to_bits(),
                            "row {r}, out {o}"
                        );
                    }
                }
            }
        }
    }
}

/// Load-time repacking runs in the background and changes no result: logits of a
/// model loaded without repacking, of one whose repacking has not finished, and of
/// one fully repacked agree bitwise (batched prompt rows and decode rows alike).
#[test]
fn repacking_changes_no_logit() {
    let path = fucina_testdata::gemma3_270m();
    let load = |mode: &str| {
        std::env::set_var("FUCINA_REPACK", mode);
        let m = Arc::new(Model::load(&path, ModelOptions::with_threads(2)).expect("load gemma"));
        std::env::remove_var("FUCINA_REPACK");
        m
    };
    let logits = |m: &Arc<Model>| {
        let mut s = Session::new(Arc::clone(m), 64, KvDtype::F16).expect("session");
        let mut out = s
            .eval(&[2, 818, 5279, 529, 7001, 563], true)
            .expect("prompt")
            .to_vec();
        out.extend_from_slice(s.eval(&[506], false).expect("decode"));
        // A prompt whose last row (the only one kept at the last layer) lies in
        // llama.cpp's GEMM part of the batch (8 rows: the first 8 - 8 % 4).
        let mut s = Session::new(Arc::clone(m), 64, KvDtype::F16).expect("session");
        let prompt = [2, 818, 5279, 529, 7001, 563, 506, 5279];
        out.extend_from_slice(s.eval(&prompt, false).expect("prompt, last row"));
        out
    };
    let plain = load("0");
    assert_eq!(plain.repacked_bytes(), 0);
    let want = logits(&plain);
    let background = load("1");
    let early = logits(&background);
    background.wait_repacked();
    let packed_bytes = background.repacked_bytes();
    let late = logits(&background);
    let sync = load("sync");
    assert_eq!(sync.repacked_bytes(), packed_bytes);
    // Every packed layout, whether or not this CPU runs it faster than the row-major
    // kernels (`Packed::pays_off`).
    let every = load("all-sync");
    assert!(every.repacked_bytes() >= packed_bytes);
    for (name, got) in [
        ("background, early", &early),
        ("background, finished", &late),
        ("sync", &logits(&sync)),
        ("every layout", &logits(&every)),
    ] {
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}: logits differ from the row-major model's"
        );
    }
    let isa = fucina_quant::Kernels::from_env().expect("kernels").isa();
    if matches!(isa, fucina_quant::Isa::Avx2 | fucina_quant::Isa::Avx512) {
        assert!(every.repacked_bytes() > 0, "nothing repacked on {isa:?}");
    }
    if isa == fucina_quant::Isa::Avx512 {
        // The tied Q8_0 output head (262144 × 640, 34 bytes per 32 weights) is packed
        // too, so the logits above went through the packed Q8_0 kernel.
        let head = 262_144 * 640 / 32 * 34;
        let n = every.repacked_bytes();
        assert!(n > head, "Q8_0 head not repacked: {n} bytes");
        // Its Q5_0 projections (q, k, gate, up of every layer, v of some), widened to
        // packed Q8_0 blocks, so those logits went through the Q8_0 kernels as well.
        let q5_blocks: usize = plain
            .file()
            .tensors()
            .values()
            .filter(|t| t.ggml_type == fucina_gguf::GgmlType::Q5_0)
            .map(|t| t.dims.iter().product::<u64>() as usize / 32)
            .sum();
        assert!(q5_blocks >= 18 * (1024 + 256 + 2048 + 2048) * 640 / 32);
        assert!(
            n >= head + q5_blocks * 34,
            "Q5_0 matrices not widened: {n} bytes"
        );
        // A decode step reads the widened bytes (12 more per block of 32).
        assert_eq!(
            every.weight_bytes_per_token(),
            plain.weight_bytes_per_token() + q5_blocks * 12
        );
    }
}

/// One row kept from llama.cpp's GEMM part of a batch (`gemm_rows = 1`: the last
/// layer's projection of a prompt whose length is a multiple of 4) takes the prompt
/// order on the row-major and the repacked weights alike; a decode row (`gemm_rows =
/// 0`) the single-row order. Checked on the matmul itself: after the residual add a
/// one-ulp difference rarely survives into the logits.
#[test]
fn lone_gemm_row_uses_the_prompt_order_on_both_layouts() {
    use fucina_model::matmul::{matmul_split, MatmulScratch};
    use fucina_model::parallel::ThreadPool;
    let file = Arc::new(fucina_gguf::GgufFile::open(fucina_testdata::gemma3_270m()).expect("open"));
    let bind =
        || fucina_model::Linear::bind(&file, "blk.0.attn_output.weight", 640, 1024).expect("bind");
    let (rows_major, packed) = (bind(), bind());
    packed.repack().expect("repack");
    let pool = ThreadPool::new(2).expect("pool");
    let x: Vec<f32> = (0..1024)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    let run = |w: &fucina_model::Linear, gemm_rows: usize| {
        let mut y = vec![0f32; 640];
        matmul_split(
            &pool,
            w,
            &x,
            1,
            gemm_rows,
            &mut y,
            &mut MatmulScratch::default(),
        )
        .expect("matmul");
        y
    };
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    for gemm_rows in [0, 1] {
        assert_eq!(
            bits(run(&rows_major, gemm_rows)),
            bits(run(&packed, gemm_rows)),
            "gemm_rows {gemm_rows}"
        );
    }
    if packed.packed().is_some() {
        assert_ne!(
            bits(run(&packed, 0)),
            bits(run(&packed, 1)),
            "the two orders coincide"
        );
    }
}
