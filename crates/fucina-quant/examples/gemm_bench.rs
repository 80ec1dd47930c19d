//! Single-thread speed of the tile (GEMM) kernels against a loop of single-row dots:
//! `gemm_bench [rows] [cols] [tokens]` (defaults 1024 × 640, 512 tokens, Gemma 3
//! 270M's attention/FFN input width). Prints GMAC/s per type and path.

use std::time::Instant;

use fucina_quant::{GgmlType, Kernels, TileDot};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rows = args.first().copied().unwrap_or(1024);
    let cols = args.get(1).copied().unwrap_or(640);
    let toks = args.get(2).copied().unwrap_or(512);
    let kernels = Kernels::from_env()?;
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 300.0)
        .collect();
    let a: Vec<f32> = (0..toks * cols)
        .map(|i| ((i * 104_729 % 997) as f32 - 498.0) / 200.0)
        .collect();
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let entry = kernels.entry(ty)?;
        if cols % entry.block_size != 0 {
            continue;
        }
        let mut w = Vec::new();
        fucina_quant::quantize(ty, &x, &mut w)?;
        let rb = w.len() / rows;
        let mut acts = Vec::new();
        for t in a.chunks_exact(cols) {
            entry.act.quantize_row(t, &mut acts)?;
        }
        let stride = acts.len() / toks;
        let macs = (rows * cols * toks) as f64;
        let mut out = vec![0f32; rows * toks];
        let t = Instant::now();
        for (o, wr) in w.chunks_exact(rb).enumerate() {
            for (k, ar) in acts.chunks_exact(stride).enumerate() {
                out[k * rows + o] = entry.dot(wr, ar);
            }
        }
        let single = macs / t.elapsed().as_secs_f64() / 1e9;
        let tiles = TileDot::new(&entry);
        let mut vals = vec![0f32; 64 * 8];
        let t = Instant::now();
        for t0 in (0..toks).step_by(64) {
            let t1 = (t0 + 64).min(toks);
            for w0 in (0..rows).step_by(8) {
                let nw = (rows - w0).min(8);
                let ws: Vec<&[u8]> = (w0..w0 + nw).map(|o| &w[o * rb..(o + 1) * rb]).collect();
                let v = &mut vals[..(t1 - t0) * nw];
                tiles.dots(&ws, &acts[t0 * stride..t1 * stride], stride, v);
                for (k, v) in v.chunks_exact(nw).enumerate() {
                    out[(t0 + k) * rows + w0..(t0 + k) * rows + w0 + nw].copy_from_slice(v);
                }
            }
        }
        let tile = macs / t.elapsed().as_secs_f64() / 1e9;
        println!("{ty:?} {rows}x{cols} x {toks} tokens ({:?}): single-row {single:.1} GMAC/s, tile {tile:.1} GMAC/s ({:.2}x)", kernels.isa(), tile / single);
    }
    Ok(())
}
