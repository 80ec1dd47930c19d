//! Reference quantizers for Q4_K, Q5_K and Q6_K: ggml's `quantize_row_q{4,5,6}_K_ref`
//! (no importance matrix), reproduced operation for operation so the bytes are identical.
//!
//! Every float expression keeps C's evaluation order and f32 rounding (no fused
//! multiply-add, no reassociation): the goldens come from the C reference compiled
//! for baseline x86-64.

use super::kquants::{k_scale_min, nearest_int, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, QK_K};
use super::{f16_at, put_f16};

const GROUP_MAX_EPS: f32 = 1e-15;

/// Scratch and parameters of ggml's `make_qkx2_quants` (asymmetric, weighted least squares).
struct Qkx2 {
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
}

impl Qkx2 {
    /// Quantize 32 values to `0..=nmax` with a scale and a (negated) min; returns (scale, min).
    fn run(&self, x: &[f32], weights: &[f32; 32], l_out: &mut [u8]) -> (f32, f32) {
        let nmax = self.nmax;
        let mut min = x[0];
        let mut max = x[0];
        let mut sum_w = weights[0];
        let mut sum_x = sum_w * x[0];
        for i in 1..32 {
            if x[i] < min {
                min = x[i];
            }
            if x[i] > max {
                max = x[i];
            }
            let w = weights[i];
            sum_w += w;
            sum_x += w * x[i];
        }
        if min > 0.0 {
            min = 0.0;
        }
        if max == min {
            l_out[..32].fill(0);
            return (0.0, -min);
        }
        let mut iscale = nmax as f32 / (max - min);
        let mut scale = 1.0 / iscale;
        let mut best_error = 0f32;
        for i in 0..32 {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            l_out[i] = l as u8;
            let diff = scale * l as f32 + min - x[i];
            best_error += weights[i] * (diff * diff);
        }
        let mut laux = [0u8; 32];
        for is in 0..=self.nstep {
            iscale = (self.rmin + self.rdelta * is as f32 + nmax as f32) / (max - min);
            let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
            for i in 0..32 {
                let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
                laux[i] = l as u8;
                let (w, lf) = (weights[i], l as f32);
                sum_l += w * lf;
                sum_l2 += w * lf * lf;
                sum_xl += w * lf * x[i];
            }
            let d = sum_w * sum_l2 - sum_l * sum_l;
            if d > 0.0 {
                let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
                let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
                if this_min > 0.0 {
                    this_min = 0.0;
                    this_scale = sum_xl / sum_l2;
                }
                let mut cur_error = 0f32;
                for i in 0..32 {
                    let diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                    cur_error += weights[i] * (diff * diff);
                }
                if cur_error < best_error {
                    l_out[..32].copy_from_slice(&laux);
                    best_error = cur_error;
                    scale = this_scale;
                    min = this_min;
                }
            }
        }
        (scale, -min)
    }
}

/// Shared Q4_K/Q5_K front half: per-32 scales/mins, the packed 12 scale bytes,
/// `d`/`dmin`, and the final quants `L` (0..=nmax) against the rounded scales.
fn k_scales_and_quants(x: &[f32], qkx2: &Qkx2, b: &mut [u8], l: &mut [u8; QK_K]) {
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0f32; 32];
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = qkx2.run(xs, &weights, &mut l[32 * j..]);
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut b[4..16];
    sc.fill(0);
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    put_f16(b, 0, max_scale / 63.0);
    put_f16(b, 2, max_min / 63.0);
    let (scv, mnv) = k_scale_min(&b[4..16]);
    let (d0, dmin0) = (f16_at(b, 0), f16_at(b, 2));
    for j in 0..8 {
        let d = d0 * f32::from(scv[j]);
        if d == 0.0 {
            continue;
        }
        let dm = dmin0 * f32::from(mnv[j]);
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, qkx2.nmax) as u8;
        }
    }
}

pub(crate) fn quantize_q4_k(src: &[f32], out: &mut [u8]) {
    let qkx2 = Qkx2 {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
    };
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q4_K_BYTES)) {
        let mut l = [0u8; QK_K];
        k_scales_and_quants(x, &qkx2, b, &mut l);
        for (c, q) in b[16..144].chunks_exact_mut(32).enumerate() {
            for (i, q) in q.iter_mut().enumerate() {
                *q = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
            }
        }
    }
}

pub(crate) fn quantize_q5_k(src: &[f32], out: &mut [u8]) {
    let qkx2 = Qkx2 {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
    };
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q5_K_BYTES)) {
        let mut l = [0u8; QK_K];
        k_scales_and_quants(x, &qkx2, b, &mut l);
        let (qh, ql) = b[16..176].split_at_mut(32);
        qh.fill(0);
        for c in 0..4 {
            for j in 0..32 {
                let (mut l1, mut l2) = (l[64 * c + j], l[64 * c + 32 + j]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= 1 << (2 * c);
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= 2 << (2 * c);
                }
                ql[32 * c + j] = l1 | (l2 << 4);
            }
        }
    }
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights (weights x²).
fn make_qx_quants(x: &[f32], nmax: i32, l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let l = quant(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = (-nmax) as f32 / max;
    for (o, &v) in l_out.iter_mut().zip(x) {
        *o = (quant(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in l_out.iter_mut().zip(x) {
                *o = (quant(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

pub(crate) fn quantize_q6_k(src: &[f32], out: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q6_K_BYTES)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
        for ib in 0..16 {
            let s = make_qx_quants(&x[16 * ib..16 * ib + 16], 32, &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        b.fill(0);
        if max_abs_scale < GROUP_MAX_EPS {
            continue;
        }
        let iscale = -128.0 / max_scale;
        put_f16(b, 208, 1.0 / iscale);
        for ib in 0..16 {
            b[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
        }
        let d0 = f16_at(b, 208);
        for j in 0..16 {
            let d = d0 * f32::from(b[192 + j] as i8);
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-32, 31) + 32) as i8;
            }
        }
        let (ql, rest) = b.split_at_mut(128);
        let qh = &mut rest[..64];
        for h in 0..2 {
            for i in 0..32 {
                let q = |k: usize| l[128 * h + 32 * k + i] as u8;
                ql[64 * h + i] = (q(0) & 0x0f) | ((q(2) & 0x0f) << 4);
                ql[64 * h + 32 + i] = (q(1) & 0x0f) | ((q(3) & 0x0f) << 4);
                qh[32 * h + i] =
                    (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
            }
        }
    }
}
