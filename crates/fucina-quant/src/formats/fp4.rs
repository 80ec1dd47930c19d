//! Micro-scaled 4-bit float formats MXFP4 (E8M0 scale per 32) and NVFP4 (UE4M3 scale per 16).
//!
//! | type | block | bytes | fields |
//! |------|-------|-------|--------|
//! | MXFP4 | 32 | 17 | `e: u8` (E8M0 exponent), `qs: [u8; 16]` — Q4_0 nibble order, E2M1 codes |
//! | NVFP4 | 64 | 36 | `d: [u8; 4]` (UE4M3 scale per 16 elements), `qs: [u8; 32]` — per 16: 8 bytes, low nibbles first |
//!
//! Codes index [`KVALUES_MXFP4`], the E2M1 values doubled; the scales are halved to match.

const QK_MXFP4: usize = 32;
const QK_NVFP4: usize = 64;
/// Bytes of an MXFP4 block.
pub const MXFP4_BYTES: usize = 17;
/// Bytes of an NVFP4 block.
pub const NVFP4_BYTES: usize = 36;

/// E2M1 values times two (ggml's `kvalues_mxfp4`).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half of the E8M0 scale `2^(e−127)` (ggml's `ggml_e8m0_to_fp32_half`).
#[inline]
pub(crate) fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// Half of an unsigned E4M3 scale; codes 0 and 0x7F decode to 0 (ggml's `ggml_ue4m3_to_fp32`).
#[inline]
pub(crate) fn ue4m3_half(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let exp = i32::from((x >> 3) & 0x0f);
    let man = f32::from(x & 7);
    let raw = if exp == 0 {
        man * 2f32.powi(-9)
    } else {
        (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    };
    raw * 0.5
}

pub(crate) fn dequantize_mxfp4(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(MXFP4_BYTES)
        .zip(out.chunks_exact_mut(QK_MXFP4))
    {
        let d = e8m0_half(b[0]);
        for (j, y) in y.iter_mut().enumerate() {
            let q = if j < 16 {
                b[1 + j] & 0x0f
            } else {
                b[1 + j - 16] >> 4
            };
            *y = d * f32::from(KVALUES_MXFP4[usize::from(q)]);
        }
    }
}

pub(crate) fn dequantize_nvfp4(src: &[u8], out: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(NVFP4_BYTES)
        .zip(out.chunks_exact_mut(QK_NVFP4))
    {
        for (s, y) in y.chunks_exact_mut(16).enumerate() {
            let d = ue4m3_half(b[s]);
            let qs = &b[4 + 8 * s..12 + 8 * s];
            for (j, y) in y.iter_mut().enumerate() {
                let q = if j < 8 { qs[j] & 0x0f } else { qs[j - 8] >> 4 };
                *y = d * f32::from(KVALUES_MXFP4[usize::from(q)]);
            }
        }
    }
}

/// The code whose value `d·k` is nearest `x` (first on ties), as gguf-py's `argmin`.
fn best_code(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = f32::INFINITY;
    for (i, &k) in KVALUES_MXFP4.iter().enumerate() {
        let err = (d * f32::from(k) - x).abs();
        if err < best_err {
            best_err = err;
            best = i as u8;
        }
    }
    best
}

pub(crate) fn quantize_mxfp4(src: &[f32], out: &mut [u8]) {
    for (x, b) in src
        .chunks_exact(QK_MXFP4)
        .zip(out.chunks_exact_mut(MXFP4_BYTES))
    {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        // floor(log2f(amax)): the f64 log2 rounded to f32 reproduces numpy's float32 log2
        // at every power-of-two boundary (checked over all exponents; see the goldens).
        let e = if amax > 0.0 {
            (f64::from(amax).log2() as f32).floor() - 2.0 + 127.0
        } else {
            0.0
        };
        let e = e as u8;
        let d = e8m0_half(e);
        b[0] = e;
        for j in 0..16 {
            b[1 + j] = best_code(x[j], d) | (best_code(x[j + 16], d) << 4);
        }
    }
}
