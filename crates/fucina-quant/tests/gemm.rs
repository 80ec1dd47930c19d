//! Multi-row (GEMM) tile kernels against the single-row dot of the same ISA: bitwise
//! equal on random blocks, for every weight type with a quantizer, every ISA this CPU
//! runs, and tile shapes covering whole register blocks and remainders.

mod common;

use common::uniform;
use fucina_quant::{GgmlType, Isa, Kernels, TileDot};

/// Types that must get a register-blocked kernel on every SIMD ISA.
const BLOCKED: [GgmlType; 6] = [
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

#[test]
fn multi_row_equals_single_row_bitwise() {
    const COLS: usize = 1024;
    const ROWS: usize = 19;
    const W_ROWS: usize = 9;
    let mut checked = 0;
    for isa in Isa::available() {
        let kernels = Kernels::for_isa(isa).expect("available ISA");
        for entry in kernels.entries() {
            let has_quantizer = fucina_quant::format(entry.ty).and_then(|f| f.quantize);
            if has_quantizer.is_none() || !COLS.is_multiple_of(entry.block_size) {
                continue;
            }
            let rows = TileDot::new(entry);
            if isa != Isa::Scalar && BLOCKED.contains(&entry.ty) {
                assert!(
                    rows.is_blocked(),
                    "{:?} on {isa:?} is not blocked",
                    entry.ty
                );
            }
            for seed in 0..3u64 {
                let ws: Vec<Vec<u8>> = (0..W_ROWS as u64)
                    .map(|i| {
                        let mut w = Vec::new();
                        let wx = uniform(seed * 31 + 100 * i + 1, COLS, 0.5 + i as f32);
                        fucina_quant::quantize(entry.ty, &wx, &mut w).expect("quantize");
                        w
                    })
                    .collect();
                let stride = entry.act.row_bytes(COLS);
                let mut acts = Vec::new();
                for r in 0..ROWS as u64 {
                    // Rows of very different magnitudes, so scales differ per row.
                    let scale = 1.0 + (r % 5) as f32 * 7.5;
                    let x = uniform(seed * 1000 + r + 7, COLS, scale);
                    entry.act.quantize_row(&x, &mut acts).expect("activation");
                }
                for nw in 1..=W_ROWS {
                    let wr: Vec<&[u8]> = ws[..nw].iter().map(|w| w.as_slice()).collect();
                    for n in 0..=ROWS {
                        let mut got = vec![f32::NAN; n * nw];
                        rows.dots(&wr, &acts[..n * stride], stride, &mut got);
                        for (k, g) in got.iter().enumerate() {
                            let (t, i) = (k / nw, k % nw);
                            let want = entry.dot(wr[i], &acts[t * stride..(t + 1) * stride]);
                            assert_eq!(
                                g.to_bits(),
                                want.to_bits(),
                                "{:?} on {isa:?}, seed {seed}, {nw}×{n} tile, weight row {i}, \
                                 activation row {t}: {g} vs {want}",
                                entry.ty
                            );
                        }
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 0);
}

#[test]
fn short_activations_give_zero_dots_like_single_row() {
    let kernels = Kernels::for_isa(Isa::best()).expect("best ISA");
    let entry = kernels.entry(GgmlType::Q5_0).expect("q5_0");
    let rows = TileDot::new(&entry);
    let mut w = Vec::new();
    fucina_quant::quantize(GgmlType::Q5_0, &uniform(3, 64, 1.0), &mut w).expect("quantize");
    let stride = entry.act.row_bytes(64);
    let mut acts = Vec::new();
    entry
        .act
        .quantize_row(&uniform(4, 64, 1.0), &mut acts)
        .expect("activation");
    let mut out = [f32::NAN; 3];
    rows.dots(&[&w], &acts, stride, &mut out);
    assert_eq!(out[0].to_bits(), entry.dot(&w, &acts).to_bits());
    assert_eq!(out[1..], [0.0, 0.0]);
}

/// The prompt-batch form (`TileDot::new_prompt`): for Q4_K ggml's GEMM order, bitwise
/// the scalar reference (`dot_q4_k_q8_k_pairs`, the scalar ISA's prompt form) on every
/// ISA and tile shape, and different from the single-row order on some outputs; for
/// every other type identical to the single-row dots.
#[test]
fn prompt_order_matches_scalar_reference_on_every_isa() {
    const COLS: usize = 1024;
    const ROWS: usize = 11;
    const W_ROWS: usize = 17;
    let scalar = Kernels::for_isa(Isa::Scalar).expect("scalar");
    let mut differs = 0usize;
    let mut checked = 0;
    for isa in Isa::available() {
        let kernels = Kernels::for_isa(isa).expect("available ISA");
        for entry in kernels.entries() {
            let has_quantizer = fucina_quant::format(entry.ty).and_then(|f| f.quantize);
            if has_quantizer.is_none() || !COLS.is_multiple_of(entry.block_size) {
                continue;
            }
            let prompt = TileDot::new_prompt(entry);
            let reference = TileDot::new_prompt(&scalar.entry(entry.ty).expect("scalar entry"));
            assert_eq!(prompt.is_prompt_order(), entry.ty == GgmlType::Q4_K);
            let seed = 5u64;
            let ws: Vec<Vec<u8>> = (0..W_ROWS as u64)
                .map(|i| {
                    let mut w = Vec::new();
                    let wx = uniform(seed * 31 + 100 * i + 1, COLS, 0.5 + i as f32);
                    fucina_quant::quantize(entry.ty, &wx, &mut w).expect("quantize");
                    w
                })
                .collect();
            let stride = entry.act.row_bytes(COLS);
            let mut acts = Vec::new();
            for r in 0..ROWS as u64 {
                let x = uniform(seed * 1000 + r + 7, COLS, 1.0 + (r % 5) as f32 * 7.5);
                entry.act.quantize_row(&x, &mut acts).expect("activation");
            }
            for nw in [1, 3, 8, 9, 16, 17] {
                let wr: Vec<&[u8]> = ws[..nw].iter().map(|w| w.as_slice()).collect();
                for n in [1, 3, 4, 5, 8, 11] {
                    let mut got = vec![f32::NAN; n * nw];
                    let mut want = vec![f32::NAN; n * nw];
                    prompt.dots(&wr, &acts[..n * stride], stride, &mut got);
                    reference.dots(&wr, &acts[..n * stride], stride, &mut want);
                    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                        let (t, i) = (k / nw, k % nw);
                        let single = entry.dot(wr[i], &acts[t * stride..(t + 1) * stride]);
                        if entry.ty != GgmlType::Q4_K {
                            assert_eq!(g.to_bits(), single.to_bits(), "{:?} on {isa:?}", entry.ty);
                            continue;
                        } else if g.to_bits() != single.to_bits() {
                            differs += 1;
                        }
                        assert_eq!(
                            g.to_bits(),
                            w.to_bits(),
                            "{:?} on {isa:?}, {nw}×{n} tile, weight row {i}, activation row \
                             {t}: {g} vs {w}",
                            entry.ty
                        );
                    }
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 0);
    assert!(
        differs > 0,
        "the prompt order never differed from the single-row order"
    );
}
