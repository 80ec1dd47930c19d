//! Causal GQA attention of one query head against a [`KvCache`], with optional
//! sliding window and logit soft cap.
//!
//! Numerics follow llama.cpp's non-flash CPU path for an f16 cache, bit for bit
//! on AVX-512 machines: the query is rounded to f16 before `q·k`, scores are
//! soft-capped, scaled and soft-maxed with ggml's exp and chunked sum (see
//! [`softmax_cells`]), and the probabilities are rounded to f16 before the
//! weighted sum over V (stored transposed, one dot per output dim); both dots run
//! in tinyBLAS order over cell-aligned spans (see [`f16dot`]).
//! A Q8_0 cache quantizes the query to Q8_0 and scores with integer block dots; V
//! rows are dequantized into the weighted accumulation. An F32 cache is exact.

use crate::kv_cache::{KvCache, KvDtype};
use crate::ops::f16dot::{self, F16_PAD};
use crate::ops::softmax::softmax_cells;
use crate::ModelError;
use fucina_quant::half::{f16_to_f32, f32_to_f16};

/// Shape and masking of one layer's attention.
#[derive(Clone, Copy, Debug)]
pub struct AttnParams {
    /// Query heads per kv head (GQA group size).
    pub group: usize,
    /// Key head dimension.
    pub head_dim_k: usize,
    /// Value head dimension.
    pub head_dim_v: usize,
    /// Sliding window, if the layer has one.
    pub window: Option<usize>,
    /// Scale applied to scores inside the softmax.
    pub kq_scale: f32,
    /// Soft cap `c·tanh(s/c)` applied to raw scores before scaling.
    pub softcap: Option<f32>,
}

/// Per-thread buffers of [`attend_head`].
#[derive(Default, Debug)]
pub struct AttnScratch {
    qa: Vec<u8>,
    qf: Vec<f32>,
    kf: Vec<f32>,
    scores: Vec<f32>,
    pa: Vec<u8>,
    vrow: Vec<f32>,
}

/// First position visible from `pos` (inclusive).
#[inline]
pub fn window_start(pos: usize, window: Option<usize>) -> usize {
    match window {
        Some(w) if w > 0 => (pos + 1).saturating_sub(w),
        _ => 0,
    }
}

/// Attention output of query head `head` (`q`: `head_dim_k` values, post-RoPE and
/// pre-scaled) at position `pos` of layer `il`, attending to cached positions
/// `window_start(pos)..=pos`, into `out` (`head_dim_v` values).
#[allow(clippy::too_many_arguments)]
pub fn attend_head(
    cache: &KvCache,
    il: usize,
    head: usize,
    q: &[f32],
    pos: usize,
    p: &AttnParams,
    out: &mut [f32],
    s: &mut AttnScratch,
) -> Result<(), ModelError> {
    let kvh = head / p.group.max(1);
    let layer = cache.layer(il);
    if pos >= cache.capacity() || kvh >= layer.geometry().n_head_kv {
        return Err(ModelError::InvalidBatch(format!(
            "attention at position {pos}, kv head {kvh}: outside the cache"
        )));
    }
    let start = window_start(pos, p.window);
    let n = pos + 1 - start;
    let dot = *cache.dot();

    s.scores.clear();
    if cache.dtype() == KvDtype::F16 {
        // q·k in f16 as llama.cpp (q rounded to f16, llama.cpp's dot order).
        let hd = p.head_dim_k;
        s.qf.clear();
        s.qf.extend(q[..hd].iter().map(|&v| f16_to_f32(f32_to_f16(v))));
        s.qf.resize(hd.next_multiple_of(F16_PAD), 0.0);
        s.kf.resize(s.qf.len(), 0.0);
        for j in start..=pos {
            fucina_quant::half::widen_f16_into(layer.k_row(j, kvh), &mut s.kf);
            s.scores.push(f16dot::dot(&s.kf, &s.qf));
        }
    } else {
        s.qa.clear();
        dot.act.quantize_row(q, &mut s.qa)?;
        s.scores
            .extend((start..=pos).map(|j| dot.dot(layer.k_row(j, kvh), &s.qa)));
    }

    // softmax(softcap(s) · scale), as ggml_soft_max_ext with a -inf mask outside.
    let mut max = f32::NEG_INFINITY;
    for v in s.scores.iter_mut() {
        if let Some(c) = p.softcap {
            *v = (*v / c).tanh() * c;
        }
        *v *= p.kq_scale;
        max = max.max(*v);
    }
    softmax_cells(&mut s.scores, start, max);

    match cache.dtype() {
        KvDtype::F16 => {
            // p·v over cache cells c0..c1 (aligned to F16_PAD so lanes are the
            // cells' lanes in llama.cpp's padded view), p rounded to f16.
            let c0 = start / F16_PAD * F16_PAD;
            let c1 = (pos + 1).next_multiple_of(F16_PAD);
            s.qf.clear();
            s.qf.resize(c1 - c0, 0.0);
            for (o, &w) in s.qf[start - c0..].iter_mut().zip(&s.scores) {
                *o = f16_to_f32(f32_to_f16(w));
            }
            s.kf.clear();
            s.kf.resize(c1 - c0, 0.0);
            for (d, o) in out.iter_mut().enumerate().take(p.head_dim_v) {
                let span = layer.vt_span(kvh, d, start, pos + 1, 2, cache.capacity());
                fucina_quant::half::widen_f16_into(span, &mut s.kf[start - c0..]);
                *o = f16dot::dot(&s.qf, &s.kf);
            }
        }
        KvDtype::F32 => {
            s.pa.clear();
            dot.act.quantize_row(&s.scores, &mut s.pa)?;
            for (d, o) in out.iter_mut().enumerate().take(p.head_dim_v) {
                *o = dot.dot(
                    layer.vt_span(kvh, d, start, pos + 1, 4, cache.capacity()),
                    &s.pa,
                );
            }
        }
        KvDtype::Q8_0 => {
            out[..p.head_dim_v].fill(0.0);
            s.vrow.resize(p.head_dim_v, 0.0);
            let deq = cache.dequant();
            for (j, &w) in (start..=pos).zip(&s.scores) {
                deq(layer.v_row(j, kvh), &mut s.vrow);
                for (o, &v) in out.iter_mut().zip(&s.vrow) {
                    *o += w * v;
                }
            }
        }
    }
    debug_assert_eq!(s.scores.len(), n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_cache::KvGeometry;

    fn naive(qs: &[f32], ks: &[Vec<f32>], vs: &[Vec<f32>], scale: f32) -> Vec<f32> {
        let sc: Vec<f64> = ks
            .iter()
            .map(|k| {
                k.iter().zip(qs).map(|(a, b)| f64::from(a * b)).sum::<f64>() * f64::from(scale)
            })
            .collect();
        let m = sc.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        (0..vs[0].len())
            .map(|d| {
                (e.iter()
                    .zip(vs)
                    .map(|(w, v)| w * f64::from(v[d]))
                    .sum::<f64>()
                    / z) as f32
            })
            .collect()
    }

    fn rows(n: usize, seed: f32) -> Vec<Vec<f32>> {
        (0..n)
            .map(|p| {
                (0..32)
                    .map(|i| ((p * 32 + i) as f32 * seed).sin())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn matches_naive_softmax_attention_and_window() {
        let geom = [KvGeometry {
            n_head_kv: 1,
            head_dim_k: 32,
            head_dim_v: 32,
        }];
        let ks = rows(10, 0.37);
        let vs = rows(10, 0.11);
        let q: Vec<f32> = (0..32).map(|i| (i as f32 * 0.7).cos()).collect();
        for (dtype, tol) in [
            (KvDtype::F32, 1e-5f32),
            (KvDtype::F16, 2e-3),
            (KvDtype::Q8_0, 2e-2),
        ] {
            let mut c = KvCache::new(&geom, 16, dtype).unwrap();
            for p in 0..10 {
                c.write(0, p, &ks[p], &vs[p]).unwrap();
            }
            c.advance(10).unwrap();
            for window in [None, Some(4)] {
                let p = AttnParams {
                    group: 2,
                    head_dim_k: 32,
                    head_dim_v: 32,
                    window,
                    kq_scale: 0.5,
                    softcap: None,
                };
                let mut out = vec![0f32; 32];
                let mut s = AttnScratch::default();
                attend_head(&c, 0, 1, &q, 9, &p, &mut out, &mut s).unwrap();
                let st = window_start(9, window);
                let want = naive(&q, &ks[st..10], &vs[st..10], 0.5);
                for (a, b) in out.iter().zip(&want) {
                    assert!((a - b).abs() < tol, "{dtype:?} {window:?}: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn softcap_bounds_scores() {
        let geom = [KvGeometry {
            n_head_kv: 1,
            head_dim_k: 32,
            head_dim_v: 32,
        }];
        let ks = rows(3, 0.37);
        let vs = rows(3, 0.11);
        let mut c = KvCache::new(&geom, 4, KvDtype::F32).unwrap();
        for p in 0..3 {
            c.write(0, p, &ks[p], &vs[p]).unwrap();
        }
        // Huge queries: without a cap the softmax is one-hot, with cap 1 the scores
        // lie in [-1, 1] and every value gets weight >= e^-2 / 3.
        let q: Vec<f32> = (0..32).map(|i| 100.0 * (i as f32 * 0.7).cos()).collect();
        let mut out = vec![0f32; 32];
        let mut s = AttnScratch::default();
        let mut p = AttnParams {
            group: 1,
            head_dim_k: 32,
            head_dim_v: 32,
            window: None,
            kq_scale: 1.0,
            softcap: Some(1.0),
        };
        attend_head(&c, 0, 0, &q, 2, &p, &mut out, &mut s).unwrap();
        assert!(
            s.scores.iter().all(|&w| w >= (-2f32).exp() / 3.0 - 1e-6),
            "{:?}",
            s.scores
        );
        p.softcap = None;
        attend_head(&c, 0, 0, &q, 2, &p, &mut out, &mut s).unwrap();
        assert!(s.scores.iter().any(|&w| w > 0.999), "{:?}", s.scores);
    }

    #[test]
    fn window_bounds() {
        assert_eq!(window_start(0, Some(512)), 0);
        assert_eq!(window_start(511, Some(512)), 0);
        assert_eq!(window_start(512, Some(512)), 1);
        assert_eq!(window_start(700, None), 0);
    }
}
