//! K-quants: 256-element super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and the Q8_K activation form.
//!
//! Layouts (little-endian, packed):
//!
//! | type | bytes | fields, in order |
//! |------|-------|------------------|
//! | Q2_K | 84  | `scales: [u8; 16]` (low nibble scale, high nibble min, per 16 elements), `qs: [u8; 64]` (2-bit), `d: f16`, `dmin: f16` |
//! | Q3_K | 110 | `hmask: [u8; 32]` (3rd bit), `qs: [u8; 64]` (low 2 bits), `scales: [u8; 12]` (16 × 6-bit, signed −32), `d: f16` |
//! | Q4_K | 144 | `d: f16`, `dmin: f16`, `scales: [u8; 12]` (8 × 6-bit scale + 8 × 6-bit min), `qs: [u8; 128]` |
//! | Q5_K | 176 | `d: f16`, `dmin: f16`, `scales: [u8; 12]`, `qh: [u8; 32]` (5th bit), `qs: [u8; 128]` |
//! | Q6_K | 210 | `ql: [u8; 128]` (low 4 bits), `qh: [u8; 64]` (high 2 bits), `scales: [i8; 16]`, `d: f16` |
//! | Q8_K | 292 | `d: f32`, `qs: [i8; 256]`, `bsums: [i16; 16]` (sums of 16 quants) |
//!
//! Element order inside a super-block is ggml's (see the per-type index helpers);
//! dequantization repeats gguf-py's float operations so results are bit-identical.

use super::{f16_at, f32_at};

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;
/// Bytes of a Q2_K block.
pub const Q2_K_BYTES: usize = 84;
/// Bytes of a Q3_K block.
pub const Q3_K_BYTES: usize = 110;
/// Bytes of a Q4_K block.
pub const Q4_K_BYTES: usize = 144;
/// Bytes of a Q5_K block.
pub const Q5_K_BYTES: usize = 176;
/// Bytes of a Q6_K block.
pub const Q6_K_BYTES: usize = 210;
/// Bytes of a Q8_K block.
pub const Q8_K_BYTES: usize = 292;

/// Q2_K: 2-bit quant of element `i` (0..256).
#[inline]
pub(crate) fn q2_k_quant(qs: &[u8], i: usize) -> u8 {
    let (half, j, l) = (i / 128, (i % 128) / 32, i % 32);
    (qs[half * 32 + l] >> (2 * j)) & 3
}

pub(crate) fn dequantize_q2_k(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q2_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let (scales, qs) = (&b[0..16], &b[16..80]);
        let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
        for (g, yg) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(scales[g] & 0x0f);
            let ml = dmin * f32::from(scales[g] >> 4);
            for (k, y) in yg.iter_mut().enumerate() {
                *y = dl * f32::from(q2_k_quant(qs, g * 16 + k)) - ml;
            }
        }
    }
}

/// Q3_K: the 16 signed 6-bit scales.
pub(crate) fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = (s[i % 8] >> (4 * (i / 8))) & 0x0f;
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

/// Q3_K: signed 3-bit quant of element `i` (−4..=3).
#[inline]
pub(crate) fn q3_k_quant(hmask: &[u8], qs: &[u8], i: usize) -> i8 {
    let low = q2_k_quant(qs, i) as i8;
    let high_set = (hmask[i % 32] >> (i / 32)) & 1 == 1;
    if high_set {
        low
    } else {
        low - 4
    }
}

pub(crate) fn dequantize_q3_k(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q3_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let (hmask, qs) = (&b[0..32], &b[32..96]);
        let scales = q3_k_scales(&b[96..108]);
        let d = f16_at(b, 108);
        for (g, yg) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(scales[g]);
            for (k, y) in yg.iter_mut().enumerate() {
                *y = dl * f32::from(q3_k_quant(hmask, qs, g * 16 + k));
            }
        }
    }
}

/// Q4_K/Q5_K: unpack the 8 (scale, min) 6-bit pairs from the 12 packed bytes.
#[inline]
pub(crate) fn k_scale_min(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 0x3f;
        mn[j] = s[j + 4] & 0x3f;
        sc[j + 4] = (s[j + 8] & 0x0f) | ((s[j] >> 2) & 0x30);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
    }
    (sc, mn)
}

/// Q4_K/Q5_K: low 4 bits of element `i`: sub-block `g = i/32` lives in byte
/// `(g/2)*32 + i%32`, low nibble for even `g`, high for odd.
#[inline]
pub(crate) fn k_nibble(qs: &[u8], i: usize) -> u8 {
    let g = i / 32;
    (qs[(g / 2) * 32 + i % 32] >> (4 * (g % 2))) & 0x0f
}

pub(crate) fn dequantize_q4_k(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let (sc, mn) = k_scale_min(&b[4..16]);
        let qs = &b[16..144];
        for (g, yg) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * f32::from(sc[g]);
            let ml = dmin * f32::from(mn[g]);
            for (k, y) in yg.iter_mut().enumerate() {
                *y = dl * f32::from(k_nibble(qs, g * 32 + k)) - ml;
            }
        }
    }
}

pub(crate) fn dequantize_q5_k(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let (sc, mn) = k_scale_min(&b[4..16]);
        let (qh, qs) = (&b[16..48], &b[48..176]);
        for (g, yg) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * f32::from(sc[g]);
            let ml = dmin * f32::from(mn[g]);
            for (k, y) in yg.iter_mut().enumerate() {
                let q = k_nibble(qs, g * 32 + k) | (((qh[k] >> g) & 1) << 4);
                *y = dl * f32::from(q) - ml;
            }
        }
    }
}

/// Q6_K: signed 6-bit quant of element `i` (−32..=31).
#[inline]
pub(crate) fn q6_k_quant(ql: &[u8], qh: &[u8], i: usize) -> i8 {
    let (half, r) = (i / 128, i % 128);
    let (t, l) = (r / 64, r % 64);
    let low = (ql[half * 64 + l] >> (4 * t)) & 0x0f;
    let (j, l2) = (r / 32, r % 32);
    let high = (qh[half * 32 + l2] >> (2 * j)) & 0x03;
    (low | (high << 4)) as i8 - 32
}

pub(crate) fn dequantize_q6_k(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q6_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
        let d = f16_at(b, 208);
        for (g, yg) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * f32::from(scales[g] as i8);
            for (k, y) in yg.iter_mut().enumerate() {
                *y = dl * f32::from(q6_k_quant(ql, qh, g * 16 + k));
            }
        }
    }
}

pub(crate) fn dequantize_q8_k(src: &[u8], out: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q8_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let d = f32_at(b, 0);
        for (&q, y) in b[4..260].iter().zip(y.iter_mut()) {
            *y = d * f32::from(q as i8);
        }
    }
}

/// ggml's `nearest_int`: round half to even via the 1.5·2^23 trick (valid for |x| < 2^22).
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Quantize activations to Q8_K (ggml's `quantize_row_q8_K_ref`).
pub(crate) fn quantize_q8_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let mut amax = 0f32;
        let mut max = 0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        b.fill(0);
        if amax == 0.0 {
            continue;
        }
        let iscale = -127.0 / max;
        let mut q = [0i8; QK_K];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        b[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
        for (o, &v) in b[4..260].iter_mut().zip(&q) {
            *o = v as u8;
        }
        for (g, chunk) in q.chunks_exact(16).enumerate() {
            let s: i16 = chunk.iter().map(|&v| i16::from(v)).sum();
            b[260 + 2 * g..262 + 2 * g].copy_from_slice(&s.to_le_bytes());
        }
    }
}

// ---- scalar dot products with Q8_K activations (the oracle for the SIMD kernels) -------
//
// Per super-block: an exact integer sum `isum = Σ_g scale_g · Σ q·a` (and, for the
// types with mins, `summs = Σ_g min_g · bsum_g`), then
// `acc += (d_w·d_a)·isum − (dmin_w·d_a)·summs`, accumulated in order in one f32.
//
// Q4_K and Q6_K instead reproduce the float steps llama.cpp executes on x86-64 (the
// Gemma 3 default model's hot types), so logits track llama.cpp's to the last bit
// where the integer sums agree:
// * Q4_K: ggml's repacked `gemv/gemm_q4_K_8x8_q8_K` (every Q4_K matrix with a row
//   count divisible by 8 is repacked on AVX2 machines): two f32 accumulators,
//   `acc = fma(isum, d_w·d_a, acc)`, `accm = fma(summs, dmin_w·d_a, accm)`, result
//   `acc − accm`.
// * Q6_K: ggml's AVX2 `vec_dot_q6_K_q8_K`: eight lanes, lane `l` holding the exact
//   integer sum over elements with `(i mod 32) / 4 = l` of `scale·(q+32)·a`, minus
//   `32·(scale·bsum)` of groups `2l` and `2l+1`; each lane does
//   `acc_l = fma(d_w·d_a, lane_l, acc_l)`, and the lanes are summed as
//   `((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))` (ggml's `hsum_float_8`).

/// Q8_K activation quant `i` of a block.
#[inline]
fn aq(a: &[u8], i: usize) -> i32 {
    i32::from(a[4 + i] as i8)
}

/// Q8_K activation sum of the 16 quants of group `g`.
#[inline]
pub(crate) fn bsum(a: &[u8], g: usize) -> i32 {
    i32::from(i16::from_le_bytes([a[260 + 2 * g], a[261 + 2 * g]]))
}

/// Q2_K weights · Q8_K activations.
pub(crate) fn dot_q2_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(Q2_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (scales, qs) = (&x[0..16], &x[16..80]);
        let (mut isum, mut summs) = (0i32, 0i32);
        for (g, &sc) in scales.iter().enumerate() {
            let s: i32 = (16 * g..16 * g + 16)
                .map(|i| i32::from(q2_k_quant(qs, i)) * aq(y, i))
                .sum();
            isum += i32::from(sc & 0x0f) * s;
            summs += i32::from(sc >> 4) * bsum(y, g);
        }
        let da = f32_at(y, 0);
        acc += (f16_at(x, 80) * da) * isum as f32 - (f16_at(x, 82) * da) * summs as f32;
    }
    acc
}

/// Q3_K weights · Q8_K activations.
pub(crate) fn dot_q3_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(Q3_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (hmask, qs) = (&x[0..32], &x[32..96]);
        let scales = q3_k_scales(&x[96..108]);
        let mut isum = 0i32;
        for (g, &sc) in scales.iter().enumerate() {
            let s: i32 = (16 * g..16 * g + 16)
                .map(|i| i32::from(q3_k_quant(hmask, qs, i)) * aq(y, i))
                .sum();
            isum += i32::from(sc) * s;
        }
        acc += (f16_at(x, 108) * f32_at(y, 0)) * isum as f32;
    }
    acc
}

/// Q4_K / Q5_K shared tail: scale and min sums over the 8 sub-blocks.
fn k_sums(sc: &[u8; 8], mn: &[u8; 8], y: &[u8], q: impl Fn(usize) -> i32) -> (i32, i32) {
    let (mut isum, mut summs) = (0i32, 0i32);
    for g in 0..8 {
        let s: i32 = (32 * g..32 * g + 32).map(|i| q(i) * aq(y, i)).sum();
        isum += i32::from(sc[g]) * s;
        summs += i32::from(mn[g]) * (bsum(y, 2 * g) + bsum(y, 2 * g + 1));
    }
    (isum, summs)
}

/// Q4_K weights · Q8_K activations.
pub(crate) fn dot_q4_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for (x, y) in w.chunks_exact(Q4_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (sc, mn) = k_scale_min(&x[4..16]);
        let qs = &x[16..144];
        let (isum, summs) = k_sums(&sc, &mn, y, |i| i32::from(k_nibble(qs, i)));
        let da = f32_at(y, 0);
        acc = (isum as f32).mul_add(f16_at(x, 0) * da, acc);
        accm = (summs as f32).mul_add(f16_at(x, 2) * da, accm);
    }
    acc - accm
}

/// Q4_K weights · Q8_K activations in ggml's prompt-batch (GEMM) order: the float
/// steps of `gemm_q4_K_8x8_q8_K`, which llama.cpp runs on groups of 4 activation rows
/// of a repacked Q4_K matrix. Same exact integer sums as [`dot_q4_k_q8_k`], but one
/// FMA per *pair* of 32-element sub-blocks (`j = 0..4`: sub-blocks `2j`, `2j+1`):
/// `acc = fma(isum_j, d_w·d_a, acc)`, `accm = fma(summs_j, dmin_w·d_a, accm)`,
/// result `acc − accm`.
pub(crate) fn dot_q4_k_q8_k_pairs(w: &[u8], a: &[u8]) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for (x, y) in w.chunks_exact(Q4_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (sc, mn) = k_scale_min(&x[4..16]);
        let qs = &x[16..144];
        let da = f32_at(y, 0);
        let (dd, dm) = (f16_at(x, 0) * da, f16_at(x, 2) * da);
        for j in 0..4 {
            let (mut isum, mut summs) = (0i32, 0i32);
            for g in 2 * j..2 * j + 2 {
                let s: i32 = (32 * g..32 * g + 32)
                    .map(|i| i32::from(k_nibble(qs, i)) * aq(y, i))
                    .sum();
                isum += i32::from(sc[g]) * s;
                summs += i32::from(mn[g]) * (bsum(y, 2 * g) + bsum(y, 2 * g + 1));
            }
            acc = (isum as f32).mul_add(dd, acc);
            accm = (summs as f32).mul_add(dm, accm);
        }
    }
    acc - accm
}

/// Q4_K weights · Q8_K activations in ggml's unrepacked order: the float steps of
/// `ggml_vec_dot_q4_K_q8_K` (x86 AVX2 body), which llama.cpp runs where it does not
/// repack a Q4_K matrix (rows % 8 != 0, or a 3-D weight such as MLA's `attn_v_b`) and
/// the batch is too small for its tiled kernel. Eight f32 lanes, lane `l` taking the
/// exact sum over elements `4l..4l+4` of every 32-element sub-block (times its scale)
/// by `fma(d_a·d_w, ·, lane)`; four lanes of mins (`-(d_a·dmin_w)` times the pair sums
/// `mn_2i·(bsum_4i + bsum_4i+1) + mn_2i+1·(bsum_4i+2 + bsum_4i+3)`); then
/// `hsum_float_8(lanes) + ((m0 + m2) + (m1 + m3))`.
pub(crate) fn dot_q4_k_q8_k_lanes(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut acc_m = [0f32; 4];
    for (x, y) in w.chunks_exact(Q4_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (sc, mn) = k_scale_min(&x[4..16]);
        let qs = &x[16..144];
        let da = f32_at(y, 0);
        let (d, dmin) = (da * f16_at(x, 0), -(da * f16_at(x, 2)));
        let mut lanes = [0i32; 8];
        for (g, &s_g) in sc.iter().enumerate() {
            for (l, lane) in lanes.iter_mut().enumerate() {
                let s: i32 = (32 * g + 4 * l..32 * g + 4 * l + 4)
                    .map(|i| i32::from(k_nibble(qs, i)) * aq(y, i))
                    .sum();
                *lane += i32::from(s_g) * s;
            }
        }
        for (acc, lane) in acc.iter_mut().zip(lanes) {
            *acc = d.mul_add(lane as f32, *acc);
        }
        let pair = |g: usize| i32::from(mn[g]) * (bsum(y, 2 * g) + bsum(y, 2 * g + 1));
        for (i, m) in acc_m.iter_mut().enumerate() {
            *m = dmin.mul_add((pair(2 * i) + pair(2 * i + 1)) as f32, *m);
        }
    }
    hsum_lanes8(&acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]))
}

/// Q5_K weights · Q8_K activations.
pub(crate) fn dot_q5_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(Q5_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (sc, mn) = k_scale_min(&x[4..16]);
        let (qh, qs) = (&x[16..48], &x[48..176]);
        let q = |i: usize| i32::from(k_nibble(qs, i) | (((qh[i % 32] >> (i / 32)) & 1) << 4));
        let (isum, summs) = k_sums(&sc, &mn, y, q);
        let da = f32_at(y, 0);
        acc += (f16_at(x, 0) * da) * isum as f32 - (f16_at(x, 2) * da) * summs as f32;
    }
    acc
}

/// Q6_K weights · Q8_K activations.
pub(crate) fn dot_q6_k_q8_k(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in w.chunks_exact(Q6_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (ql, qh, scales) = (&x[0..128], &x[128..192], &x[192..208]);
        let sc = |g: usize| i32::from(scales[g] as i8);
        let mut lanes = [0i32; 8];
        for i in 0..QK_K {
            let q = i32::from(q6_k_quant(ql, qh, i)) + 32;
            lanes[(i % 32) / 4] += sc(i / 16) * q * aq(y, i);
        }
        let d = f16_at(x, 208) * f32_at(y, 0);
        for (l, (acc, lane)) in acc.iter_mut().zip(lanes).enumerate() {
            let sub = 32 * (sc(2 * l) * bsum(y, 2 * l) + sc(2 * l + 1) * bsum(y, 2 * l + 1));
            *acc = d.mul_add((lane - sub) as f32, *acc);
        }
    }
    hsum_lanes8(&acc)
}

/// ggml's `hsum_float_8` order for eight f32 lanes.
#[inline]
pub(crate) fn hsum_lanes8(a: &[f32; 8]) -> f32 {
    let s: [f32; 4] = core::array::from_fn(|k| a[k] + a[k + 4]);
    (s[0] + s[2]) + (s[1] + s[3])
}

// ---- llama.cpp's tiled K-quant matmul order (ggml-cpu/tiled) --------------------------
//
// For a mul_mat with >= 8 activation rows whose weights are not repacked, llama.cpp
// (ggml-cpu `tiled.cpp`) runs Q6_K (and Q5_K, Q4_K, Q3_K, Q2_K) through its tiled
// kernel. Per super-block it forms one exact integer `isum = Σ_g scale_g · Σ q·a`
// (Q6_K: `q` is the signed quant, the −32 offset folded in through the Q8_K block
// sums), then `r = f32(isum) · d_w` (a rounded multiply) and `out = fma(r, d_a, out)`
// (one rounding: the VNNI kernel's epilogue `_mm512_add_ps(buf, _mm512_mul_ps(result,
// d1))`, tiled-kernel.cpp `tiled_run_micro_vnni_8x16`, is contracted by GCC into
// `vfmadd213ps`, as the llama-cpp-python 0.3.36 libggml-cpu.so disassembly shows),
// `out` starting at 0 and summing the super-blocks in order.

/// Q6_K weights · Q8_K activations in llama.cpp's tiled-matmul order (see above).
pub(crate) fn dot_q6_k_q8_k_tiled(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(Q6_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (ql, qh, scales) = (&x[0..128], &x[128..192], &x[192..208]);
        let mut isum = 0i32;
        for (g, &sc) in scales.iter().enumerate() {
            let s: i32 = (16 * g..16 * g + 16)
                .map(|i| i32::from(q6_k_quant(ql, qh, i)) * aq(y, i))
                .sum();
            isum += i32::from(sc as i8) * s;
        }
        let r = isum as f32 * f16_at(x, 208);
        acc = r.mul_add(f32_at(y, 0), acc);
    }
    acc
}

/// Q4_K / Q5_K weights · Q8_K activations in llama.cpp's tiled-matmul order: per
/// super-block `r = f32(isum)·d_w`, then `r = fnmadd(dmin_w, f32(summs), r)` (one
/// rounding), `out = fma(r, d_a, out)`.
fn dot_k45_tiled(w: &[u8], a: &[u8], bytes: usize, q: impl Fn(&[u8], usize) -> i32) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(bytes).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (sc, mn) = k_scale_min(&x[4..16]);
        let (isum, summs) = k_sums(&sc, &mn, y, |i| q(x, i));
        let r = isum as f32 * f16_at(x, 0);
        let r = (-f16_at(x, 2)).mul_add(summs as f32, r);
        acc = r.mul_add(f32_at(y, 0), acc);
    }
    acc
}

/// Q4_K weights · Q8_K activations in llama.cpp's tiled-matmul order.
pub(crate) fn dot_q4_k_q8_k_tiled(w: &[u8], a: &[u8]) -> f32 {
    dot_k45_tiled(w, a, Q4_K_BYTES, |x, i| i32::from(k_nibble(&x[16..144], i)))
}

/// Q5_K weights · Q8_K activations in llama.cpp's tiled-matmul order.
pub(crate) fn dot_q5_k_q8_k_tiled(w: &[u8], a: &[u8]) -> f32 {
    dot_k45_tiled(w, a, Q5_K_BYTES, |x, i| {
        let (qh, qs) = (&x[16..48], &x[48..176]);
        i32::from(k_nibble(qs, i) | (((qh[i % 32] >> (i / 32)) & 1) << 4))
    })
}

/// Q3_K weights · Q8_K activations in llama.cpp's tiled-matmul order (as Q6_K: no
/// mins, `r = f32(isum)·d_w`, `out = fma(r, d_a, out)`).
pub(crate) fn dot_q3_k_q8_k_tiled(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(Q3_K_BYTES).zip(a.chunks_exact(Q8_K_BYTES)) {
        let (hmask, qs) = (&x[0..32], &x[32..96]);
        let scales = q3_k_scales(&x[96..108]);
        let mut isum = 0i32;
        for (g, &sc) in scales.iter().enumerate() {
            let s: i32 = (16 * g..16 * g + 16)
                .map(|i| i32::from(q3_k_quant(hmask, qs, i)) * aq(y, i))
                .sum();
            isum += i32::from(sc) * s;
        }
        let r = isum as f32 * f16_at(x, 108);
        acc = r.mul_add(f32_at(y, 0), acc);
    }
    acc
}
