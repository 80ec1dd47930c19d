//! Passes over the whole logits row (the vocabulary, up to 262,144 entries):
//! the only places where per-token cost scales with the vocabulary. Each
//! tests 16 logits at a time ([`fucina_quant::lanes`]) and does scalar work only for
//! the lanes that pass.

use crate::bucket::by_logit;
use crate::stdsort;
use crate::Candidate;
use fucina_quant::lanes;

/// Extremes of a row after [`sanitize`].
pub struct RowStats {
    /// Largest logit (-inf when every token is masked).
    pub max: f32,
}

/// NaN becomes -inf (a NaN logit bans its token) and +inf becomes f32::MAX (so
/// the softmax never meets inf - inf), in place; returns the row's max.
pub fn sanitize(row: &mut [f32]) -> RowStats {
    let (max, bad) = lanes::max_and_bad(row);
    if !bad {
        return RowStats { max };
    }
    for v in row.iter_mut() {
        if v.is_nan() {
            *v = f32::NEG_INFINITY;
        } else if *v == f32::INFINITY {
            *v = f32::MAX;
        }
    }
    RowStats {
        max: lanes::max_and_bad(row).0,
    }
}

/// The first index holding the row's largest logit (NaN never wins), as
/// llama.cpp's greedy sampler scans; None when nothing beats -inf.
pub fn argmax(row: &[f32]) -> Option<usize> {
    let (best, _) = lanes::max_and_bad(row);
    if best == f32::NEG_INFINITY {
        return None;
    }
    // Nothing exceeds `best`, so ">= best" lanes are exactly the maxima.
    for (ci, c) in row.chunks_exact(lanes::LANES).enumerate() {
        let Ok(c) = <&[f32; lanes::LANES]>::try_from(c) else {
            continue;
        };
        let m = lanes::ge(c, best);
        if m != 0 {
            return Some(ci * lanes::LANES + m.trailing_zeros() as usize);
        }
    }
    let start = row.len() / lanes::LANES * lanes::LANES;
    row[start..]
        .iter()
        .position(|&v| v == best)
        .map(|i| start + i)
}

/// Call `f(index)` for each set bit of a chunk mask, lowest first.
#[inline(always)]
fn each_bit(mut mask: u32, base: usize, mut f: impl FnMut(usize)) {
    while mask != 0 {
        f(base + mask.trailing_zeros() as usize);
        mask &= mask - 1;
    }
}

/// `std::partial_sort(row, k)` as llama.cpp runs it for top-k <= 128 on the
/// id-ordered row, without materialising the row: heap-select keeps a k-heap
/// of the first k tokens and admits a later token only when it beats the
/// heap's root, so a lane test of each 16-token chunk against the root skips
/// almost every chunk (the root only rises, so testing against the chunk's
/// starting root never misses a token). Requires 1 <= k <= row.len(); writes
/// k candidates, sorted by logit descending with libstdc++'s tie order.
pub fn top_k_heap(row: &[f32], k: usize, out: &mut Vec<Candidate>) {
    out.clear();
    out.extend(row[..k].iter().enumerate().map(|(i, &l)| Candidate {
        id: i as u32,
        logit: l,
        p: 0.0,
    }));
    stdsort::make_heap(out, &mut by_logit);
    let tail = &row[k..];
    let admit = |i: usize, heap: &mut Vec<Candidate>| {
        let l = row[i];
        if l > heap[0].logit {
            let len = heap.len();
            stdsort::adjust_heap(
                heap,
                0,
                len,
                Candidate {
                    id: i as u32,
                    logit: l,
                    p: 0.0,
                },
                &mut by_logit,
            );
        }
    };
    let mut heap = std::mem::take(out);
    for (ci, c) in tail.chunks_exact(lanes::LANES).enumerate() {
        let Ok(c) = <&[f32; lanes::LANES]>::try_from(c) else {
            continue;
        };
        let m = lanes::gt(c, heap[0].logit);
        each_bit(m, k + ci * lanes::LANES, |i| admit(i, &mut heap));
    }
    for i in k + tail.len() / lanes::LANES * lanes::LANES..row.len() {
        admit(i, &mut heap);
    }
    stdsort::sort_heap(&mut heap, &mut by_logit);
    *out = heap;
}

/// `max(-FLT_MAX, max(row))`: min-p's unsorted path starts from -FLT_MAX.
pub fn min_p_max(stats: &RowStats) -> f32 {
    stats.max.max(-f32::MAX)
}

/// Every token with `logit >= bound`, in id order (min-p's unsorted path).
pub fn collect_at_least(row: &[f32], bound: f32, out: &mut Vec<Candidate>) {
    out.clear();
    let mut push = |i: usize| {
        out.push(Candidate {
            id: i as u32,
            logit: row[i],
            p: 0.0,
        })
    };
    for (ci, c) in row.chunks_exact(lanes::LANES).enumerate() {
        let Ok(c) = <&[f32; lanes::LANES]>::try_from(c) else {
            continue;
        };
        each_bit(lanes::ge(c, bound), ci * lanes::LANES, &mut push);
    }
    let start = row.len() / lanes::LANES * lanes::LANES;
    for (i, &v) in row.iter().enumerate().skip(start) {
        if v >= bound {
            push(i);
        }
    }
}

/// A subset of the row (ids ascending, with their logits) that contains
/// every token above some logit.
#[derive(Default)]
pub struct Hits {
    /// Token ids, ascending.
    pub ids: Vec<u32>,
    /// Their logits.
    pub logits: Vec<f32>,
}

/// The smallest f32 strictly above `s` (s finite and >= 0).
fn next_up(s: f32) -> f32 {
    f32::from_bits(s.to_bits() + 1)
}

/// Below this running sum the threshold is not worth deriving (only reached
/// when every earlier term underflowed); every non-zero term is added.
const TINY_SUM: f32 = 1e-30;
/// expf underflows to 0 below about -103.97; no term below this can matter.
const EXP_UNDERFLOW: f32 = -104.0;
/// Slack (in the log domain) between "e^x is below half an ulp of the sum" and
/// the test: covers expf's < 1 ulp error and the f32 rounding of the bound.
const LOG_SLACK: f64 = 2e-4;

/// llama.cpp's softmax denominator over the id-ordered row: the f32 running
/// sum of `expf(l - max)`, added one token after another.
///
/// That sum is not the true sum: once it is large, small terms are rounded
/// away (on real Gemma 3 rows llama.cpp's sum is up to 0.07% low, which moves
/// top-p's cut by hundreds of tokens), so it is replayed exactly. The replay
/// skips a term only when it provably cannot change the running sum: a term
/// below half an ulp of the sum rounds away, and `expf(x)` is below that
/// whenever `x < ln(ulp/2) - slack`. Real rows absorb ~93% of their terms, so
/// the serial adds (and libm `expf` calls) touch only the rest, and the skip
/// test runs 16 lanes at a time.
///
/// Every token it adds (a "hit") is appended to `hits` in id order; the
/// returned bound is the final skip threshold on `l - max`: every token at or
/// above it was a hit, which lets top-p's bucket sort scan the hits instead
/// of the row.
pub fn serial_sum_exp(row: &[f32], max: f32, hits: &mut Hits) -> (f32, f32) {
    hits.ids.clear();
    hits.logits.clear();
    let mut s = 0.0f32;
    let mut bound = EXP_UNDERFLOW;
    // The sum's binade top: while s stays below it, its ulp (and the bound) hold.
    let mut binade_top = TINY_SUM;
    let mut add = |i: usize, s: &mut f32, bound: &mut f32| {
        let l = row[i];
        let x = l - max;
        if x >= *bound {
            *s += x.exp();
            hits.ids.push(i as u32);
            hits.logits.push(l);
            if *s >= binade_top {
                let half_ulp = (next_up(*s) - *s) as f64 * 0.5;
                *bound = ((half_ulp.ln() - LOG_SLACK) as f32).max(EXP_UNDERFLOW);
                binade_top = f32::from_bits((s.to_bits() & 0xFF80_0000) + 0x0080_0000);
            }
        }
    };
    let chunks = row.len() / lanes::LANES;
    for (ci, c) in row.chunks_exact(lanes::LANES).enumerate() {
        let Ok(c) = <&[f32; lanes::LANES]>::try_from(c) else {
            continue;
        };
        // A mask taken with the chunk's starting bound may admit a term the
        // updated bound would skip; `add` re-tests, and the bound only rises.
        each_bit(lanes::sub_ge(c, max, bound), ci * lanes::LANES, |i| {
            add(i, &mut s, &mut bound)
        });
    }
    for i in chunks * lanes::LANES..row.len() {
        add(i, &mut s, &mut bound);
    }
    (s, bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_row(n: usize, seed: &mut u64, spread: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * spread
            })
            .collect()
    }

    #[test]
    fn serial_sum_equals_the_plain_running_sum() {
        let mut seed = 11;
        for &(n, spread) in &[
            (262_144usize, 40.0f32),
            (50_000, 8.0),
            (1000, 300.0),
            (17, 1.0),
        ] {
            let mut row = rand_row(n, &mut seed, spread);
            row[n / 2] = 12.0;
            let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut plain = 0.0f32;
            for &v in &row {
                plain += (v - max).exp();
            }
            let mut hits = Hits::default();
            let (s, bound) = serial_sum_exp(&row, max, &mut hits);
            assert_eq!(s.to_bits(), plain.to_bits(), "n={n}");
            // Every token at or above the final bound was added (and recorded).
            let above = (0..n as u32).filter(|&i| row[i as usize] - max >= bound);
            assert!(
                above
                    .into_iter()
                    .all(|i| hits.ids.binary_search(&i).is_ok()),
                "n={n}"
            );
        }
    }

    #[test]
    fn serial_sum_handles_masked_prefixes() {
        let mut row = vec![f32::NEG_INFINITY; 5000];
        row[4000] = 1.0;
        row[4500] = -200.0;
        row[4999] = 0.5;
        let mut plain = 0.0f32;
        for &v in &row {
            plain += (v - 1.0f32).exp();
        }
        assert_eq!(
            serial_sum_exp(&row, 1.0, &mut Hits::default()).0.to_bits(),
            plain.to_bits()
        );
    }

    #[test]
    fn top_k_heap_matches_std_partial_sort() {
        let mut seed = 3u64;
        for &(n, k, levels) in &[
            (10_000usize, 40usize, 30u64),
            (300, 128, 5),
            (64, 64, 3),
            (1000, 1, 1000),
        ] {
            let row: Vec<f32> = (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    ((seed >> 33) % levels) as f32
                })
                .collect();
            let mut toks: Vec<Candidate> = row
                .iter()
                .enumerate()
                .map(|(i, &l)| Candidate {
                    id: i as u32,
                    logit: l,
                    p: 0.0,
                })
                .collect();
            stdsort::partial_sort(&mut toks, k, &mut by_logit);
            let mut out = Vec::new();
            top_k_heap(&row, k, &mut out);
            assert_eq!(out, toks[..k].to_vec(), "n={n} k={k}");
        }
    }

    #[test]
    fn sanitize_maps_nan_and_inf() {
        let mut row = vec![1.0; 40];
        row[3] = f32::NAN;
        row[39] = f32::INFINITY;
        row[7] = -3.0;
        let st = sanitize(&mut row);
        assert_eq!(row[3], f32::NEG_INFINITY);
        assert_eq!(row[39], f32::MAX);
        assert_eq!(st.max, f32::MAX);
        assert_eq!(argmax(&[f32::NAN, 2.0, 3.0, 3.0]), Some(2));
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY]), None);
    }
}
