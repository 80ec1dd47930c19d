//! llamafile's tinyBLAS order for F32 / F16 / BF16 weights (`TileDot::new_sgemm`):
//! bitwise `sgemm_order_reference` on every ISA this CPU runs that has it (AVX2: 8
//! lanes, AVX-512: 16), `None` where llama.cpp would not take the shape or has no
//! tinyBLAS (scalar), and values within rounding of the single-row dots. BF16 on a CPU
//! with AVX512-BF16 runs `vdpbf16ps` (the instruction's own pairwise rounding, which
//! no scalar reference here restates): checked against the single-row dots and for
//! group independence only.

mod common;

use common::uniform;
use fucina_quant::{sgemm_order_reference, GgmlType, Isa, Kernels, TileDot};

#[test]
fn sgemm_order_matches_the_reference_on_every_isa() {
    const COLS: usize = 512;
    const ROWS: usize = 7;
    const W_ROWS: usize = 12;
    let mut checked = 0;
    for isa in Isa::available() {
        let kernels = Kernels::for_isa(isa).expect("available ISA");
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            let entry = kernels.entry(ty).expect("entry");
            #[cfg(target_arch = "x86_64")]
            let dp = ty == GgmlType::BF16 && std::arch::is_x86_feature_detected!("avx512bf16");
            #[cfg(not(target_arch = "x86_64"))]
            let dp = false;
            let lanes = match isa {
                Isa::Avx512 if dp => 32,
                Isa::Avx512 => 16,
                Isa::Avx2 => 8,
                _ => {
                    assert!(
                        TileDot::new_sgemm(&entry, W_ROWS, COLS).is_none(),
                        "{isa:?}"
                    );
                    continue;
                }
            };
            let sg = TileDot::new_sgemm(&entry, W_ROWS, COLS).expect("sgemm form");
            assert!(sg.is_prompt_order() && sg.is_blocked());
            // Shapes tinyBLAS declines.
            assert!(TileDot::new_sgemm(&entry, W_ROWS + 2, COLS).is_none());
            assert!(TileDot::new_sgemm(&entry, W_ROWS, COLS + lanes / 2).is_none());
            let wf: Vec<Vec<f32>> = (0..W_ROWS as u64)
                .map(|i| uniform(i + 1, COLS, 0.5 + i as f32))
                .collect();
            let xf: Vec<Vec<f32>> = (0..ROWS as u64)
                .map(|r| uniform(r + 100, COLS, 1.0 + r as f32 * 3.0))
                .collect();
            let mut ws = Vec::new();
            for w in &wf {
                let mut b = Vec::new();
                fucina_quant::quantize(ty, w, &mut b).expect("weights");
                ws.push(b);
            }
            let stride = entry.act.row_bytes(COLS);
            let mut acts = Vec::new();
            for x in &xf {
                entry.act.quantize_row(x, &mut acts).expect("activations");
            }
            // The operands as the kernels see them (F16 rounds both).
            let widen = |b: &[u8]| {
                let mut v = vec![0f32; COLS];
                fucina_quant::dequantize(ty, b, &mut v).expect("widen");
                v
            };
            let wr: Vec<&[u8]> = ws.iter().map(Vec::as_slice).collect();
            let mut got = vec![f32::NAN; ROWS * W_ROWS];
            sg.dots(&wr, &acts, stride, &mut got);
            for t in 0..ROWS {
                let a = widen(&acts[t * stride..(t + 1) * stride]);
                for (i, w) in ws.iter().enumerate() {
                    let g = got[t * W_ROWS + i];
                    if !(isa == Isa::Avx512 && dp) {
                        let want = sgemm_order_reference(lanes, &widen(w), &a);
                        assert_eq!(g.to_bits(), want.to_bits(), "{isa:?} {ty:?} row {t} w {i}");
                    }
                    let single = entry.dot(w, &acts[t * stride..(t + 1) * stride]);
                    assert!((g - single).abs() <= 1e-4 * single.abs().max(1.0));
                }
            }
            // Partial weight groups: the same bits per output.
            for nw in [1, 3, 7] {
                let mut part = vec![f32::NAN; ROWS * nw];
                sg.dots(&wr[..nw], &acts, stride, &mut part);
                for t in 0..ROWS {
                    for i in 0..nw {
                        assert_eq!(part[t * nw + i].to_bits(), got[t * W_ROWS + i].to_bits());
                    }
                }
            }
            checked += 1;
        }
    }
    eprintln!("{checked} (ISA, type) pairs checked");
}
