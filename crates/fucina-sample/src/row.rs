//! Passes over the whole logits row (the vocabulary, up to 262,144 entries):
//! the only places where per-token cost scales with the vocabulary, written
//! as fixed-width lane loops the compiler vectorises.

use crate::bucket::by_logit;
use crate::stdsort;
use crate::Candidate;

/// Lane count of the vectorised loops (four SSE registers of f32).
const LANES: usize = 16;

/// Extremes of a row after [`sanitize`].
pub struct RowStats {
    /// Largest logit (-inf when every token is masked).
    pub max: f32,
    /// Smallest logit.
    pub min: f32,
}

/// NaN becomes -inf (a NaN logit bans its token) and +inf becomes f32::MAX (so
/// the softmax never meets inf - inf), in place; returns the row's extremes.
pub fn sanitize(row: &mut [f32]) -> RowStats {
    let mut mx = [f32::NEG_INFINITY; LANES];
    let mut mn = [f32::INFINITY; LANES];
    let mut bad = [false; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            let v = c[j];
            bad[j] |= v.is_nan() | (v == f32::INFINITY);
            mx[j] = if v > mx[j] { v } else { mx[j] };
            mn[j] = if v < mn[j] { v } else { mn[j] };
        }
    }
    let any_bad = bad.iter().any(|&b| b)
        || chunks
            .remainder()
            .iter()
            .any(|v| v.is_nan() || *v == f32::INFINITY);
    if any_bad {
        for v in row.iter_mut() {
            if v.is_nan() {
                *v = f32::NEG_INFINITY;
            } else if *v == f32::INFINITY {
                *v = f32::MAX;
            }
        }
        return sanitize(row);
    }
    let mut stats = RowStats {
        max: f32::NEG_INFINITY,
        min: f32::INFINITY,
    };
    for &v in mx.iter().chain(chunks.remainder()) {
        if v > stats.max {
            stats.max = v;
        }
    }
    for &v in mn.iter().chain(chunks.remainder()) {
        if v < stats.min {
            stats.min = v;
        }
    }
    stats
}

/// The first index holding the row's largest logit (NaN never wins), as
/// llama.cpp's greedy sampler scans; None when nothing beats -inf.
pub fn argmax(row: &[f32]) -> Option<usize> {
    let mut mx = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            mx[j] = if c[j] > mx[j] { c[j] } else { mx[j] };
        }
    }
    let mut best = f32::NEG_INFINITY;
    for &v in mx.iter().chain(chunks.remainder()) {
        if v > best {
            best = v;
        }
    }
    if best == f32::NEG_INFINITY {
        return None;
    }
    row.iter().position(|&v| v == best)
}

/// `std::partial_sort(row, k)` as llama.cpp runs it for top-k <= 128 on the
/// id-ordered row, without materialising the row: heap-select keeps a k-heap
/// of the first k tokens and admits a later token only when it beats the
/// heap's root, so a lane test of each 16-token chunk against the root skips
/// almost every chunk. Requires 1 <= k <= row.len(); writes k candidates,
/// sorted by logit descending with libstdc++'s tie order.
pub fn top_k_heap(row: &[f32], k: usize, out: &mut Vec<Candidate>) {
    out.clear();
    out.extend(row[..k].iter().enumerate().map(|(i, &l)| Candidate {
        id: i as u32,
        logit: l,
        p: 0.0,
    }));
    stdsort::make_heap(out, &mut by_logit);
    let tail = &row[k..];
    let mut chunks = tail.chunks_exact(LANES);
    let mut base = k;
    let admit = |i: usize, l: f32, heap: &mut Vec<Candidate>| {
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
    for c in &mut chunks {
        let root = out[0].logit;
        let mut hit = false;
        for &v in c {
            hit |= v > root;
        }
        if hit {
            for (j, &v) in c.iter().enumerate() {
                admit(base + j, v, out);
            }
        }
        base += LANES;
    }
    for (j, &v) in chunks.remainder().iter().enumerate() {
        admit(base + j, v, out);
    }
    stdsort::sort_heap(out, &mut by_logit);
}

/// `max(-FLT_MAX, max(row))`: min-p's unsorted path starts from -FLT_MAX.
pub fn min_p_max(stats: &RowStats) -> f32 {
    stats.max.max(-f32::MAX)
}

/// Every token with `logit >= bound`, in id order (min-p's unsorted path).
pub fn collect_at_least(row: &[f32], bound: f32, out: &mut Vec<Candidate>) {
    out.clear();
    for (ci, c) in row.chunks(LANES).enumerate() {
        let mut hit = false;
        for &v in c {
            hit |= v >= bound;
        }
        if hit {
            for (j, &v) in c.iter().enumerate() {
                if v >= bound {
                    out.push(Candidate {
                        id: (ci * LANES + j) as u32,
                        logit: v,
                        p: 0.0,
                    });
                }
            }
        }
    }
}

/// The smallest f32 strictly above `s` (s finite and >= 0).
fn next_up(s: f32) -> f32 {
    f32::from_bits(s.to_bits() + 1)
}

/// Terms below the threshold are provably absorbed; above it they are added exactly.
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
pub fn serial_sum_exp(row: &[f32], max: f32) -> f32 {
    let mut s = 0.0f32;
    let mut bound = EXP_UNDERFLOW;
    // The sum's binade top: while s stays below it, its ulp (and the bound) hold.
    let mut binade_top = TINY_SUM;
    for c in row.chunks(LANES) {
        let mut hit = false;
        for &v in c {
            hit |= v - max >= bound;
        }
        if !hit {
            continue;
        }
        for &v in c {
            let x = v - max;
            if x >= bound {
                s += x.exp();
                if s >= binade_top {
                    let half_ulp = (next_up(s) - s) as f64 * 0.5;
                    bound = ((half_ulp.ln() - LOG_SLACK) as f32).max(EXP_UNDERFLOW);
                    binade_top = f32::from_bits((s.to_bits() & 0xFF80_0000) + 0x0080_0000);
                }
            }
        }
    }
    s
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
            assert_eq!(
                serial_sum_exp(&row, max).to_bits(),
                plain.to_bits(),
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
        assert_eq!(serial_sum_exp(&row, 1.0).to_bits(), plain.to_bits());
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
        assert_eq!(st.min, f32::NEG_INFINITY);
        assert_eq!(argmax(&[f32::NAN, 2.0, 3.0, 3.0]), Some(2));
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY]), None);
    }
}
