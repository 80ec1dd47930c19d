//! Threaded quantized matrix products: `y = W·x` for one activation row (GEMV,
//! decode) or many (GEMM, prefill). `W` is `rows × cols` in a ggml block type, row
//! major (ggml `ne = [cols, rows]`); activations and outputs are f32, row major.
//!
//! Activations are converted once per call to the kernel's activation format (into a
//! buffer the caller may keep across calls: [`QMatrix::gemv_with`] /
//! [`QMatrix::gemm_with`]); weight rows are split into chunks that threads claim from
//! an atomic counter (so a thread slowed by another process does not hold the others
//! back). Several tokens go through the tile kernels ([`TileDot`]), which are bitwise
//! equal to the single-row dots.

use std::sync::atomic::{AtomicUsize, Ordering};

use fucina_gguf::GgmlType;

use crate::dispatch::{DotEntry, Kernels};
use crate::gemm::TileDot;
use crate::pool::ThreadPool;
use crate::repack::{Packed, PackedOrder};
use crate::{QuantError, Result};

/// Fewest weight rows a thread claims at once (whole tiles; the last claim may be
/// shorter).
const MIN_CLAIM_ROWS: usize = 16;
/// Weight rows per tile-kernel call: a tile's weights stay in L1 while its tokens pass.
const GEMM_TILE_ROWS: usize = 8;
/// Tokens per tile-kernel call (their activations stay in L1/L2 while the weights pass).
const GEMM_TILE_TOKENS: usize = 64;

/// A quantized weight matrix checked once: type, shape and byte length agree.
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    entry: DotEntry,
    bytes: &'a [u8],
    packed: Option<&'a Packed>,
    rows: usize,
    cols: usize,
    row_bytes: usize,
}

impl<'a> QMatrix<'a> {
    /// Wrap `bytes` as a `rows × cols` matrix of `ty`, with the dot kernels of `kernels`.
    pub fn new(
        kernels: &Kernels,
        ty: GgmlType,
        bytes: &'a [u8],
        rows: usize,
        cols: usize,
    ) -> Result<QMatrix<'a>> {
        let entry = kernels.entry(ty)?;
        if cols == 0 || !cols.is_multiple_of(entry.block_size) {
            return Err(QuantError::NotBlockMultiple {
                ty,
                what: "row",
                found: cols,
                block_size: entry.block_size,
            });
        }
        let row_bytes = cols / entry.block_size * entry.type_size;
        let total = rows
            .checked_mul(row_bytes)
            .ok_or_else(|| QuantError::Shape(format!("{rows} × {cols} {ty} overflows usize")))?;
        if bytes.len() != total {
            return Err(QuantError::ByteLength {
                ty,
                what: "weights",
                found: bytes.len(),
                expected: total,
            });
        }
        Ok(QMatrix {
            entry,
            bytes,
            packed: None,
            rows,
            cols,
            row_bytes,
        })
    }

    /// A repacked matrix ([`Packed`]), with `kernels`' dot entry for its type (the one
    /// the matrix was packed for): the same results, bitwise, as the row-major matrix.
    pub fn interleaved(kernels: &Kernels, packed: &'a Packed) -> Result<QMatrix<'a>> {
        let ty = packed.ty();
        let entry = kernels.entry(ty)?;
        if !Packed::supported(&entry, packed.rows()) {
            return Err(QuantError::Unsupported {
                ty,
                op: "interleaved matmul on this ISA",
            });
        }
        Ok(QMatrix {
            entry,
            bytes: &[],
            packed: Some(packed),
            rows: packed.rows(),
            cols: packed.cols(),
            row_bytes: packed.row_bytes(),
        })
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The dot kernel in use.
    pub fn entry(&self) -> &DotEntry {
        &self.entry
    }

    fn row(&self, r: usize) -> &[u8] {
        &self.bytes[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// `y = W·x` for one activation row (`x.len() == cols`, `y.len() == rows`).
    pub fn gemv(&self, pool: &ThreadPool, x: &[f32], y: &mut [f32]) -> Result<()> {
        self.gemm_with(pool, x, 1, y, &mut Vec::new())
    }

    /// [`QMatrix::gemv`] converting the activations into `acts` (reused across calls:
    /// no allocation once it has grown to the row size).
    pub fn gemv_with(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        y: &mut [f32],
        acts: &mut Vec<u8>,
    ) -> Result<()> {
        self.gemm_with(pool, x, 1, y, acts)
    }

    /// `Y = X·Wᵀ` for `n` activation rows: `x` is `n × cols`, `y` is `n × rows`.
    pub fn gemm(&self, pool: &ThreadPool, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
        self.gemm_with(pool, x, n, y, &mut Vec::new())
    }

    /// [`QMatrix::gemm`] converting the activations into `acts` (reused across calls:
    /// no allocation once it has grown to `n` rows).
    pub fn gemm_with(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        n: usize,
        y: &mut [f32],
        acts: &mut Vec<u8>,
    ) -> Result<()> {
        let ty = self.entry.ty;
        let (want_x, want_y) = (n.saturating_mul(self.cols), n.saturating_mul(self.rows));
        if x.len() != want_x {
            return Err(QuantError::ElementCount {
                ty,
                what: "activations",
                found: x.len(),
                expected: want_x,
            });
        }
        if y.len() != want_y {
            return Err(QuantError::ElementCount {
                ty,
                what: "output",
                found: y.len(),
                expected: want_y,
            });
        }
        if n == 0 || self.rows == 0 {
            return Ok(());
        }
        let act = self.entry.act;
        let act_row = act.row_bytes(self.cols);
        acts.clear();
        acts.resize(n * act_row, 0);
        for (src, dst) in x
            .chunks_exact(self.cols)
            .zip(acts.chunks_exact_mut(act_row))
        {
            act.quantize_into(src, dst);
        }
        let next = AtomicUsize::new(0);
        let out = SharedOut::new(y);
        let acts = &acts[..];
        let tiles = TileDot::new(&self.entry);
        let claims = Claims::new(self.rows, pool.n_threads(), self.row_bytes * n);
        pool.run(&|_thread| {
            while let Some((start, end)) = claims.next(&next) {
                let mut vals = [0f32; GEMM_TILE_ROWS * GEMM_TILE_TOKENS];
                let mut ws: [&[u8]; GEMM_TILE_ROWS] = [&[]; GEMM_TILE_ROWS];
                for k0 in (0..n).step_by(GEMM_TILE_TOKENS) {
                    let k1 = (k0 + GEMM_TILE_TOKENS).min(n);
                    let tile_acts = &acts[k0 * act_row..k1 * act_row];
                    if let Some(p) = self.packed {
                        // Claims are whole tiles of 8 rows and `rows % 8 == 0`; one
                        // token streams 64 rows per call.
                        let step = if k1 - k0 == 1 { 64 } else { GEMM_TILE_ROWS };
                        for t0 in (start..end).step_by(step) {
                            let nw = (end - t0).min(step);
                            let vals = &mut vals[..(k1 - k0) * nw];
                            p.dots(PackedOrder::Single, t0..t0 + nw, tile_acts, act_row, vals);
                            for (tok, v) in (k0..k1).zip(vals.chunks_exact(nw)) {
                                out.write(tok * self.rows + t0, v);
                            }
                        }
                        continue;
                    }
                    for t0 in (start..end).step_by(GEMM_TILE_ROWS) {
                        let nw = (end - t0).min(GEMM_TILE_ROWS);
                        for (w, r) in ws.iter_mut().zip(t0..t0 + nw) {
                            *w = self.row(r);
                        }
                        let vals = &mut vals[..(k1 - k0) * nw];
                        tiles.dots(&ws[..nw], tile_acts, act_row, vals);
                        for (tok, v) in (k0..k1).zip(vals.chunks_exact(nw)) {
                            out.write(tok * self.rows + t0, v);
                        }
                    }
                }
            }
        });
        Ok(())
    }
}

/// Guided self-scheduling of a call's weight rows: each claim takes half the remaining
/// rows' fair share (`remaining / (2 · threads)`, rounded up to whole tiles, at least
/// [`MIN_CLAIM_ROWS`]), so the first claims are large (few round trips of the shared
/// counter's cache line between cores) and the last ones small (little waiting for
/// the slowest thread). A claim never exceeds [`MAX_CLAIM_BYTES`] of weights × tokens,
/// so a thread the OS deschedules mid-claim holds back little work. Which thread
/// computes a row never changes its result.
struct Claims {
    rows: usize,
    threads: usize,
    max_rows: usize,
}

/// Largest weight bytes × tokens one claim covers (tens of microseconds of work).
const MAX_CLAIM_BYTES: usize = 1 << 18;

impl Claims {
    /// `work_per_row`: weight bytes of a row × tokens.
    fn new(rows: usize, threads: usize, work_per_row: usize) -> Claims {
        let max_rows = (MAX_CLAIM_BYTES / work_per_row.max(1))
            .next_multiple_of(GEMM_TILE_ROWS)
            .max(MIN_CLAIM_ROWS);
        Claims {
            rows,
            threads: threads.max(1),
            max_rows,
        }
    }

    /// The next range of rows, or `None` once every row is claimed.
    fn next(&self, counter: &AtomicUsize) -> Option<(usize, usize)> {
        let mut cur = counter.load(Ordering::Relaxed);
        loop {
            if cur >= self.rows {
                return None;
            }
            let rem = self.rows - cur;
            let size = (rem / (2 * self.threads))
                .next_multiple_of(GEMM_TILE_ROWS)
                .clamp(MIN_CLAIM_ROWS, self.max_rows)
                .min(rem);
            match counter.compare_exchange_weak(
                cur,
                cur + size,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some((cur, cur + size)),
                Err(seen) => cur = seen,
            }
        }
    }
}

/// The output matrix shared by the threads of one call; each thread writes only the
/// rows of the chunks it claimed from the atomic counter, so writes never overlap.
struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `SharedOut` is only used inside one `gemm` call, whose threads write
// disjoint index ranges (rows claimed exclusively through an atomic counter) and
// never read; the borrow of `y` outlives the call.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    fn new(y: &mut [f32]) -> SharedOut {
        SharedOut {
            ptr: y.as_mut_ptr(),
            len: y.len(),
        }
    }

    /// Write `vals` at `start..start + vals.len()`.
    fn write(&self, start: usize, vals: &[f32]) {
        assert!(start + vals.len() <= self.len, "output range out of bounds");
        // SAFETY: the range is in bounds (checked above) of the `&mut [f32]` this was
        // built from, which is borrowed for the whole call, and no other thread writes
        // it (see the `Sync` impl).
        unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), self.ptr.add(start), vals.len()) }
    }
}
