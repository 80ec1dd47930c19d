//! llama.cpp's order over the Q4_0 / IQ4_NL matrices it repacks (`TileDot::new_repacked`,
//! `fucina_quant::whole_block`): on every ISA this CPU runs, and through the packed
//! Q4_0 layout where there is one, every output is bitwise the whole-block reference
//! (one FMA of the block's exact integer sum by `d_w · d_a` per block), for weight-row
//! counts with and without a whole group of 8 and any number of activation rows; and
//! it is a different float order from `ggml_vec_dot_q4_0_q8_0`'s (`TileDot::new`).

mod common;

use common::{prng_blocks, uniform};
use fucina_quant::whole_block::dot_blocks;
use fucina_quant::{GgmlType, Isa, Kernels, Packed, PackedOrder, TileDot};

const COLS: usize = 640;

/// Rows of `ty`: quantized rows of different magnitudes (Q4_0), then raw random blocks
/// (every nibble, any finite scale).
fn rows(ty: GgmlType, n: usize, seed: u64) -> Vec<Vec<u8>> {
    (0..n as u64)
        .map(|r| {
            if ty == GgmlType::Q4_0 && r % 2 == 0 {
                let x = uniform(seed * 7919 + r, COLS, 0.25 + (r % 7) as f32);
                let mut w = Vec::new();
                fucina_quant::quantize(ty, &x, &mut w).expect("quantize");
                w
            } else {
                prng_blocks(ty, seed * 31 + r, COLS / 32)
            }
        })
        .collect()
}

fn table(ty: GgmlType) -> [i8; 16] {
    match ty {
        GgmlType::Q4_0 => core::array::from_fn(|i| i as i8 - 8),
        _ => fucina_quant::formats::iq::KVALUES_IQ4NL,
    }
}

#[test]
fn repacked_order_is_the_whole_block_reference_on_every_isa() {
    let mut differs = 0usize;
    let mut checked = 0usize;
    for ty in [GgmlType::Q4_0, GgmlType::IQ4_NL] {
        for isa in Isa::available() {
            let kernels = Kernels::for_isa(isa).expect("available ISA");
            let entry = kernels.entry(ty).expect("entry");
            let tiles = TileDot::new_repacked(&entry).expect("a repacked order");
            assert!(tiles.is_blocked());
            let stride = entry.act.row_bytes(COLS);
            for (nw, nt) in [(1, 1), (8, 1), (13, 3), (17, 20), (64, 2), (5, 33)] {
                let ws = rows(ty, nw, nw as u64);
                let refs: Vec<&[u8]> = ws.iter().map(Vec::as_slice).collect();
                let x = uniform(nt as u64 + 3, nt * COLS, 2.0);
                let mut acts = Vec::new();
                for r in x.chunks_exact(COLS) {
                    entry.act.quantize_row(r, &mut acts).expect("quantize");
                }
                let mut got = vec![f32::NAN; nt * nw];
                tiles.dots(&refs, &acts, stride, &mut got);
                let mut lanes = vec![0f32; nt * nw];
                TileDot::new(&entry).dots(&refs, &acts, stride, &mut lanes);
                for t in 0..nt {
                    let a = &acts[t * stride..(t + 1) * stride];
                    for (i, w) in refs.iter().enumerate() {
                        let want = dot_blocks(&table(ty), w, a);
                        let g = got[t * nw + i];
                        assert_eq!(
                            g.to_bits(),
                            want.to_bits(),
                            "{ty} {isa:?}: row {i} of {nw}, activation {t} of {nt}: {g} vs {want}"
                        );
                        let l = lanes[t * nw + i];
                        assert!(
                            (l - want).abs() <= 1e-4 * want.abs().max(1.0),
                            "{l} vs {want}"
                        );
                        differs += usize::from(l.to_bits() != want.to_bits());
                        checked += 1;
                    }
                }
            }
        }
    }
    // The vec_dot lanes round differently from the whole blocks in part of the outputs.
    assert!(
        differs * 20 > checked,
        "{differs} of {checked} outputs differ"
    );
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_0,
        GgmlType::F16,
    ] {
        let kernels = Kernels::for_isa(Isa::best()).expect("best ISA");
        let entry = kernels.entry(ty).expect("entry");
        assert!(TileDot::new_repacked(&entry).is_none(), "{ty}");
    }
}

/// Q4_0 packed (widened to Q8_0 on AVX-512 VNNI) has the whole-block order and gives
/// the reference's bits; layouts without it say so.
#[test]
fn packed_q4_0_whole_blocks_are_the_reference() {
    let ty = GgmlType::Q4_0;
    let mut packed_somewhere = false;
    // 4112 rows: calls longer than the kernel's 4096 weight rows go through a buffer.
    for (n_rows, nts, ranges) in [
        (48, &[1usize, 5, 40][..], [0..48, 8..24]),
        (4112, &[1, 3][..], [0..4112, 4088..4112]),
    ] {
        let ws = rows(ty, n_rows, 9);
        let w: Vec<u8> = ws.concat();
        for isa in Isa::available() {
            let kernels = Kernels::for_isa(isa).expect("available ISA");
            let entry = kernels.entry(ty).expect("entry");
            let Some(p) = Packed::new(&entry, &w, n_rows, COLS).expect("repack") else {
                continue;
            };
            assert!(p.has_order(PackedOrder::WholeBlock), "{isa:?}");
            packed_somewhere = true;
            let stride = entry.act.row_bytes(COLS);
            for &nt in nts {
                let x = uniform(nt as u64, nt * COLS, 1.5);
                let mut acts = Vec::new();
                for r in x.chunks_exact(COLS) {
                    entry.act.quantize_row(r, &mut acts).expect("quantize");
                }
                for rows in ranges.clone() {
                    let n = rows.len();
                    let mut got = vec![f32::NAN; nt * n];
                    p.dots(
                        PackedOrder::WholeBlock,
                        rows.clone(),
                        &acts,
                        stride,
                        &mut got,
                    );
                    for t in 0..nt {
                        for (i, r) in rows.clone().enumerate() {
                            let want = dot_blocks(&table(ty), &ws[r], &acts[t * stride..]);
                            assert_eq!(got[t * n + i].to_bits(), want.to_bits(), "{isa:?} {t} {r}");
                        }
                    }
                }
            }
        }
    }
    if Isa::available().contains(&Isa::Avx512) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512vnni") {
            assert!(packed_somewhere, "no packed Q4_0 on AVX-512 VNNI");
        }
    }
    // Q4_K's layout has no whole-block order.
    let best = Kernels::for_isa(Isa::best()).expect("best ISA");
    let e = best.entry(GgmlType::Q4_K).expect("entry");
    let mut q = Vec::new();
    for r in 0..8u64 {
        fucina_quant::quantize(GgmlType::Q4_K, &uniform(r, 256, 1.0), &mut q).expect("q");
    }
    if let Some(p) = Packed::new(&e, &q, 8, 256).expect("repack") {
        assert!(!p.has_order(PackedOrder::WholeBlock));
    }
}
