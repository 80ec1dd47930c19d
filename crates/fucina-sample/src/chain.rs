//! The filter chain after penalties: top-k → typical → top-p → min-p →
//! temperature → the draw's softmax, each replaying the llama.cpp sampler of
//! the same name (llama-cpp-python 0.3.36's vendored `llama-sampler.cpp`)
//! operation for operation, including its f32 arithmetic and sort orders.
//!
//! The working set mirrors llama.cpp's `llama_token_data_array`: a candidate
//! array plus a `sorted` flag. Until a stage shrinks it, the set is the logits
//! row itself (`materialized == false`): the first active stage reads the row
//! directly, so a 262,144-token vocabulary is never copied into candidates
//! when top-k, top-p or min-p keeps a few of them.

use crate::bucket::{self, Buckets, Src};
use crate::row::{self, RowStats};
use crate::stdsort;
use crate::{Candidate, SampleError, SamplingParams};

/// llama-cpp-python passes `min_keep = max(1, n_probs)` with `n_probs = 0`.
const MIN_KEEP: usize = 1;
/// Up to this many candidates llama.cpp partial-sorts with `std::partial_sort`
/// on the whole array; above, with its bucket sort.
const HEAP_SORT_MAX: usize = 128;
/// top-p sorts in place up to this size; above, it tries a 256-token window first.
const TOP_P_INPLACE_MAX: usize = 1024;
/// top-p's first window (llama.cpp's "adaptive top-k").
const TOP_P_WINDOW: usize = 256;

/// Reusable buffers and state of one chain run.
#[derive(Default)]
pub struct Chain {
    /// The working set when `materialized`.
    pub toks: Vec<Candidate>,
    materialized: bool,
    sorted: bool,
    buckets: Buckets,
    scratch: Vec<Candidate>,
    full: Vec<Candidate>,
    idx: Vec<usize>,
    shifted: Vec<f32>,
    /// The top-p denominator replay's final skip bound.
    hit_bound: f32,
    /// The dist sampler's unnormalised `expf(l - max)` per candidate, in llama.cpp's
    /// array order (`draw_order`), and their f64 sum: what its draw accumulates.
    weights: Vec<f32>,
    weight_sum: f64,
    /// The candidates' ids in llama.cpp's array order when the chain left it unsorted
    /// (the vocabulary's order); empty when that order is the sorted one.
    draw_order: Vec<u32>,
}

/// Which buffer holds top-p's result after the window search.
enum Kept {
    Window,
    Full,
}

impl Chain {
    /// Run the chain on a sanitized row; leaves the kept candidates, with the
    /// draw's probabilities, in `self.toks`, sorted by logit descending.
    pub fn run(
        &mut self,
        row: &[f32],
        stats: &RowStats,
        p: &SamplingParams,
    ) -> Result<(), SampleError> {
        self.materialized = false;
        self.sorted = false;
        self.top_k(row, p.top_k);
        self.typical(row, p.typical_p);
        self.top_p(row, stats, p.top_p);
        self.min_p(row, stats, p.min_p);
        self.materialize(row);
        self.temperature(p.temperature);
        self.dist_probs()?;
        self.order();
        Ok(())
    }

    /// [`Chain::run`] on a row whose top-k stage is known to keep exactly `top`: the
    /// row's `k` largest logits (`k` = the parameters' top-k, `top.len()`), strictly
    /// decreasing and finite, with the row's next logit strictly below the last. Such a
    /// set and its order are the same however llama.cpp's sort meets the rest of the row,
    /// and every later stage reads only that set, so the result is [`Chain::run`]'s.
    pub fn run_top(&mut self, top: &[(u32, f32)], p: &SamplingParams) -> Result<(), SampleError> {
        self.toks.clear();
        self.toks.extend(
            top.iter()
                .map(|&(id, logit)| Candidate { id, logit, p: 0.0 }),
        );
        self.materialized = true;
        self.sorted = true;
        // The stages below read the working set only, never the row (it is materialized).
        let (row, stats) = (
            &[][..],
            RowStats {
                max: f32::NEG_INFINITY,
            },
        );
        self.typical(row, p.typical_p);
        self.top_p(row, &stats, p.top_p);
        self.min_p(row, &stats, p.min_p);
        self.temperature(p.temperature);
        self.dist_probs()?;
        self.order();
        Ok(())
    }

    /// The candidate llama.cpp's dist sampler selects for the uniform draw `u`, by id:
    /// its running f64 sum of the unnormalised `expf(l - max)`, in its array order,
    /// until it reaches `u` times their sum. Call after [`Chain::run`].
    pub fn draw(&self, u: f64) -> u32 {
        let order: &[u32] = &self.draw_order;
        let id_at = |i: usize| {
            if order.is_empty() {
                self.toks[i].id
            } else {
                order[i]
            }
        };
        let n = self.weights.len();
        if n == 0 {
            // One candidate, or the +inf case that llama.cpp has no answer for: by p.
            return self.toks[crate::sampler::pick(&self.toks, u)].id;
        }
        let target = self.weight_sum * u;
        let mut run = 0.0f64;
        for (i, &w) in self.weights.iter().enumerate() {
            run += f64::from(w);
            if run >= target {
                return id_at(i);
            }
        }
        id_at(n - 1)
    }

    /// llama.cpp's Mirostat samplers in place of the filter chain (llama-cpp-python's
    /// `mirostat_mode` 1 and 2, with `mu` the sampler's running state): the whole row
    /// sorted as `llama_sampler_softmax_impl` sorts it, its softmax, then
    /// * v1: the Zipf exponent `s_hat` fitted over the top 100 probabilities and the
    ///   top-k its `k = (ε·2^mu / (1 − n_vocab^−ε))^(1/s_hat)` keeps (ε = s_hat − 1);
    /// * v2: the candidates before the first whose surprise `−log2 p` exceeds `mu`;
    ///
    /// and the kept set's softmax again, all in llama.cpp's f32 arithmetic. Leaves the
    /// kept candidates with their probabilities in `self.toks`, sorted.
    pub fn mirostat(&mut self, row: &[f32], mode: u8, mu: f32) -> Result<(), SampleError> {
        self.materialized = false;
        self.sorted = false;
        self.partial_sort_inplace(row, row.len());
        self.softmax_sorted()?;
        let keep = if mode == 1 {
            let toks = &self.toks;
            let (mut sum_ti_bi, mut sum_ti_sq) = (0f32, 0f32);
            for i in 0..(MIROSTAT_M - 1).min(toks.len().saturating_sub(1)) {
                let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
                let b_i = (toks[i].p / toks[i + 1].p).ln();
                sum_ti_bi += t_i * b_i;
                sum_ti_sq += t_i * t_i;
            }
            let s_hat = sum_ti_bi / sum_ti_sq;
            let epsilon_hat = s_hat - 1.0;
            let n_vocab = row.len() as f32;
            let k = ((epsilon_hat * 2f32.powf(mu)) / (1.0 - n_vocab.powf(-epsilon_hat)))
                .powf(1.0 / s_hat);
            c_int(k).max(1) as usize
        } else {
            self.toks
                .iter()
                .position(|t| -t.p.log2() > mu)
                .unwrap_or(self.toks.len())
                .max(1)
        };
        self.toks.truncate(keep);
        self.softmax_sorted()
    }

    /// `llama_sampler_softmax_impl` on the sorted working set: f32 `expf(l − max)`
    /// summed in f32, each p divided by the sum.
    fn softmax_sorted(&mut self) -> Result<(), SampleError> {
        let toks = &mut self.toks;
        if toks.is_empty() {
            return Err(SampleError::AllTokensMasked);
        }
        // llama.cpp reads data[0] of its sorted array: the max whenever its bucket sort
        // was truthful (see `dist_probs`).
        let max_l = fold_max(toks);
        if !max_l.is_finite() {
            return Err(SampleError::AllTokensMasked);
        }
        let mut sum = 0f32;
        for t in toks.iter_mut() {
            t.p = (t.logit - max_l).exp();
            sum += t.p;
        }
        for t in toks.iter_mut() {
            t.p /= sum;
        }
        Ok(())
    }

    fn size(&self, row: &[f32]) -> usize {
        if self.materialized {
            self.toks.len()
        } else {
            row.len()
        }
    }

    fn materialize(&mut self, row: &[f32]) {
        if !self.materialized {
            self.toks.clear();
            self.toks
                .extend(row.iter().enumerate().map(|(i, &l)| Candidate {
                    id: i as u32,
                    logit: l,
                    p: 0.0,
                }));
            self.materialized = true;
        }
    }

    /// llama.cpp's `llama_token_data_array_partial_sort_inplace`: keep the top
    /// `npartial`, sorted.
    fn partial_sort_inplace(&mut self, row: &[f32], npartial: usize) {
        if npartial == 0 {
            self.toks.clear();
        } else if npartial <= HEAP_SORT_MAX {
            if self.materialized {
                stdsort::partial_sort(&mut self.toks, npartial, &mut bucket::by_logit);
                self.toks.truncate(npartial);
            } else {
                row::top_k_heap(row, npartial, &mut self.toks);
            }
        } else {
            self.buckets.reset();
            let src = if self.materialized {
                Src::Toks(&self.toks)
            } else {
                Src::Row(row)
            };
            let sorted = self.buckets.partial(src, npartial);
            self.scratch.clear();
            self.scratch.extend_from_slice(sorted);
            std::mem::swap(&mut self.toks, &mut self.scratch);
        }
        self.materialized = true;
        self.sorted = true;
    }

    fn top_k(&mut self, row: &[f32], k: i32) {
        if k <= 0 {
            return;
        }
        let k = (k as usize).min(self.size(row));
        if !self.sorted {
            self.partial_sort_inplace(row, k);
        }
        self.toks.truncate(k);
    }

    fn typical(&mut self, row: &[f32], p: f32) {
        if p >= 1.0 {
            return;
        }
        // softmax with do_sort = true
        if !self.sorted {
            let n = self.size(row);
            self.partial_sort_inplace(row, n);
        }
        let toks = &mut self.toks;
        let max_l = toks[0].logit;
        let mut cum = 0.0f32;
        for t in toks.iter_mut() {
            t.p = (t.logit - max_l).exp();
            cum += t.p;
        }
        for t in toks.iter_mut() {
            t.p /= cum;
        }
        let mut entropy = 0.0f32;
        for t in toks.iter() {
            entropy += -t.p * t.p.ln();
        }
        self.shifted.clear();
        self.shifted
            .extend(toks.iter().map(|t| (-t.p.ln() - entropy).abs()));
        self.idx.clear();
        self.idx.extend(0..toks.len());
        let shifted = &self.shifted;
        stdsort::sort(&mut self.idx, &mut |&a: &usize, &b: &usize| {
            shifted[a] < shifted[b]
        });
        let mut cum = 0.0f32;
        let mut last = self.idx.len();
        for (i, &ix) in self.idx.iter().enumerate() {
            cum += toks[ix].p;
            if cum > p && i + 1 >= MIN_KEEP {
                last = i + 1;
                break;
            }
        }
        self.scratch.clear();
        self.scratch
            .extend(self.idx[..last].iter().map(|&ix| toks[ix]));
        std::mem::swap(&mut self.toks, &mut self.scratch);
        self.sorted = false;
    }

    fn top_p(&mut self, row: &[f32], stats: &RowStats, p: f32) {
        if p >= 1.0 {
            return;
        }
        // softmax without sorting: llama.cpp's max and f32 running-sum denominator.
        let (max_l, denom) = if self.materialized {
            let max_l = if self.sorted {
                self.toks[0].logit
            } else {
                fold_max(&self.toks)
            };
            let mut s = 0.0f32;
            for t in &self.toks {
                s += (t.logit - max_l).exp();
            }
            (max_l, s)
        } else {
            let (s, bound) = row::serial_sum_exp(row, stats.max, &mut self.buckets.hits);
            self.hit_bound = bound;
            (stats.max, s)
        };
        let prob = |l: f32| (l - max_l).exp() / denom;
        let size = self.size(row);
        if !self.sorted && size > TOP_P_INPLACE_MAX {
            let src = if self.materialized {
                self.buckets.reset();
                Src::Toks(&self.toks)
            } else {
                self.buckets.reset();
                self.buckets.cover_with_hits(max_l, self.hit_bound);
                Src::Row(row)
            };
            let kept = window_search(
                src,
                p,
                &prob,
                &mut self.buckets,
                &mut self.scratch,
                &mut self.full,
            );
            match kept {
                Kept::Window => std::mem::swap(&mut self.toks, &mut self.scratch),
                Kept::Full => std::mem::swap(&mut self.toks, &mut self.full),
            }
            self.materialized = true;
            self.sorted = true;
            return;
        }
        if !self.sorted {
            self.partial_sort_inplace(row, size);
        }
        let mut cum = 0.0f32;
        let mut last = self.toks.len();
        for (i, t) in self.toks.iter().enumerate() {
            cum += prob(t.logit);
            if cum >= p && i + 1 >= MIN_KEEP {
                last = i + 1;
                break;
            }
        }
        self.toks.truncate(last);
    }

    fn min_p(&mut self, row: &[f32], stats: &RowStats, p: f32) {
        if p <= 0.0 || self.size(row) == 0 {
            return;
        }
        let mut applied = false;
        if !self.sorted {
            let max_logit = if self.materialized {
                self.toks.iter().fold(-f32::MAX, |m, t| m.max(t.logit))
            } else {
                row::min_p_max(stats)
            };
            let min_logit = max_logit + p.ln();
            if self.materialized {
                self.scratch.clear();
                self.scratch
                    .extend(self.toks.iter().filter(|t| t.logit >= min_logit));
            } else {
                row::collect_at_least(row, min_logit, &mut self.scratch);
            }
            if !self.scratch.is_empty() && self.scratch.len() >= MIN_KEEP {
                std::mem::swap(&mut self.toks, &mut self.scratch);
                self.materialized = true;
                applied = true;
            }
        }
        if !applied {
            if !self.sorted {
                let n = self.size(row);
                self.partial_sort_inplace(row, n);
            }
            let min_logit = self.toks[0].logit + p.ln();
            let mut i = 1;
            while i < self.toks.len() {
                if self.toks[i].logit < min_logit && i >= MIN_KEEP {
                    break;
                }
                i += 1;
            }
            self.toks.truncate(i);
        }
    }

    fn temperature(&mut self, temp: f32) {
        // llama.cpp installs no sampler at exactly 1 (x / 1 would be x anyway).
        if temp == 1.0 {
            return;
        }
        for t in &mut self.toks {
            t.logit /= temp;
        }
    }

    /// The dist sampler's probabilities: f32 `expf(l - max)`, an f64 sum, and
    /// each p divided in f64 then rounded to f32.
    fn dist_probs(&mut self) -> Result<(), SampleError> {
        let toks = &mut self.toks;
        if toks.is_empty() {
            return Err(SampleError::AllTokensMasked);
        }
        self.weights.clear();
        if toks.len() == 1 {
            toks[0].p = 1.0;
            return Ok(());
        }
        // llama.cpp takes data[0] when its array is flagged sorted. That is the
        // max except after a bucket sort of logits beyond ~3e8 (filed in bucket
        // 0, after smaller ones), where llama.cpp's probabilities come out NaN;
        // the true max gives the same bits whenever the flag is truthful.
        let max_l = fold_max(toks);
        if max_l == f32::NEG_INFINITY {
            return Err(SampleError::AllTokensMasked);
        }
        if max_l == f32::INFINITY {
            // Temperature overflowed some logits to +inf; llama.cpp would compute
            // NaN here. The infinite tokens share the mass instead.
            let n_inf = toks.iter().filter(|t| t.logit == f32::INFINITY).count();
            for t in toks.iter_mut() {
                t.p = if t.logit == f32::INFINITY {
                    (1.0 / n_inf as f64) as f32
                } else {
                    0.0
                };
            }
            return Ok(());
        }
        let mut sum = 0.0f64;
        for t in toks.iter_mut() {
            t.p = (t.logit - max_l).exp();
            sum += t.p as f64;
        }
        self.weights.extend(toks.iter().map(|t| t.p));
        self.weight_sum = sum;
        for t in toks.iter_mut() {
            t.p = (t.p as f64 / sum) as f32;
        }
        Ok(())
    }

    /// Logit descending. When llama.cpp's chain ended sorted this is its order
    /// already (ties included) and nothing moves; otherwise ties go by id, and the
    /// order the weights were computed in is kept for the draw (`draw_order`): llama.cpp's
    /// unsorted chains, and a "sorted" set its bucket sort misfiled (logits beyond ~3e8).
    fn order(&mut self) {
        self.draw_order.clear();
        if !self.toks.windows(2).all(|w| w[0].logit >= w[1].logit) {
            self.draw_order.extend(self.toks.iter().map(|t| t.id));
            self.toks
                .sort_unstable_by(|a, b| b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id)));
        }
    }
}

/// Mirostat v1's `m`: the top probabilities its Zipf fit reads (llama-cpp-python's 100).
const MIROSTAT_M: usize = 100;

/// C++'s `int(k)` on x86-64 (`cvttss2si`): truncation toward zero, and INT_MIN for NaN
/// and for values out of the i32 range (Rust's `as` saturates instead).
fn c_int(k: f32) -> i32 {
    // NaN is in no range.
    if (-2_147_483_648.0..2_147_483_648.0).contains(&k) {
        k as i32
    } else {
        i32::MIN
    }
}

/// llama.cpp's unsorted max: `std::max` folded from the first element.
fn fold_max(toks: &[Candidate]) -> f32 {
    let mut m = toks[0].logit;
    for t in &toks[1..] {
        if m < t.logit {
            m = t.logit;
        }
    }
    m
}

/// top-p on more than 1024 unsorted candidates (`buckets` freshly reset or
/// seeded for `src`), as llama.cpp does it: walk the
/// 256 best (bucket partial sort) accumulating f32 probabilities; if they do
/// not reach `p`, continue along llama.cpp's *full* sort of the set, whose
/// head this builds bucket by bucket, only as deep as the running sum needs.
fn window_search(
    src: Src<'_>,
    p: f32,
    prob: &dyn Fn(f32) -> f32,
    buckets: &mut Buckets,
    window: &mut Vec<Candidate>,
    full: &mut Vec<Candidate>,
) -> Kept {
    let size = src.len();
    let k = TOP_P_WINDOW.min(size);
    window.clear();
    window.extend_from_slice(buckets.partial(src, k));
    full.clear();
    // Buckets of the full sort not yet appended to `full`: 0..next.
    let mut next = 128usize;
    let grow = |full: &mut Vec<Candidate>, want: usize, buckets: &mut Buckets, next: &mut usize| {
        while full.len() < want && *next > 0 {
            *next -= 1;
            full.extend_from_slice(buckets.bucket(src, *next));
        }
    };
    let mut in_full = false;
    let mut cum = 0.0f32;
    let mut last = size;
    for i in 0..size {
        let logit = if in_full {
            grow(full, i + 1, buckets, &mut next);
            match full.get(i) {
                Some(c) => c.logit,
                None => break,
            }
        } else {
            match window.get(i) {
                Some(c) => c.logit,
                None => break,
            }
        };
        cum += prob(logit);
        if cum >= p && i + 1 >= MIN_KEEP {
            last = i + 1;
            break;
        }
        if !in_full && i == k - 1 {
            in_full = true;
        }
    }
    if in_full {
        grow(full, last, buckets, &mut next);
        full.truncate(last);
        Kept::Full
    } else {
        window.truncate(last);
        Kept::Window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_int_is_cvttss2si() {
        assert_eq!(c_int(3.9), 3);
        assert_eq!(c_int(-3.9), -3);
        assert_eq!(c_int(f32::NAN), i32::MIN);
        assert_eq!(c_int(f32::INFINITY), i32::MIN);
        assert_eq!(c_int(3e9), i32::MIN);
        assert_eq!(c_int(-2_147_483_648.0), i32::MIN);
    }
}
