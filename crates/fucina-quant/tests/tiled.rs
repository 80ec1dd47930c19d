//! llama.cpp's tiled K-quant matmul order (`TileDot::new_tiled`, Q3_K to Q6_K and IQ4_XS):
//! bitwise the scalar reference on every ISA this CPU runs (forced through `Kernels::for_isa`), for tile
//! shapes covering whole 8-row groups and remainders, and a different float order from
//! the single-row dots (same values up to rounding).

mod common;

use common::{splitmix_words, uniform};
use fucina_quant::{GgmlType, Isa, Kernels, TileDot};

#[test]
fn tiled_order_matches_scalar_reference_on_every_isa() {
    const COLS: usize = 1536;
    const ROWS: usize = 21;
    const W_ROWS: usize = 17;
    let scalar = Kernels::for_isa(Isa::Scalar).expect("scalar");
    let mut differs = std::collections::BTreeMap::new();
    let mut checked = 0usize;
    for isa in Isa::available() {
        let kernels = Kernels::for_isa(isa).expect("available ISA");
        for entry in kernels.entries() {
            const TILED: [GgmlType; 5] = [
                GgmlType::Q3_K,
                GgmlType::Q4_K,
                GgmlType::Q5_K,
                GgmlType::Q6_K,
                GgmlType::IQ4_XS,
            ];
            let Some(tiled) = TileDot::new_tiled(entry) else {
                assert!(
                    !TILED.contains(&entry.ty),
                    "{:?} has a tiled form",
                    entry.ty
                );
                continue;
            };
            assert!(TILED.contains(&entry.ty), "{:?}", entry.ty);
            assert!(tiled.is_prompt_order() && tiled.is_blocked());
            let reference =
                TileDot::new_tiled(&scalar.entry(entry.ty).expect("scalar entry")).expect("tiled");
            for seed in 0..3u64 {
                let ws: Vec<Vec<u8>> = (0..W_ROWS as u64)
                    .map(|i| {
                        let mut w = Vec::new();
                        if entry.ty == GgmlType::IQ4_XS {
                            // No IQ4_XS quantizer: random blocks (every code and 6-bit
                            // scale) with a small f16 scale.
                            let words = splitmix_words(seed * 37 + 100 * i + 5, COLS / 256 * 17);
                            for block in words.chunks_exact(17) {
                                let mut b: Vec<u8> =
                                    block.iter().flat_map(|x| x.to_le_bytes()).collect();
                                b.truncate(136);
                                b[0..2].copy_from_slice(&(0x1c00u16 + i as u16).to_le_bytes());
                                w.extend_from_slice(&b);
                            }
                            return w;
                        }
                        if entry.ty == GgmlType::Q3_K {
                            // No Q3_K quantizer: random blocks with a finite f16 scale.
                            let words = splitmix_words(seed * 31 + 100 * i + 1, COLS / 256 * 14);
                            for block in words.chunks_exact(14) {
                                let mut b: Vec<u8> = block
                                    .iter()
                                    .flat_map(|x| x.to_le_bytes())
                                    .take(110)
                                    .collect();
                                b[108..110].copy_from_slice(&(0x2000u16 + i as u16).to_le_bytes());
                                w.extend_from_slice(&b);
                            }
                            return w;
                        }
                        let wx = uniform(seed * 31 + 100 * i + 1, COLS, 0.5 + i as f32);
                        fucina_quant::quantize(entry.ty, &wx, &mut w).expect("quantize");
                        w
                    })
                    .collect();
                let stride = entry.act.row_bytes(COLS);
                let mut acts = Vec::new();
                let mut xs = Vec::new();
                for r in 0..ROWS as u64 {
                    let x = uniform(seed * 1000 + r + 7, COLS, 1.0 + (r % 5) as f32 * 7.5);
                    entry.act.quantize_row(&x, &mut acts).expect("activation");
                    xs.push(x);
                }
                // Σ |w|·|x| per (weight row, activation row): the two orders round
                // terms of that size differently (random IQ4_XS blocks cancel heavily).
                let deq: Vec<Vec<f32>> = ws
                    .iter()
                    .map(|w| {
                        let mut d = vec![0f32; COLS];
                        fucina_quant::dequantize(entry.ty, w, &mut d).expect("dequantize");
                        d
                    })
                    .collect();
                let magnitude = |i: usize, t: usize| -> f32 {
                    deq[i].iter().zip(&xs[t]).map(|(w, x)| (w * x).abs()).sum()
                };
                for nw in [1, 3, 8, 16, 17] {
                    let wr: Vec<&[u8]> = ws[..nw].iter().map(|w| w.as_slice()).collect();
                    for n in [1, 5, 8, 9, 16, 21] {
                        let mut got = vec![f32::NAN; n * nw];
                        let mut want = vec![f32::NAN; n * nw];
                        tiled.dots(&wr, &acts[..n * stride], stride, &mut got);
                        reference.dots(&wr, &acts[..n * stride], stride, &mut want);
                        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                            let (t, i) = (k / nw, k % nw);
                            assert_eq!(
                                g.to_bits(),
                                w.to_bits(),
                                "{:?} on {isa:?}, {nw}×{n} tile, weight row {i}, activation \
                                 row {t}: {g} vs {w}",
                                entry.ty
                            );
                            let single = entry.dot(wr[i], &acts[t * stride..(t + 1) * stride]);
                            let tol = (1e-4 * (1.0 + single.abs())).max(1e-6 * magnitude(i, t));
                            assert!((g - single).abs() <= tol, "{g} vs single-row {single}");
                            *differs.entry(format!("{:?}", entry.ty)).or_insert(0usize) +=
                                usize::from(g.to_bits() != single.to_bits());
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 0);
    assert_eq!(differs.len(), 5, "{differs:?}");
    assert!(
        differs.values().all(|&d| d > 0),
        "the tiled order never differed from the single-row order: {differs:?}"
    );
}

/// ggml's unrepacked Q4_K single-row order (`TileDot::new_unpacked`): bitwise the scalar
/// reference on every ISA this CPU runs, within rounding of the repacked order
/// (`TileDot::new`) and different from it in some outputs; `None` for other types.
#[test]
fn unpacked_q4_k_order_matches_scalar_reference_on_every_isa() {
    const COLS: usize = 1024;
    let scalar = Kernels::for_isa(Isa::Scalar).expect("scalar");
    let reference =
        TileDot::new_unpacked(&scalar.entry(GgmlType::Q4_K).expect("Q4_K")).expect("unpacked");
    let (mut checked, mut differs) = (0usize, 0usize);
    for isa in Isa::available() {
        let kernels = Kernels::for_isa(isa).expect("available ISA");
        for entry in kernels.entries() {
            let Some(unpacked) = TileDot::new_unpacked(entry) else {
                assert_ne!(
                    entry.ty,
                    GgmlType::Q4_K,
                    "Q4_K has an unpacked form on {isa:?}"
                );
                continue;
            };
            assert_eq!(entry.ty, GgmlType::Q4_K);
            let ws: Vec<Vec<u8>> = (0..9u64)
                .map(|i| {
                    let mut w = Vec::new();
                    let wx = uniform(100 * i + 3, COLS, 0.25 + i as f32);
                    fucina_quant::quantize(GgmlType::Q4_K, &wx, &mut w).expect("quantize");
                    w
                })
                .collect();
            let wr: Vec<&[u8]> = ws.iter().map(|w| w.as_slice()).collect();
            let stride = entry.act.row_bytes(COLS);
            let mut acts = Vec::new();
            for r in 0..6u64 {
                let x = uniform(r + 11, COLS, 1.0 + r as f32 * 9.0);
                entry.act.quantize_row(&x, &mut acts).expect("activation");
            }
            let n = 6;
            let (mut got, mut want) = (vec![f32::NAN; n * 9], vec![f32::NAN; n * 9]);
            unpacked.dots(&wr, &acts, stride, &mut got);
            reference.dots(&wr, &acts, stride, &mut want);
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let (t, i) = (k / 9, k % 9);
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "{isa:?}, weight row {i}, row {t}: {g} vs {w}"
                );
                let single = entry.dot(wr[i], &acts[t * stride..(t + 1) * stride]);
                assert!(
                    (g - single).abs() <= 1e-4 * (1.0 + single.abs()),
                    "{g} vs {single}"
                );
                differs += usize::from(g.to_bits() != single.to_bits());
                checked += 1;
            }
        }
    }
    assert!(checked >= 54, "{checked}");
    assert!(
        differs > 0,
        "the unpacked order never differed from the repacked one"
    );
}
