//! The SIMD dots whose float order is ggml's (Q4_0, Q5_0, Q8_0 with eight lanes per
//! block, Q6_K's AVX2 lanes) against the scalar oracle, bitwise, on realistic random
//! rows of every ISA; and their tile (GEMM) forms, bitwise the single-row dot, for one
//! activation row (decode) and small and large row counts.

mod common;

use common::uniform;
use fucina_quant::dispatch::scalar_reference;
use fucina_quant::{GgmlType, Isa, Kernels, TileDot};

const TYPES: [GgmlType; 4] = [
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q6_K,
];

fn weights(ty: GgmlType, n: usize, seed: u64, scale: f32) -> Vec<u8> {
    let mut w = Vec::new();
    fucina_quant::quantize(ty, &uniform(seed, n, scale), &mut w).expect("quantize");
    w
}

#[test]
fn simd_dots_equal_the_scalar_oracle_bitwise() {
    const N: usize = 2048;
    for isa in Isa::available() {
        let kernels = Kernels::for_isa(isa).expect("available ISA");
        for ty in TYPES {
            let entry = kernels.entry(ty).expect("entry");
            let (act, scalar) = scalar_reference(ty).expect("block kernel");
            for seed in 0..6u64 {
                let w = weights(ty, N, 10 + seed, 0.3 + seed as f32);
                let mut a = Vec::new();
                act.quantize_row(&uniform(50 + seed, N, 2.0 + 5.0 * seed as f32), &mut a)
                    .expect("activations");
                for blocks in [N / entry.block_size, 1, 3] {
                    let wb = &w[..blocks * entry.type_size];
                    let ab = &a[..act.row_bytes(blocks * entry.block_size)];
                    assert_eq!(
                        entry.dot(wb, ab).to_bits(),
                        scalar(wb, ab).to_bits(),
                        "{ty} on {isa:?}, seed {seed}, {blocks} blocks"
                    );
                }
            }
        }
    }
}

#[test]
fn tiles_equal_single_row_dots_for_any_row_count() {
    const N: usize = 1024;
    for isa in Isa::available() {
        let kernels = Kernels::for_isa(isa).expect("available ISA");
        for ty in TYPES {
            let entry = kernels.entry(ty).expect("entry");
            let tiles = TileDot::new(&entry);
            let ws: Vec<Vec<u8>> = (0..27u64)
                .map(|i| weights(ty, N, 200 + i, 0.5 + i as f32))
                .collect();
            let stride = entry.act.row_bytes(N);
            let mut acts = Vec::new();
            for r in 0..17u64 {
                entry
                    .act
                    .quantize_row(&uniform(300 + r, N, 1.0 + 3.0 * r as f32), &mut acts)
                    .expect("activations");
            }
            for nw in [1usize, 2, 3, 7, 8, 11, 16, 27] {
                let w: Vec<&[u8]> = ws[..nw].iter().map(|v| v.as_slice()).collect();
                for nt in [1usize, 2, 3, 4, 5, 8, 9, 16, 17] {
                    let mut out = vec![f32::NAN; nt * nw];
                    tiles.dots(&w, &acts[..nt * stride], stride, &mut out);
                    for t in 0..nt {
                        for (i, wr) in w.iter().enumerate() {
                            let want = entry.dot(wr, &acts[t * stride..(t + 1) * stride]);
                            assert_eq!(
                                out[t * nw + i].to_bits(),
                                want.to_bits(),
                                "{ty} on {isa:?}: {nw} weight rows × {nt} rows, [{t}][{i}]"
                            );
                        }
                    }
                }
            }
        }
    }
}
