//! llama.cpp's order for the matrices it repacks of the 4-bit types with one f16 scale
//! per 32 weights (Q4_0, IQ4_NL: the same 18-byte block, nibbles indexing a table).
//!
//! On any x86-64 CPU with AVX2, ggml-cpu repacks a Q4_0 or IQ4_NL weight with
//! rows % 8 == 0 (a 2-D `mul_mat` weight or a `mul_mat_id` expert stack) into
//! `block_q4_0x8` / `block_iq4_nlx8` and multiplies it with
//! `gemv/gemm_q4_b32_8x8_q8_0_lut_avx` (`arch/x86/repack.cpp`), one activation row or
//! four at a time, against activations quantized as `quantize_row_q8_0` does. Both
//! kernels compute every output in the **whole-block** order:
//!
//! ```text
//! acc = 0; for each block b: acc = fma(f32(S_b), d_w,b · d_a,b, acc)
//! ```
//!
//! with `S_b` the exact integer sum of the block's 32 products and `d_w,b · d_a,b`
//! rounded once. `ggml_vec_dot_q4_0_q8_0` (the matrices it does not repack) keeps eight
//! f32 lanes instead, so the two orders differ in the last bits. [`dot_blocks`] is the
//! order's reference (with [`values`]' table of the type); `tile` the fastest form per ISA
//! ([`crate::TileDot::new_repacked`]); packed Q4_0 on AVX-512 VNNI runs it through the
//! packed Q8_0 whole-block kernel ([`crate::repack::PackedOrder::WholeBlock`]).

use fucina_gguf::GgmlType;

use crate::dispatch::{Isa, KernelPath};
use crate::formats::f16_at;
use crate::formats::iq::KVALUES_IQ4NL;
use crate::gemm::TileFn;

/// Bytes of one block (Q4_0 and IQ4_NL alike): an f16 scale, 16 bytes of nibbles.
pub(crate) const BLOCK: usize = 18;
/// Bytes of one Q8_0 activation block.
const ACT_BLOCK: usize = 34;

/// Q4_0's nibble values: `q − 8`.
pub(crate) const Q4_0_VALUES: [i8; 16] = [-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7];

/// The nibble table of a whole-block type, `None` for the others.
pub fn values(ty: GgmlType) -> Option<&'static [i8; 16]> {
    match ty {
        GgmlType::Q4_0 => Some(&Q4_0_VALUES),
        GgmlType::IQ4_NL => Some(&KVALUES_IQ4NL),
        _ => None,
    }
}

/// The whole-block dot of a row of 18-byte blocks whose nibbles index `table` with a
/// row of Q8_0 activations (the whole blocks both hold).
pub fn dot_blocks(table: &[i8; 16], w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(BLOCK).zip(a.chunks_exact(ACT_BLOCK)) {
        let mut s = 0i32;
        for j in 0..16 {
            let lo = table[usize::from(x[2 + j] & 0x0f)];
            let hi = table[usize::from(x[2 + j] >> 4)];
            s += i32::from(lo) * i32::from(y[2 + j] as i8);
            s += i32::from(hi) * i32::from(y[18 + j] as i8);
        }
        acc = (s as f32).mul_add(f16_at(x, 0) * f16_at(y, 0), acc);
    }
    acc
}

fn scalar_tile(table: &[i8; 16], ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    let nw = ws.len();
    if nw == 0 || stride == 0 {
        return;
    }
    for (o, a) in out.chunks_exact_mut(nw).zip(acts.chunks_exact(stride)) {
        for (o, w) in o.iter_mut().zip(ws) {
            *o = dot_blocks(table, w, a);
        }
    }
}

fn q4_0_scalar(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    scalar_tile(&Q4_0_VALUES, ws, acts, stride, out);
}

fn iq4_nl_scalar(ws: &[&[u8]], acts: &[u8], stride: usize, out: &mut [f32]) {
    scalar_tile(&KVALUES_IQ4NL, ws, acts, stride, out);
}

/// The whole-block tile kernel for `ty` on `path` (a [`TileFn`]: `out[t · n + i]` = the
/// dot of `ws[i]` with activation row `t`), `None` for types without the order.
pub(crate) fn tile(ty: GgmlType, path: KernelPath) -> Option<TileFn> {
    values(ty)?;
    #[cfg(target_arch = "x86_64")]
    {
        use crate::arch::x86_64::whole_block as x86;
        let avx2: TileFn = match ty {
            GgmlType::Q4_0 => x86::q4_0,
            _ => x86::iq4_nl,
        };
        match path {
            KernelPath::Simd(Isa::Avx512) => return Some(x86::vnni(ty).unwrap_or(avx2)),
            KernelPath::Simd(Isa::Avx2) => return Some(avx2),
            _ => {}
        }
    }
    #[cfg(target_arch = "aarch64")]
    if path == KernelPath::Simd(Isa::Neon) {
        return crate::arch::aarch64::neon::whole_block_kernel(ty);
    }
    let _ = path;
    Some(match ty {
        GgmlType::Q4_0 => q4_0_scalar,
        _ => iq4_nl_scalar,
    })
}
