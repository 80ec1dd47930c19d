//! Load-time repacking of Q6_K matrices into interleaved groups of 8 rows, the layout
//! the AVX-512 (VBMI, VNNI) Q6_K GEMV kernel (`arch::x86_64::q6_k_x8`) reads with one
//! 64-byte load, one `vpermb` and one `vpmultishiftqb` per 64 quants: the 6-bit
//! quants are stored as packed bit fields instead of ggml's split `ql` / `qh` planes,
//! in the order the kernel's integer lanes want them.
//!
//! Layout: group `g` holds rows `8g..8g + 8`; it is `nb = cols / 256` super-blocks of
//! [`Q6_K_X8_BLOCK_BYTES`] (1680 = 8 · 210) bytes. In super-block `b` of the group,
//! pair `k` (0..4) is rows `8g + 2k` (side 0) and `8g + 2k + 1` (side 1); a row's
//! quants are *unsigned*, `q = ql nibble | qh bits << 4` (0..=63: ggml's signed
//! quant plus 32), of elements `e` in 0..256 of the super-block. The super-block is
//! * quants (1536 bytes): for chunk pair `j` in 0..4 (elements `64j..64j + 64`), for
//!   pair `k` in 0..4, for side `s` in 0..2: 48 bytes at `96·(4j + k) + 48s`, eight
//!   little-endian 48-bit fields of 6 bytes. Field `t` (bytes `6t..6t + 6`, with
//!   `m = t / 2`, `h = t % 2`) holds at bits `6i..6i + 6` (`i` in 0..8) the quant of
//!   element `64j + 32·(i / 4) + 16h + 4m + i % 4`;
//! * scales (128 bytes at [`X8_SCALES`]): for pair `k`, 32 bytes at `32k`; byte
//!   `8m + 4s + i` (`m`, `i` in 0..4) is the `i8` scale of sub-block
//!   `[2m, 2m + 1, 8 + 2m, 9 + 2m][i]` of side `s`'s row;
//! * `d` (16 bytes at [`X8_D`]): the `f16` `d` of each of the 8 rows, in row order.
//!
//! (So each 4-quant run of a field is one integer lane of ggml's 8-lane
//! `vec_dot_q6_K_q8_K` for one chunk: in the kernel, the dword sums of a side's two
//! chunks of the same lane sit next to each other, and one `vpackssdw` + `vpdpwssd`
//! applies both chunks' scales.)
//!
//! The packed matrix has exactly the byte count of the row-major one, and repacking
//! is lossless ([`deinterleave_q6_k`] restores every byte). It changes where the bits
//! live, never the arithmetic: the kernel reaches the same exact integer lanes as the
//! single-row dot and runs the same float steps, so its results are bitwise those of
//! [`crate::formats::kquants::dot_q6_k_q8_k`].

use fucina_gguf::GgmlType;

use super::{for_each_group, GROUP_ROWS};
use crate::Result;

/// Bytes of one Q6_K super-block (256 weights).
pub(crate) use crate::formats::kquants::Q6_K_BYTES as Q6_K_BLOCK;
/// Bytes of a Q8_K activation block (the tests' and the reference GEMV's).
#[cfg(test)]
use crate::formats::kquants::Q8_K_BYTES as Q8_K_BLOCK;
/// Bytes of one super-block of an interleaved 8-row group.
pub(crate) const Q6_K_X8_BLOCK_BYTES: usize = GROUP_ROWS * Q6_K_BLOCK;
/// Offset of the 8 rows' scales (16 bytes each) in a group super-block.
pub(crate) const X8_SCALES: usize = 1536;
/// Offset of the 8 rows' `f16` `d` in a group super-block.
pub(crate) const X8_D: usize = X8_SCALES + GROUP_ROWS * 16;

const _: () = assert!(X8_D + 2 * GROUP_ROWS == Q6_K_X8_BLOCK_BYTES);

/// The 256 unsigned quants (0..=63) of a ggml Q6_K block.
fn unsigned_quants(blk: &[u8; Q6_K_BLOCK]) -> [u8; 256] {
    let mut q = [0u8; 256];
    for half in 0..2 {
        let ql: &[u8; 64] = blk[64 * half..64 * half + 64].try_into().expect("64 bytes");
        let qh: &[u8; 32] = blk[128 + 32 * half..160 + 32 * half]
            .try_into()
            .expect("32 bytes");
        let q: &mut [u8; 128] = (&mut q[128 * half..128 * half + 128])
            .try_into()
            .expect("128");
        for r in 0..32 {
            let h = qh[r];
            q[r] = (ql[r] & 0x0f) | (h & 3) << 4;
            q[r + 32] = (ql[r + 32] & 0x0f) | ((h >> 2) & 3) << 4;
            q[r + 64] = (ql[r] >> 4) | ((h >> 4) & 3) << 4;
            q[r + 96] = (ql[r + 32] >> 4) | ((h >> 6) & 3) << 4;
        }
    }
    q
}
/// Sub-block of scale byte `i` (0..4) of a side's four at `8m` of its pair's 32.
#[inline]
fn scale_group(m: usize, i: usize) -> usize {
    [2 * m, 2 * m + 1, 8 + 2 * m, 9 + 2 * m][i]
}

/// Offset in a group super-block of field `t` (0..8) of chunk pair `j` of group row `r`.
#[inline]
fn field_offset(j: usize, r: usize, t: usize) -> usize {
    96 * (4 * j + r / 2) + 48 * (r % 2) + 6 * t
}

/// Super-block element of quant `i` (0..8) of field `t` of chunk pair `j`.
#[inline]
const fn field_element(j: usize, t: usize, i: usize) -> usize {
    64 * j + 32 * (i / 4) + 16 * (t % 2) + 4 * (t / 2) + i % 4
}

/// Offset in a group super-block of scale `i` (0..4) at `8m` of group row `r`.
#[inline]
fn scale_offset(r: usize, m: usize, i: usize) -> usize {
    X8_SCALES + 32 * (r / 2) + 8 * m + 4 * (r % 2) + i
}

/// Write super-block `blk` of group row `r` into the group super-block `dst`.
/// [`field_element`] of quant `i` of field `f = 8j + t`, at `8f + i`.
const FIELD_ELEMENTS: [u8; 256] = {
    let mut tab = [0u8; 256];
    let mut n = 0;
    while n < 256 {
        tab[n] = field_element(n / 64, (n / 8) % 8, n % 8) as u8;
        n += 1;
    }
    tab
};

fn pack_block(blk: &[u8; Q6_K_BLOCK], r: usize, dst: &mut [u8; Q6_K_X8_BLOCK_BYTES]) {
    let q = unsigned_quants(blk);
    for (f, elements) in FIELD_ELEMENTS.chunks_exact(8).enumerate() {
        let mut field = 0u64;
        for (i, &e) in elements.iter().enumerate() {
            field |= u64::from(q[usize::from(e)]) << (6 * i);
        }
        let o = field_offset(f / 8, r, f % 8);
        dst[o..o + 6].copy_from_slice(&field.to_le_bytes()[..6]);
    }
    for m in 0..4 {
        for i in 0..4 {
            dst[scale_offset(r, m, i)] = blk[192 + scale_group(m, i)];
        }
    }
    dst[X8_D + 2 * r..X8_D + 2 * r + 2].copy_from_slice(&blk[208..210]);
}

/// Read group row `r`'s super-block back out of the group super-block `src`.
fn unpack_block(src: &[u8; Q6_K_X8_BLOCK_BYTES], r: usize, blk: &mut [u8; Q6_K_BLOCK]) {
    let mut q = [0u8; 256];
    for j in 0..4 {
        for t in 0..8 {
            let o = field_offset(j, r, t);
            let mut f = [0u8; 8];
            f[..6].copy_from_slice(&src[o..o + 6]);
            let field = u64::from_le_bytes(f);
            for i in 0..8 {
                q[field_element(j, t, i)] = ((field >> (6 * i)) & 0x3f) as u8;
            }
        }
    }
    blk[..192].fill(0);
    for (i, &q) in q.iter().enumerate() {
        let (half, r) = (i / 128, i % 128);
        blk[64 * half + r % 64] |= (q & 0x0f) << (4 * (r / 64));
        blk[128 + 32 * half + r % 32] |= (q >> 4) << (2 * (r / 32));
    }
    for m in 0..4 {
        for i in 0..4 {
            blk[192 + scale_group(m, i)] = src[scale_offset(r, m, i)];
        }
    }
    blk[208..210].copy_from_slice(&src[X8_D + 2 * r..X8_D + 2 * r + 2]);
}

/// Repack a row-major `rows × cols` Q6_K matrix (`rows % 8 == 0`, `cols % 256 == 0`)
/// into interleaved groups (the module's layout); `dst` has the same length as `src`.
pub(crate) fn interleave_q6_k(src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) -> Result<()> {
    for_each_group(
        GgmlType::Q6_K,
        "interleave",
        src,
        rows,
        cols,
        dst,
        |nb, s, d| {
            let row_bytes = nb * Q6_K_BLOCK;
            for (b, d) in d.chunks_exact_mut(Q6_K_X8_BLOCK_BYTES).enumerate() {
                let d: &mut [u8; Q6_K_X8_BLOCK_BYTES] = d.try_into().expect("whole block");
                for k in 0..GROUP_ROWS {
                    let o = k * row_bytes + b * Q6_K_BLOCK;
                    let blk = s[o..o + Q6_K_BLOCK].try_into().expect("whole block");
                    pack_block(blk, k, d);
                }
            }
        },
    )?;
    Ok(())
}

/// The inverse of [`interleave_q6_k`]: interleaved groups back to row-major rows
/// (the tests' check of the layout; the matmuls unpack rows with [`unpack_rows_q6_k`]).
#[cfg(test)]
pub(crate) fn deinterleave_q6_k(
    src: &[u8],
    rows: usize,
    cols: usize,
    dst: &mut [u8],
) -> Result<()> {
    super::check_rows(
        GgmlType::Q6_K,
        "deinterleave",
        src.len(),
        dst.len(),
        rows,
        cols,
    )?;
    unpack_rows_q6_k(src, cols, 0, rows, dst);
    Ok(())
}

/// Row-major bytes of rows `first_row..first_row + n_rows` of the interleaved matrix
/// `packed` (`cols` columns) into `dst` (`n_rows` rows of `cols / 256 · 210` bytes):
/// any range, not only whole groups (prefill paths that want ggml's layout back).
///
/// # Panics
/// If `cols` is not a positive multiple of 256, if the rows are not all inside
/// `packed` (whole groups), or if `dst` is not exactly `n_rows` rows long (internal
/// contract, checked).
pub(crate) fn unpack_rows_q6_k(
    packed: &[u8],
    cols: usize,
    first_row: usize,
    n_rows: usize,
    dst: &mut [u8],
) {
    assert!(cols > 0 && cols.is_multiple_of(256), "Q6_K columns {cols}");
    let nb = cols / 256;
    let row_bytes = nb * Q6_K_BLOCK;
    let gb = nb * Q6_K_X8_BLOCK_BYTES;
    let end = first_row.checked_add(n_rows).expect("row range overflows");
    assert!(
        packed.len().is_multiple_of(gb) && end <= packed.len() / gb * GROUP_ROWS,
        "Q6_K rows {first_row}..{end} of a {}-byte packed matrix of {cols} columns",
        packed.len()
    );
    assert_eq!(dst.len(), n_rows * row_bytes, "Q6_K unpacked rows length");
    for (r, row) in (first_row..end).zip(dst.chunks_exact_mut(row_bytes)) {
        let (g, k) = (r / GROUP_ROWS, r % GROUP_ROWS);
        let grp = &packed[g * gb..(g + 1) * gb];
        for (s, blk) in grp
            .chunks_exact(Q6_K_X8_BLOCK_BYTES)
            .zip(row.chunks_exact_mut(Q6_K_BLOCK))
        {
            unpack_block(
                s.try_into().expect("whole block"),
                k,
                blk.try_into().expect("whole block"),
            );
        }
    }
}

/// Portable reference GEMV over interleaved groups (the contract of the SIMD kernel):
/// `groups` holds whole groups of `nb` super-blocks, `act` one Q8_K row of at least
/// `nb` blocks; `out[8g + r]` = dot of row `r` of group `g`, bitwise
/// [`crate::formats::kquants::dot_q6_k_q8_k`] of that row.
///
/// # Panics
/// If the lengths disagree (internal contract, checked).
#[cfg(test)]
pub(crate) fn gemv_q6_k_x8_ref(groups: &[u8], nb: usize, act: &[u8], out: &mut [f32]) {
    let gb = nb * Q6_K_X8_BLOCK_BYTES;
    assert!(
        nb > 0
            && out.len().is_multiple_of(GROUP_ROWS)
            && groups.len() == out.len() / GROUP_ROWS * gb
            && act.len() >= nb * Q8_K_BLOCK,
        "packed Q6_K GEMV: {} bytes, nb {nb}, {} outputs, {} activation bytes",
        groups.len(),
        out.len(),
        act.len()
    );
    let mut row = vec![0u8; nb * Q6_K_BLOCK];
    for (r, o) in out.iter_mut().enumerate() {
        unpack_rows_q6_k(groups, 256 * nb, r, 1, &mut row);
        *o = crate::formats::kquants::dot_q6_k_q8_k(&row, &act[..nb * Q8_K_BLOCK]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::kquants::dot_q6_k_q8_k;
    use crate::half::f32_to_f16;
    use crate::{ActType, QuantError};

    /// splitmix64: deterministic test data without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform in [-1, 1).
        fn unit(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }

        /// Roughly normal (sum of uniforms), mean 0, deviation `sd`.
        fn normal(&mut self, sd: f32) -> f32 {
            let s: f32 = (0..4).map(|_| self.unit()).sum();
            s * sd * (3f32 / 4.0).sqrt()
        }
    }

    /// A row-major `rows × 256·nb` Q6_K matrix: random quant and scale bytes, `d` a
    /// small f16 around 0.01.
    fn random_q6_k(rng: &mut Rng, rows: usize, nb: usize) -> Vec<u8> {
        let mut m = vec![0u8; rows * nb * Q6_K_BLOCK];
        for blk in m.chunks_exact_mut(Q6_K_BLOCK) {
            for b in &mut blk[..208] {
                *b = rng.next() as u8;
            }
            let d = 0.01 + rng.normal(0.003);
            blk[208..210].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        }
        m
    }

    /// A Q8_K activation row of `256·nb` random floats, through the crate's quantizer.
    fn random_act(rng: &mut Rng, nb: usize) -> Vec<u8> {
        let x: Vec<f32> = (0..256 * nb).map(|_| rng.normal(1.0)).collect();
        let mut a = Vec::new();
        ActType::Q8_K
            .quantize_row(&x, &mut a)
            .expect("whole blocks");
        a
    }

    #[test]
    fn interleave_roundtrip() {
        let mut rng = Rng(1);
        for (rows, nb) in [(8, 1), (8, 3), (24, 1), (24, 3)] {
            let m = random_q6_k(&mut rng, rows, nb);
            let mut p = vec![0u8; m.len()];
            interleave_q6_k(&m, rows, 256 * nb, &mut p).unwrap();
            assert_ne!(p, m);
            let mut back = vec![0u8; m.len()];
            deinterleave_q6_k(&p, rows, 256 * nb, &mut back).unwrap();
            assert_eq!(back, m, "{rows} × {}", 256 * nb);
            // Every byte pattern round-trips, not only the ones with a valid `d`.
            let raw: Vec<u8> = (0..m.len()).map(|_| rng.next() as u8).collect();
            interleave_q6_k(&raw, rows, 256 * nb, &mut p).unwrap();
            deinterleave_q6_k(&p, rows, 256 * nb, &mut back).unwrap();
            assert_eq!(back, raw);
        }
    }

    #[test]
    fn unpack_rows_ranges() {
        let mut rng = Rng(2);
        let (rows, nb) = (24, 3);
        let row_bytes = nb * Q6_K_BLOCK;
        let m = random_q6_k(&mut rng, rows, nb);
        let mut p = vec![0u8; m.len()];
        interleave_q6_k(&m, rows, 256 * nb, &mut p).unwrap();
        for (first, n) in [
            (0, 24),
            (0, 1),
            (3, 1),
            (5, 7),
            (7, 2),
            (8, 8),
            (13, 11),
            (23, 1),
            (4, 0),
        ] {
            let mut dst = vec![0u8; n * row_bytes];
            unpack_rows_q6_k(&p, 256 * nb, first, n, &mut dst);
            assert_eq!(
                dst,
                m[first * row_bytes..(first + n) * row_bytes],
                "{first}+{n}"
            );
        }
    }

    #[test]
    fn shape_errors() {
        let m = vec![0u8; 8 * Q6_K_BLOCK];
        let mut p = vec![0u8; m.len()];
        // Columns not a multiple of 256.
        assert!(matches!(
            interleave_q6_k(&m, 8, 255, &mut p),
            Err(QuantError::NotBlockMultiple { .. })
        ));
        assert!(matches!(
            interleave_q6_k(&m, 8, 0, &mut p),
            Err(QuantError::NotBlockMultiple { .. })
        ));
        // Rows not a multiple of 8.
        let m7 = vec![0u8; 7 * Q6_K_BLOCK];
        let mut p7 = vec![0u8; m7.len()];
        assert!(matches!(
            interleave_q6_k(&m7, 7, 256, &mut p7),
            Err(QuantError::Shape(_))
        ));
        assert!(matches!(
            deinterleave_q6_k(&m7, 7, 256, &mut p7),
            Err(QuantError::Shape(_))
        ));
        // Source length not rows × row bytes.
        assert!(matches!(
            interleave_q6_k(&m, 16, 256, &mut p),
            Err(QuantError::ByteLength { .. })
        ));
        assert!(matches!(
            deinterleave_q6_k(&m[1..], 8, 256, &mut p[1..]),
            Err(QuantError::ByteLength { .. })
        ));
        // Destination length differs from the source.
        let mut short = vec![0u8; m.len() - 1];
        assert!(matches!(
            interleave_q6_k(&m, 8, 256, &mut short),
            Err(QuantError::ByteLength { .. })
        ));
        assert!(matches!(
            deinterleave_q6_k(&m, 8, 256, &mut short),
            Err(QuantError::ByteLength { .. })
        ));
        // Overflow is an error, not a panic.
        assert!(matches!(
            interleave_q6_k(&m, usize::MAX - 7, 256, &mut p),
            Err(QuantError::Shape(_))
        ));
    }

    #[test]
    fn reference_gemv_matches_row_dots() {
        let mut rng = Rng(3);
        for (rows, nb) in [(8, 1), (16, 3)] {
            let m = random_q6_k(&mut rng, rows, nb);
            let a = random_act(&mut rng, nb);
            let mut p = vec![0u8; m.len()];
            interleave_q6_k(&m, rows, 256 * nb, &mut p).unwrap();
            let mut out = vec![0f32; rows];
            gemv_q6_k_x8_ref(&p, nb, &a, &mut out);
            for (r, o) in out.iter().enumerate() {
                let row = &m[r * nb * Q6_K_BLOCK..(r + 1) * nb * Q6_K_BLOCK];
                assert_eq!(o.to_bits(), dot_q6_k_q8_k(row, &a).to_bits());
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_gemv_bitwise() {
        use crate::arch::x86_64::q6_k_x8;
        use crate::dispatch::{Isa, KernelPath, Kernels};

        let Some(gemv) = q6_k_x8::kernel() else {
            eprintln!("skipped: this CPU lacks AVX-512 F/BW/VL/DQ/VNNI/VBMI");
            return;
        };
        let avx512 = Kernels::for_isa(Isa::Avx512)
            .and_then(|k| k.entry(GgmlType::Q6_K))
            .expect("AVX-512 entry (VBMI implies the base AVX-512 set)");
        assert_eq!(avx512.path, KernelPath::Simd(Isa::Avx512));
        let mut rng = Rng(4);
        for nb in [1, 2, 3, 10, 16] {
            for rows in [8, 16, 64] {
                let m = random_q6_k(&mut rng, rows, nb);
                let a = random_act(&mut rng, nb);
                // Consistent activation block sums (the kernels trust them).
                for y in a.chunks_exact(Q8_K_BLOCK) {
                    for g in 0..16 {
                        let s: i32 = (0..16).map(|i| i32::from(y[4 + 16 * g + i] as i8)).sum();
                        let bs = i16::from_le_bytes([y[260 + 2 * g], y[261 + 2 * g]]);
                        assert_eq!(s, i32::from(bs));
                    }
                }
                let mut p = vec![0u8; m.len()];
                interleave_q6_k(&m, rows, 256 * nb, &mut p).unwrap();
                let mut out = vec![f32::NAN; rows];
                gemv(&p, nb, &a, &mut out);
                for (r, o) in out.iter().enumerate() {
                    let row = &m[r * nb * Q6_K_BLOCK..(r + 1) * nb * Q6_K_BLOCK];
                    let want = dot_q6_k_q8_k(row, &a);
                    assert_eq!(
                        o.to_bits(),
                        want.to_bits(),
                        "nb {nb}, row {r}/{rows}: {o} vs {want}"
                    );
                    let cur = avx512.dot(row, &a);
                    assert_eq!(
                        o.to_bits(),
                        cur.to_bits(),
                        "nb {nb}, row {r}/{rows}: {o} vs {cur}"
                    );
                }
                // The activation row may be longer than `nb` blocks.
                let mut long = a.clone();
                long.extend_from_slice(&[0x55; Q8_K_BLOCK]);
                let mut out2 = vec![f32::NAN; rows];
                gemv(&p, nb, &long, &mut out2);
                assert_eq!(
                    out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    out2.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                );
            }
        }
    }

    /// The multi-row kernel is bitwise the GEMV for every activation row: every row count
    /// it streams (1-8: passes of up to 4), past that (9, 17), strides longer than a row.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_gemm_is_bitwise_the_gemv_per_row() {
        use crate::arch::x86_64::q6_k_x8;
        let (Some(gemv), Some(gemm)) = (q6_k_x8::kernel(), q6_k_x8::gemm_kernel()) else {
            eprintln!("skipped: this CPU lacks AVX-512 F/BW/VL/DQ/VNNI/VBMI");
            return;
        };
        let mut rng = Rng(9);
        let mut checked = 0;
        for (nb, rows, nt) in [
            (1, 8, 1),
            (1, 8, 2),
            (2, 16, 3),
            (3, 8, 4),
            (3, 16, 5),
            (2, 24, 6),
            (1, 16, 7),
            (10, 24, 8),
            (2, 8, 9),
            (4, 16, 17),
        ] {
            let m = random_q6_k(&mut rng, rows, nb);
            let stride = nb * Q8_K_BLOCK + if nt % 2 == 0 { 0 } else { Q8_K_BLOCK };
            let mut acts = Vec::new();
            for _ in 0..nt {
                let mut a = random_act(&mut rng, nb);
                a.resize(stride, 0x55);
                acts.extend_from_slice(&a);
            }
            let mut p = vec![0u8; m.len()];
            interleave_q6_k(&m, rows, 256 * nb, &mut p).unwrap();
            let mut out = vec![f32::NAN; nt * rows];
            gemm(&p, nb, &acts, stride, &mut out);
            for t in 0..nt {
                let mut want = vec![f32::NAN; rows];
                gemv(&p, nb, &acts[t * stride..(t + 1) * stride], &mut want);
                for r in 0..rows {
                    assert_eq!(
                        out[t * rows + r].to_bits(),
                        want[r].to_bits(),
                        "nb {nb}, row {r}/{rows}, activation row {t}/{nt}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 500);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_gemv_empty_and_bad_lengths() {
        use crate::arch::x86_64::q6_k_x8;

        let Some(gemv) = q6_k_x8::kernel() else {
            eprintln!("skipped: this CPU lacks AVX-512 F/BW/VL/DQ/VNNI/VBMI");
            return;
        };
        // Zero super-blocks: every dot is the empty sum, as `dot_q6_k_q8_k` gives.
        let mut out = [f32::NAN; 8];
        gemv(&[], 0, &[], &mut out);
        assert!(out
            .iter()
            .all(|v| v.to_bits() == dot_q6_k_q8_k(&[], &[]).to_bits()));
        // Wrong lengths panic (checked), never read out of bounds.
        let groups = vec![0u8; Q6_K_X8_BLOCK_BYTES];
        let act = vec![0u8; Q8_K_BLOCK];
        for (g, a, n) in [
            (&groups[1..], &act[..], 8),
            (&groups[..], &act[1..], 8),
            (&groups[..], &act[..], 16),
        ] {
            let r = std::panic::catch_unwind(|| gemv(g, 1, a, &mut vec![0f32; n]));
            assert!(r.is_err());
        }
    }

    /// Single-thread throughput, old per-row AVX-512 dot vs the packed GEMV:
    /// `cargo test -p fucina-quant --release --lib -- --ignored --nocapture q6_k`.
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore = "benchmark"]
    fn bench_q6_k_gemv() {
        use std::time::Instant;

        use crate::arch::x86_64::q6_k_x8;
        use crate::dispatch::{Isa, Kernels};

        let Some(gemv) = q6_k_x8::kernel() else {
            eprintln!("skipped: this CPU lacks AVX-512 F/BW/VL/DQ/VNNI/VBMI");
            return;
        };
        let avx512 = Kernels::for_isa(Isa::Avx512)
            .and_then(|k| k.entry(GgmlType::Q6_K))
            .unwrap();
        let mut rng = Rng(5);
        for (rows, cols, reps) in [(256, 2048, 1000), (640, 2048, 400), (4096, 4096, 40)] {
            let nb = cols / 256;
            let rb = nb * Q6_K_BLOCK;
            let m = random_q6_k(&mut rng, rows, nb);
            let a = random_act(&mut rng, nb);
            let mut p = vec![0u8; m.len()];
            interleave_q6_k(&m, rows, cols, &mut p).unwrap();
            let mut out_old = vec![0f32; rows];
            let mut out_new = vec![0f32; rows];
            let bytes = m.len() as f64;
            let (mut best_old, mut best_new) = (f64::MAX, f64::MAX);
            for _ in 0..reps {
                let t = Instant::now();
                for (o, row) in out_old.iter_mut().zip(m.chunks_exact(rb)) {
                    *o = avx512.dot(row, &a);
                }
                best_old = best_old.min(t.elapsed().as_secs_f64());
                std::hint::black_box(&mut out_old);
                let t = Instant::now();
                gemv(&p, nb, &a, &mut out_new);
                best_new = best_new.min(t.elapsed().as_secs_f64());
                std::hint::black_box(&mut out_new);
            }
            println!(
                "Q6_K {rows}×{cols}, 1 thread: old per-row {:.1} GB/s ({:.1} µs), packed x8 {:.1} GB/s ({:.1} µs), {:.2}×",
                bytes / best_old / 1e9,
                best_old * 1e6,
                bytes / best_new / 1e9,
                best_new * 1e6,
                best_old / best_new
            );
            assert_eq!(
                out_old.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                out_new.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}
