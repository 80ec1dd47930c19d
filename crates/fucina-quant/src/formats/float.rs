//! Plain float element types F32, F16 and BF16 (block size 1, little-endian).

use crate::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

pub(crate) fn dequantize_f32(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(out.iter_mut()) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub(crate) fn dequantize_f16(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(out.iter_mut()) {
        *y = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub(crate) fn dequantize_bf16(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(out.iter_mut()) {
        *y = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub(crate) fn quantize_f32(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.iter().zip(out.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

pub(crate) fn quantize_f16(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.iter().zip(out.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_f16(*x).to_le_bytes());
    }
}

pub(crate) fn quantize_bf16(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.iter().zip(out.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
    }
}

// ---- scalar dot products (the oracle for the SIMD kernels): products summed in order ----

/// F32 · F32.
pub(crate) fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(4).zip(a.chunks_exact(4)) {
        acc += f32::from_le_bytes([x[0], x[1], x[2], x[3]])
            * f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
    }
    acc
}

/// F16 · F16 (each product exact in f32).
pub(crate) fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        acc += f16_to_f32(u16::from_le_bytes([x[0], x[1]]))
            * f16_to_f32(u16::from_le_bytes([y[0], y[1]]));
    }
    acc
}

/// BF16 · BF16 (each product exact in f32).
pub(crate) fn dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        acc += bf16_to_f32(u16::from_le_bytes([x[0], x[1]]))
            * bf16_to_f32(u16::from_le_bytes([y[0], y[1]]));
    }
    acc
}
