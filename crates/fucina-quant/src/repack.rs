//! Load-time weight repacking: Q4_K matrices as interleaved groups of 8 rows, the
//! layout the x86-64 Q4_K tile kernels read straight into lanes (one weight row per
//! f32 lane). A decode GEMV then streams one contiguous buffer, front to back,
//! instead of 8 row streams at once or one row at a time with a horizontal sum per
//! row (llama.cpp repacks Q4_K into `block_q4_Kx8` for the same reason).
//!
//! Layout: group `g` holds rows `8g..8g + 8`; it is `nb = cols / 256` super-blocks of
//! [`Q4_K_X8_BLOCK_BYTES`] (1152) bytes, super-block `b` of the group being
//! * the 16-byte headers (`d`, `dmin`, 12 scale bytes) of super-block `b` of rows
//!   `8g..8g + 8`, in row order (128 bytes), then
//! * for `j` in 0..4 and `e` in 0..8: quant bytes `32j + 4e .. 32j + 4e + 4` of each
//!   of the 8 rows, in row order (1024 bytes): one 256-bit register per `(j, e)`,
//!   lane `k` = row `k`.
//!
//! Repacking changes only where the bytes live, never the arithmetic: every output of
//! [`PackedQ4K::dots`] is bitwise the output of the same order ([`Q4KOrder`]) over the
//! row-major matrix ([`crate::TileDot::new`] / [`crate::TileDot::new_prompt`]).

pub(crate) mod q6_k;

use std::ops::Range;

use fucina_gguf::GgmlType;
use memmap2::{Advice, MmapMut};

use crate::dispatch::{DotEntry, Isa, KernelPath};
use crate::{QuantError, Result};

/// Rows per interleaved group.
pub const GROUP_ROWS: usize = 8;
/// Bytes of one Q4_K super-block (256 weights).
const Q4_K_BLOCK: usize = 144;
/// Bytes of one super-block of an interleaved 8-row group.
pub const Q4_K_X8_BLOCK_BYTES: usize = GROUP_ROWS * Q4_K_BLOCK;
/// Bytes of a Q8_K activation block (the Q4_K kernels' activation format).
const Q8_K_BLOCK: usize = 292;

/// A kernel over interleaved groups: `groups` holds whole groups of `nb` super-blocks
/// each, `acts` activation rows of `stride >= 292·nb` bytes (Q8_K); `out[t * 8·ng +
/// 8·g + k]` = dot of row `k` of group `g` with activation row `t`, for every `t <
/// out.len() / (8·ng)`.
pub type PackedFn = fn(groups: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [f32]);

/// Which float order a packed product uses (both are bitwise those of the row-major
/// kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q4KOrder {
    /// The single-row order ([`crate::TileDot::new`]): one FMA per super-block.
    Single,
    /// llama.cpp's prompt-batch order ([`crate::TileDot::new_prompt`]): one FMA per pair
    /// of sub-blocks.
    Pairs,
}

fn check_shape(what: &str, len: usize, rows: usize, cols: usize) -> Result<usize> {
    if cols == 0 || !cols.is_multiple_of(256) {
        return Err(QuantError::NotBlockMultiple {
            ty: GgmlType::Q4_K,
            what: "row",
            found: cols,
            block_size: 256,
        });
    }
    if !rows.is_multiple_of(GROUP_ROWS) {
        return Err(QuantError::Shape(format!(
            "{what}: {rows} Q4_K rows are not a multiple of {GROUP_ROWS}"
        )));
    }
    let expected = (cols / 256)
        .checked_mul(Q4_K_BLOCK)
        .and_then(|rb| rb.checked_mul(rows))
        .ok_or_else(|| QuantError::Shape(format!("{rows} × {cols} Q4_K overflows usize")))?;
    if len != expected {
        return Err(QuantError::ByteLength {
            ty: GgmlType::Q4_K,
            what: "weights",
            found: len,
            expected,
        });
    }
    Ok(cols / 256)
}

/// Where byte `i` (< 144) of super-block `b` of row `k` of a group lands in the group.
#[inline]
fn x8_offset(b: usize, k: usize, i: usize) -> usize {
    let base = b * Q4_K_X8_BLOCK_BYTES;
    if i < 16 {
        base + 16 * k + i
    } else {
        let q = i - 16; // quant byte: q = 32j + 4e + n
        base + 128 + 32 * (q / 4) + 4 * k + q % 4
    }
}

/// Repack a row-major `rows × cols` Q4_K matrix (`rows % 8 == 0`) into interleaved
/// groups (the module's layout); `dst` has the same length as `src`.
pub fn interleave_q4_k(src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) -> Result<()> {
    let nb = check_shape("interleave", src.len(), rows, cols)?;
    if dst.len() != src.len() {
        return Err(QuantError::ByteLength {
            ty: GgmlType::Q4_K,
            what: "interleaved output",
            found: dst.len(),
            expected: src.len(),
        });
    }
    let row_bytes = nb * Q4_K_BLOCK;
    let gb = nb * Q4_K_X8_BLOCK_BYTES;
    for (s, d) in src
        .chunks_exact(GROUP_ROWS * row_bytes)
        .zip(dst.chunks_exact_mut(gb))
    {
        for (b, d) in d.chunks_exact_mut(Q4_K_X8_BLOCK_BYTES).enumerate() {
            // Fixed-size views: the copies below compile without bounds checks.
            let d: &mut [u8; Q4_K_X8_BLOCK_BYTES] = d.try_into().expect("whole block");
            let blk: [&[u8; Q4_K_BLOCK]; GROUP_ROWS] = core::array::from_fn(|k| {
                let o = k * row_bytes + b * Q4_K_BLOCK;
                s[o..o + Q4_K_BLOCK].try_into().expect("whole block")
            });
            for (k, blk) in blk.iter().enumerate() {
                d[16 * k..16 * k + 16].copy_from_slice(&blk[..16]);
            }
            for c in 0..32 {
                for (k, blk) in blk.iter().enumerate() {
                    let o = 128 + 32 * c + 4 * k;
                    d[o..o + 4].copy_from_slice(&blk[16 + 4 * c..20 + 4 * c]);
                }
            }
        }
    }
    Ok(())
}

/// The inverse of [`interleave_q4_k`]: interleaved groups back to row-major rows.
pub fn deinterleave_q4_k(src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) -> Result<()> {
    let nb = check_shape("deinterleave", src.len(), rows, cols)?;
    if dst.len() != src.len() {
        return Err(QuantError::ByteLength {
            ty: GgmlType::Q4_K,
            what: "row-major output",
            found: dst.len(),
            expected: src.len(),
        });
    }
    let row_bytes = nb * Q4_K_BLOCK;
    let gb = nb * Q4_K_X8_BLOCK_BYTES;
    for (s, d) in src
        .chunks_exact(gb)
        .zip(dst.chunks_exact_mut(GROUP_ROWS * row_bytes))
    {
        for (k, row) in d.chunks_exact_mut(row_bytes).enumerate() {
            for (b, blk) in row.chunks_exact_mut(Q4_K_BLOCK).enumerate() {
                for (i, v) in blk.iter_mut().enumerate() {
                    *v = s[x8_offset(b, k, i)];
                }
            }
        }
    }
    Ok(())
}

/// The packed kernels (single order, pairs order) of `entry`'s ISA, if it has them.
fn kernels(entry: &DotEntry) -> Option<(PackedFn, PackedFn)> {
    if entry.ty != GgmlType::Q4_K {
        return None;
    }
    match entry.path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Simd(Isa::Avx2) => {
            use crate::arch::x86_64::q4_k_tiles::avx2 as k;
            Some((k::packed_single, k::packed_pairs))
        }
        #[cfg(target_arch = "x86_64")]
        KernelPath::Simd(Isa::Avx512) => {
            use crate::arch::x86_64::q4_k_tiles::avx512 as k;
            Some((k::packed_single, k::packed_pairs))
        }
        _ => None,
    }
}

/// A Q4_K matrix repacked into interleaved 8-row groups, with the kernels that read
/// it. Built at load time by [`PackedQ4K::new`] when the entry's ISA has packed
/// kernels (x86-64 AVX2 and AVX-512) and the row count is a multiple of 8.
pub struct PackedQ4K {
    buf: MmapMut,
    rows: usize,
    cols: usize,
    nb: usize,
    wide: bool,
    single: PackedFn,
    pairs: PackedFn,
}

impl std::fmt::Debug for PackedQ4K {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedQ4K")
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish()
    }
}

impl PackedQ4K {
    /// Whether [`PackedQ4K::new`] would repack a `rows`-row matrix with `entry`'s kernels.
    pub fn supported(entry: &DotEntry, rows: usize) -> bool {
        rows > 0 && rows.is_multiple_of(GROUP_ROWS) && kernels(entry).is_some()
    }

    /// Repack the row-major `rows × cols` Q4_K matrix `bytes` into a new buffer
    /// (anonymous memory, transparent huge pages requested where the OS has them).
    /// `Ok(None)` when [`PackedQ4K::supported`] is false: keep the row-major form.
    pub fn new(
        entry: &DotEntry,
        bytes: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<Option<PackedQ4K>> {
        let Some((single, pairs)) = kernels(entry).filter(|_| Self::supported(entry, rows)) else {
            return Ok(None);
        };
        let nb = check_shape("repack", bytes.len(), rows, cols)?;
        let mut buf = MmapMut::map_anon(bytes.len())
            .map_err(|e| QuantError::Shape(format!("cannot map {} bytes: {e}", bytes.len())))?;
        // A hint only: without huge pages the buffer works the same, with more TLB misses.
        #[cfg(target_os = "linux")]
        let _ = buf.advise(Advice::HugePage);
        interleave_q4_k(bytes, rows, cols, &mut buf)?;
        Ok(Some(PackedQ4K {
            buf,
            rows,
            cols,
            nb,
            wide: entry.path == KernelPath::Simd(Isa::Avx512),
            single,
            pairs,
        }))
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The interleaved bytes (the module's layout).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Weight rows worth passing per [`PackedQ4K::dots`] call with several activation
    /// rows: 16 on AVX-512 (two groups per 512-bit register), else 8.
    pub fn weights_per_call(&self) -> usize {
        if self.wide {
            16
        } else {
            8
        }
    }

    /// `out[t * n + i]` = dot of weight row `rows.start + i` with activation row `t`
    /// (`acts[t * stride..(t + 1) * stride]`, Q8_K) in `order`, for every
    /// `t < out.len() / n`, `n = rows.len()`; bitwise the row-major kernels' results.
    ///
    /// # Panics
    /// If `rows` is out of range or its ends are not multiples of 8, if `stride` is
    /// shorter than a Q8_K row of `cols`, or if `acts` holds fewer rows than `out` asks
    /// for (internal contract, checked: never undefined behaviour).
    pub fn dots(
        &self,
        order: Q4KOrder,
        rows: Range<usize>,
        acts: &[u8],
        stride: usize,
        out: &mut [f32],
    ) {
        assert!(
            rows.start <= rows.end
                && rows.end <= self.rows
                && rows.start.is_multiple_of(GROUP_ROWS)
                && rows.end.is_multiple_of(GROUP_ROWS),
            "packed Q4_K rows {rows:?} of {}",
            self.rows
        );
        let n = rows.len();
        if n == 0 {
            return;
        }
        let nt = out.len() / n;
        assert!(
            stride >= self.nb * Q8_K_BLOCK && acts.len() >= nt * stride,
            "packed Q4_K activations: {nt} rows of stride {stride}, {} bytes",
            acts.len()
        );
        let gb = self.nb * Q4_K_X8_BLOCK_BYTES;
        let groups = &self.buf[rows.start / GROUP_ROWS * gb..rows.end / GROUP_ROWS * gb];
        let f = match order {
            Q4KOrder::Single => self.single,
            Q4KOrder::Pairs => self.pairs,
        };
        f(
            groups,
            self.nb,
            &acts[..nt * stride],
            stride,
            &mut out[..nt * n],
        );
    }
}
