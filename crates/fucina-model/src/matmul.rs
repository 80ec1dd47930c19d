//! `y = x · Wᵀ` for a [`Linear`] in its GGUF block format: the adapter between the
//! forward and fucina-quant's per-type dot kernels.
//!
//! Activation rows are converted once per call to the weight type's activation
//! format (llama.cpp's `vec_dot_type`: Q8_0 for legacy quants, Q8_K for K-quants,
//! F16 for F16 weights). One row (decode) is one kernel dot per output; several rows
//! (prefill) go through fucina-quant's tile kernels ([`TileDot`]): a task takes a chunk
//! of output rows × all tokens, `W_TILE` weight rows × `ROW_TILE` tokens at a time,
//! each weight block decoded once per register block of tokens; they are bitwise
//! equal to the single-row dots. Each output therefore depends only on its own row of `x`: a
//! batch of m rows gives bitwise the same results as m single-row calls (the
//! pinned-kernel property), whatever the thread count.

use fucina_quant::TileDot;

use crate::parallel::{SharedMut, ThreadPool};
use crate::weights::Linear;
use crate::{ModelError, Result};

/// Activation rows processed per weight-row sweep (keeps them in L2 while each
/// weight row is reused across them).
const ROW_TILE: usize = 64;
/// Weight rows per tile-kernel call (each activation block is loaded once for them).
const W_TILE: usize = 8;

/// Reusable buffers of [`matmul`] (converted activation rows).
#[derive(Default, Debug)]
pub struct MatmulScratch {
    act: Vec<u8>,
}

/// `y[r][o] = Σ_k x[r][k] · W[o][k]` for `m` rows: `x` is `m × cols`, `y` is
/// `m × rows` (row-major).
pub fn matmul(
    pool: &ThreadPool,
    w: &Linear,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<()> {
    let (rows, cols) = (w.rows(), w.cols());
    if x.len() < m * cols || y.len() < m * rows {
        return Err(ModelError::InvalidBatch(format!(
            "matmul '{}': {m} rows need {} inputs / {} outputs, got {} / {}",
            w.name(),
            m * cols,
            m * rows,
            x.len(),
            y.len()
        )));
    }
    let entry = *w.dot();
    let act_row = entry.act.row_bytes(cols);
    scratch.act.clear();
    for r in 0..m {
        entry
            .act
            .quantize_row(&x[r * cols..(r + 1) * cols], &mut scratch.act)?;
    }
    let act = &scratch.act;
    let wb = w.bytes();
    let rb = w.row_bytes();
    // Enough chunks to balance threads, each big enough to amortise the hand-out.
    let n_chunks = (rows / 16).clamp(1, pool.n_threads() * 8);
    let chunk = rows.div_ceil(n_chunks);
    let out = SharedMut::new(&mut y[..m * rows]);
    if m == 1 {
        pool.run(rows.div_ceil(chunk), &|c| {
            let o0 = c * chunk;
            let o1 = (o0 + chunk).min(rows);
            for o in o0..o1 {
                let v = entry.dot(&wb[o * rb..(o + 1) * rb], &act[..act_row]);
                // SAFETY: chunk c alone writes outputs o0..o1.
                unsafe { out.write(o, v) };
            }
        });
        return Ok(());
    }
    let tiles = TileDot::new(&entry);
    pool.run(rows.div_ceil(chunk), &|c| {
        let o0 = c * chunk;
        let o1 = (o0 + chunk).min(rows);
        let mut vals = [0f32; ROW_TILE * W_TILE];
        let mut ws: [&[u8]; W_TILE] = [&[]; W_TILE];
        for r0 in (0..m).step_by(ROW_TILE) {
            let r1 = (r0 + ROW_TILE).min(m);
            let acts = &act[r0 * act_row..r1 * act_row];
            for w0 in (o0..o1).step_by(W_TILE) {
                let nw = (o1 - w0).min(W_TILE);
                for (s, o) in ws.iter_mut().zip(w0..w0 + nw) {
                    *s = &wb[o * rb..(o + 1) * rb];
                }
                let vals = &mut vals[..(r1 - r0) * nw];
                tiles.dots(&ws[..nw], acts, act_row, vals);
                for (r, v) in (r0..r1).zip(vals.chunks_exact(nw)) {
                    for (k, &v) in v.iter().enumerate() {
                        // SAFETY: chunk c alone writes columns o0..o1 of every row.
                        unsafe { out.write(r * rows + w0 + k, v) };
                    }
                }
            }
        }
    });
    Ok(())
}
