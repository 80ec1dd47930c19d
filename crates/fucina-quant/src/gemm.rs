//! Multi-row dot kernels for GEMM (prefill): one weight row against many activation
//! rows at once, each weight block decoded once per register block of rows.
//!
//! Contract of [`TileDot::new`]: every output is bitwise the single-row
//! [`DotEntry::dot`] of the same ISA (same per-block integer sums, same float
//! accumulation order per output), so a batched forward equals single-row forwards.
//! Types without a multi-row kernel on the entry's ISA (and the scalar ISA) fall back
//! to a loop of single-row dots. Any number of activation rows may be passed, one
//! included (decode): each kernel picks its strategy for it.
//!
//! [`TileDot::new_prompt`] is llama.cpp's prompt-batch arithmetic instead: for Q4_K
//! the float order of ggml's repacked `gemm_q4_K_8x8_q8_K` (one FMA per pair of
//! sub-blocks, bitwise `dot_q4_k_q8_k_pairs` on every ISA), which llama.cpp applies to
//! groups of 4 activation rows; for every other type the same as [`TileDot::new`].
//!
//! [`TileDot::new_sgemm`] is llamafile's tinyBLAS order, which llama.cpp runs on
//! batched F32, F16 and BF16 mul_mats: one vector accumulator per output, then a
//! horizontal sum ([`sgemm_order_reference`] defines it).
//!
//! [`TileDot::new_tiled`] is llama.cpp's tiled K-quant matmul order (ggml-cpu
//! `tiled/`, taken by mul_mats with >= 8 activation rows over non-repacked K-quant
//! weights): for Q6_K one rounded multiply by `d_w` per super-block, then one FMA
//! `out = fma(r, d_a, out)` (bitwise `dot_q6_k_q8_k_tiled` on every ISA).

use fucina_gguf::GgmlType;

use crate::dispatch::{DotEntry, Isa, KernelPath};
use crate::formats::kquants;

/// A tile kernel: `out[t * ws.len() + i]` = dot of weight row `ws[i]` with activation
/// row `t` (`acts[t * stride..(t + 1) * stride]`) for every `t < out.len() / ws.len()`;
/// `acts` must hold that many rows.
pub type TileFn = fn(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);

/// The multi-row form of one [`DotEntry`].
#[derive(Clone, Copy, Debug)]
pub struct TileDot {
    entry: DotEntry,
    tile: Option<TileFn>,
    prompt: bool,
}

impl TileDot {
    /// The tile kernel matching `entry` (same ISA), or a loop of its single-row dots.
    pub fn new(entry: &DotEntry) -> TileDot {
        let tile = match entry.path {
            KernelPath::Simd(isa) => tile_kernel(isa, entry.ty),
            KernelPath::Scalar | KernelPath::ViaDequant => None,
        };
        TileDot {
            entry: *entry,
            tile,
            prompt: false,
        }
    }

    /// The prompt-batch (llama.cpp GEMM) form of `entry`: for Q4_K the pair-of-sub-blocks
    /// float order (bitwise `dot_q4_k_q8_k_pairs`, whatever the ISA), for other types
    /// [`TileDot::new`].
    pub fn new_prompt(entry: &DotEntry) -> TileDot {
        if entry.ty != GgmlType::Q4_K || entry.path == KernelPath::ViaDequant {
            return TileDot::new(entry);
        }
        let tile: TileFn = match entry.path {
            #[cfg(target_arch = "x86_64")]
            KernelPath::Simd(Isa::Avx2) => crate::arch::x86_64::q4_k_tiles::avx2::pairs,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Simd(Isa::Avx512) => crate::arch::x86_64::q4_k_tiles::avx512::pairs,
            _ => q4_k_pairs_scalar,
        };
        TileDot {
            entry: *entry,
            tile: Some(tile),
            prompt: true,
        }
    }

    /// llama.cpp's tiled-matmul form of `entry` (ggml-cpu `tiled/`, which llama.cpp runs
    /// on every mul_mat with at least 8 activation rows whose K-quant or IQ4_XS weights
    /// are not repacked): per super-block `r = f32(isum)·d_w` (Q4_K, Q5_K: then
    /// `r = fnmadd(dmin_w, f32(summs), r)`), `out = fma(r, d_a, out)` (bitwise
    /// `dot_q{3,4,5,6}_k_q8_k_tiled` / `dot_iq4_xs_q8_k_tiled` on every ISA). `None` for the types without a tiled
    /// kernel here. Which matrices llama.cpp tiles (not the repacked ones: Q4_K with
    /// rows % 8 == 0 on x86-64) is the caller's rule.
    pub fn new_tiled(entry: &DotEntry) -> Option<TileDot> {
        if entry.path == KernelPath::ViaDequant {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        use crate::arch::x86_64::kq_tiled::{avx2, avx512};
        let tile: TileFn = match (entry.ty, entry.path) {
            #[cfg(target_arch = "x86_64")]
            (GgmlType::Q6_K, KernelPath::Simd(Isa::Avx2)) => avx2::q6_k,
            #[cfg(target_arch = "x86_64")]
            (GgmlType::Q6_K, KernelPath::Simd(Isa::Avx512)) => avx512::q6_k,
            #[cfg(target_arch = "x86_64")]
            (GgmlType::Q4_K, KernelPath::Simd(Isa::Avx2)) => avx2::q4_k,
            #[cfg(target_arch = "x86_64")]
            (GgmlType::Q4_K, KernelPath::Simd(Isa::Avx512)) => avx512::q4_k,
            #[cfg(target_arch = "x86_64")]
            (GgmlType::Q5_K, KernelPath::Simd(Isa::Avx2)) => avx2::q5_k,
            #[cfg(target_arch = "x86_64")]
            (GgmlType::Q5_K, KernelPath::Simd(Isa::Avx512)) => avx512::q5_k,
            #[cfg(target_arch = "x86_64")]
            (GgmlType::Q3_K, KernelPath::Simd(Isa::Avx2)) => avx2::q3_k,
            #[cfg(target_arch = "x86_64")]
            (GgmlType::Q3_K, KernelPath::Simd(Isa::Avx512)) => avx512::q3_k,
            #[cfg(target_arch = "x86_64")]
            (GgmlType::IQ4_XS, KernelPath::Simd(Isa::Avx2 | Isa::Avx512)) => avx2::iq4_xs,
            (GgmlType::IQ4_XS, _) => iq4_xs_tiled_scalar,
            (GgmlType::Q6_K, _) => q6_k_tiled_scalar,
            (GgmlType::Q3_K, _) => q3_k_tiled_scalar,
            (GgmlType::Q4_K, _) => q4_k_tiled_scalar,
            (GgmlType::Q5_K, _) => q5_k_tiled_scalar,
            _ => return None,
        };
        Some(TileDot {
            entry: *entry,
            tile: Some(tile),
            prompt: true,
        })
    }

    /// llama.cpp's single-row order over Q4_K weights it does not repack (a matrix with
    /// rows % 8 != 0, or a 3-D weight such as MLA's per-head `attn_v_b`):
    /// `ggml_vec_dot_q4_K_q8_K`'s eight float lanes (bitwise `dot_q4_k_q8_k_lanes` on
    /// every ISA), where [`TileDot::new`] follows the repacked GEMV. `None` for the
    /// other types, whose single-row order is the same either way.
    pub fn new_unpacked(entry: &DotEntry) -> Option<TileDot> {
        if entry.ty != GgmlType::Q4_K || entry.path == KernelPath::ViaDequant {
            return None;
        }
        let tile: TileFn = match entry.path {
            #[cfg(target_arch = "x86_64")]
            KernelPath::Simd(Isa::Avx2 | Isa::Avx512) => crate::arch::x86_64::q4_k_lanes::tile,
            _ => q4_k_lanes_scalar,
        };
        Some(TileDot {
            entry: *entry,
            tile: Some(tile),
            prompt: true,
        })
    }

    /// llama.cpp's order over the weights it repacks where that differs from
    /// [`TileDot::new`]: Q4_0 and IQ4_NL with rows % 8 == 0 (2-D `mul_mat` weights and
    /// `mul_mat_id` stacks), which ggml-cpu multiplies in the whole-block order
    /// ([`crate::whole_block`]) on every x86-64 CPU with AVX2, one activation row or
    /// many. `None` for the other types (Q4_K's repacked order is [`TileDot::new`]'s).
    /// Which matrices llama.cpp repacks is the caller's rule.
    pub fn new_repacked(entry: &DotEntry) -> Option<TileDot> {
        if entry.path == KernelPath::ViaDequant {
            return None;
        }
        let tile = crate::whole_block::tile(entry.ty, entry.path)?;
        Some(TileDot {
            entry: *entry,
            tile: Some(tile),
            prompt: true,
        })
    }

    /// llamafile's tinyBLAS form of `entry` for a `rows × cols` matrix: what llama.cpp
    /// computes a mul_mat of at least two activation rows with when the weights are
    /// F32, F16 or BF16, the build has AVX2 or AVX-512 (8 or 16 lanes; BF16 with
    /// AVX512-BF16 takes 32 values per `vdpbf16ps` step) and tinyBLAS takes the shape
    /// (`cols` a multiple of the step, `rows` of 4). `None` otherwise (llama.cpp then
    /// runs `ggml_vec_dot_*`, the order of [`TileDot::new`]).
    pub fn new_sgemm(entry: &DotEntry, rows: usize, cols: usize) -> Option<TileDot> {
        #[cfg(target_arch = "x86_64")]
        use crate::arch::x86_64::sgemm::{avx2, avx512};
        let (tile, lanes): (TileFn, usize) = match (entry.ty, entry.path) {
            #[cfg(target_arch = "x86_64")]
            (GgmlType::F32, KernelPath::Simd(Isa::Avx512)) => (avx512::f32, 16),
            #[cfg(target_arch = "x86_64")]
            (GgmlType::F16, KernelPath::Simd(Isa::Avx512)) => (avx512::f16, 16),
            #[cfg(target_arch = "x86_64")]
            (GgmlType::F32, KernelPath::Simd(Isa::Avx2)) => (avx2::f32, 8),
            #[cfg(target_arch = "x86_64")]
            (GgmlType::F16, KernelPath::Simd(Isa::Avx2)) => (avx2::f16, 8),
            #[cfg(target_arch = "x86_64")]
            (GgmlType::BF16, KernelPath::Simd(Isa::Avx512))
                if std::arch::is_x86_feature_detected!("avx512bf16") =>
            {
                (avx512::bf16_dp, 32)
            }
            #[cfg(target_arch = "x86_64")]
            (GgmlType::BF16, KernelPath::Simd(Isa::Avx512)) => (avx512::bf16, 16),
            #[cfg(target_arch = "x86_64")]
            (GgmlType::BF16, KernelPath::Simd(Isa::Avx2)) => (avx2::bf16, 8),
            _ => return None,
        };
        (cols.is_multiple_of(lanes) && rows.is_multiple_of(4)).then_some(TileDot {
            entry: *entry,
            tile: Some(tile),
            prompt: true,
        })
    }

    /// Whether this form differs in arithmetic from the single-row dots (the prompt
    /// form of a type whose GEMM order differs).
    pub fn is_prompt_order(&self) -> bool {
        self.prompt
    }

    /// Activation rows worth passing per [`TileDot::dots`] call: Q4_K's kernels
    /// transpose each weight tile once per call, so they want many rows (they keep
    /// only per-row accumulators across super-blocks); the others work on small
    /// register blocks and get 64 (activation rows stay in L2 across weight rows).
    pub fn rows_per_call(&self) -> usize {
        if self.entry.ty == GgmlType::Q4_K && self.tile.is_some() {
            256
        } else {
            64
        }
    }

    /// Weight rows worth passing per [`TileDot::dots`] call with several activation
    /// rows: 16 for Q4_K on AVX-512 (two 8-row halves per 512-bit register), 64 for the
    /// Q8_0-activation types on AVX2 (which regroup the activation rows once per
    /// call) and AVX-512 (which prepare them once per call for the packed Q8_0 GEMM
    /// their weights are decoded into), else 8.
    pub fn weights_per_call(&self) -> usize {
        use GgmlType::{Q4_0, Q4_K, Q5_0, Q8_0};
        match (self.entry.path, self.entry.ty) {
            (KernelPath::Simd(Isa::Avx512), Q4_K) => 16,
            (KernelPath::Simd(Isa::Avx2 | Isa::Avx512), Q4_0 | Q5_0 | Q8_0) => 64,
            _ => 8,
        }
    }

    /// The single-row entry this wraps.
    pub fn entry(&self) -> &DotEntry {
        &self.entry
    }

    /// Whether a register-blocked kernel (not a loop of single-row dots) is installed.
    pub fn is_blocked(&self) -> bool {
        self.tile.is_some()
    }

    /// `out[t * ws.len() + i] = self.entry().dot(ws[i], act_t)` bitwise, for every
    /// activation row `act_t = acts[t * stride..(t + 1) * stride]` with
    /// `t < out.len() / ws.len()`. Rows past the end of `acts` are treated as empty
    /// (dot 0), as the single-row kernel treats a short activation slice.
    pub fn dots(&self, ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
        let nw = ws.len();
        if nw == 0 {
            return;
        }
        let nt = out.len() / nw;
        let whole = acts.len().checked_div(stride).unwrap_or(0).min(nt);
        let (head, tail) = out[..nt * nw].split_at_mut(whole * nw);
        match self.tile {
            Some(f) => f(ws, &acts[..whole * stride], stride, head),
            None => {
                for (o, a) in head
                    .chunks_exact_mut(nw)
                    .zip(acts.chunks_exact(stride.max(1)))
                {
                    for (o, w) in o.iter_mut().zip(ws) {
                        *o = self.entry.dot(w, a);
                    }
                }
            }
        }
        for (t, o) in tail.chunks_exact_mut(nw).enumerate() {
            let start = ((whole + t) * stride).min(acts.len());
            let end = (start + stride).min(acts.len());
            for (o, w) in o.iter_mut().zip(ws) {
                *o = self.entry.dot(w, &acts[start..end]);
            }
        }
    }
}

/// The tinyBLAS float order of one output ([`TileDot::new_sgemm`]): `lanes` f32
/// accumulators, element `i` into lane `i % lanes` by a fused multiply-add, then the
/// lanes summed as tinyBLAS's `hsum` does (16 lanes: `_mm512_reduce_add_ps`, halves
/// then quarters; 8 lanes: the two halves, then pairs 0+2 / 1+3, then those two).
/// `w.len()` must be a multiple of `lanes` (8 or 16).
pub fn sgemm_order_reference(lanes: usize, w: &[f32], a: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (wc, ac) in w.chunks_exact(lanes).zip(a.chunks_exact(lanes)) {
        for l in 0..lanes {
            acc[l] = wc[l].mul_add(ac[l], acc[l]);
        }
    }
    let v: [f32; 8] = if lanes == 16 {
        core::array::from_fn(|k| acc[k] + acc[k + 8])
    } else {
        core::array::from_fn(|k| acc[k])
    };
    let t4: [f32; 4] = core::array::from_fn(|k| v[k + 4] + v[k]);
    (t4[0] + t4[2]) + (t4[1] + t4[3])
}

/// The scalar prompt-order Q4_K tile: a loop of `dot_q4_k_q8_k_pairs`.
fn q4_k_pairs_scalar(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    let nw = ws.len();
    if nw == 0 {
        return;
    }
    for (o, a) in out
        .chunks_exact_mut(nw)
        .zip(acts.chunks_exact(stride.max(1)))
    {
        for (o, w) in o.iter_mut().zip(ws) {
            *o = kquants::dot_q4_k_q8_k_pairs(w, a);
        }
    }
}

/// A scalar tile: a loop of the single-row function `dot`.
fn loop_tile(
    dot: fn(&[u8], &[u8]) -> f32,
    ws: &[&[u8]],
    acts: &[u8],
    stride: usize,
    out: &mut [f32],
) {
    let nw = ws.len();
    if nw == 0 {
        return;
    }
    for (o, a) in out
        .chunks_exact_mut(nw)
        .zip(acts.chunks_exact(stride.max(1)))
    {
        for (o, w) in o.iter_mut().zip(ws) {
            *o = dot(w, a);
        }
    }
}

/// The scalar tiled-order IQ4_XS tile: a loop of `dot_iq4_xs_q8_k_tiled`.
fn iq4_xs_tiled_scalar(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    loop_tile(
        crate::formats::iq::dot_iq4_xs_q8_k_tiled,
        ws,
        acts,
        stride,
        out,
    );
}

/// The scalar tiled-order Q6_K tile: a loop of `dot_q6_k_q8_k_tiled`.
fn q6_k_tiled_scalar(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    loop_tile(kquants::dot_q6_k_q8_k_tiled, ws, acts, stride, out);
}

/// The scalar tiled-order Q3_K tile: a loop of `dot_q3_k_q8_k_tiled`.
fn q3_k_tiled_scalar(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    loop_tile(kquants::dot_q3_k_q8_k_tiled, ws, acts, stride, out);
}

/// The scalar tiled-order Q4_K tile: a loop of `dot_q4_k_q8_k_tiled`.
fn q4_k_tiled_scalar(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    loop_tile(kquants::dot_q4_k_q8_k_tiled, ws, acts, stride, out);
}

/// The scalar unpacked-order Q4_K tile: a loop of `dot_q4_k_q8_k_lanes`.
fn q4_k_lanes_scalar(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    loop_tile(kquants::dot_q4_k_q8_k_lanes, ws, acts, stride, out);
}

/// The scalar tiled-order Q5_K tile: a loop of `dot_q5_k_q8_k_tiled`.
fn q5_k_tiled_scalar(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    loop_tile(kquants::dot_q5_k_q8_k_tiled, ws, acts, stride, out);
}

fn tile_kernel(isa: Isa, ty: GgmlType) -> Option<TileFn> {
    #[cfg(target_arch = "x86_64")]
    match (isa, ty) {
        (Isa::Avx2, GgmlType::Q4_K) => return Some(crate::arch::x86_64::q4_k_tiles::avx2::single),
        (Isa::Avx512, GgmlType::Q4_K) => {
            return Some(crate::arch::x86_64::q4_k_tiles::avx512::single)
        }
        _ => {}
    }
    match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => crate::arch::aarch64::neon::tile_kernel(ty),
        #[cfg(not(target_arch = "aarch64"))]
        Isa::Neon => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => crate::arch::x86_64::gemm_avx2::kernel(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => crate::arch::x86_64::gemm_avx512::kernel(ty),
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::Avx512 => {
            let _ = ty;
            None
        }
    }
}
