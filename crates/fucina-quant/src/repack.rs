//! Load-time weight repacking into interleaved groups of 8 rows ([`Packed`]): Q4_K
//! (this file's layout, below), Q8_0 (`q8_0.rs`) and Q6_K (`q6_k.rs`).
//!
//! Q4_K: the layout the x86-64 Q4_K tile kernels read straight into lanes (one weight
//! row per f32 lane). A decode GEMV then streams one contiguous buffer, front to back,
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
//! [`Packed::dots`] is bitwise the output of the same order ([`PackedOrder`]) over the
//! row-major matrix ([`crate::TileDot::new`] / [`crate::TileDot::new_prompt`]).

use std::ops::Range;

use fucina_gguf::GgmlType;
use memmap2::{Advice, MmapMut};

use crate::dispatch::{DotEntry, Isa, KernelPath};
use crate::{QuantError, Result};

// Their kernels exist for x86-64 only: elsewhere the layouts are built by no one.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) mod q6_k;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) mod q8_0;

/// Source bytes packed between two calls of [`Packed::new_releasing`]'s `done`.
const RELEASE_BYTES: usize = 8 << 20;
/// Rows per interleaved group.
pub const GROUP_ROWS: usize = 8;
/// Bytes of one Q4_K super-block (256 weights).
const Q4_K_BLOCK: usize = 144;
/// Bytes of one super-block of an interleaved 8-row group.
pub const Q4_K_X8_BLOCK_BYTES: usize = GROUP_ROWS * Q4_K_BLOCK;
/// Bytes of a Q8_K activation block (the Q4_K and Q6_K kernels' activation format).
use crate::formats::kquants::Q8_K_BYTES as Q8_K_BLOCK;

/// A kernel over interleaved groups: `groups` holds whole groups of `nb` super-blocks
/// each, `acts` activation rows of `stride >= 292·nb` bytes (Q8_K); `out[t * 8·ng +
/// 8·g + k]` = dot of row `k` of group `g` with activation row `t`, for every `t <
/// out.len() / (8·ng)`.
pub type PackedFn = fn(groups: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [f32]);

/// Which float order a packed product uses (each bitwise that of the row-major
/// kernels named).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackedOrder {
    /// The single-row order ([`crate::TileDot::new`]; Q4_K: one FMA per super-block).
    Single,
    /// Q4_K: llama.cpp's prompt-batch order ([`crate::TileDot::new_prompt`]): one FMA
    /// per pair of sub-blocks.
    Pairs,
    /// Q4_0 widened to Q8_0 on AVX-512 VNNI: llama.cpp's order over the Q4_0 matrices
    /// it repacks ([`crate::TileDot::new_repacked`], [`crate::whole_block`]), one FMA
    /// per block of 32 (the whole-block kernel of [`Packed::approx_dots`]).
    WholeBlock,
}

/// Checks for repacking a row-major `rows × cols` matrix of `ty` (`src` bytes) into
/// `dst` bytes of 8-row groups: whole blocks per row, rows % 8 == 0, both lengths
/// right. Returns the blocks per row.
pub(crate) fn check_rows(
    ty: GgmlType,
    what: &str,
    src: usize,
    dst: usize,
    rows: usize,
    cols: usize,
) -> Result<usize> {
    let (block_size, type_size) = (ty.block_size() as usize, ty.type_size() as usize);
    if cols == 0 || !cols.is_multiple_of(block_size) {
        return Err(QuantError::NotBlockMultiple {
            ty,
            what: "row",
            found: cols,
            block_size,
        });
    }
    if rows == 0 || !rows.is_multiple_of(GROUP_ROWS) {
        return Err(QuantError::Shape(format!(
            "{what}: {rows} {ty} rows are not a positive multiple of {GROUP_ROWS}"
        )));
    }
    let expected = (cols / block_size)
        .checked_mul(type_size)
        .and_then(|rb| rb.checked_mul(rows))
        .ok_or_else(|| QuantError::Shape(format!("{rows} × {cols} {ty} overflows usize")))?;
    for (found, what) in [(src, "weights"), (dst, "repacked output")] {
        if found != expected {
            return Err(QuantError::ByteLength {
                ty,
                what,
                found,
                expected,
            });
        }
    }
    Ok(cols / block_size)
}

/// Shape checks ([`check_rows`]), then `f(nb, rows, group)` for every 8-row group:
/// `rows` its 8 row-major rows, `group` its bytes of the packed matrix (the same
/// length). Returns the blocks per row.
pub(crate) fn for_each_group(
    ty: GgmlType,
    what: &str,
    src: &[u8],
    rows: usize,
    cols: usize,
    dst: &mut [u8],
    mut f: impl FnMut(usize, &[u8], &mut [u8]),
) -> Result<usize> {
    let nb = check_rows(ty, what, src.len(), dst.len(), rows, cols)?;
    let group = GROUP_ROWS * nb * ty.type_size() as usize;
    for (s, d) in src.chunks_exact(group).zip(dst.chunks_exact_mut(group)) {
        f(nb, s, d);
    }
    Ok(nb)
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
    for_each_group(
        GgmlType::Q4_K,
        "interleave",
        src,
        rows,
        cols,
        dst,
        |nb, s, d| {
            let row_bytes = nb * Q4_K_BLOCK;
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
        },
    )?;
    Ok(())
}

/// The inverse of [`interleave_q4_k`]: interleaved groups back to row-major rows.
pub fn deinterleave_q4_k(src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) -> Result<()> {
    check_rows(
        GgmlType::Q4_K,
        "deinterleave",
        src.len(),
        dst.len(),
        rows,
        cols,
    )?;
    unpack_rows_q4_k(src, cols, 0, dst);
    Ok(())
}

/// Row-major bytes of rows `first..` (whole rows filling `dst`, any range) of an
/// interleaved Q4_K matrix of `cols` columns.
fn unpack_rows_q4_k(packed: &[u8], cols: usize, first: usize, dst: &mut [u8]) {
    let rb = cols / 256 * Q4_K_BLOCK;
    for (i, row) in dst.chunks_exact_mut(rb).enumerate() {
        let (g, k) = ((first + i) / GROUP_ROWS, (first + i) % GROUP_ROWS);
        let grp = &packed[g * GROUP_ROWS * rb..(g + 1) * GROUP_ROWS * rb];
        for (b, blk) in row.chunks_exact_mut(Q4_K_BLOCK).enumerate() {
            for (j, v) in blk.iter_mut().enumerate() {
                *v = grp[x8_offset(b, k, j)];
            }
        }
    }
}

/// The packed kernels (single order, pairs order) of `entry`'s ISA, if it has them.
fn q4_k_kernels(entry: &DotEntry) -> Option<(PackedFn, PackedFn)> {
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

/// A GEMV over packed 8-row groups of a layout with one float order (Q8_0, Q6_K):
/// `groups` = whole groups of `nb` blocks, `act` = one activation row,
/// `out[8g + r]` = row `r` of group `g`.
pub(crate) type GemvFn = fn(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]);
/// The multi-row form of a [`GemvFn`]: `out[t * n + i]` = row `i` of the groups
/// (`n = 8 · groups`) against activation row `t` (`acts[t * stride..]`), for every
/// `t < out.len() / n`; per output bitwise the GEMV's result.
pub(crate) type GemmFn = fn(groups: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [f32]);
/// Whole-block approximate dots over packed groups ([`Packed::approx_dots`]):
/// `out[t * n + i]` for row `i` of the groups and activation row `t`, and `dmax[i]`
/// = the largest `|d|` of row `i`'s blocks.
pub(crate) type ApproxFn =
    fn(groups: &[u8], nb: usize, acts: &[u8], stride: usize, out: &mut [f32], dmax: &mut [f32]);
/// Row-major bytes of packed rows `first..` into `dst` (whole rows).
type UnpackFn = fn(packed: &[u8], cols: usize, first: usize, dst: &mut [u8]);

/// Where a packed decode GEMV prefetches its weight stream in software (a hint:
/// results never depend on it), settled once per process per layout by the
/// repacking's calibration ([`Packed::pays_off`]): CPUs differ in which one streams
/// fastest (Zen 4: none; Zen 5: L1; Intel Xeons with AVX-512: L2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefetch {
    /// None: the hardware prefetchers alone.
    Off = 0,
    /// Into L1 (`prefetcht0`), a few super-blocks ahead (each kernel's own distance).
    L1 = 1,
    /// Into L2 (`prefetcht1`), 8 KiB ahead.
    L2 = 2,
}

/// A kernel's [`Prefetch`] choice, shared by every thread running it.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct PrefetchCell(std::sync::atomic::AtomicU8);

#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl PrefetchCell {
    pub(crate) const fn new(p: Prefetch) -> PrefetchCell {
        PrefetchCell(std::sync::atomic::AtomicU8::new(p as u8))
    }

    #[inline]
    pub(crate) fn get(&self) -> Prefetch {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Prefetch::Off,
            2 => Prefetch::L2,
            _ => Prefetch::L1,
        }
    }

    pub(crate) fn set(&self, p: Prefetch) {
        self.0.store(p as u8, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The faster of prefetching into L1 (`l1` seconds) and into L2 (`l2`), L2 unless L1
/// is at least 3% faster (they tie where the hardware prefetchers keep up; under load
/// from both cores L2 requests hold up better, as measured on an Intel Xeon), with
/// its time.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn faster_prefetch(l1: f64, l2: f64) -> (Prefetch, f64) {
    if l1 * 1.03 < l2 {
        (Prefetch::L1, l1)
    } else {
        (Prefetch::L2, l2)
    }
}

/// `A = Σ_b |d_b| · Σ_j |q_j|` of a Q8_0 activation row (`nb` blocks of 34 bytes),
/// rounded up: with a weight row's largest block scale, the bound on the terms of its
/// dot that [`Packed::approx_dots`] states its error against. Infinite or NaN where a
/// scale is.
pub fn q8_0_magnitude(row: &[u8]) -> f32 {
    let a: f64 = row
        .chunks_exact(34)
        .map(|y| {
            let d = crate::half::f16_to_f32(u16::from_le_bytes([y[0], y[1]])) as f64;
            let q: u32 = y[2..]
                .iter()
                .map(|&v| (v as i8).unsigned_abs() as u32)
                .sum();
            d.abs() * q as f64
        })
        .sum();
    (a * (1.0 + 1e-6)) as f32
}

/// The factor `s` of [`Packed::approx_dots`]'s bound `s · dmax · A` for rows of `nb`
/// blocks: `2 · 2 · γ_(nb + 4) · 128` (twice the two results' error terms), rounded up.
pub fn approx_slack(nb: usize) -> f32 {
    let k = (nb + 4) as f64;
    let u = (2.0f64).powi(-24);
    let gamma = k * u / (1.0 - k * u);
    (4.0 * gamma * 128.0 * (1.0 + 1e-6)) as f32
}

/// The kernels that read one packed layout.
#[derive(Clone, Copy)]
enum Layout {
    /// Q4_K, both of its float orders ([`PackedOrder`]).
    Q4K { single: PackedFn, pairs: PackedFn },
    /// Q8_0 or Q6_K: the single-row order only (other orders read unpacked rows).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Rows {
        gemv: GemvFn,
        /// Several activation rows at once (else the GEMV once per row).
        gemm: Option<GemmFn>,
        /// Whole-block approximations with a bound ([`Packed::approx_dots`]).
        approx: Option<ApproxFn>,
        unpack: UnpackFn,
        /// Where the GEMV prefetches.
        prefetch: &'static PrefetchCell,
    },
}

/// The block type a packed matrix of `ty` stores: Q8_0 for Q4_0 and Q5_0 (widened to
/// Q8_0 blocks of the same values: their dots are Q8_0's, bitwise), else `ty`.
fn stored_ty(ty: GgmlType) -> GgmlType {
    if q8_0::widens(ty) {
        GgmlType::Q8_0
    } else {
        ty
    }
}

/// The packed layout of `entry`'s type and ISA, if there is one.
fn layout(entry: &DotEntry) -> Option<Layout> {
    if let Some((single, pairs)) = q4_k_kernels(entry) {
        return Some(Layout::Q4K { single, pairs });
    }
    match (entry.ty, entry.path) {
        // Q4_0 / Q5_0 widened to Q8_0 blocks of the same values (`Packed::stored_ty`):
        // the Q8_0 kernels, rows unpacked back to the matrix's own type.
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0, KernelPath::Simd(Isa::Avx512)) => {
            Some(Layout::Rows {
                gemv: crate::arch::x86_64::q8_0_x8::kernel()?,
                gemm: crate::arch::x86_64::q8_0_x8::gemm_kernel(),
                approx: crate::arch::x86_64::q8_0_x8::approx_kernel(),
                unpack: match entry.ty {
                    GgmlType::Q4_0 => q8_0::unpack_rows_q4_0,
                    GgmlType::Q5_0 => q8_0::unpack_rows_q5_0,
                    _ => q8_0::unpack_rows_q8_0,
                },
                prefetch: &crate::arch::x86_64::q8_0_x8::GEMV_PREFETCH,
            })
        }
        #[cfg(target_arch = "x86_64")]
        (GgmlType::Q6_K, KernelPath::Simd(Isa::Avx512)) => Some(Layout::Rows {
            gemv: crate::arch::x86_64::q6_k_x8::kernel()?,
            gemm: crate::arch::x86_64::q6_k_x8::gemm_kernel(),
            approx: None,
            prefetch: &crate::arch::x86_64::q6_k_x8::GEMV_PREFETCH,
            unpack: |packed, cols, first, dst| {
                let n = dst.len() / (cols / 256 * q6_k::Q6_K_BLOCK);
                q6_k::unpack_rows_q6_k(packed, cols, first, n, dst)
            },
        }),
        _ => None,
    }
}

/// A weight matrix repacked at load time into interleaved 8-row groups, with the
/// kernels that read it:
/// * Q4_K ([`interleave_q4_k`]'s layout) on AVX2 and AVX-512: both of llama.cpp's
///   orders ([`PackedOrder`]);
/// * Q8_0 (`q8_0`'s layout: row pairs in 512-bit registers) on AVX-512 VNNI and
///   Q6_K (`q6_k`'s layout: packed 6-bit fields) on AVX-512 VNNI + VBMI: the
///   single-row order (Q8_0's only one); a batch loops over its activation rows;
/// * Q4_0 and Q5_0 on AVX-512 VNNI, widened into Q8_0's layout (the same values as
///   Q8_0 blocks, [`Packed::stored_ty`]): ggml's dots of the three types share one
///   float structure, so the Q8_0 kernels give each type's single-row results
///   bitwise, at Q8_0's speed instead of decoding 4- or 5-bit fields per product.
///
/// Built by [`Packed::new`] when the entry's type and ISA have packed kernels and the
/// row count is a multiple of 8. The packed buffer has the row-major matrix's byte
/// count (widened types: [`Packed::packed_len`], 34 bytes a block);
/// [`Packed::unpack_rows`] gives back any rows in row-major form of the matrix's own
/// type (for the orders the packed kernels do not have, e.g. llama.cpp's tiled order).
pub struct Packed {
    buf: MmapMut,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    nb: usize,
    wide: bool,
    layout: Layout,
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish()
    }
}

/// `f(key)` once per process for each key: later calls (and concurrent ones, which
/// wait under the lock) get the first answer.
fn once_per_key<K: PartialEq + Copy, V: Copy>(
    memo: &std::sync::OnceLock<std::sync::Mutex<Vec<(K, V)>>>,
    key: K,
    f: impl FnOnce() -> V,
) -> V {
    let memo = memo.get_or_init(Default::default);
    let mut memo = memo.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, v)) = memo.iter().find(|(k, _)| *k == key) {
        return v;
    }
    let v = f();
    memo.push((key, v));
    v
}

/// Whether repacking pays off for `entry`'s matrices on this CPU (see
/// [`Packed::pays_off`]): measured once per weight type and kernel path. The packed
/// GEMV may take up to `margin` times the row-major kernels' time (below 1: it must
/// win by that much).
fn measured_pays_off(entry: &DotEntry, margin: f64) -> bool {
    type Memo = Vec<((GgmlType, KernelPath), bool)>;
    static MEMO: std::sync::OnceLock<std::sync::Mutex<Memo>> = std::sync::OnceLock::new();
    once_per_key(&MEMO, (entry.ty, entry.path), || match calibrate(entry) {
        Some((packed, rows)) => packed < rows * margin,
        None => true,
    })
}

/// [`measured_pays_off`]'s margin for a `Rows` layout: what the packed form brings
/// beyond its one-row GEMV.
///
/// * Without a GEMM kernel, prompt batches unpack its rows once per call: the packed
///   GEMV must win by 10%.
/// * With a whole-block kernel (Q8_0 on AVX-512 VNNI) the packed form carries every
///   batch: row-major Q8_0 batches decode their rows into this very layout on each
///   call (`legacy_gemm`), and a greedy head decides from the whole-block pass only
///   when packed. Gemma 3 270M, 2-core EPYC (Zen 5), 2 threads: a greedy verify of
///   17 rows 36 ms row-major against 21 ms packed, a one-row decode step 7.8 against
///   7.4 ms, while the one-thread calibration read the packed GEMV 1.05-1.18x slower
///   (at 2 threads the two kernels stream memory alike, 0.8-1.1x). It is kept unless
///   its one-row GEMV is 30% slower.
/// * Otherwise (Q6_K's GEMM): it must simply be faster.
fn rows_margin(gemm: bool, approx: bool) -> f64 {
    match (gemm, approx) {
        (false, _) => 1.0 / 1.1,
        (true, true) => 1.3,
        (true, false) => 1.0,
    }
}

/// Weight bytes [`Packed::calibrate`] streams through each kernel per round.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const CALIBRATE_BYTES: usize = 16 << 20;
/// Columns of the calibration matrices.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const CALIBRATE_COLS: usize = 4096;

/// Best of 3 single-thread seconds of each of `runs` over `bufs`, flushed from the
/// caches before every run (rounds interleave the runs, so a shared machine's
/// phases hit them alike).
#[cfg(target_arch = "x86_64")]
fn time_from_memory<const N: usize>(bufs: &[&[u8]], runs: [&mut dyn FnMut(); N]) -> [f64; N] {
    use core::arch::x86_64::{_mm_clflush, _mm_mfence};
    let flush = || {
        for line in bufs.iter().flat_map(|b| b.chunks(64)) {
            // SAFETY: SSE2 (x86-64 baseline); `line` points into a live buffer.
            unsafe { _mm_clflush(line.as_ptr()) };
        }
        // SAFETY: SSE2, no operands.
        unsafe { _mm_mfence() };
    };
    let mut best = [f64::INFINITY; N];
    let mut runs = runs;
    for _round in 0..3 {
        for (run, best) in runs.iter_mut().zip(best.iter_mut()) {
            flush();
            let t = std::time::Instant::now();
            run();
            *best = best.min(t.elapsed().as_secs_f64());
        }
    }
    best
}

/// About [`CALIBRATE_BYTES`] of whole 8-row groups of `entry`'s type, `CALIBRATE_COLS`
/// wide, and one activation row for them. Timing does not depend on the values, only
/// on the bytes being real memory: 0x3c bytes (every f16 scale 1.06: no subnormal
/// arithmetic) with each page's first 8 bytes its index (no two pages alike, so no
/// page sharing can fold them); a kernel may read the buffer as groups or as rows.
#[cfg(target_arch = "x86_64")]
fn calibration_data(entry: &DotEntry) -> Option<(Vec<u8>, usize, Vec<u8>)> {
    let row_bytes = CALIBRATE_COLS / entry.block_size * entry.type_size;
    let rows = CALIBRATE_BYTES / row_bytes / GROUP_ROWS * GROUP_ROWS;
    let buf = calibration_bytes(rows * row_bytes);
    let x: Vec<f32> = (0..CALIBRATE_COLS)
        .map(|i| (i % 17) as f32 / 8.0 - 1.0)
        .collect();
    let mut act = Vec::new();
    entry.act.quantize_row(&x, &mut act).ok()?;
    Some((buf, rows, act))
}

/// `len` bytes of [`calibration_data`]'s kind.
#[cfg(target_arch = "x86_64")]
fn calibration_bytes(len: usize) -> Vec<u8> {
    let mut buf = vec![0x3c_u8; len];
    for (i, page) in buf.chunks_mut(4096).enumerate() {
        let n = page.len().min(8);
        page[..n].copy_from_slice(&(i as u64).to_le_bytes()[..n]);
    }
    buf
}

/// [`Packed::calibrate`] (x86-64: the only ISA with `Rows` layouts).
#[cfg(target_arch = "x86_64")]
fn calibrate(entry: &DotEntry) -> Option<(f64, f64)> {
    let Some(Layout::Rows { gemv, prefetch, .. }) = layout(entry) else {
        return None;
    };
    let (buf, rows, act) = calibration_data(entry)?;
    let row_bytes = buf.len() / rows;
    // A widened type's packed GEMV streams its Q8_0 bytes (as many weights, more bytes).
    let widened = (stored_ty(entry.ty) != entry.ty)
        .then(|| calibration_bytes(Packed::packed_len(entry, rows, CALIBRATE_COLS)));
    let packed = widened.as_deref().unwrap_or(&buf);
    let flushed: &[&[u8]] = match &widened {
        Some(w) => &[&buf, w],
        None => &[&buf],
    };
    let tiles = crate::TileDot::new(entry);
    let (mut out, mut out1, mut out2) = (vec![0f32; rows], vec![0f32; rows], vec![0f32; rows]);
    let nb = CALIBRATE_COLS / entry.block_size;
    let [l1, l2, by_rows] = time_from_memory(
        flushed,
        [
            &mut || {
                prefetch.set(Prefetch::L1);
                gemv(packed, nb, &act, &mut out)
            },
            &mut || {
                prefetch.set(Prefetch::L2);
                gemv(packed, nb, &act, &mut out1)
            },
            &mut || {
                for (r0, o) in out2.chunks_exact_mut(GROUP_ROWS).enumerate() {
                    let ws: [&[u8]; GROUP_ROWS] = std::array::from_fn(|i| {
                        let r = r0 * GROUP_ROWS + i;
                        &buf[r * row_bytes..(r + 1) * row_bytes]
                    });
                    tiles.dots(&ws, &act, act.len(), o);
                }
            },
        ],
    );
    std::hint::black_box((&out, &out1, &out2));
    let (choice, packed) = faster_prefetch(l1, l2);
    prefetch.set(choice);
    Some((packed, by_rows))
}

#[cfg(not(target_arch = "x86_64"))]
fn calibrate(_entry: &DotEntry) -> Option<(f64, f64)> {
    None
}

/// Settle where the packed Q4_K decode GEMV prefetches in software (x86-64's
/// `GEMV_PREFETCH`), once per process: `entry`'s packed single-row kernel streams
/// [`CALIBRATE_BYTES`] from memory prefetching into L1, into L2 and not at all; the
/// faster of L1 and L2 ([`faster_prefetch`]) stays unless going without is at least
/// 5% faster. Returns the times (with the faster prefetch, without).
fn tune_q4_k_prefetch(entry: &DotEntry) -> Option<(f64, f64)> {
    // One flag serves every ISA's kernel: the first measurement settles it.
    type Memo = Vec<((), Option<(f64, f64)>)>;
    static MEMO: std::sync::OnceLock<std::sync::Mutex<Memo>> = std::sync::OnceLock::new();
    if !matches!(layout(entry), Some(Layout::Q4K { .. })) {
        return None;
    }
    once_per_key(&MEMO, (), || measure_q4_k_prefetch(entry))
}

#[cfg(target_arch = "x86_64")]
fn measure_q4_k_prefetch(entry: &DotEntry) -> Option<(f64, f64)> {
    use crate::arch::x86_64::q4_k_tiles::GEMV_PREFETCH;
    let Some(Layout::Q4K { single, .. }) = layout(entry) else {
        return None;
    };
    let (buf, rows, act) = calibration_data(entry)?;
    let (mut out, mut out1, mut out2) = (vec![0f32; rows], vec![0f32; rows], vec![0f32; rows]);
    let nb = CALIBRATE_COLS / entry.block_size;
    let stride = act.len();
    let [l1, l2, without] = time_from_memory(
        &[&buf],
        [
            &mut || {
                GEMV_PREFETCH.set(Prefetch::L1);
                single(&buf, nb, &act, stride, &mut out);
            },
            &mut || {
                GEMV_PREFETCH.set(Prefetch::L2);
                single(&buf, nb, &act, stride, &mut out1);
            },
            &mut || {
                GEMV_PREFETCH.set(Prefetch::Off);
                single(&buf, nb, &act, stride, &mut out2);
            },
        ],
    );
    std::hint::black_box((&out, &out1, &out2));
    let (choice, with) = faster_prefetch(l1, l2);
    GEMV_PREFETCH.set(if without * 1.05 < with {
        Prefetch::Off
    } else {
        choice
    });
    Some((with, without))
}

#[cfg(not(target_arch = "x86_64"))]
fn measure_q4_k_prefetch(_entry: &DotEntry) -> Option<(f64, f64)> {
    None
}

impl Packed {
    /// Whether repacking `entry`'s matrices makes them faster on this CPU, so that a
    /// loader should (results are bitwise the same either way).
    ///
    /// Q4_K: always, where it has a layout (its packed kernels serve both of
    /// llama.cpp's orders, prompt batches included); the first call also settles
    /// whether its decode GEMV prefetches in software, by the same kind of
    /// measurement. Q8_0, Q6_K, Q4_0 and Q5_0 (single-row order only): where, streaming weights
    /// from memory on one thread, the packed GEMV is faster than the row-major kernels
    /// (a layout without a GEMM kernel, whose prompt batches unpack packed rows per
    /// call: by at least 10%; Q8_0, whose packed form carries every batch and a greedy
    /// head's whole-block pass: unless 30% slower, see `rows_margin`; Q4_0 and Q5_0,
    /// widened to more bytes than the file's: unless slower at all),
    /// measured once per process by [`Packed::calibrate`] (about 15 ms, the first time
    /// a model with such matrices loads), which also settles where their GEMV
    /// prefetches ([`Packed::prefetch`]). The same packed Q6_K kernel
    /// streams at ~65 GB/s per core on Zen 5 and loses to the row-major one on Zen 4
    /// (25 against 30 GB/s on Qwen3.5's 248k-row head, 2 threads), whose in-cache
    /// speed still favours it: only a measurement from memory tells them apart.
    pub fn pays_off(entry: &DotEntry) -> bool {
        match layout(entry) {
            None => false,
            Some(Layout::Q4K { .. }) => {
                tune_q4_k_prefetch(entry);
                true
            }
            // Widened: more bytes per weight, so its GEMV must be no slower.
            Some(Layout::Rows { .. }) if stored_ty(entry.ty) != entry.ty => {
                measured_pays_off(entry, 1.0)
            }
            Some(Layout::Rows { gemm, approx, .. }) => {
                measured_pays_off(entry, rows_margin(gemm.is_some(), approx.is_some()))
            }
        }
    }

    /// The Q4_K packed GEMV's prefetch measurement behind [`Packed::pays_off`] (which
    /// also settles it): seconds streaming 16 MiB from memory with and without
    /// software prefetch, once per process (`None` without a packed Q4_K layout here).
    pub fn q4_k_prefetch_timings(entry: &DotEntry) -> Option<(f64, f64)> {
        tune_q4_k_prefetch(entry)
    }

    /// The measurement behind [`Packed::pays_off`]: best of 3 single-thread seconds of
    /// the packed GEMV and of the row-major kernels, each streaming the same 16 MiB of
    /// `entry`'s type flushed from the caches (`None` where the type has no packed
    /// `Rows` layout here).
    pub fn calibrate(entry: &DotEntry) -> Option<(f64, f64)> {
        calibrate(entry)
    }

    /// Where `entry`'s packed decode GEMV prefetches now (`None` without a packed
    /// layout here, or off x86-64): settled by [`Packed::pays_off`]'s measurement,
    /// L1 before it.
    pub fn prefetch(entry: &DotEntry) -> Option<Prefetch> {
        match layout(entry)? {
            #[cfg(target_arch = "x86_64")]
            Layout::Q4K { .. } => Some(crate::arch::x86_64::q4_k_tiles::GEMV_PREFETCH.get()),
            #[cfg(target_arch = "x86_64")]
            Layout::Rows { prefetch, .. } => Some(prefetch.get()),
            #[cfg(not(target_arch = "x86_64"))]
            _ => None,
        }
    }

    /// Whether [`Packed::new`] would repack a `rows`-row matrix with `entry`'s kernels.
    pub fn supported(entry: &DotEntry, rows: usize) -> bool {
        rows > 0 && rows.is_multiple_of(GROUP_ROWS) && layout(entry).is_some()
    }

    /// Repack the row-major `rows × cols` matrix `bytes` of `entry`'s type into a new
    /// buffer (anonymous memory, transparent huge pages requested where the OS has
    /// them). `Ok(None)` when [`Packed::supported`] is false: keep the row-major form.
    pub fn new(entry: &DotEntry, bytes: &[u8], rows: usize, cols: usize) -> Result<Option<Packed>> {
        Self::new_releasing(entry, bytes, rows, cols, |_| {})
    }

    /// [`Packed::new`], calling `done(range)` each time a slice of about
    /// `RELEASE_BYTES` (8 MiB) of `bytes` has been packed: a caller reading `bytes`
    /// from a mapped file can drop those pages from its resident set at once, so that
    /// repacking a large matrix adds the packed copy to peak memory, not the copy plus
    /// the whole source. The source must stay readable (it still is after
    /// `MADV_DONTNEED` on a file mapping: reads fault the pages back in).
    pub fn new_releasing(
        entry: &DotEntry,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        mut done: impl FnMut(Range<usize>),
    ) -> Result<Option<Packed>> {
        let Some(layout) = layout(entry).filter(|_| Self::supported(entry, rows)) else {
            return Ok(None);
        };
        let nb = check_rows(entry.ty, "repack", bytes.len(), bytes.len(), rows, cols)?;
        let len = Self::packed_len(entry, rows, cols);
        let mut buf = MmapMut::map_anon(len)
            .map_err(|e| QuantError::Shape(format!("cannot map {len} bytes: {e}")))?;
        // A hint only: without huge pages the buffer works the same, with more TLB misses.
        #[cfg(target_os = "linux")]
        let _ = buf.advise(Advice::HugePage);
        let ty = entry.ty;
        let interleave = |src: &[u8], n: usize, dst: &mut [u8]| match ty {
            GgmlType::Q4_K => interleave_q4_k(src, n, cols, dst),
            GgmlType::Q8_0 => q8_0::interleave_q8_0(src, n, cols, dst),
            GgmlType::Q6_K => q6_k::interleave_q6_k(src, n, cols, dst),
            ty if q8_0::widens(ty) => q8_0::interleave_widened(ty, src, n, cols, dst),
            ty => unreachable!("no packed layout for {ty}"),
        };
        // Every layout is group-major with groups as long as their 8 source rows
        // (widened: their 8 rows as Q8_0), so slices of whole groups pack independently.
        let group = bytes.len() / rows * GROUP_ROWS;
        let packed_group = len / rows * GROUP_ROWS;
        let groups = (RELEASE_BYTES / group).max(1);
        for (g, start) in (0..bytes.len()).step_by(groups * group).enumerate() {
            let end = (start + groups * group).min(bytes.len());
            let n = (end - start) / group * GROUP_ROWS;
            let at = g * groups * packed_group;
            interleave(
                &bytes[start..end],
                n,
                &mut buf[at..at + n / GROUP_ROWS * packed_group],
            )?;
            done(start..end);
        }
        Ok(Some(Packed {
            buf,
            ty,
            rows,
            cols,
            nb,
            wide: entry.path == KernelPath::Simd(Isa::Avx512),
            layout,
        }))
    }

    /// The weight type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// The block type the packed bytes hold: [`Packed::ty`], except Q8_0 for Q4_0 and
    /// Q5_0 (widened: the same values as Q8_0 blocks).
    pub fn stored_ty(&self) -> GgmlType {
        stored_ty(self.ty)
    }

    /// Bytes [`Packed::new`] allocates for a `rows × cols` matrix of `entry`'s type:
    /// the row-major size, or that of Q8_0 rows for a widened type (34 bytes a block
    /// of 32 against Q4_0's 18 and Q5_0's 22).
    pub fn packed_len(entry: &DotEntry, rows: usize, cols: usize) -> usize {
        rows * (cols / entry.block_size) * stored_ty(entry.ty).type_size() as usize
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The packed bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Bytes of one row-major row.
    pub fn row_bytes(&self) -> usize {
        self.nb * self.ty.type_size() as usize
    }

    /// Whether [`Packed::dots`] computes `order` (else multiply [`Packed::unpack_rows`]'
    /// rows with the row-major kernels).
    pub fn has_order(&self, order: PackedOrder) -> bool {
        match order {
            PackedOrder::Single => true,
            PackedOrder::Pairs => matches!(self.layout, Layout::Q4K { .. }),
            // The whole-block kernel over Q4_0's values widened to Q8_0.
            PackedOrder::WholeBlock => self.ty == GgmlType::Q4_0 && self.has_approx(),
        }
    }

    /// Weight rows worth passing per [`Packed::dots`] call with several activation
    /// rows: 16 for Q4_K on AVX-512 (two groups per 512-bit register), else 8. (Layouts
    /// with a multi-row kernel, [`Packed::has_gemm`], take as many as the caller's
    /// buffer holds: the kernel prepares the activation blocks once per call.)
    pub fn weights_per_call(&self) -> usize {
        if self.wide && self.ty == GgmlType::Q4_K {
            16
        } else {
            8
        }
    }

    /// Whether several activation rows go through one multi-row kernel (each weight
    /// block loaded once for several rows, the activation blocks prepared once per
    /// call) rather than a GEMV per row.
    pub fn has_gemm(&self) -> bool {
        matches!(self.layout, Layout::Rows { gemm: Some(_), .. })
    }

    /// `out[t * n + i]` = dot of weight row `rows.start + i` with activation row `t`
    /// (`acts[t * stride..(t + 1) * stride]`, the type's activation format) in `order`,
    /// for every `t < out.len() / n`, `n = rows.len()`; bitwise the row-major kernels'
    /// results.
    ///
    /// # Panics
    /// If `rows` is out of range or its ends are not multiples of 8, if `stride` is
    /// shorter than an activation row of `cols`, if `acts` holds fewer rows than `out`
    /// asks for, or if the layout has no `order` ([`Packed::has_order`]) (internal
    /// contract, checked: never undefined behaviour).
    pub fn dots(
        &self,
        order: PackedOrder,
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
            "packed {} rows {rows:?} of {}",
            self.ty,
            self.rows
        );
        let n = rows.len();
        if n == 0 {
            return;
        }
        let nt = out.len() / n;
        let act_row = match self.stored_ty() {
            GgmlType::Q8_0 => self.nb * 34,
            _ => self.nb * Q8_K_BLOCK,
        };
        assert!(
            stride >= act_row && acts.len() >= nt * stride,
            "packed {} activations: {nt} rows of stride {stride}, {} bytes",
            self.ty,
            acts.len()
        );
        assert!(
            self.has_order(order),
            "packed {}: no {order:?} order",
            self.ty
        );
        if order == PackedOrder::WholeBlock {
            self.whole_blocks(rows, &acts[..nt * stride], stride, &mut out[..nt * n]);
            return;
        }
        let groups = self.groups(&rows);
        match self.layout {
            Layout::Q4K { single, pairs } => {
                let f = match order {
                    PackedOrder::Pairs => pairs,
                    _ => single,
                };
                f(
                    groups,
                    self.nb,
                    &acts[..nt * stride],
                    stride,
                    &mut out[..nt * n],
                );
            }
            Layout::Rows { gemv, gemm, .. } => {
                if let Some(gemm) = gemm.filter(|_| nt > 1) {
                    gemm(
                        groups,
                        self.nb,
                        &acts[..nt * stride],
                        stride,
                        &mut out[..nt * n],
                    );
                    return;
                }
                for (t, out) in out[..nt * n].chunks_exact_mut(n).enumerate() {
                    gemv(
                        groups,
                        self.nb,
                        &acts[t * stride..t * stride + act_row],
                        out,
                    );
                }
            }
        }
    }

    /// [`PackedOrder::WholeBlock`]'s products: the whole-block kernel, at most
    /// [`Packed::APPROX_ROWS`] activation rows and `DMAX` weight rows per call (its
    /// largest scales are not wanted here). Calls of up to `DMAX` weight rows (every
    /// call `fucina-model`'s matmul makes) write straight into `out`; longer ones go
    /// through a buffer.
    fn whole_blocks(&self, rows: Range<usize>, acts: &[u8], stride: usize, out: &mut [f32]) {
        const DMAX: usize = 4096;
        let n = rows.len();
        let nt = out.len() / n;
        let mut dmax = [0f32; DMAX];
        let mut vals = Vec::new();
        if n > DMAX {
            vals.resize(Self::APPROX_ROWS * DMAX, 0f32);
        }
        for w0 in rows.clone().step_by(DMAX) {
            let nw = (rows.end - w0).min(DMAX);
            for t0 in (0..nt).step_by(Self::APPROX_ROWS) {
                let k = (nt - t0).min(Self::APPROX_ROWS);
                let acts = &acts[t0 * stride..];
                if nw == n {
                    let out = &mut out[t0 * n..(t0 + k) * n];
                    self.approx_dots(rows.clone(), acts, stride, out, &mut dmax[..n]);
                    continue;
                }
                let v = &mut vals[..k * nw];
                self.approx_dots(w0..w0 + nw, acts, stride, v, &mut dmax[..nw]);
                for (t, v) in v.chunks_exact(nw).enumerate() {
                    let at = (t0 + t) * n + (w0 - rows.start);
                    out[at..at + nw].copy_from_slice(v);
                }
            }
        }
    }

    /// Whether [`Packed::approx_dots`] has a kernel here (Q8_0 on AVX-512 VNNI).
    pub fn has_approx(&self) -> bool {
        matches!(
            self.layout,
            Layout::Rows {
                approx: Some(_),
                ..
            }
        )
    }

    /// Most activation rows one [`Packed::approx_dots`] call takes.
    pub const APPROX_ROWS: usize = 32;

    /// Approximate dots for finding the largest output without computing every output
    /// in the single-row order: `out[t * n + i]` ≈ the dot of weight row
    /// `rows.start + i` with activation row `t` (`n = rows.len()`, at most
    /// [`Packed::APPROX_ROWS`] activation rows), and `dmax[i]` = the largest `|d|` of that
    /// row's blocks. Returns false (nothing written) where there is no such kernel
    /// ([`Packed::has_approx`]).
    ///
    /// Each block's 32 products are summed as one exact integer and scaled once, where
    /// the single-row order ([`Packed::dots`]) keeps 8 partial sums of 4 per block in
    /// separate f32 lanes and adds them at the end. Both use the same rounded block
    /// scales `fl(d_w·d_a)` and exact integer partial sums, so both are within
    /// `γ_(nb + 4) · T` of the same real number (γ_k = k·u / (1 − k·u), u = 2⁻²⁴, nb blocks,
    /// three levels of the final horizontal sum, one more rounding of the scale), where
    /// `T = Σ_b |d_w,b·d_a,b| · Σ_j |q_w,j·q_a,j| ≤ 128 · dmax · A` and `A` =
    /// [`q8_0_magnitude`] of the activation row. Hence, finite values assumed,
    /// `|approx − single-row| ≤ approx_slack(nb) · dmax · A` with [`approx_slack`]
    /// taking twice the two γ terms (and an absolute 2⁻¹⁰⁰ for underflow).
    ///
    /// # Panics
    /// As [`Packed::dots`], and if `dmax` is not `rows.len()` long or `out` asks for
    /// more than [`Packed::APPROX_ROWS`] activation rows.
    pub fn approx_dots(
        &self,
        rows: Range<usize>,
        acts: &[u8],
        stride: usize,
        out: &mut [f32],
        dmax: &mut [f32],
    ) -> bool {
        let Layout::Rows {
            approx: Some(approx),
            ..
        } = self.layout
        else {
            return false;
        };
        assert!(
            rows.start <= rows.end
                && rows.end <= self.rows
                && rows.start.is_multiple_of(GROUP_ROWS)
                && rows.end.is_multiple_of(GROUP_ROWS)
                && dmax.len() == rows.len(),
            "packed {} approximate rows {rows:?} of {}",
            self.ty,
            self.rows
        );
        if rows.is_empty() {
            return true;
        }
        let groups = self.groups(&rows);
        approx(groups, self.nb, acts, stride, out, dmax);
        true
    }

    /// The packed groups holding weight rows `rows` (whole groups).
    fn groups(&self, rows: &Range<usize>) -> &[u8] {
        let gb = self.nb * self.stored_ty().type_size() as usize * GROUP_ROWS;
        &self.buf[rows.start / GROUP_ROWS * gb..rows.end / GROUP_ROWS * gb]
    }

    /// Row-major bytes of rows `first..first + dst.len() / row_bytes` (any range).
    ///
    /// # Panics
    /// If `dst` is not whole rows or the rows are out of range.
    pub fn unpack_rows(&self, first: usize, dst: &mut [u8]) {
        let rb = self.row_bytes();
        assert!(
            dst.len().is_multiple_of(rb) && first + dst.len() / rb <= self.rows,
            "unpack {} bytes from row {first} of {} {} rows",
            dst.len(),
            self.rows,
            self.ty
        );
        match self.layout {
            Layout::Q4K { .. } => unpack_rows_q4_k(&self.buf, self.cols, first, dst),
            Layout::Rows { unpack, .. } => unpack(&self.buf, self.cols, first, dst),
        }
    }
}
