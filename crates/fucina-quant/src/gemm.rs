//! Multi-row dot kernels for GEMM (prefill): one weight row against many activation
//! rows at once, each weight block decoded once per register block of rows.
//!
//! Contract: every output is bitwise the single-row [`DotEntry::dot`] of the same ISA
//! (same per-block integer sums, same float accumulation order per output), so a
//! batched forward equals single-row forwards. Types without a multi-row kernel on
//! the entry's ISA (and the scalar ISA) fall back to a loop of single-row dots.

use fucina_gguf::GgmlType;

use crate::dispatch::{DotEntry, Isa, KernelPath};

/// A tile kernel: `out[t * ws.len() + i]` = dot of weight row `ws[i]` with activation
/// row `t` (`acts[t * stride..(t + 1) * stride]`) for every `t < out.len() / ws.len()`;
/// `acts` must hold that many rows.
pub type TileFn = fn(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]);

/// The multi-row form of one [`DotEntry`].
#[derive(Clone, Copy, Debug)]
pub struct TileDot {
    entry: DotEntry,
    tile: Option<TileFn>,
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

fn tile_kernel(isa: Isa, ty: GgmlType) -> Option<TileFn> {
    match isa {
        Isa::Scalar => None,
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
