//! The output head's greedy decision without every logit.
//!
//! A greedy row needs only the index of its largest logit (and a speculative decoder
//! feeding its guesses, the ids of the few largest). Where the head has a whole-block
//! kernel ([`Packed::approx_dots`]: Q8_0 on AVX-512 VNNI, a third of the single-row
//! kernel's work per weight), [`top_rows`] computes every output approximately with a
//! proven bound on its distance from the single-row order's value, keeps the rows whose
//! upper bound reaches the `k`-th best lower bound, and computes only those in the
//! single-row order: the picks are those of the logits a pinned forward computes,
//! bitwise (the greedy pick: first largest, NaN ignored, as fucina-sample's; the top
//! `k`: best first, ties to the lower id, as [`top_k`]). A speculative verify of 17 rows
//! on Gemma 3's 262k-row head is where this pays (the head is compute-bound there).

use std::sync::Mutex;

use fucina_quant::{approx_slack, q8_0_magnitude, Packed};

use crate::matmul::{convert, matmul, packed_single_order, MatmulScratch};
use crate::parallel::ThreadPool;
use crate::weights::Linear;
use crate::Result;

/// Weight rows per approximate kernel call (a multiple of 16): the kernel prepares the
/// activation blocks once per call, and the values of one call (`W_CALL × rows` floats)
/// stay in L2 for the scan that follows.
const W_CALL: usize = 1024;
/// Absolute slack beside the relative bound (results near the subnormal range).
const TINY: f32 = 1e-30;

/// The first index of the largest value of `row`, NaN ignored; `None` when nothing
/// exceeds −∞ (the greedy sampler's pick, `fucina_sample::row::argmax`).
pub fn first_argmax(row: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &v) in row.iter().enumerate() {
        if v > f32::NEG_INFINITY && best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i as u32)
}

/// Ids of the `k` largest values of `row` into `out`, best first, ties to the lower id,
/// NaN skipped.
pub fn top_k(row: &[f32], k: usize, out: &mut Vec<u32>) {
    out.clear();
    if k == 0 {
        return;
    }
    let mut best: Vec<(f32, u32)> = Vec::with_capacity(k + 1);
    let mut floor = f32::NEG_INFINITY;
    for (i, &x) in row.iter().enumerate() {
        if (best.len() == k && x <= floor) || x.is_nan() {
            continue;
        }
        let at = best.iter().position(|&(v, _)| x > v).unwrap_or(best.len());
        best.insert(at, (x, i as u32));
        best.truncate(k);
        if best.len() == k {
            floor = best[k - 1].0;
        }
    }
    out.extend(best.iter().map(|&(_, i)| i));
}

/// What [`top_rows`] gives for each activation row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Picks {
    /// Per row, its greedy pick ([`first_argmax`] of its logits).
    pub pick: Vec<Option<u32>>,
    /// Per row, its `k` largest ids ([`top_k`] of its logits: fewer where fewer are
    /// not NaN); empty with `k` = 0.
    pub top: Vec<Vec<u32>>,
    /// Per row, the logits of `top`'s ids (the pinned forward's values, bitwise).
    pub vals: Vec<Vec<f32>>,
    /// Per row, its whole logits row where [`top_rows`] was asked for `distinct` top
    /// values and the row's were not (a tie among them, or a non-finite logit): a
    /// decision that needs them distinct reads the row instead. `None` elsewhere (and
    /// every row without `distinct`).
    pub full: Vec<Option<Vec<f32>>>,
}

impl Picks {
    /// Append `other`'s rows after these.
    pub fn extend_from(&mut self, other: &Picks) {
        self.pick.extend_from_slice(&other.pick);
        self.top.extend(other.top.iter().cloned());
        self.vals.extend(other.vals.iter().cloned());
        self.full.extend(other.full.iter().cloned());
    }
}

/// Running candidates of one activation row within one chunk of weight rows.
#[derive(Clone)]
struct Cands {
    /// A lower bound on the `k`-th largest value (the `k`-th best lower bound seen).
    thr: f32,
    /// (weight row, lower bound, upper bound) of every row whose upper bound reached
    /// `thr` when seen, ascending.
    list: Vec<(u32, f32, f32)>,
    /// A non-finite value or bound: decide this row from its full logits.
    bad: bool,
}

/// The `k`-th largest lower bound of `list` (−∞ with fewer than `k`).
fn kth_lower(list: &[(u32, f32, f32)], k: usize, tmp: &mut Vec<f32>) -> f32 {
    if list.len() < k {
        return f32::NEG_INFINITY;
    }
    tmp.clear();
    tmp.extend(list.iter().map(|e| e.1));
    let (_, kth, _) = tmp.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    *kth
}

/// For each of the `m` rows of `x` (`m × w.cols()`), the greedy pick
/// ([`first_argmax`]) of `x · wᵀ` as [`matmul`] computes it in pinned mode, into
/// `out`: [`top_rows`] with no top ids. Returns false (nothing done) where `w` has no
/// whole-block kernel.
pub fn argmax_rows(
    pool: &ThreadPool,
    w: &Linear,
    x: &[f32],
    m: usize,
    scratch: &mut MatmulScratch,
    out: &mut Vec<Option<u32>>,
) -> Result<bool> {
    let mut picks = Picks::default();
    let done = top_rows(pool, w, x, m, 0, 0, scratch, &mut picks)?;
    *out = picks.pick;
    Ok(done)
}

/// For each of the `m` rows of `x` (`m × w.cols()`), the greedy pick and the `k`
/// largest ids ([`first_argmax`], [`top_k`]) of `x · wᵀ` as [`matmul`] computes it in
/// pinned mode, with their values, into `out`. With `distinct` > 0, a row whose first
/// `distinct` top values are not strictly decreasing (or that has a non-finite logit)
/// also gets its whole logits row ([`Picks::full`]). Returns false (nothing done) where
/// `w` has no whole-block kernel. `scratch`'s activation buffer is reused.
#[allow(clippy::too_many_arguments)]
pub fn top_rows(
    pool: &ThreadPool,
    w: &Linear,
    x: &[f32],
    m: usize,
    k: usize,
    distinct: usize,
    scratch: &mut MatmulScratch,
    out: &mut Picks,
) -> Result<bool> {
    let Some(p) = w.packed().filter(|p| p.has_approx()) else {
        return Ok(false);
    };
    out.pick.clear();
    out.top.clear();
    out.vals.clear();
    out.full.clear();
    if m == 0 {
        return Ok(true);
    }
    let (rows, cols) = (w.rows(), w.cols());
    convert(w.dot(), cols, x, m, scratch.act_mut())?;
    let act = std::mem::take(scratch.act_mut());
    let act_row = w.dot().act.row_bytes(cols);
    let mags: Vec<f32> = (0..m)
        .map(|t| q8_0_magnitude(&act[t * act_row..(t + 1) * act_row]))
        .collect();
    let slack = approx_slack(cols / 32);
    let found = candidates(pool, p, &act, act_row, m, k.max(1), &mags, slack);
    // The candidates in the single-row order, each 8-row group once, best first.
    let order = packed_single_order(w);
    let mut full = Vec::new();
    let mut group = [0f32; 8];
    for (t, c) in found.into_iter().enumerate() {
        let a = &act[t * act_row..(t + 1) * act_row];
        let ranked = c.and_then(|list| {
            let mut vals: Vec<(f32, u32)> = Vec::with_capacity(list.len());
            let mut at = usize::MAX;
            for r in list {
                let g = r as usize / 8;
                if g != at {
                    p.dots(order, 8 * g..8 * g + 8, a, act_row, &mut group);
                    at = g;
                }
                let v = group[r as usize % 8];
                if !v.is_finite() {
                    return None;
                }
                vals.push((v, r));
            }
            vals.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            (vals.len() >= k.max(1)).then_some(vals)
        });
        // A tie among the values that must be distinct: the whole row decides.
        let ranked = ranked.filter(|vals| {
            vals.iter()
                .take(distinct)
                .zip(vals.iter().skip(1).take(distinct.saturating_sub(1)))
                .all(|(a, b)| a.0 > b.0)
        });
        out.full.push(None);
        match ranked {
            Some(vals) => {
                out.pick.push(Some(vals[0].1));
                if k > 0 {
                    out.top.push(vals.iter().take(k).map(|&(_, r)| r).collect());
                    out.vals
                        .push(vals.iter().take(k).map(|&(v, _)| v).collect());
                }
            }
            None => {
                out.pick.push(None);
                if k > 0 {
                    out.top.push(Vec::new());
                    out.vals.push(Vec::new());
                }
                full.push(t);
            }
        }
    }
    *scratch.act_mut() = act;
    // Rows with a non-finite value somewhere: their full logits, as the sampler sees them.
    let mut logits = vec![0f32; if full.is_empty() { 0 } else { rows }];
    let mut ids = Vec::new();
    for t in full {
        matmul(
            pool,
            w,
            &x[t * cols..(t + 1) * cols],
            1,
            &mut logits,
            scratch,
        )?;
        out.pick[t] = first_argmax(&logits);
        if k > 0 {
            top_k(&logits, k, &mut ids);
            out.vals[t] = ids.iter().map(|&i| logits[i as usize]).collect();
            out.top[t].clone_from(&ids);
        }
        if distinct > 0 {
            out.full[t] = Some(logits.clone());
        }
    }
    Ok(true)
}

/// Fold one kernel call's values `v` (weight rows `w0..`, largest block scales `d`)
/// of one activation row into its candidates, `scale` = the bound per unit of `d`,
/// `k` the number of largest values wanted: a pass for the best lower bound (lanes of
/// 16, vectorised; the threshold itself where `k` is 1), then one that keeps the rows
/// whose upper bound reaches the threshold (few), which is raised to the `k`-th best
/// lower bound kept whenever the list grows long.
fn scan(c: &mut Cands, w0: usize, v: &[f32], d: &[f32], scale: f32, k: usize, tmp: &mut Vec<f32>) {
    const L: usize = 16;
    let mut lo = [f32::NEG_INFINITY; L];
    let mut sum = [0f32; L];
    let (vc, dc) = (v.chunks_exact(L), d.chunks_exact(L));
    let (vr, dr) = (vc.remainder(), dc.remainder());
    for (v, d) in vc.zip(dc) {
        for j in 0..L {
            let l = v[j] - (scale * d[j] + TINY);
            lo[j] = if l > lo[j] { l } else { lo[j] };
            sum[j] += v[j].abs() + d[j];
        }
    }
    for (j, (&v, &d)) in vr.iter().zip(dr).enumerate() {
        let l = v - (scale * d + TINY);
        lo[j] = if l > lo[j] { l } else { lo[j] };
        sum[j] += v.abs() + d;
    }
    // A NaN or infinite value or scale (or a sum past f32's range: logits that large
    // are decided from the full row all the same).
    if !(scale.is_finite() && sum.iter().sum::<f32>().is_finite()) {
        c.bad = true;
        return;
    }
    // The lanes' best lower bounds belong to distinct rows: the `k`-th largest of them
    // is at most the `k`-th best lower bound over all rows, so it may serve as the
    // threshold (for `k` = 1, the best lower bound itself).
    if k <= L {
        let mut best = lo;
        best.sort_unstable_by(|a, b| b.total_cmp(a));
        let kth = best[k - 1];
        if kth > c.thr {
            c.thr = kth;
            if c.list.len() >= 32 {
                c.list.retain(|e| e.2 >= kth);
            }
        }
    }
    // Lanes of 16 whose upper bounds all fall short of the threshold (nearly all of
    // them) are skipped by one vectorised test; the others are walked one by one.
    for (i0, (vl, dl)) in v.chunks(L).zip(d.chunks(L)).enumerate() {
        let thr = c.thr;
        let reaches =
            if let (Ok(vl), Ok(dl)) = (<&[f32; L]>::try_from(vl), <&[f32; L]>::try_from(dl)) {
                let mut any = false;
                for j in 0..L {
                    any |= vl[j] + (scale * dl[j] + TINY) >= thr;
                }
                any
            } else {
                true
            };
        if !reaches {
            continue;
        }
        for (i, (&v, &d)) in vl.iter().zip(dl).enumerate() {
            let e = scale * d + TINY;
            let hi = v + e;
            if hi >= c.thr {
                c.list.push(((w0 + L * i0 + i) as u32, v - e, hi));
                if k > 1 && c.list.len() >= 4 * k + 256 {
                    c.thr = kth_lower(&c.list, k, tmp);
                    let thr = c.thr;
                    c.list.retain(|e| e.2 >= thr);
                }
            }
        }
    }
}

/// Per activation row, the weight rows (ascending) whose approximate value's upper
/// bound reaches the `k`-th best lower bound over all rows; `None` where a value or a
/// bound is not finite.
#[allow(clippy::too_many_arguments)]
fn candidates(
    pool: &ThreadPool,
    p: &Packed,
    act: &[u8],
    act_row: usize,
    m: usize,
    k: usize,
    mags: &[f32],
    slack: f32,
) -> Vec<Option<Vec<u32>>> {
    let rows = p.rows();
    let n_chunks = (rows / 256).clamp(1, pool.n_threads() * 8);
    let chunk = rows.div_ceil(n_chunks).next_multiple_of(16);
    let n_chunks = rows.div_ceil(chunk);
    let results: Vec<Mutex<Vec<Cands>>> = (0..n_chunks).map(|_| Mutex::new(Vec::new())).collect();
    pool.run(n_chunks, &|c| {
        let (o0, o1) = (c * chunk, ((c + 1) * chunk).min(rows));
        let mut cands = vec![
            Cands {
                thr: f32::NEG_INFINITY,
                list: Vec::new(),
                bad: false,
            };
            m
        ];
        let mut vals = vec![0f32; W_CALL * Packed::APPROX_ROWS.min(m)];
        let mut dmax = vec![0f32; W_CALL];
        let mut tmp = Vec::new();
        for t0 in (0..m).step_by(Packed::APPROX_ROWS) {
            let t1 = (t0 + Packed::APPROX_ROWS).min(m);
            let acts = &act[t0 * act_row..t1 * act_row];
            for w0 in (o0..o1).step_by(W_CALL) {
                let nw = (o1 - w0).min(W_CALL);
                let vals = &mut vals[..(t1 - t0) * nw];
                p.approx_dots(w0..w0 + nw, acts, act_row, vals, &mut dmax[..nw]);
                for (t, v) in (t0..t1).zip(vals.chunks_exact(nw)) {
                    scan(
                        &mut cands[t],
                        w0,
                        v,
                        &dmax[..nw],
                        slack * mags[t],
                        k,
                        &mut tmp,
                    );
                }
            }
        }
        *results[c].lock().expect("chunk results") = cands;
    });
    let chunks: Vec<Vec<Cands>> = results
        .into_iter()
        .map(|r| r.into_inner().expect("chunk results"))
        .collect();
    let mut tmp = Vec::new();
    (0..m)
        .map(|t| {
            if chunks.iter().any(|c| c[t].bad) {
                return None;
            }
            // Chunks are in row order and each list ascends: the union ascends.
            let all: Vec<(u32, f32, f32)> = chunks
                .iter()
                .flat_map(|c| c[t].list.iter().copied())
                .collect();
            let thr = kth_lower(&all, k, &mut tmp);
            let list: Vec<u32> = all.iter().filter(|e| e.2 >= thr).map(|e| e.0).collect();
            (!list.is_empty()).then_some(list)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fucina_gguf::{GgmlType, GgufFile, GgufWriter};

    use super::*;

    /// A `rows × cols` matrix of `ty` (`bytes`) written to a temporary GGUF (its path
    /// returned for removal), bound and repacked.
    fn packed_matrix(
        tag: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: Vec<u8>,
    ) -> (Linear, std::path::PathBuf) {
        let mut w = GgufWriter::new();
        w.add_tensor("w", ty, &[cols as u64, rows as u64], bytes)
            .unwrap();
        let path =
            std::env::temp_dir().join(format!("fucina-greedy-{tag}-{}.gguf", std::process::id()));
        w.write_file(&path).unwrap();
        let file = Arc::new(GgufFile::open(&path).unwrap());
        let lin = Linear::bind(&file, "w", rows, cols).unwrap();
        lin.repack().unwrap();
        (lin, path)
    }

    /// A Q8_0 matrix of `rows × cols` from a xorshift stream, with planted ties: row
    /// 1000 is row 5 again (exact ties, the lower must win), rows 7 and 9 are row 5
    /// with one quant one step nearer zero and with its first scale one f16 step
    /// smaller (near-ties far inside the approximations' bound).
    fn matrix(rows: usize, cols: usize) -> Vec<u8> {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let rb = cols / 32 * 34;
        let mut m = vec![0u8; rows * rb];
        for blk in m.chunks_exact_mut(34) {
            // f16 0x1800..0x1fff: about 0.002 .. 0.008.
            let d = 0x1800u16 + (next() % 0x800) as u16;
            blk[..2].copy_from_slice(&d.to_le_bytes());
            for q in &mut blk[2..] {
                *q = (next() % 255) as u8 ^ 0x80;
            }
        }
        let five = m[5 * rb..6 * rb].to_vec();
        m[1000 * rb..1001 * rb].copy_from_slice(&five);
        m[7 * rb..8 * rb].copy_from_slice(&five);
        // Both near-ties lose to row 5 against row 5's own values: one quant moved
        // towards zero, one scale one step smaller.
        let q = m[7 * rb + 2..7 * rb + 34]
            .iter_mut()
            .find(|q| **q != 0)
            .expect("a nonzero quant");
        *q = ((*q as i8) - (*q as i8).signum()) as u8;
        m[9 * rb..10 * rb].copy_from_slice(&five);
        let d = u16::from_le_bytes([five[0], five[1]]) - 1;
        m[9 * rb..9 * rb + 2].copy_from_slice(&d.to_le_bytes());
        m
    }

    /// A Q4_0 head that llama.cpp repacks (rows % 8 == 0), widened and packed: its exact
    /// order is the whole-block one, the very kernel of the approximate pass, so the
    /// candidates are checked in that order and the picks (argmax and top 3 with their
    /// values) are those of the pinned matmul's logits, bitwise.
    #[test]
    fn q4_0_picks_follow_the_whole_block_order() {
        let (rows, cols) = (2048usize, 640usize);
        let mut seed = 777u32;
        let mut rand = move || {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let weights: Vec<f32> = (0..rows * cols).map(|_| rand()).collect();
        let mut q = Vec::new();
        fucina_quant::quantize(GgmlType::Q4_0, &weights, &mut q).unwrap();
        let (lin, path) = packed_matrix("q4", GgmlType::Q4_0, rows, cols, q);
        let pool = ThreadPool::new(2).unwrap();
        let mut sc = MatmulScratch::default();
        sc.set_pinned(true);
        let mut picks = Vec::new();
        if !argmax_rows(&pool, &lin, &vec![0f32; cols], 1, &mut sc, &mut picks).unwrap() {
            eprintln!("skipped: no whole-block kernel here (packed Q4_0 on AVX-512 VNNI)");
            let _ = std::fs::remove_file(&path);
            return;
        }
        assert_eq!(
            packed_single_order(&lin),
            fucina_quant::PackedOrder::WholeBlock
        );
        for m in [1usize, 5, 33] {
            let x: Vec<f32> = (0..m * cols).map(|_| rand() * 4.0).collect();
            assert!(argmax_rows(&pool, &lin, &x, m, &mut sc, &mut picks).unwrap());
            let mut tops = Picks::default();
            assert!(top_rows(&pool, &lin, &x, m, 3, 0, &mut sc, &mut tops).unwrap());
            let mut y = vec![0f32; m * rows];
            matmul(&pool, &lin, &x, m, &mut y, &mut sc).unwrap();
            let mut ids = Vec::new();
            for t in 0..m {
                let row = &y[t * rows..(t + 1) * rows];
                assert_eq!(picks[t], first_argmax(row), "{m} rows, row {t}");
                top_k(row, 3, &mut ids);
                assert_eq!(tops.top[t], ids, "{m} rows, row {t}");
                let vals: Vec<u32> = ids.iter().map(|&i| row[i as usize].to_bits()).collect();
                let got: Vec<u32> = tops.vals[t].iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, vals, "{m} rows, row {t}");
            }
        }
        let _ = std::fs::remove_file(&path);
    }

    /// The greedy picks equal the first argmax of the pinned matmul's logits, and the top
    /// ids its top 1, 3 or 8 (the planted ties decide ranks too), row for row, for activations that make the planted ties win (the dequantized row 5,
    /// scaled), random ones, all zeros (every output ties: the first row wins), and
    /// non-finite ones (decided from the full logits), in batches of 1 to 40 rows (past
    /// one kernel call's 32).
    #[test]
    fn greedy_picks_are_the_pinned_logits_argmax() {
        let (rows, cols) = (4096usize, 640usize);
        let (lin, path) = packed_matrix("q8", GgmlType::Q8_0, rows, cols, matrix(rows, cols));
        let pool = ThreadPool::new(2).unwrap();
        let mut sc = MatmulScratch::default();
        sc.set_pinned(true);
        let mut picks = Vec::new();
        if !argmax_rows(&pool, &lin, &vec![0f32; cols], 1, &mut sc, &mut picks).unwrap() {
            eprintln!("skipped: no whole-block kernel here (packed Q8_0 on AVX-512 VNNI)");
            let _ = std::fs::remove_file(&path);
            return;
        }
        let mut five = vec![0f32; cols];
        lin.dequantize_row(5, &mut five).unwrap();
        let mut seed = 12345u32;
        let mut rand = move || {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let mut xs: Vec<Vec<f32>> = Vec::new();
        for scale in [1.0f32, 0.01, 300.0] {
            xs.push(five.iter().map(|v| v * scale).collect());
        }
        xs.push(vec![0.0; cols]);
        for k in 0..30 {
            xs.push((0..cols).map(|_| rand() * (1 + k % 7) as f32).collect());
        }
        let mut nan = five.clone();
        nan[17] = f32::NAN;
        xs.push(nan);
        let mut inf = five.clone();
        inf[3] = f32::INFINITY;
        xs.push(inf);
        let mut ties = 0;
        let mut distinct_full = 0;
        for m in [1usize, 3, 17, 40] {
            for start in (0..xs.len()).step_by(m.max(7)) {
                let batch: Vec<&Vec<f32>> = xs.iter().cycle().skip(start).take(m).collect();
                let x: Vec<f32> = batch.iter().flat_map(|v| v.iter().copied()).collect();
                assert!(argmax_rows(&pool, &lin, &x, m, &mut sc, &mut picks).unwrap());
                let k = [1, 3, 8][start % 3];
                // Distinct top values asked for (a top-k sampler's k + 1) on every other batch.
                let distinct = if (start / 3) % 2 == 1 { k } else { 0 };
                let mut tops = Picks::default();
                assert!(top_rows(&pool, &lin, &x, m, k, distinct, &mut sc, &mut tops).unwrap());
                let mut y = vec![0f32; m * rows];
                matmul(&pool, &lin, &x, m, &mut y, &mut sc).unwrap();
                let mut ids = Vec::new();
                for t in 0..m {
                    let row = &y[t * rows..(t + 1) * rows];
                    let want = first_argmax(row);
                    assert_eq!(picks[t], want, "batch of {m} from {start}, row {t}");
                    assert_eq!(tops.pick[t], want, "batch of {m} from {start}, row {t}");
                    top_k(row, k, &mut ids);
                    assert_eq!(tops.top[t], ids, "top {k}, row {t}");
                    let vals: Vec<u32> = ids.iter().map(|&i| row[i as usize].to_bits()).collect();
                    let got: Vec<u32> = tops.vals[t].iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, vals, "top {k} values, row {t}");
                    // The whole row where the first `distinct` values tie or any is not
                    // finite, and only there.
                    let tied = ids
                        .iter()
                        .take(distinct)
                        .zip(ids.iter().skip(1).take(distinct.saturating_sub(1)))
                        .any(|(&a, &b)| row[a as usize] <= row[b as usize]);
                    let bad = row.iter().any(|v| !v.is_finite());
                    match &tops.full[t] {
                        Some(full) => {
                            assert!(distinct > 0 && (tied || bad || ids.len() < k), "row {t}");
                            assert!(full
                                .iter()
                                .zip(row)
                                .all(|(a, b)| a.to_bits() == b.to_bits()));
                            distinct_full += 1;
                        }
                        None => assert!(distinct == 0 || !(tied || bad), "row {t}: tied {tied}"),
                    }
                    if want == Some(5) && row[1000] == row[5] {
                        ties += 1;
                    }
                }
            }
        }
        // The planted exact ties did decide some picks, and some rows were given whole.
        assert!(ties > 0 && distinct_full > 0, "{ties} {distinct_full}");
        let _ = std::fs::remove_file(&path);
    }
}
