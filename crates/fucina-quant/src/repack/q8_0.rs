//! Q8_0 matrices as interleaved groups of 8 rows for the AVX-512 VNNI GEMV
//! (`arch::x86_64::q8_0_x8`).
//!
//! ggml's Q8_0 dot keeps 8 f32 lanes per row (lane `i` = the exact sum of quant bytes
//! `4i..4i + 4` of each block times the activation's, times `d_w·d_a`, FMA'd block by
//! block) and adds them horizontally at the end. This layout keeps those lanes but puts
//! two rows in one 512-bit register, dword-interleaved, so that one `vpdpbusd`, one
//! conversion and one FMA serve 64 weight bytes, and the quants are stored offset to
//! unsigned (`q + 128`, what `vpdpbusd`'s first operand takes) so that no sign tricks
//! are needed: the kernel starts each dot from `−128·Σ` of the activation quad, which
//! cancels the offset exactly.
//!
//! Layout: group `g` holds rows `8g..8g + 8`, `nb = cols / 32` blocks per row, and is
//! `nb · 272` bytes:
//! * `nb · 256` quant bytes: block `b`, then pair `k` in 0..4 (rows `8g + 2k`,
//!   `8g + 2k + 1`), 64 bytes each: dword `2i` = bytes `4i..4i + 4` of row `8g + 2k`'s
//!   block `b` quants, dword `2i + 1` = those of row `8g + 2k + 1`, every byte XOR 0x80;
//! * then `nb · 16` scale bytes: block `b`'s eight f16 `d`, row order.
//!
//! The packed matrix has exactly the row-major matrix's byte count.

use super::for_each_group;
use crate::Result;
use fucina_gguf::GgmlType;

/// Rows per group.
pub(crate) const GROUP_ROWS: usize = 8;
/// Bytes of one Q8_0 block.
pub(crate) const BLOCK: usize = 34;
/// Bytes of one block of a group (8 rows).
pub(crate) const GROUP_BLOCK: usize = GROUP_ROWS * BLOCK;

/// Offset of quant byte `q` (< 32) of block `b` of row `r` (< 8) in a group of `nb`
/// blocks.
#[inline]
fn quant_offset(b: usize, r: usize, q: usize) -> usize {
    256 * b + 64 * (r / 2) + 8 * (q / 4) + 4 * (r % 2) + q % 4
}

/// Offset of the f16 `d` of block `b` of row `r` in a group of `nb` blocks.
#[inline]
fn scale_offset(nb: usize, b: usize, r: usize) -> usize {
    256 * nb + 16 * b + 2 * r
}

/// Repack a row-major `rows × cols` Q8_0 matrix (`rows % 8 == 0`) into the module's
/// layout; `dst` has the same length as `src`.
pub(crate) fn interleave_q8_0(src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) -> Result<()> {
    for_each_group(
        GgmlType::Q8_0,
        "interleave",
        src,
        rows,
        cols,
        dst,
        |nb, s, d| {
            let row_bytes = nb * BLOCK;
            let (quants, scales) = d.split_at_mut(256 * nb);
            for (b, (q, sc)) in quants
                .chunks_exact_mut(256)
                .zip(scales.chunks_exact_mut(16))
                .enumerate()
            {
                // Destination order: pair, dword, side (the rows' dwords interleaved).
                for (r, sc) in sc.chunks_exact_mut(2).enumerate() {
                    let o = r * row_bytes + b * BLOCK;
                    sc.copy_from_slice(&s[o..o + 2]);
                }
                for (k, pair) in q.chunks_exact_mut(64).enumerate() {
                    let rows: [&[u8]; 2] = core::array::from_fn(|side| {
                        let o = (2 * k + side) * row_bytes + b * BLOCK + 2;
                        &s[o..o + 32]
                    });
                    for (n, d) in pair.chunks_exact_mut(4).enumerate() {
                        let v = &rows[n % 2][4 * (n / 2)..4 * (n / 2) + 4];
                        let w = u32::from_le_bytes([v[0], v[1], v[2], v[3]]) ^ 0x8080_8080;
                        d.copy_from_slice(&w.to_le_bytes());
                    }
                }
            }
        },
    )?;
    Ok(())
}

/// Row-major bytes of rows `first..first + n` (any range) of a packed matrix of `cols`
/// columns into `dst` (`n` rows' bytes).
///
/// # Panics
/// If the rows are out of `packed`'s range or `dst` has the wrong length (internal
/// contract: the packed matrix was checked when it was built).
pub(crate) fn unpack_rows_q8_0(packed: &[u8], cols: usize, first: usize, dst: &mut [u8]) {
    let nb = cols / 32;
    let row_bytes = nb * BLOCK;
    let n = dst.len() / row_bytes;
    assert!(
        dst.len() == n * row_bytes
            && (first + n).div_ceil(GROUP_ROWS) * nb * GROUP_BLOCK <= packed.len(),
        "unpack Q8_0 rows {first}..{} of {} bytes",
        first + n,
        packed.len()
    );
    for (i, row) in dst.chunks_exact_mut(row_bytes).enumerate() {
        let (g, r) = ((first + i) / GROUP_ROWS, (first + i) % GROUP_ROWS);
        let grp = &packed[g * nb * GROUP_BLOCK..(g + 1) * nb * GROUP_BLOCK];
        for (b, blk) in row.chunks_exact_mut(BLOCK).enumerate() {
            let so = scale_offset(nb, b, r);
            blk[..2].copy_from_slice(&grp[so..so + 2]);
            for i in 0..8 {
                let o = quant_offset(b, r, 4 * i);
                for (d, s) in blk[2 + 4 * i..6 + 4 * i].iter_mut().zip(&grp[o..o + 4]) {
                    *d = s ^ 0x80;
                }
            }
        }
    }
}

/// Whether `ty`'s blocks widen into Q8_0 blocks of the same values ([`widen_rows`]):
/// Q4_0 and Q5_0, an f16 scale and 32 small signed integers whose ggml dot has Q8_0's
/// float structure (8 lanes of exact 4-product sums, one FMA by `d_w·d_a` a block).
pub(crate) fn widens(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0)
}

/// Row-major `ty` blocks ([`widens`]) rewritten as Q8_0 blocks of the same scale and
/// quants into `dst` (`src.len() / ty_size` blocks of 34 bytes): exact, every Q4_0
/// quant in -8..=7 and every Q5_0 quant in -16..=15.
pub(crate) fn widen_rows(ty: GgmlType, src: &[u8], dst: &mut [u8]) {
    let ts = ty.type_size() as usize;
    for (x, y) in src.chunks_exact(ts).zip(dst.chunks_exact_mut(BLOCK)) {
        y[..2].copy_from_slice(&x[..2]);
        let (qs, qh, bias) = match ty {
            GgmlType::Q5_0 => (&x[6..22], u32::from_le_bytes([x[2], x[3], x[4], x[5]]), 16),
            _ => (&x[2..18], 0, 8),
        };
        for (j, q) in y[2..].iter_mut().enumerate() {
            let nib = if j < 16 {
                qs[j] & 0x0f
            } else {
                qs[j - 16] >> 4
            };
            let v = nib | (((qh >> j) & 1) as u8) << 4;
            *q = (v as i8 - bias) as u8;
        }
    }
}

/// The inverse of [`widen_rows`]: Q8_0 blocks whose quants fit `ty` back into `ty`'s
/// blocks (`dst`).
pub(crate) fn narrow_rows(ty: GgmlType, src: &[u8], dst: &mut [u8]) {
    let ts = ty.type_size() as usize;
    for (y, x) in src.chunks_exact(BLOCK).zip(dst.chunks_exact_mut(ts)) {
        x[..2].copy_from_slice(&y[..2]);
        let bias = if ty == GgmlType::Q5_0 { 16 } else { 8 };
        let v: [u8; 32] = core::array::from_fn(|j| (y[2 + j] as i8 + bias) as u8);
        let qs_at = if ty == GgmlType::Q5_0 {
            let qh = (0..32).fold(0u32, |h, j| h | u32::from(v[j] >> 4 & 1) << j);
            x[2..6].copy_from_slice(&qh.to_le_bytes());
            6
        } else {
            2
        };
        for j in 0..16 {
            x[qs_at + j] = (v[j] & 0x0f) | (v[j + 16] & 0x0f) << 4;
        }
    }
}

/// [`interleave_q8_0`] of `ty` rows ([`widens`]) widened to Q8_0: `dst` holds the
/// widened rows' bytes (34 per block).
pub(crate) fn interleave_widened(
    ty: GgmlType,
    src: &[u8],
    rows: usize,
    cols: usize,
    dst: &mut [u8],
) -> Result<()> {
    super::check_rows(ty, "widen", src.len(), src.len(), rows, cols)?;
    let mut wide = vec![0u8; dst.len()];
    widen_rows(ty, src, &mut wide);
    interleave_q8_0(&wide, rows, cols, dst)
}

/// [`unpack_rows_q8_0`] narrowed back to Q4_0 rows.
pub(crate) fn unpack_rows_q4_0(packed: &[u8], cols: usize, first: usize, dst: &mut [u8]) {
    unpack_narrowed(GgmlType::Q4_0, packed, cols, first, dst)
}

/// [`unpack_rows_q8_0`] narrowed back to Q5_0 rows.
pub(crate) fn unpack_rows_q5_0(packed: &[u8], cols: usize, first: usize, dst: &mut [u8]) {
    unpack_narrowed(GgmlType::Q5_0, packed, cols, first, dst)
}

fn unpack_narrowed(ty: GgmlType, packed: &[u8], cols: usize, first: usize, dst: &mut [u8]) {
    let blocks = dst.len() / ty.type_size() as usize;
    let mut wide = vec![0u8; blocks * BLOCK];
    unpack_rows_q8_0(packed, cols, first, &mut wide);
    narrow_rows(ty, &wide, dst);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bytes (xorshift), valid f16 scales.
    fn matrix(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut m = vec![0u8; rows * cols / 32 * BLOCK];
        for blk in m.chunks_exact_mut(BLOCK) {
            // f16 0x1400..0x1bff: about 0.001 .. 0.008.
            let d = 0x1400u16 + (next() % 0x800) as u16;
            blk[..2].copy_from_slice(&d.to_le_bytes());
            for q in &mut blk[2..] {
                *q = next() as u8;
            }
        }
        m
    }

    #[test]
    fn unpack_inverts_interleave_for_any_row_range() {
        for (rows, cols) in [(8, 32), (16, 640), (24, 96)] {
            let src = matrix(rows, cols, (rows * cols) as u64);
            let mut packed = vec![0u8; src.len()];
            interleave_q8_0(&src, rows, cols, &mut packed).unwrap();
            assert_ne!(packed, src);
            let rb = cols / 32 * BLOCK;
            let ranges = [(0, rows), (1, 3), (7, 2), (rows - 1, 1), (3, rows - 3)];
            for (first, n) in ranges.into_iter().filter(|&(f, n)| f + n <= rows) {
                let mut out = vec![0u8; n * rb];
                unpack_rows_q8_0(&packed, cols, first, &mut out);
                assert_eq!(
                    out,
                    src[first * rb..(first + n) * rb],
                    "{rows}x{cols} {first}+{n}"
                );
            }
        }
    }

    #[test]
    fn widening_is_exact_and_narrowing_inverts_it() {
        for ty in [GgmlType::Q4_0, GgmlType::Q5_0] {
            let ts = ty.type_size() as usize;
            let (rows, cols) = (16, 96);
            // Any bytes are valid Q4_0 / Q5_0 quants; scales kept finite.
            let mut src = matrix(rows, cols * 2, 11)[..rows * cols / 32 * ts].to_vec();
            for blk in src.chunks_exact_mut(ts) {
                blk[1] &= 0x3b;
            }
            let mut wide = vec![0u8; rows * cols / 32 * BLOCK];
            widen_rows(ty, &src, &mut wide);
            let (mut a, mut b) = (vec![0f32; rows * cols], vec![0f32; rows * cols]);
            crate::dequantize(ty, &src, &mut a).unwrap();
            crate::dequantize(GgmlType::Q8_0, &wide, &mut b).unwrap();
            assert_eq!(a, b, "{ty}: the same values");
            let mut back = vec![0u8; src.len()];
            narrow_rows(ty, &wide, &mut back);
            assert_eq!(back, src, "{ty}: narrowing inverts widening");
            let mut packed = vec![0u8; wide.len()];
            interleave_widened(ty, &src, rows, cols, &mut packed).unwrap();
            let rb = cols / 32 * ts;
            for (first, n) in [(0, rows), (3, 5), (15, 1)] {
                let mut out = vec![0u8; n * rb];
                match ty {
                    GgmlType::Q4_0 => unpack_rows_q4_0(&packed, cols, first, &mut out),
                    _ => unpack_rows_q5_0(&packed, cols, first, &mut out),
                }
                assert_eq!(out, src[first * rb..(first + n) * rb], "{ty} {first}+{n}");
            }
        }
    }

    #[test]
    fn shapes_that_cannot_be_packed_are_errors() {
        let src = matrix(8, 64, 3);
        let mut dst = vec![0u8; src.len()];
        assert!(
            interleave_q8_0(&src, 8, 48, &mut dst).is_err(),
            "cols not whole blocks"
        );
        assert!(
            interleave_q8_0(&src[..src.len() / 2], 4, 64, &mut dst[..src.len() / 2]).is_err(),
            "rows % 8"
        );
        assert!(
            interleave_q8_0(&src, 8, 64, &mut dst[1..]).is_err(),
            "dst length"
        );
        assert!(
            interleave_q8_0(&src[1..], 8, 64, &mut dst[1..]).is_err(),
            "src length"
        );
    }

    /// The AVX-512 GEMV over packed groups is bitwise each row's single-row dot (the
    /// scalar reference and the ISA's own kernel), for every block count and group
    /// count tried, on activations from the crate's quantizer.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn packed_gemv_is_bitwise_the_row_dots() {
        use crate::dispatch::{Isa, Kernels};
        use crate::formats::VecDotFn;
        let Some(gemv) = crate::arch::x86_64::q8_0_x8::kernel() else {
            eprintln!("skipped: this CPU lacks AVX-512 VNNI (the packed Q8_0 kernel's ISA)");
            return;
        };
        let scalar: VecDotFn = crate::dispatch::scalar_reference(GgmlType::Q8_0).unwrap().1;
        let simd = Kernels::for_isa(Isa::Avx512)
            .unwrap()
            .entry(GgmlType::Q8_0)
            .unwrap();
        let mut checked = 0;
        for nb in [1, 2, 3, 7, 20, 33] {
            for rows in [8, 16, 64] {
                let cols = 32 * nb;
                let w = matrix(rows, cols, (nb * 131 + rows) as u64);
                let mut packed = vec![0u8; w.len()];
                interleave_q8_0(&w, rows, cols, &mut packed).unwrap();
                let x: Vec<f32> = (0..cols)
                    .map(|i| ((i * 7919 % 263) as f32 - 131.0) * 0.037)
                    .collect();
                let mut act = Vec::new();
                crate::quantize(GgmlType::Q8_0, &x, &mut act).unwrap();
                let mut out = vec![0f32; rows];
                gemv(&packed, nb, &act, &mut out);
                let rb = nb * BLOCK;
                for (r, o) in out.iter().enumerate() {
                    let row = &w[r * rb..(r + 1) * rb];
                    assert_eq!(o.to_bits(), scalar(row, &act).to_bits(), "nb {nb} row {r}");
                    assert_eq!(
                        o.to_bits(),
                        simd.dot(row, &act).to_bits(),
                        "nb {nb} row {r}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 500);
    }

    /// The whole-block approximations stay within the documented bound of the
    /// single-row results (the GEMV's, bitwise the row dots'), row by row, and report
    /// each row's largest block scale exactly; odd group counts (a last group paired
    /// with itself) and every activation-row count up to the limit included. Extreme
    /// rows (all quants −128 or 127 against activations of one sign) put the sums at
    /// their integer bounds.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn whole_block_approximations_stay_within_their_bound() {
        let (Some(gemv), Some(approx)) = (
            crate::arch::x86_64::q8_0_x8::kernel(),
            crate::arch::x86_64::q8_0_x8::approx_kernel(),
        ) else {
            eprintln!("skipped: this CPU lacks AVX-512 VNNI (the packed Q8_0 kernel's ISA)");
            return;
        };
        let mut worst = 0f64;
        for (nb, rows, nt) in [
            (1, 8, 1),
            (2, 16, 3),
            (20, 24, 17),
            (20, 64, 32),
            (7, 40, 5),
        ] {
            let cols = 32 * nb;
            let mut w = matrix(rows, cols, (nb * 977 + rows) as u64);
            let rb = nb * BLOCK;
            for (r, fill) in [(1usize, 0x80u8), (2, 0x7f)] {
                for blk in w[r * rb..(r + 1) * rb].chunks_exact_mut(BLOCK) {
                    blk[2..].fill(fill);
                }
            }
            let mut packed = vec![0u8; w.len()];
            interleave_q8_0(&w, rows, cols, &mut packed).unwrap();
            let mut acts = Vec::new();
            for t in 0..nt {
                let x: Vec<f32> = (0..cols)
                    .map(|i| match t {
                        0 => 3.0,
                        1 => -0.5,
                        _ => ((i * 7919 + t * 131) % 263) as f32 * 0.037 - 4.8,
                    })
                    .collect();
                crate::quantize(GgmlType::Q8_0, &x, &mut acts).unwrap();
            }
            let mut out = vec![0f32; nt * rows];
            let mut dmax = vec![0f32; rows];
            approx(&packed, nb, &acts, rb, &mut out, &mut dmax);
            let slack = crate::repack::approx_slack(nb);
            for t in 0..nt {
                let act = &acts[t * rb..(t + 1) * rb];
                let mut exact = vec![0f32; rows];
                gemv(&packed, nb, act, &mut exact);
                let a = crate::repack::q8_0_magnitude(act);
                for r in 0..rows {
                    let row = &w[r * rb..(r + 1) * rb];
                    let d = row
                        .chunks_exact(BLOCK)
                        .map(|b| crate::half::f16_to_f32(u16::from_le_bytes([b[0], b[1]])).abs())
                        .fold(0f32, f32::max);
                    assert_eq!(dmax[r], d, "nb {nb} row {r}");
                    let bound = slack * d * a;
                    let err = (out[t * rows + r] - exact[r]).abs();
                    assert!(
                        err <= bound,
                        "nb {nb} t {t} row {r}: {} vs {} (bound {bound})",
                        out[t * rows + r],
                        exact[r]
                    );
                    worst = worst.max(err as f64 / bound as f64);
                }
            }
        }
        // The bound is no sham: the approximations do differ from the single-row order.
        assert!(worst > 0.0);
    }
}

/// Single-thread timing of the packed GEMV against the ISA's row dots (not a test:
/// `cargo test -p fucina-quant --release --lib -- --ignored --nocapture q8_0_speed`).
#[cfg(all(test, target_arch = "x86_64"))]
#[test]
#[ignore]
fn q8_0_speed() {
    use crate::dispatch::{Isa, Kernels};
    let Some(gemv) = crate::arch::x86_64::q8_0_x8::kernel() else {
        return;
    };
    let simd = Kernels::for_isa(Isa::Avx512)
        .unwrap()
        .entry(GgmlType::Q8_0)
        .unwrap();
    for (rows, cols, copies) in [(1024, 640, 1), (4096, 640, 64)] {
        let nb = cols / 32;
        let rb = nb * BLOCK;
        let w: Vec<u8> = (0..rows * rb * copies)
            .map(|i| ((i * 2654435761usize) >> 7) as u8 & 0x3f)
            .collect();
        let mut packed = vec![0u8; w.len()];
        let t = std::time::Instant::now();
        for (s, d) in w
            .chunks_exact(rows * rb)
            .zip(packed.chunks_exact_mut(rows * rb))
        {
            interleave_q8_0(s, rows, cols, d).unwrap();
        }
        let repack = w.len() as f64 / t.elapsed().as_secs_f64() / 1e9;
        let x: Vec<f32> = (0..cols).map(|i| (i % 17) as f32 - 8.0).collect();
        let mut act = Vec::new();
        crate::quantize(GgmlType::Q8_0, &x, &mut act).unwrap();
        let mut out = vec![0f32; rows];
        let time = |f: &mut dyn FnMut(usize)| {
            let mut best = f64::INFINITY;
            for i in 0..200 {
                let t = std::time::Instant::now();
                f(i % copies);
                best = best.min(t.elapsed().as_secs_f64());
            }
            (rows * rb) as f64 / best / 1e9
        };
        let rowwise = time(&mut |c| {
            let m = &w[c * rows * rb..(c + 1) * rows * rb];
            for (r, o) in out.iter_mut().enumerate() {
                *o = simd.dot(&m[r * rb..(r + 1) * rb], &act);
            }
        });
        let packedv = time(&mut |c| {
            gemv(
                &packed[c * rows * rb..(c + 1) * rows * rb],
                nb,
                &act,
                &mut out,
            )
        });
        eprintln!(
            "Q8_0 {rows}x{cols} ×{copies}: row dots {rowwise:.1} GB/s, packed {packedv:.1} GB/s, repacking {repack:.2} GB/s"
        );
    }
}

/// Single-thread in-cache timing of the whole-block kernel against the single-row
/// GEMM (not a test: `cargo test -p fucina-quant --release --lib -- --ignored
/// --nocapture q8_0_approx_speed`).
#[cfg(all(test, target_arch = "x86_64"))]
#[test]
#[ignore]
fn q8_0_approx_speed() {
    let (Some(gemm), Some(approx)) = (
        crate::arch::x86_64::q8_0_x8::gemm_kernel(),
        crate::arch::x86_64::q8_0_x8::approx_kernel(),
    ) else {
        return;
    };
    let (rows, cols) = (512usize, 640usize);
    let nb = cols / 32;
    let rb = nb * BLOCK;
    let w: Vec<u8> = (0..rows * rb)
        .map(|i| ((i * 2654435761usize) >> 7) as u8 & 0x3f)
        .collect();
    let mut packed = vec![0u8; w.len()];
    interleave_q8_0(&w, rows, cols, &mut packed).unwrap();
    for nt in [5usize, 8, 17] {
        let mut acts = Vec::new();
        for t in 0..nt {
            let x: Vec<f32> = (0..cols)
                .map(|i| ((i * 31 + t * 7) % 97) as f32 - 48.0)
                .collect();
            crate::quantize(GgmlType::Q8_0, &x, &mut acts).unwrap();
        }
        let mut out = vec![0f32; nt * rows];
        let mut dmax = vec![0f32; rows];
        let time = |f: &mut dyn FnMut()| {
            (0..200)
                .map(|_| {
                    let t = std::time::Instant::now();
                    f();
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let tg = time(&mut || gemm(&packed, nb, &acts, rb, &mut out));
        let ta = time(&mut || approx(&packed, nb, &acts, rb, &mut out, &mut dmax));
        let macs = (rows * cols * nt) as f64;
        println!(
            "nt {nt}: gemm {:.1} us ({:.1} GMAC/s), approx {:.1} us ({:.1} GMAC/s)",
            tg * 1e6,
            macs / tg * 1e-9,
            ta * 1e6,
            macs / ta * 1e-9
        );
    }
}
