//! `y = x · Wᵀ` for a [`Linear`] in its GGUF block format: the adapter between the
//! forward and fucina-quant's per-type dot kernels.
//!
//! Activation rows are converted once per call to the weight type's activation
//! format (llama.cpp's `vec_dot_type`: Q8_0 for legacy quants, Q8_K for K-quants,
//! F16 for F16 weights). Every call goes through fucina-quant's tile kernels
//! ([`TileDot`]): a task takes a chunk of output rows × all tokens, `W_TILE` weight
//! rows × `ROW_TILE` tokens at a time (one token in decode), each weight block decoded
//! once per register block of tokens.
//!
//! Two float orders exist per output, both depending only on the output's own row of
//! `x` (so results never depend on the thread count):
//! * the single-row order ([`TileDot::new`]): bitwise the single-row dot kernels;
//! * llama.cpp's prompt-batch order ([`TileDot::new_prompt`]): for Q4_K matrices with
//!   rows % 8 == 0 ggml repacks the weights and runs its GEMM kernel, with its own
//!   float order, on the first `m - m % 4` rows of every mul_mat (the rest through
//!   its GEMV, whose order is the single-row one). [`matmul`] reproduces that split.
//!
//! * llama.cpp's repacked Q4_0 / IQ4_NL order ([`TileDot::new_repacked`]): those
//!   matrices with rows % 8 == 0 ggml repacks too, and multiplies every row of them
//!   (one or a batch) in its whole-block order; [`matmul`] gives them that order in
//!   place of the single-row one (pinned mode included: it is llama.cpp's decode
//!   order for them), the packed Q4_0 layout through [`PackedOrder::WholeBlock`].
//!
//! * llama.cpp's tiled order ([`TileDot::new_tiled`]): a mul_mat with at least
//!   [`TILED_MIN_ROWS`] activation rows over non-repacked K-quant weights runs through
//!   ggml-cpu's tiled kernel, every row of it. For the types with a tiled form here
//!   (Q6_K, Q5_K, Q3_K, never repacked on x86-64; Q4_K with rows % 8 != 0) [`matmul`]
//!   gives every row that order when the call (llama.cpp's op) has at least 8 rows.
//!
//! * llamafile's tinyBLAS order ([`TileDot::new_sgemm`]): F32, F16 and BF16 weights in a
//!   mul_mat of at least [`SGEMM_MIN_ROWS`] rows, every row (where tinyBLAS takes the
//!   shape); one-row calls and MoE experts ([`matmul_grouped`]) use the single-row
//!   order, as llama.cpp's `ggml_vec_dot_f32/f16` and `mul_mat_id` do.
//!
//! Repacked weights ([`Linear::packed`]: Q4_K, Q8_0, Q6_K, widened Q4_0 / Q5_0) go
//! through the packed kernels for the orders they have (bitwise the row-major
//! kernels'); for the others (llama.cpp's tiled Q6_K order) rows are unpacked once per
//! call.
//!
//! In pinned mode ([`MatmulScratch::set_pinned`]) every row uses the single-row order,
//! so a batch of m rows gives bitwise the same results as m single-row calls (what
//! the speculative decoder's verify needs).

use fucina_quant::{PackedOrder, TileDot};

use crate::parallel::{SharedMut, ThreadPool};
use crate::weights::Linear;
use crate::{ModelError, Result};

/// Most activation rows per weight-row sweep (each kernel asks for its number,
/// [`TileDot::rows_per_call`]: enough to reuse each decoded weight tile, few enough to
/// keep the rows in L2).
const ROW_TILE: usize = 256;
/// Weight rows per tile-kernel call in decode (each activation block is loaded once
/// for them).
const W_TILE: usize = 8;
/// Weight rows per call of the interleaved Q4_K kernels in decode (they stream the
/// groups; a multiple of 8 no larger than `ROW_TILE * W_TILE_MAX`).
const W_DECODE: usize = 64;
/// Bytes of packed weight rows unpacked at a time for the kernels of an order the
/// packed layout lacks (about L2-sized: every activation row of the call passes them).
const UNPACK_BYTES: usize = 1 << 20;
/// Granularity of the chunks of weight rows that threads claim.
const W_TILE_MAX: usize = 16;
/// Most weight rows per tile-kernel call with several activation rows (each kernel
/// asks for its number, [`TileDot::weights_per_call`]; the output buffer holds
/// `ROW_TILE * W_TILE_MAX` values, which bounds it further by the activation rows per
/// call).
const W_CALL_MAX: usize = 64;

/// Fewest activation rows of a mul_mat that llama.cpp sends through its tiled K-quant
/// kernel (ggml-cpu `tiled.cpp`, `ggml_tiled_min_batch`).
pub const TILED_MIN_ROWS: usize = 8;
/// Fewest activation rows of a mul_mat that llama.cpp sends through llamafile's
/// tinyBLAS (`llamafile_sgemm`: "only enable sgemm for prompt processing").
pub const SGEMM_MIN_ROWS: usize = 2;

/// Before a kernel call of several activation rows: the lines its outputs go to (one
/// short run per row, rows `rows` floats apart), asked for writable. A prompt's
/// output matrix outgrows the caches, and stores of a narrow column strip down many
/// rows otherwise each waited for their line (a prompt matmul's output copies were 11%
/// of a Gemma 4 E2B shape's 512-token prefill, 6% with the prefetch).
fn prefetch_outputs(
    out: &SharedMut<f32>,
    r: std::ops::Range<usize>,
    rows: usize,
    w0: usize,
    nw: usize,
) {
    if r.len() > 1 {
        for r in r {
            out.prefetch_write(r * rows + w0, nw);
        }
    }
}

/// `dst.copy_from_slice(src)` for a kernel call's outputs of one row (often 8 or 16
/// floats), inline in blocks of 8: `copy_from_slice` of a run-time length is a
/// `memcpy` call, whose fixed cost on runs this short was 6% of a Gemma 4 E2B prompt
/// (512 rows: one call per row and weight tile).
#[inline(always)]
fn copy_outputs(dst: &mut [f32], src: &[f32]) {
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        let s: &[f32; 8] = s.try_into().expect("8 floats");
        d.copy_from_slice(s);
    }
    for (d, &s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d = s;
    }
}

/// Reusable buffers of [`matmul`] (converted activation rows) and its numerics mode.
#[derive(Default, Debug)]
pub struct MatmulScratch {
    act: Vec<u8>,
    /// Converted rows in grouped order ([`matmul_grouped`]).
    gathered: Vec<u8>,
    pinned: bool,
}

impl MatmulScratch {
    /// Pinned mode: every row uses the single-row order (a batch of m rows equals m
    /// single-row calls bitwise). Off (the default): llama.cpp's prompt-batch order
    /// for Q4_K (see [`matmul_split`]).
    pub fn set_pinned(&mut self, pinned: bool) {
        self.pinned = pinned;
    }

    /// Whether pinned mode is on.
    pub fn pinned(&self) -> bool {
        self.pinned
    }

    /// The converted-activation buffer (reused by [`crate::greedy`]).
    pub(crate) fn act_mut(&mut self) -> &mut Vec<u8> {
        &mut self.act
    }
}

/// `y[r][o] = Σ_k x[r][k] · W[o][k]` for `m` rows: `x` is `m × cols`, `y` is
/// `m × rows` (row-major). llama.cpp's split of one mul_mat: the first `m - m % 4`
/// rows in the prompt-batch order, the rest in the single-row order
/// ([`matmul_split`] with `gemm_rows = m - m % 4`).
pub fn matmul(
    pool: &ThreadPool,
    w: &Linear,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    matmul_split(pool, w, x, m, m - m % 4, y, scratch)
}

/// [`matmul`] with rows `0..gemm_rows` in the prompt-batch order and the rest in the
/// single-row order. The prompt-batch order is llama.cpp's GEMM arithmetic: it differs
/// from the single-row order only for Q4_K matrices with a row count divisible by 8
/// (the ones ggml repacks), and only when the scratch is not pinned. Each output still
/// depends only on its own row of `x` and on which of the two ranges the row is in.
/// For weights with a tiled form ([`TileDot::new_tiled`]) and `m >= TILED_MIN_ROWS`,
/// unpinned, every row uses llama.cpp's tiled order instead (`gemm_rows` is then moot).
#[allow(clippy::too_many_arguments)]
pub fn matmul_split(
    pool: &ThreadPool,
    w: &Linear,
    x: &[f32],
    m: usize,
    gemm_rows: usize,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    matmul_split_in_op(pool, w, x, m, m, gemm_rows, y, scratch)
}

/// [`matmul_split`] for `m` rows that llama.cpp computes inside one mul_mat of
/// `op_rows >= m` rows (e.g. the rows kept at the last layer, whose projection
/// llama.cpp runs on every row of the batch): the tiled order applies when
/// `op_rows >= TILED_MIN_ROWS`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_split_in_op(
    pool: &ThreadPool,
    w: &Linear,
    x: &[f32],
    m: usize,
    op_rows: usize,
    gemm_rows: usize,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    check_shapes(w, x, m, gemm_rows, y)?;
    let entry = *w.dot();
    convert(&entry, w.cols(), x, m, &mut scratch.act)?;
    let pinned = scratch.pinned;
    let plan = Plan::new(
        w,
        m,
        op_rows,
        gemm_rows,
        y,
        &scratch.act,
        pool.n_threads(),
        pinned,
        Op::MulMat,
    );
    pool.run(plan.n_chunks, &|c| plan.run_chunk(c));
    Ok(())
}

/// Several products of the same input rows, `ys[i] = x · ws[i]ᵀ` (each as
/// [`matmul`]), in one parallel section: the input is converted once and the threads
/// meet once (the q/k/v and gate/up projections). Each output is computed exactly
/// as [`matmul`] computes it. Weights whose kernels want different activation
/// formats run one after the other.
pub fn matmul_many(
    pool: &ThreadPool,
    ws: &[&Linear],
    x: &[f32],
    m: usize,
    ys: &mut [&mut [f32]],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    if ws.len() != ys.len() {
        return Err(ModelError::InvalidBatch(format!(
            "matmul_many: {} weights, {} outputs",
            ws.len(),
            ys.len()
        )));
    }
    let same_act = ws
        .windows(2)
        .all(|p| p[0].dot().act == p[1].dot().act && p[0].cols() == p[1].cols());
    if !same_act || ws.is_empty() {
        for (w, y) in ws.iter().zip(ys.iter_mut()) {
            matmul(pool, w, x, m, y, scratch)?;
        }
        return Ok(());
    }
    let gemm_rows = m - m % 4;
    for (w, y) in ws.iter().zip(ys.iter()) {
        check_shapes(w, x, m, gemm_rows, y)?;
    }
    convert(ws[0].dot(), ws[0].cols(), x, m, &mut scratch.act)?;
    let (act, pinned, threads) = (&scratch.act, scratch.pinned, pool.n_threads());
    let plans: Vec<Plan> = ws
        .iter()
        .zip(ys.iter_mut())
        .map(|(w, y)| Plan::new(w, m, m, gemm_rows, y, act, threads, pinned, Op::MulMat))
        .collect();
    run_plans(pool, &plans);
    Ok(())
}

/// One product of [`matmul_grouped`]: `y = x[rows] · wᵀ`, `rows` indexing the
/// grouped input rows, `y` holding `rows.len() × w.rows()` outputs.
pub struct GroupedProduct<'a> {
    /// The weights (one expert of a stack).
    pub w: &'a Linear,
    /// The grouped input rows this product multiplies.
    pub rows: std::ops::Range<usize>,
    /// Its outputs, row-major.
    pub y: &'a mut [f32],
}

/// Products of different weights with different row groups of one input, in one
/// parallel section: llama.cpp's `mul_mat_id` (MoE experts). The grouped input's row
/// `i` is row `gather[i]` of `x` (`gather: None`: the rows of `x` in order); rows are
/// converted to the activation format once, before grouping. Each weight is read once
/// per call for all its rows, like one [`matmul`] over them.
///
/// Every row takes the single-row order, except that a product of at least
/// [`TILED_MIN_ROWS`] rows over a type with a tiled form takes llama.cpp's tiled
/// order (unpinned; ggml decides per expert, on the rows routed to it). All weights
/// must share the activation format and input width.
pub fn matmul_grouped(
    pool: &ThreadPool,
    x: &[f32],
    gather: Option<&[usize]>,
    products: &mut [GroupedProduct<'_>],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    grouped(pool, x, gather, products, scratch, Op::MulMatId)
}

/// The matrices of a 3-D weight (`[cols, rows, n]`, e.g. MLA's per-head `attn_k_b` /
/// `attn_v_b`) against their own rows of `x`, in one parallel section: llama.cpp's
/// batched `mul_mat`, whose weights ggml never repacks (a Q4_K matrix takes
/// `ggml_vec_dot_q4_K_q8_K`'s order, [`TileDot::new_unpacked`]), with tinyBLAS and
/// the tiled kernel where a 2-D `mul_mat` of that many rows would take them.
pub fn matmul_heads(
    pool: &ThreadPool,
    x: &[f32],
    products: &mut [GroupedProduct<'_>],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    grouped(pool, x, None, products, scratch, Op::MulMat3d)
}

fn grouped(
    pool: &ThreadPool,
    x: &[f32],
    gather: Option<&[usize]>,
    products: &mut [GroupedProduct<'_>],
    scratch: &mut MatmulScratch,
    op: Op,
) -> Result<()> {
    let Some(first) = products.first() else {
        return Ok(());
    };
    let entry = *first.w.dot();
    let cols = first.w.cols();
    let m_src = x.len() / cols.max(1);
    let n_rows = gather.map_or(m_src, <[usize]>::len);
    for p in products.iter() {
        let (rows, len) = (p.w.rows(), p.rows.len());
        if p.w.dot().act != entry.act || p.w.cols() != cols {
            return Err(ModelError::InvalidBatch(format!(
                "matmul_grouped: '{}' does not share the activation format and width of '{}'",
                p.w.name(),
                first.w.name()
            )));
        }
        if p.rows.end > n_rows || p.y.len() < len * rows {
            return Err(ModelError::InvalidBatch(format!(
                "matmul_grouped '{}': rows {:?} of {n_rows}, {} outputs for {}",
                p.w.name(),
                p.rows,
                p.y.len(),
                len * rows
            )));
        }
    }
    if let Some(&bad) = gather.and_then(|g| g.iter().find(|&&r| r >= m_src)) {
        return Err(ModelError::InvalidBatch(format!(
            "matmul_grouped: row {bad} of {m_src} input rows"
        )));
    }
    convert(&entry, cols, x, m_src, &mut scratch.act)?;
    let act_row = entry.act.row_bytes(cols);
    let act: &[u8] = match gather {
        Some(g) => {
            scratch.gathered.clear();
            for &r in g {
                let src = &scratch.act[r * act_row..(r + 1) * act_row];
                scratch.gathered.extend_from_slice(src);
            }
            &scratch.gathered
        }
        None => &scratch.act,
    };
    let (pinned, threads) = (scratch.pinned, pool.n_threads());
    let plans: Vec<Plan> = products
        .iter_mut()
        .filter(|p| !p.rows.is_empty())
        .map(|p| {
            let (m, rows) = (p.rows.len(), p.rows.clone());
            let a = &act[rows.start * act_row..rows.end * act_row];
            Plan::new(p.w, m, m, 0, p.y, a, threads, pinned, op)
        })
        .collect();
    run_plans(pool, &plans);
    Ok(())
}

/// Run every chunk of `plans` in one parallel section.
fn run_plans(pool: &ThreadPool, plans: &[Plan<'_>]) {
    let starts: Vec<usize> = plans
        .iter()
        .scan(0, |acc, p| {
            let s = *acc;
            *acc += p.n_chunks;
            Some(s)
        })
        .collect();
    let total = plans.iter().map(|p| p.n_chunks).sum();
    pool.run(total, &|t| {
        let i = starts.partition_point(|&s| s <= t) - 1;
        plans[i].run_chunk(t - starts[i]);
    });
}

fn check_shapes(w: &Linear, x: &[f32], m: usize, gemm_rows: usize, y: &[f32]) -> Result<()> {
    let (rows, cols) = (w.rows(), w.cols());
    if x.len() < m * cols || y.len() < m * rows || gemm_rows > m {
        return Err(ModelError::InvalidBatch(format!(
            "matmul '{}': {m} rows ({gemm_rows} in GEMM order) need {} inputs / {} outputs, \
             got {} / {}",
            w.name(),
            m * cols,
            m * rows,
            x.len(),
            y.len()
        )));
    }
    Ok(())
}

/// Convert `m` rows of `x` (`cols` wide) to `entry`'s activation format into `act`.
pub(crate) fn convert(
    entry: &fucina_quant::DotEntry,
    cols: usize,
    x: &[f32],
    m: usize,
    act: &mut Vec<u8>,
) -> Result<()> {
    act.clear();
    for r in 0..m {
        entry.act.quantize_row(&x[r * cols..(r + 1) * cols], act)?;
    }
    Ok(())
}

/// Which llama.cpp op a [`Plan`] stands for: its kernel rules differ.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `mul_mat` over a 2-D weight (repacked where ggml repacks it; tinyBLAS for F32
    /// and F16 batches).
    MulMat,
    /// One expert of `mul_mat_id` (repacked like a 2-D weight; never tinyBLAS).
    MulMatId,
    /// `mul_mat` over one matrix of a 3-D weight (never repacked: ggml repacks only
    /// 2-D `mul_mat` weights and 3-D `mul_mat_id` stacks).
    MulMat3d,
}

/// Whether ggml repacks a weight of `rows` rows in `op` where its type has a repacked
/// layout on x86-64 (Q4_K, Q4_0, IQ4_NL): 2-D `mul_mat` weights and `mul_mat_id`
/// stacks with rows % 8 == 0.
fn ggml_repacks(rows: usize, op: Op) -> bool {
    rows % 8 == 0 && op != Op::MulMat3d
}

/// The order a packed layout's kernels must use for `w`'s rows in the single-row order
/// in `op`: the whole-block one for the Q4_0 / IQ4_NL matrices llama.cpp repacks
/// ([`TileDot::new_repacked`]), else the single-row one.
fn packed_single(w: &Linear, op: Op) -> PackedOrder {
    if ggml_repacks(w.rows(), op) && TileDot::new_repacked(w.dot()).is_some() {
        PackedOrder::WholeBlock
    } else {
        PackedOrder::Single
    }
}

/// [`packed_single`] for a 2-D `mul_mat` weight (the output head).
pub(crate) fn packed_single_order(w: &Linear) -> PackedOrder {
    packed_single(w, Op::MulMat)
}

/// One product of a matmul call, split into chunks of output columns that the
/// pool's threads claim; which thread runs a chunk never changes its results.
struct Plan<'a> {
    w: &'a Linear,
    m: usize,
    /// Rows `0..gemm_rows` use `prompt`, the rest `single`.
    gemm_rows: usize,
    single: TileDot,
    /// `single`'s order in a packed layout's kernels.
    packed_single: PackedOrder,
    prompt: TileDot,
    tiled: bool,
    chunk: usize,
    n_chunks: usize,
    act: &'a [u8],
    act_row: usize,
    out: SharedMut<f32>,
}

impl<'a> Plan<'a> {
    /// `op`: the llama.cpp op the product is part of (its kernel rules).
    #[allow(clippy::too_many_arguments)]
    fn new(
        w: &'a Linear,
        m: usize,
        op_rows: usize,
        gemm_rows: usize,
        y: &mut [f32],
        act: &'a [u8],
        threads: usize,
        pinned: bool,
        op: Op,
    ) -> Plan<'a> {
        let rows = w.rows();
        let entry = *w.dot();
        // Enough chunks to balance threads, each big enough to amortise the hand-out,
        // in whole weight tiles.
        // A multi-row packed kernel prepares the activations once per chunk: fewer,
        // larger chunks.
        let gemm = m > 1 && w.packed().is_some_and(|p| p.has_gemm());
        let n_chunks = if gemm {
            (rows / 64).clamp(1, threads * 8)
        } else {
            (rows / 16).clamp(1, threads * 8)
        };
        let chunk = rows.div_ceil(n_chunks).next_multiple_of(W_TILE_MAX);
        // Q4_K with rows % 8 == 0 is what ggml repacks on x86-64 (2-D mul_mat weights
        // and mul_mat_id stacks); its single-row order is the repacked GEMV's, that of
        // the other Q4_K matrices `ggml_vec_dot_q4_K_q8_K`'s.
        // Q4_0 and IQ4_NL ones too, whose every row then takes the whole-block order
        // (`TileDot::new_repacked`) in place of `ggml_vec_dot_*`'s.
        let repacks = ggml_repacks(rows, op);
        let repacked = entry.ty == fucina_quant::GgmlType::Q4_K && repacks;
        let special = if repacks {
            TileDot::new_repacked(&entry)
        } else {
            TileDot::new_unpacked(&entry)
        };
        let single = special.unwrap_or_else(|| TileDot::new(&entry));
        // llama.cpp's tiled kernel takes the whole op (every row) from 8 rows on...
        // except over the weights it repacks.
        let tiled = if pinned || repacked || op_rows.max(m) < TILED_MIN_ROWS {
            None
        } else {
            TileDot::new_tiled(&entry)
        };
        // F32 / F16 mul_mats of two rows or more go through llamafile's tinyBLAS
        // (every row of the op); mul_mat_id never does.
        let sgemm = if pinned || op == Op::MulMatId || op_rows.max(m) < SGEMM_MIN_ROWS {
            None
        } else {
            TileDot::new_sgemm(&entry, rows, w.cols())
        };
        let (prompt, gemm_rows) = match tiled.or(sgemm) {
            Some(t) => (t, m),
            None => (TileDot::new_prompt(&entry), gemm_rows),
        };
        // llama.cpp repacks (and so runs its GEMM order on) Q4_K only with rows % 8 == 0.
        let gemm_rows = if tiled.is_some() || sgemm.is_some() {
            m
        } else if pinned || !prompt.is_prompt_order() || rows % 8 != 0 {
            0
        } else {
            gemm_rows
        };
        Plan {
            w,
            m,
            gemm_rows,
            single,
            packed_single: packed_single(w, op),
            prompt,
            tiled: tiled.is_some(),
            chunk,
            n_chunks: rows.div_ceil(chunk),
            act,
            act_row: entry.act.row_bytes(w.cols()),
            out: SharedMut::new(&mut y[..m * rows]),
        }
    }

    /// Output columns `c·chunk..(c+1)·chunk` of every row.
    fn run_chunk(&self, c: usize) {
        let (w, m, act, act_row, out) = (self.w, self.m, self.act, self.act_row, &self.out);
        let rows = w.rows();
        let gemm_rows = self.gemm_rows;
        let o0 = c * self.chunk;
        let o1 = (o0 + self.chunk).min(rows);
        // Packed weights whose kernels have every order this call needs: Q4_K (never
        // tiled in llama.cpp either: these are the matrices it repacks) has both of
        // its orders; Q8_0 and Q6_K have the single-row one (a tiled Q6_K batch reads
        // unpacked rows below), widened Q4_0 the whole-block one too.
        let packed = w.packed();
        let direct = packed.filter(|p| {
            !self.tiled
                && p.has_order(self.packed_single)
                && (gemm_rows == 0 || p.has_order(PackedOrder::Pairs))
        });
        if let Some(p) = direct {
            let mut vals = [0f32; ROW_TILE * W_TILE_MAX];
            let parts = [
                (PackedOrder::Pairs, 0, gemm_rows),
                (self.packed_single, gemm_rows, m),
            ];
            for (order, s0, s1) in parts {
                // Decode: many weight rows per call (the kernel streams their groups);
                // batches: a register tile of weight rows × up to ROW_TILE rows.
                let (row_tile, w_tile) = if s1 - s0 == 1 {
                    (1, W_DECODE)
                } else if p.has_gemm() {
                    // As many weight rows per call as the buffer holds for up to 64
                    // activation rows: the kernel prepares the activations once per call.
                    let row_tile = (s1 - s0).clamp(1, 64);
                    (row_tile, (vals.len() / row_tile) / 8 * 8)
                } else {
                    (ROW_TILE, p.weights_per_call())
                };
                for r0 in (s0..s1).step_by(row_tile) {
                    let r1 = (r0 + row_tile).min(s1);
                    let acts = &act[r0 * act_row..r1 * act_row];
                    for w0 in (o0..o1).step_by(w_tile) {
                        let nw = (o1 - w0).min(w_tile);
                        let vals = &mut vals[..(r1 - r0) * nw];
                        prefetch_outputs(out, r0..r1, rows, w0, nw);
                        p.dots(order, w0..w0 + nw, acts, act_row, vals);
                        for (r, v) in (r0..r1).zip(vals.chunks_exact(nw)) {
                            // SAFETY: chunk c alone writes columns o0..o1 of every row.
                            copy_outputs(unsafe { out.slice(r * rows + w0, nw) }, v);
                        }
                    }
                }
            }
            return;
        }
        let wb = w.bytes();
        let rb = w.row_bytes();
        if m == 1 && gemm_rows == 0 && !self.tiled && packed.is_none() {
            // Decode: `W_TILE` weight rows per kernel call, the activation row loaded
            // once for them (each kernel picks its one-row strategy; bitwise the
            // single dots). A lone row kept from llama.cpp's GEMM part of a batch
            // (the last layer's projection) takes the general path's prompt order.
            let mut vals = [0f32; W_TILE];
            let mut ws: [&[u8]; W_TILE] = [&[]; W_TILE];
            for w0 in (o0..o1).step_by(W_TILE) {
                let nw = (o1 - w0).min(W_TILE);
                for (s, o) in ws.iter_mut().zip(w0..w0 + nw) {
                    *s = &wb[o * rb..(o + 1) * rb];
                }
                self.single
                    .dots(&ws[..nw], &act[..act_row], act_row, &mut vals[..nw]);
                // SAFETY: chunk c alone writes outputs o0..o1.
                copy_outputs(unsafe { out.slice(w0, nw) }, &vals[..nw]);
            }
            return;
        }
        let mut vals = [0f32; ROW_TILE * W_TILE_MAX];
        // Packed weights in an order their layout lacks (a tiled Q6_K batch) go
        // through the row-major kernels on unpacked rows (the file's row-major pages
        // were released): each row is unpacked once per call, in blocks of about
        // `UNPACK_BYTES` that every activation row then passes.
        let block = match packed {
            Some(_) => (UNPACK_BYTES / rb)
                .next_multiple_of(W_TILE_MAX)
                .max(W_TILE_MAX),
            None => (o1 - o0).max(1),
        };
        let mut unpacked = Vec::new();
        if packed.is_some() {
            unpacked.resize(block.min(o1 - o0) * rb, 0);
        }
        for b0 in (o0..o1).step_by(block) {
            let b1 = (b0 + block).min(o1);
            let (src, first) = match packed {
                Some(p) => {
                    p.unpack_rows(b0, &mut unpacked[..(b1 - b0) * rb]);
                    (&unpacked[..], b0)
                }
                None => (wb, 0),
            };
            for (tiles, s0, s1) in [(&self.prompt, 0, gemm_rows), (&self.single, gemm_rows, m)] {
                let row_tile = tiles.rows_per_call().clamp(1, ROW_TILE);
                let w_tile = tiles
                    .weights_per_call()
                    .clamp(1, W_CALL_MAX.min(vals.len() / row_tile));
                for r0 in (s0..s1).step_by(row_tile) {
                    let r1 = (r0 + row_tile).min(s1);
                    let acts = &act[r0 * act_row..r1 * act_row];
                    for w0 in (b0..b1).step_by(w_tile) {
                        let nw = (b1 - w0).min(w_tile);
                        let mut ws: [&[u8]; W_CALL_MAX] = [&[]; W_CALL_MAX];
                        for (s, o) in ws.iter_mut().zip(w0 - first..w0 - first + nw) {
                            *s = &src[o * rb..(o + 1) * rb];
                        }
                        let vals = &mut vals[..(r1 - r0) * nw];
                        prefetch_outputs(out, r0..r1, rows, w0, nw);
                        tiles.dots(&ws[..nw], acts, act_row, vals);
                        for (r, v) in (r0..r1).zip(vals.chunks_exact(nw)) {
                            // SAFETY: chunk c alone writes columns o0..o1 of every row.
                            copy_outputs(unsafe { out.slice(r * rows + w0, nw) }, v);
                        }
                    }
                }
            }
        }
    }
}
