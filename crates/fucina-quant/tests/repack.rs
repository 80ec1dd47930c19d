//! Weights repacked into interleaved 8-row groups (`fucina_quant::repack`): the Q4_K
//! layout round-trips, bad shapes are errors, and every packed product (Q4_K, Q8_0,
//! Q6_K, and Q4_0 / Q5_0 widened to Q8_0) is bitwise the row-major kernels' product in
//! the same order, on every ISA with packed kernels.

mod common;

use common::{prng_blocks, uniform};
use fucina_quant::repack::{deinterleave_q4_k, interleave_q4_k};
use fucina_quant::{
    GgmlType, Isa, Kernels, Packed, PackedOrder, Prefetch, QMatrix, ThreadPool, TileDot,
};

/// A `rows × cols` Q4_K matrix: quantized rows of different magnitudes, then (from
/// `seed % 2 == 1`) raw random blocks, whose 6-bit scales and mins take every value.
fn matrix(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    if seed % 2 == 1 {
        return prng_blocks(GgmlType::Q4_K, seed, rows * cols / 256);
    }
    let mut w = Vec::new();
    for r in 0..rows as u64 {
        let x = uniform(seed * 7919 + r, cols, 0.25 + (r % 7) as f32);
        fucina_quant::quantize(GgmlType::Q4_K, &x, &mut w).expect("quantize");
    }
    w
}

#[test]
fn interleave_round_trips_and_moves_every_byte() {
    for (rows, cols) in [(8, 256), (16, 512), (24, 2560)] {
        let src = matrix(rows, cols, 3);
        let mut packed = vec![0u8; src.len()];
        interleave_q4_k(&src, rows, cols, &mut packed).expect("interleave");
        assert_ne!(packed, src, "{rows}×{cols}: interleaving changed nothing");
        let mut back = vec![0u8; src.len()];
        deinterleave_q4_k(&packed, rows, cols, &mut back).expect("deinterleave");
        assert_eq!(back, src, "{rows}×{cols}");
        // The first group's first super-block: headers in row order, then quant dwords.
        let rb = cols / 256 * 144;
        for k in 0..8 {
            assert_eq!(packed[16 * k..16 * k + 16], src[k * rb..k * rb + 16]);
            assert_eq!(
                packed[128 + 4 * k..132 + 4 * k],
                src[k * rb + 16..k * rb + 20]
            );
        }
    }
}

#[test]
fn bad_shapes_are_errors() {
    let src = matrix(8, 256, 0);
    let mut dst = vec![0u8; src.len()];
    assert!(
        interleave_q4_k(&src, 8, 255, &mut dst).is_err(),
        "cols not whole blocks"
    );
    assert!(
        interleave_q4_k(&src[..144 * 4], 4, 256, &mut dst[..144 * 4]).is_err(),
        "4 rows"
    );
    assert!(interleave_q4_k(&src, 16, 256, &mut dst).is_err(), "length");
    assert!(
        interleave_q4_k(&src, 8, 256, &mut dst[1..]).is_err(),
        "output length"
    );
    assert!(
        deinterleave_q4_k(&src[1..], 8, 256, &mut dst[1..]).is_err(),
        "length"
    );
    let k = Kernels::for_isa(Isa::best()).expect("best ISA");
    let entry = k.entry(GgmlType::Q4_K).expect("Q4_K");
    if Packed::supported(&entry, 8) {
        assert!(Packed::new(&entry, &src[1..], 8, 256).is_err(), "length");
    }
    assert!(Packed::new(&entry, &src[..144 * 4], 4, 256)
        .expect("4 rows")
        .is_none());
}

#[test]
fn scalar_isa_keeps_the_row_major_form() {
    let k = Kernels::for_isa(Isa::Scalar).expect("scalar");
    let entry = k.entry(GgmlType::Q4_K).expect("Q4_K");
    assert!(!Packed::supported(&entry, 8));
    let src = matrix(8, 256, 0);
    assert!(Packed::new(&entry, &src, 8, 256).expect("scalar").is_none());
}

/// The row-major reference product of weight rows `ws` (a multiple of 8) with the
/// first `nt` activation rows, `nt × ws.len()`, in chunks of 8 weight rows (its tile
/// width).
fn row_major(reference: &TileDot, ws: &[&[u8]], acts: &[u8], stride: usize, nt: usize) -> Vec<f32> {
    let n = ws.len();
    let mut want = vec![f32::NAN; nt * n];
    for c in (0..n).step_by(8) {
        let mut part = vec![0f32; nt * 8];
        reference.dots(&ws[c..c + 8], &acts[..nt * stride], stride, &mut part);
        for t in 0..nt {
            want[t * n + c..t * n + c + 8].copy_from_slice(&part[t * 8..t * 8 + 8]);
        }
    }
    want
}

#[test]
fn packed_products_equal_row_major_products_bitwise() {
    let mut checked = 0;
    for isa in Isa::available() {
        let kernels = Kernels::for_isa(isa).expect("available ISA");
        let entry = kernels.entry(GgmlType::Q4_K).expect("Q4_K");
        // Interleaved kernels exist on x86-64 (AVX2, AVX-512); elsewhere the
        // row-major form stays.
        if matches!(isa, Isa::Avx2 | Isa::Avx512) {
            assert!(
                Packed::supported(&entry, 8),
                "{isa:?} has no packed Q4_K kernels"
            );
        }
        for (rows, cols, seed) in [(8, 256, 0), (40, 768, 1), (24, 2560, 2), (48, 1024, 5)] {
            let w = matrix(rows, cols, seed);
            let Some(packed) = Packed::new(&entry, &w, rows, cols).expect("repack") else {
                continue;
            };
            assert_eq!(packed.bytes().len(), w.len());
            let rb = cols / 256 * 144;
            let row = |r: usize| &w[r * rb..(r + 1) * rb];
            let stride = entry.act.row_bytes(cols);
            let mut acts = Vec::new();
            for t in 0..23u64 {
                let x = uniform(seed * 1000 + t + 11, cols, 1.0 + (t % 5) as f32 * 7.5);
                entry.act.quantize_row(&x, &mut acts).expect("activation");
            }
            let single = TileDot::new(&entry);
            let prompt = TileDot::new_prompt(&entry);
            for (order, reference) in [(PackedOrder::Single, single), (PackedOrder::Pairs, prompt)]
            {
                for r in [0..rows, 8..rows, 0..8, 8..(rows.min(24))] {
                    if r.is_empty() {
                        continue;
                    }
                    let n = r.len();
                    let ws: Vec<&[u8]> = r.clone().map(row).collect();
                    for nt in [1usize, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 17, 18, 19, 20, 23] {
                        let mut got = vec![f32::NAN; nt * n];
                        packed.dots(order, r.clone(), &acts[..nt * stride], stride, &mut got);
                        let want = row_major(&reference, &ws, &acts, stride, nt);
                        for (k, (g, e)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(
                                g.to_bits(),
                                e.to_bits(),
                                "{isa:?} {order:?} {rows}×{cols} seed {seed}, rows {r:?}, \
                                 {nt} activation rows: output {k}: {g} vs {e}"
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    if Isa::available()
        .iter()
        .any(|i| matches!(i, Isa::Avx2 | Isa::Avx512))
    {
        assert!(checked > 0);
    }
}

/// A `rows × cols` matrix of `ty` from the reference quantizer (rows of different
/// magnitudes).
fn typed_matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    if ty == GgmlType::Q4_K {
        return matrix(rows, cols, seed);
    }
    let mut w = Vec::new();
    for r in 0..rows as u64 {
        let x = uniform(seed * 7919 + r, cols, 0.25 + (r % 7) as f32);
        fucina_quant::quantize(ty, &x, &mut w).expect("quantize");
    }
    w
}

/// Every packable type on every ISA: the packed matrix multiplies bitwise like the
/// row-major one (1 to 70 activation rows, 1 and 3 threads), and
/// [`Packed::unpack_rows`] gives back any range of rows; where an ISA has no packed
/// kernels for the type, a matrix packed for another ISA is refused.
#[test]
fn packed_qmatrix_equals_row_major_qmatrix_bitwise() {
    let (rows, cols) = (200, 1280);
    let mut packed_types = Vec::new();
    let types = [
        GgmlType::Q4_K,
        GgmlType::Q8_0,
        GgmlType::Q6_K,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
    ];
    for ty in types {
        let w = typed_matrix(ty, rows, cols, 4);
        let rb = w.len() / rows;
        for isa in Isa::available() {
            let kernels = Kernels::for_isa(isa).expect("available ISA");
            let entry = kernels.entry(ty).expect("entry");
            let Some(packed) = Packed::new(&entry, &w, rows, cols).expect("repack") else {
                let best = Kernels::for_isa(Isa::best()).expect("best ISA");
                let e = best.entry(ty).expect("entry");
                if let Some(p) = Packed::new(&e, &w, rows, cols).expect("repack") {
                    assert!(QMatrix::interleaved(kernels, &p).is_err(), "{ty} {isa:?}");
                }
                continue;
            };
            packed_types.push((ty, isa));
            // Q4_0 and Q5_0 are widened to Q8_0 blocks (34 bytes each).
            let stored = match ty {
                GgmlType::Q4_0 | GgmlType::Q5_0 => GgmlType::Q8_0,
                ty => ty,
            };
            assert_eq!(packed.stored_ty(), stored, "{ty}");
            let len = rows * cols / 32 * 34;
            let want_len = if stored == ty { w.len() } else { len };
            assert_eq!(packed.bytes().len(), want_len, "{ty}: packed size");
            assert_eq!(Packed::packed_len(&entry, rows, cols), want_len, "{ty}");
            for (first, n) in [(0, rows), (5, 11), (rows - 1, 1), (64, 8)] {
                let mut back = vec![0u8; n * rb];
                packed.unpack_rows(first, &mut back);
                assert_eq!(
                    back,
                    w[first * rb..(first + n) * rb],
                    "{ty} rows {first}+{n}"
                );
            }
            let rm = QMatrix::new(kernels, ty, &w, rows, cols).expect("row-major");
            let il = QMatrix::interleaved(kernels, &packed).expect("interleaved");
            for threads in [1, 3] {
                let pool = ThreadPool::new(threads).expect("pool");
                for n in [1usize, 2, 7, 70] {
                    let x = uniform(n as u64 + 17, n * cols, 3.0);
                    let (mut a, mut b) = (vec![0f32; n * rows], vec![1f32; n * rows]);
                    rm.gemm(&pool, &x, n, &mut a).expect("row-major gemm");
                    il.gemm(&pool, &x, n, &mut b).expect("interleaved gemm");
                    assert!(
                        a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
                        "{ty} {isa:?}, {threads} threads, {n} rows"
                    );
                }
            }
        }
    }
    let avail = Isa::available();
    if avail.contains(&Isa::Avx2) {
        assert!(packed_types.contains(&(GgmlType::Q4_K, Isa::Avx2)));
    }
    if avail.contains(&Isa::Avx512) {
        assert!(packed_types.contains(&(GgmlType::Q4_K, Isa::Avx512)));
        assert!(packed_types.contains(&(GgmlType::Q8_0, Isa::Avx512)));
        assert!(packed_types.contains(&(GgmlType::Q4_0, Isa::Avx512)));
        assert!(packed_types.contains(&(GgmlType::Q5_0, Isa::Avx512)));
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512vbmi") {
            assert!(packed_types.contains(&(GgmlType::Q6_K, Isa::Avx512)));
        }
    }
}

/// Repacking in slices that report their source ranges (so the caller can release
/// them) covers every byte once, in order, and gives the same packed bytes as one
/// call; a widened type (Q5_0: source and packed slices of different lengths) too.
#[test]
fn releasing_repack_reports_every_slice_once() {
    let (rows, cols) = (8192, 2048); // 17.8 MB of Q8_0: three slices; Q5_0: two
    let Ok(kernels) = Kernels::for_isa(Isa::best()) else {
        return;
    };
    for ty in [GgmlType::Q8_0, GgmlType::Q5_0] {
        let w = typed_matrix(ty, rows, cols, 6);
        let entry = kernels.entry(ty).expect("entry");
        let mut seen = Vec::new();
        let Some(sliced) =
            Packed::new_releasing(&entry, &w, rows, cols, |r| seen.push(r)).expect("repack")
        else {
            eprintln!("skipped: no packed {ty} kernel on this CPU");
            return;
        };
        assert!(seen.len() >= 2, "{ty}: {} slices", seen.len());
        assert_eq!(seen.first().map(|r| r.start), Some(0));
        assert_eq!(seen.last().map(|r| r.end), Some(w.len()));
        assert!(seen.windows(2).all(|p| p[0].end == p[1].start));
        let whole = Packed::new(&entry, &w, rows, cols)
            .expect("repack")
            .expect("packed");
        assert!(sliced.bytes() == whole.bytes(), "{ty}");
        let mut back = vec![0u8; w.len()];
        sliced.unpack_rows(0, &mut back);
        assert!(back == w, "{ty}: every row back");
    }
}

/// The packed Q4_K products at the integer bounds: every nibble 15, every 6-bit
/// scale and min 63, activation blocks of constant sign (each quant −128, or 127
/// and −128 alternating). Without VNNI the kernels sum a sub-block's `maddubs`
/// pairs in i16 before widening (±30,720 at most): these inputs reach that bound,
/// and the products must still be the row-major kernels' bitwise.
#[test]
fn packed_q4_k_products_at_the_integer_bounds() {
    let (rows, cols) = (16, 1024);
    let mut block = [0xffu8; 144];
    block[..2].copy_from_slice(&0x1c00u16.to_le_bytes()); // d
    block[2..4].copy_from_slice(&0x1800u16.to_le_bytes()); // dmin
    let w: Vec<u8> = (0..rows * cols / 256).flat_map(|_| block).collect();
    let mut checked = 0;
    for isa in Isa::available() {
        let kernels = Kernels::for_isa(isa).expect("available ISA");
        let entry = kernels.entry(GgmlType::Q4_K).expect("Q4_K");
        let Some(packed) = Packed::new(&entry, &w, rows, cols).expect("repack") else {
            continue;
        };
        let stride = entry.act.row_bytes(cols);
        let mut acts = Vec::new();
        for t in 0..9 {
            let x: Vec<f32> = (0..cols)
                .map(|i| match t {
                    0 => -1.0,
                    1 => 1.0,
                    2 => {
                        if i % 2 == 0 {
                            1.0
                        } else {
                            -0.99
                        }
                    }
                    _ => {
                        if i % 3 == 0 {
                            -3.0
                        } else {
                            2.9
                        }
                    }
                })
                .collect();
            entry.act.quantize_row(&x, &mut acts).expect("activation");
        }
        let rb = cols / 256 * 144;
        let ws: Vec<&[u8]> = (0..rows).map(|r| &w[r * rb..(r + 1) * rb]).collect();
        for (order, reference) in [
            (PackedOrder::Single, TileDot::new(&entry)),
            (PackedOrder::Pairs, TileDot::new_prompt(&entry)),
        ] {
            for nt in [1usize, 2, 3, 4, 5, 8, 9] {
                let mut got = vec![f32::NAN; nt * rows];
                packed.dots(order, 0..rows, &acts[..nt * stride], stride, &mut got);
                let want = row_major(&reference, &ws, &acts, stride, nt);
                for (k, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g.is_finite() && *g != 0.0,
                        "{isa:?} {order:?}: output {k} = {g}"
                    );
                    assert_eq!(
                        g.to_bits(),
                        e.to_bits(),
                        "{isa:?} {order:?} {nt} rows: output {k}: {g} vs {e}"
                    );
                }
                checked += 1;
            }
        }
    }
    if Isa::available()
        .iter()
        .any(|i| matches!(i, Isa::Avx2 | Isa::Avx512))
    {
        assert!(checked > 0);
    }
}

/// Whether a layout pays off is a measurement of this CPU, once per process: Q4_K
/// always where it has a layout, the `Rows` layouts (Q8_0, Q6_K on AVX-512) by timing
/// both kernels from memory, never for a type or ISA without a layout.
#[test]
fn pays_off_is_measured_once_and_only_where_a_layout_exists() {
    for isa in Isa::available() {
        let k = Kernels::for_isa(isa).expect("kernels");
        for ty in [
            GgmlType::Q4_K,
            GgmlType::Q8_0,
            GgmlType::Q6_K,
            GgmlType::Q5_K,
        ] {
            let e = k.entry(ty).expect("entry");
            let supported = Packed::supported(&e, 8);
            let first = Packed::pays_off(&e);
            assert_eq!(
                Packed::pays_off(&e),
                first,
                "{ty} on {isa:?}: answer changed"
            );
            assert!(
                supported || !first,
                "{ty} on {isa:?}: pays off without a layout"
            );
            match Packed::calibrate(&e) {
                Some((packed, rows)) => {
                    assert!(
                        supported && ty != GgmlType::Q4_K,
                        "{ty} on {isa:?} calibrated"
                    );
                    assert!(packed > 0.0 && rows > 0.0 && packed.is_finite() && rows.is_finite());
                    // The measurement settled where the GEMV prefetches (L1 or L2).
                    assert!(
                        matches!(Packed::prefetch(&e), Some(Prefetch::L1 | Prefetch::L2)),
                        "{ty} on {isa:?}: {:?}",
                        Packed::prefetch(&e)
                    );
                }
                None => assert!(!supported || ty == GgmlType::Q4_K, "{ty} on {isa:?}"),
            }
            if ty == GgmlType::Q4_K {
                assert_eq!(first, supported, "Q4_K on {isa:?}");
                // Its prefetch choice was measured by `pays_off` (on x86-64), once.
                let t = Packed::q4_k_prefetch_timings(&e);
                if supported && cfg!(target_arch = "x86_64") {
                    let (with, without) = t.expect("Q4_K prefetch measured");
                    assert!(with > 0.0 && without > 0.0 && with.is_finite() && without.is_finite());
                    assert_eq!(Packed::q4_k_prefetch_timings(&e), Some((with, without)));
                    // Off only where going without measured at least 5% faster.
                    let p = Packed::prefetch(&e).expect("a packed layout");
                    assert_eq!(p == Prefetch::Off, without * 1.05 < with, "{p:?}");
                }
            }
        }
    }
}
