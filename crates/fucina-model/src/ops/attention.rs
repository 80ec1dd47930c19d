//! Causal GQA attention against a [`KvCache`], with optional sliding window and
//! logit soft cap: [`attend_group`] (what the forward runs) computes every query
//! head of one kv head's group for a block of rows of one sequence, sharing the
//! K/V conversion between them; [`attend_head`] (one head of one row) is the
//! reference it is tested against, bit for bit.
//!
//! Numerics follow llama.cpp's non-flash CPU path for an f16 cache, bit for bit
//! with the llama.cpp build for this machine's vector width
//! ([`fucina_quant::GgmlBuild`]: AVX-512 or AVX2): the query is rounded to f16
//! before `q·k`, scores are soft-capped, scaled and soft-maxed with ggml's exp and
//! chunked sum (see [`softmax_cells`]), and the probabilities are rounded to f16
//! before the weighted sum over V (stored transposed, one dot per output dim); both
//! dots run in tinyBLAS order over cell-aligned spans (see [`f16dot`]), or
//! `ggml_vec_dot_f16`'s for decode rows.
//! A Q8_0 cache quantizes the query to Q8_0 and scores with integer block dots; V
//! rows are dequantized into the weighted accumulation. An F32 cache is exact.

use crate::kv_cache::{KvCache, KvDtype};
use crate::ops::f16dot::{self, dots_n, prefetch, round_f16_in_place, DotsShape, F16_PAD};
use crate::ops::f16dot_vec::{dots_vec, dots_vec_f16, dots_vec_n, F16Shape};
use crate::ops::softmax::{soft_cap, softmax_cells};
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
    /// f16 caches: run the dots in llama.cpp's single-token decode order
    /// (`ggml_vec_dot_f16`, [`crate::ops::f16dot_vec`]) instead of its prompt-batch
    /// order (tinyBLAS, [`f16dot`]). The forward sets it for one-row batches, and
    /// for every row in pinned mode. [`attend_head`] ignores it (prompt order).
    pub decode_order: bool,
}

/// Per-thread buffers of [`attend_head`] and [`attend_group`].
#[derive(Default, Debug)]
pub struct AttnScratch {
    qa: Vec<u8>,
    qf: Vec<f32>,
    kf: Vec<f32>,
    scores: Vec<f32>,
    pa: Vec<u8>,
    vrow: Vec<f32>,
    starts: Vec<usize>,
}

/// One query row of an [`attend_group`] call: its row in the query matrix and its
/// position in the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryRow {
    /// Row of the query matrix.
    pub q_row: usize,
    /// Position of the row's token (it sees `window_start(pos)..=pos`).
    pub pos: usize,
}

/// Keys widened per block of the f16 `q·k` loop (a block of 64 rows of 256 dims is
/// 64 KiB: it stays in L2 while every query of the task passes over it).
const KEY_BLOCK: usize = 64;
/// Keys ahead of the one being widened whose row is prefetched: one kv head's K
/// rows are a short run every `n_head_kv · head_dim` values, a stream the hardware
/// prefetchers follow poorly (decode at long contexts reads them from memory).
const K_PREFETCH: usize = 32;

/// V^T dims widened per block of the f16 `p·v` loop.
const DIM_BLOCK: usize = 8;

/// First position visible from `pos` (inclusive).
#[inline]
pub fn window_start(pos: usize, window: Option<usize>) -> usize {
    match window {
        Some(w) if w > 0 => (pos + 1).saturating_sub(w),
        _ => 0,
    }
}

/// One [`dots_vec`] dot of `x` and `y` over their first `len` elements.
fn vec_dot1(x: &[f32], y: &[f32], len: usize) -> f32 {
    let mut o = [0f32];
    dots_vec::<1>(x, y, &DotsShape::single(len), &mut o);
    o[0]
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
            s.scores.push(if p.decode_order {
                vec_dot1(&s.kf, &s.qf, hd.next_multiple_of(16))
            } else {
                f16dot::dot(&s.kf, &s.qf)
            });
        }
    } else {
        s.qa.clear();
        dot.act.quantize_row(q, &mut s.qa)?;
        s.scores
            .extend((start..=pos).map(|j| dot.dot(layer.k_row(j, kvh), &s.qa)));
    }

    // softmax(softcap(s) · scale), as ggml_soft_max_ext with a -inf mask outside.
    if let Some(c) = p.softcap {
        soft_cap(&mut s.scores, c);
    }
    let mut max = f32::NEG_INFINITY;
    for v in s.scores.iter_mut() {
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
                let span = layer.vt_span(kvh, d, start, pos + 1);
                fucina_quant::half::widen_f16_into(span, &mut s.kf[start - c0..]);
                *o = if p.decode_order {
                    vec_dot1(&s.qf, &s.kf, c1 - c0)
                } else {
                    f16dot::dot(&s.qf, &s.kf)
                };
            }
        }
        KvDtype::F32 => {
            s.pa.clear();
            dot.act.quantize_row(&s.scores, &mut s.pa)?;
            for (d, o) in out.iter_mut().enumerate().take(p.head_dim_v) {
                *o = dot.dot(layer.vt_span(kvh, d, start, pos + 1), &s.pa);
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

/// Attention of query heads `heads` (a sub-range of kv head `kvh`'s GQA group) for
/// every row of `rows` of one sequence, into `out` (`rows.len() × heads.len() ×
/// head_dim_v`, row-major). Query `(row, h)` is
/// `q[row.q_row·q_stride + h·head_dim_k..][..head_dim_k]`.
///
/// Bitwise equal to [`attend_head`] for every (row, head): each score, softmax and
/// weighted sum performs the same float operations in the same order. What is
/// shared is the work around them: an f16 K row or V^T span is widened once for
/// all the queries of the group instead of once per (row, head), and the dots run
/// several heads against one widened vector at a time ([`dots_n`]); a Q8_0
/// V row is dequantized once per group.
#[allow(clippy::too_many_arguments)]
pub fn attend_group(
    cache: &KvCache,
    il: usize,
    kvh: usize,
    heads: std::ops::Range<usize>,
    q: &[f32],
    q_stride: usize,
    rows: &[QueryRow],
    p: &AttnParams,
    out: &mut [f32],
    s: &mut AttnScratch,
) -> Result<(), ModelError> {
    let layer = cache.layer(il);
    let group = p.group.max(1);
    let g = heads.len();
    let (hd, hdv) = (p.head_dim_k, p.head_dim_v);
    if kvh >= layer.geometry().n_head_kv
        || heads.start < kvh * group
        || heads.end > (kvh + 1) * group
        || rows.iter().any(|r| r.pos >= cache.capacity())
    {
        return Err(ModelError::InvalidBatch(format!(
            "attention of heads {heads:?} (kv head {kvh}): outside the cache"
        )));
    }
    let nr = rows.len();
    if nr == 0 || g == 0 {
        return Ok(());
    }
    let q_of = |r: usize, h: usize| {
        let o = rows[r].q_row * q_stride + (heads.start + h) * hd;
        &q[o..o + hd]
    };
    s.starts.clear();
    s.starts
        .extend(rows.iter().map(|r| window_start(r.pos, p.window)));
    let jmin = s.starts.iter().copied().min().unwrap_or(0);
    let jmax = rows.iter().map(|r| r.pos).max().unwrap_or(0);
    // Scores of (row r, head h) at [(r·g + h)·ns + j − start_r].
    let ns = rows
        .iter()
        .zip(&s.starts)
        .map(|(r, &st)| r.pos + 1 - st)
        .max()
        .unwrap_or(0);
    s.scores.clear();
    s.scores.resize(nr * g * ns, 0.0);
    let dot = *cache.dot();
    let dtype = cache.dtype();

    if dtype == KvDtype::F16 {
        // Queries rounded to f16 (as llama.cpp), zero-padded to whole 16-lane chunks.
        let hdp = hd.next_multiple_of(16);
        s.qf.clear();
        s.qf.resize(nr * g * hdp, 0.0);
        for r in 0..nr {
            for h in 0..g {
                let dst = &mut s.qf[(r * g + h) * hdp..][..hd];
                dst.copy_from_slice(q_of(r, h));
                round_f16_in_place(dst);
            }
        }
        // Decode order with whole 64-element steps: the dots read K straight from
        // the cache, converting in registers (bitwise the widened path below).
        let mut fused = p.decode_order && hd == hdp;
        if fused {
            let geom = layer.geometry();
            for (r, row) in rows.iter().enumerate() {
                let st = s.starts[r];
                let sh = F16Shape {
                    x_stride: hdp,
                    ny: row.pos + 1 - st,
                    y_stride: geom.n_head_kv * hd,
                    len: hd,
                    valid: 0..hd,
                    out_stride: ns,
                };
                let ks = layer.k_rows(kvh, st, row.pos + 1);
                let out = &mut s.scores[r * g * ns..];
                if !dots_vec_f16(g, &s.qf[r * g * hdp..], ks, &sh, out) {
                    fused = false;
                    break;
                }
            }
        }
        // Otherwise (prompt order, or no fused kernel here): K widened block by block.
        if !fused {
            s.kf.resize(KEY_BLOCK * hdp, 0.0);
            for jb in (jmin..=jmax).step_by(KEY_BLOCK) {
                let je = (jb + KEY_BLOCK).min(jmax + 1);
                for j in jb..je {
                    if j + K_PREFETCH <= jmax {
                        prefetch(layer.k_row(j + K_PREFETCH, kvh));
                    }
                    let kr = &mut s.kf[(j - jb) * hdp..(j - jb + 1) * hdp];
                    fucina_quant::half::widen_f16_into(layer.k_row(j, kvh), &mut kr[..hd]);
                    kr[hd..].fill(0.0);
                }
                for (r, row) in rows.iter().enumerate() {
                    let st = s.starts[r];
                    let (lo, hi) = (jb.max(st), je.min(row.pos + 1));
                    if lo >= hi {
                        continue;
                    }
                    let sh = DotsShape {
                        x_stride: hdp,
                        ny: hi - lo,
                        y_stride: hdp,
                        len: hdp,
                        first_mask: u16::MAX,
                        last_mask: u16::MAX,
                        out_stride: ns,
                    };
                    let dots = if p.decode_order { dots_vec_n } else { dots_n };
                    dots(
                        g,
                        &s.qf[r * g * hdp..],
                        &s.kf[(lo - jb) * hdp..],
                        &sh,
                        &mut s.scores[r * g * ns + lo - st..],
                    );
                }
            }
        }
    } else {
        let rb = dot.act.row_bytes(hd);
        s.qa.clear();
        for r in 0..nr {
            for h in 0..g {
                dot.act.quantize_row(q_of(r, h), &mut s.qa)?;
            }
        }
        for j in jmin..=jmax {
            let kr = layer.k_row(j, kvh);
            for (r, row) in rows.iter().enumerate() {
                let st = s.starts[r];
                if j < st || j > row.pos {
                    continue;
                }
                for h in 0..g {
                    let qa = &s.qa[(r * g + h) * rb..(r * g + h + 1) * rb];
                    s.scores[(r * g + h) * ns + j - st] = dot.dot(kr, qa);
                }
            }
        }
    }

    // softmax(softcap(s) · scale) per (row, head), exactly as attend_head.
    for (r, row) in rows.iter().enumerate() {
        let st = s.starts[r];
        for h in 0..g {
            let sc = &mut s.scores[(r * g + h) * ns..][..row.pos + 1 - st];
            if let Some(c) = p.softcap {
                soft_cap(sc, c);
            }
            sc.iter_mut().for_each(|v| *v *= p.kq_scale);
            softmax_cells(sc, st, row_max(sc));
        }
    }

    match dtype {
        KvDtype::F16 => pv_f16(cache, il, kvh, rows, g, ns, hdv, p.decode_order, out, s),
        KvDtype::F32 => {
            for (r, row) in rows.iter().enumerate() {
                let st = s.starts[r];
                for h in 0..g {
                    s.pa.clear();
                    dot.act.quantize_row(
                        &s.scores[(r * g + h) * ns..][..row.pos + 1 - st],
                        &mut s.pa,
                    )?;
                    let o = &mut out[(r * g + h) * hdv..(r * g + h + 1) * hdv];
                    for (d, o) in o.iter_mut().enumerate() {
                        *o = dot.dot(layer.vt_span(kvh, d, st, row.pos + 1), &s.pa);
                    }
                }
            }
        }
        KvDtype::Q8_0 => {
            out[..nr * g * hdv].fill(0.0);
            s.vrow.resize(hdv, 0.0);
            let deq = cache.dequant();
            for j in jmin..=jmax {
                deq(layer.v_row(j, kvh), &mut s.vrow);
                for (r, row) in rows.iter().enumerate() {
                    let st = s.starts[r];
                    if j < st || j > row.pos {
                        continue;
                    }
                    for h in 0..g {
                        let w = s.scores[(r * g + h) * ns + j - st];
                        let o = &mut out[(r * g + h) * hdv..(r * g + h + 1) * hdv];
                        for (o, &v) in o.iter_mut().zip(&s.vrow) {
                            *o += w * v;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// `f32::max` over `v` from −∞, as attend_head's running maximum, but 16 lanes at a
/// time: the maximum of a set is exact and does not depend on the order it is
/// taken in (NaNs are skipped either way; a ±0 tie can only change the sign of a
/// zero maximum, which `x − max` and the softmax never see).
fn row_max(v: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    for c in v.chunks(16) {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l = l.max(x);
        }
    }
    lanes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b))
}

/// The f16 `p·v` of [`attend_group`]: per output dim, one dot per (row, head) over
/// the row's cells, with the probabilities rounded to f16.
///
/// Prompt order ([`f16dot`]): [`attend_head`] dots cells `c0..c1` (64-aligned) of
/// two zero-padded vectors that hold p and V only at the visible cells
/// `start..=pos`. A 16-cell chunk outside those cells adds `fma(0, 0, acc) = acc`
/// to every lane (accumulators start at +0 and, holding sums of products of f16
/// values, never become −0), so only the chunks from `start / 16` to `pos / 16` are
/// run here, the first and last with V masked to the visible cells exactly as the
/// zero padding does.
///
/// Decode order (`decode`, [`dots_vec_n`]): the accumulator of a cell depends on
/// its place in a 64-cell step, so each dot runs over the 64-aligned cells
/// `start / 64 · 64 .. (pos / 64 + 1) · 64`; probabilities are zero outside the
/// row's visible cells and V is zero outside `jmin..=jmax` (a cleared cache cell), so
/// those cells add `fma(0, v, acc) = acc`, as in llama.cpp's padded view.
#[allow(clippy::too_many_arguments)]
fn pv_f16(
    cache: &KvCache,
    il: usize,
    kvh: usize,
    rows: &[QueryRow],
    g: usize,
    ns: usize,
    hdv: usize,
    decode: bool,
    out: &mut [f32],
    s: &mut AttnScratch,
) {
    let a = if decode { 64 } else { 16 };
    let layer = cache.layer(il);
    let nr = rows.len();
    let jmin = s.starts.iter().copied().min().unwrap_or(0);
    let jmax = rows.iter().map(|r| r.pos).max().unwrap_or(0);
    let cb = jmin / a * a;
    let np = (jmax + 1).next_multiple_of(a) - cb;
    // Probabilities of (r, h) at cell c: qf[(r·g + h)·np + c − cb], zero outside
    // the row's visible cells.
    s.qf.clear();
    s.qf.resize(nr * g * np, 0.0);
    for (r, row) in rows.iter().enumerate() {
        let st = s.starts[r];
        for h in 0..g {
            let src = &s.scores[(r * g + h) * ns..][..row.pos + 1 - st];
            let dst = &mut s.qf[(r * g + h) * np + st - cb..][..src.len()];
            dst.copy_from_slice(src);
            round_f16_in_place(dst);
        }
    }
    // V^T spans of DIM_BLOCK dims over cells cb..cb + np; in prompt order cells
    // outside jmin..=jmax are never read unmasked, in decode order they are zero.
    if decode {
        // Decode order: V^T read straight from the cache, converted in registers,
        // only the cells `jmin..=jmax` counted (bitwise the widened path below).
        let geom = layer.geometry();
        let cap = cache.capacity();
        let mut done = true;
        for (r, row) in rows.iter().enumerate() {
            let (st, pos) = (s.starts[r], row.pos);
            let (fc, lc) = (st / a * a, pos / a * a);
            let len = lc + a - fc;
            // The dot's cells are fc..fc + len; V exists from jmin to jmax.
            let v0 = jmin.max(fc);
            let v1 = (jmax + 1).min(fc + len);
            let sh = F16Shape {
                x_stride: np,
                ny: hdv,
                y_stride: cap,
                len,
                valid: v0 - fc..v1 - fc,
                out_stride: hdv,
            };
            let vs = layer.vt_dims(kvh, 0, geom.head_dim_v, fc, v1);
            let x = &s.qf[r * g * np + fc - cb..];
            if !dots_vec_f16(g, x, vs, &sh, &mut out[r * g * hdv..]) {
                done = false;
                break;
            }
        }
        if done {
            return;
        }
        s.kf.clear();
    }
    s.kf.resize(DIM_BLOCK * np, 0.0);
    for d0 in (0..hdv).step_by(DIM_BLOCK) {
        let nd = DIM_BLOCK.min(hdv - d0);
        for dd in 0..nd {
            let span = layer.vt_span(kvh, d0 + dd, jmin, jmax + 1);
            fucina_quant::half::widen_f16_into(span, &mut s.kf[dd * np + jmin - cb..]);
        }
        for (r, row) in rows.iter().enumerate() {
            let (st, pos) = (s.starts[r], row.pos);
            let (fc, lc) = (st / a * a, pos / a * a);
            let (first_mask, last_mask) = if decode {
                (u16::MAX, u16::MAX)
            } else {
                (u16::MAX << (st - fc), u16::MAX >> (15 - (pos - lc)))
            };
            let sh = DotsShape {
                x_stride: np,
                ny: nd,
                y_stride: np,
                len: lc + a - fc,
                first_mask,
                last_mask,
                out_stride: hdv,
            };
            let dots = if decode { dots_vec_n } else { dots_n };
            dots(
                g,
                &s.qf[r * g * np + fc - cb..],
                &s.kf[fc - cb..],
                &sh,
                &mut out[r * g * hdv + d0..],
            );
        }
    }
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
                    decode_order: false,
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
            decode_order: false,
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

    /// `attend_group` over any row set and head sub-range equals `attend_head` per
    /// (row, head), bit for bit, for every cache dtype, with GQA, sliding windows,
    /// soft caps and head dims that are not whole 16-lane chunks.
    #[test]
    fn group_equals_per_head_bitwise() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let (n_kv, group, cap, n) = (2usize, 3usize, 200usize, 150usize);
        for (dtype, hd) in [
            (KvDtype::F16, 64usize),
            (KvDtype::F16, 40),
            (KvDtype::Q8_0, 64),
            (KvDtype::F32, 40),
        ] {
            let geom = [KvGeometry {
                n_head_kv: n_kv,
                head_dim_k: hd,
                head_dim_v: hd,
            }];
            let mut c = KvCache::new(&geom, cap, dtype).unwrap();
            for pos in 0..n {
                let k: Vec<f32> = (0..n_kv * hd).map(|_| rnd() * 3.0).collect();
                let v: Vec<f32> = (0..n_kv * hd).map(|_| rnd()).collect();
                c.write(0, pos, &k, &v).unwrap();
            }
            c.advance(n).unwrap();
            let qd = n_kv * group * hd;
            let nq = 12;
            let q: Vec<f32> = (0..nq * qd).map(|_| rnd() * 2.0).collect();
            let row_sets: [Vec<usize>; 4] = [
                vec![0],
                vec![149],
                (100..112).collect(),
                vec![3, 17, 40, 63, 64, 65, 80, 97, 120, 130, 140, 149],
            ];
            for (window, softcap, decode_order) in [
                (None, None, false),
                (Some(20), None, false),
                (Some(7), Some(0.8), false),
                (None, None, true),
                (Some(20), Some(0.8), true),
            ] {
                let p = AttnParams {
                    group,
                    head_dim_k: hd,
                    head_dim_v: hd,
                    window,
                    kq_scale: 0.3,
                    softcap,
                    decode_order,
                };
                for set in &row_sets {
                    let qrows: Vec<QueryRow> = set
                        .iter()
                        .enumerate()
                        .map(|(i, &pos)| QueryRow { q_row: i, pos })
                        .collect();
                    for kvh in 0..n_kv {
                        for (h0, h1) in [(0, group), (1, 3), (0, 1)] {
                            let heads = kvh * group + h0..kvh * group + h1;
                            let g = h1 - h0;
                            let mut out = vec![f32::NAN; qrows.len() * g * hd];
                            let mut s = AttnScratch::default();
                            attend_group(
                                &c,
                                0,
                                kvh,
                                heads.clone(),
                                &q,
                                qd,
                                &qrows,
                                &p,
                                &mut out,
                                &mut s,
                            )
                            .unwrap();
                            for (r, qr) in qrows.iter().enumerate() {
                                for (k, h) in heads.clone().enumerate() {
                                    let qh = &q[qr.q_row * qd + h * hd..][..hd];
                                    let mut want = vec![0f32; hd];
                                    attend_head(&c, 0, h, qh, qr.pos, &p, &mut want, &mut s)
                                        .unwrap();
                                    let got = &out[(r * g + k) * hd..][..hd];
                                    let same = got
                                        .iter()
                                        .zip(&want)
                                        .all(|(a, b)| a.to_bits() == b.to_bits());
                                    assert!(
                                        same,
                                        "{dtype:?} hd {hd} {window:?} {softcap:?} pos {} head {h}",
                                        qr.pos
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn window_bounds() {
        assert_eq!(window_start(0, Some(512)), 0);
        assert_eq!(window_start(511, Some(512)), 0);
        assert_eq!(window_start(512, Some(512)), 1);
        assert_eq!(window_start(700, None), 0);
    }
}
