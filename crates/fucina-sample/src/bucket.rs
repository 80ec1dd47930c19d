//! llama.cpp's bucketed partial sort of candidates, reproduced exactly and
//! computed lazily.
//!
//! llama.cpp sorts more than 128 candidates by scattering them into 128
//! logit buckets over [-10, 10) (in input order), `std::sort`ing every bucket
//! above the one that completes the requested count and `std::partial_sort`ing
//! that boundary bucket. The result's tie order depends on those bucket
//! contents, so it is replayed here bucket by bucket, with [`crate::stdsort`].
//! Unlike llama.cpp this module never scatters the whole vocabulary: it
//! collects elements from the top buckets down, only as far as a caller needs
//! (a 256-token top-p window, a top-k of 1000, or the head of a full sort).

use crate::row::Hits;
use crate::stdsort;
use crate::Candidate;
use fucina_quant::lanes::{self, LANES};

/// A collection pass that gathers more elements than this shrinks the next step.
const DENSE_PASS: usize = 2048;
/// Number of buckets (llama.cpp's `nbuckets`).
const NBUCKETS: usize = 128;
/// llama.cpp's `bucket_scale = nbuckets / (bucket_high - bucket_low)`, in f32.
const BUCKET_SCALE: f32 = NBUCKETS as f32 / (10.0 - -10.0);
/// llama.cpp's `bucket_inter = -bucket_low * bucket_scale`, in f32.
const BUCKET_INTER: f32 = 10.0 * BUCKET_SCALE;
/// Values of `scale * v + inter` from here up do not fit an i32; x86's
/// truncating conversion (cvttss2si, what llama.cpp's `int(...)` compiles to)
/// then yields i32::MIN, so llama.cpp files such huge logits in bucket 0.
const I32_OVERFLOW: f32 = 2_147_483_648.0;

/// The bucket llama.cpp files `v` in: two f32 roundings (its build contracts
/// no FMA here), truncation, clamp to [0, 127]; NaN and overflow land in 0.
#[inline(always)]
pub fn bucket_of(v: f32) -> usize {
    let y = BUCKET_SCALE * v + BUCKET_INTER;
    let ib = if y < I32_OVERFLOW { y as i32 } else { 0 };
    ib.clamp(0, NBUCKETS as i32 - 1) as usize
}

/// An order-preserving integer key of a finite or infinite f32 (not NaN).
fn key(v: f32) -> i64 {
    let b = v.to_bits();
    if b >> 31 == 0 {
        b as i64
    } else {
        -((b & 0x7FFF_FFFF) as i64)
    }
}

fn from_key(k: i64) -> f32 {
    if k >= 0 {
        f32::from_bits(k as u32)
    } else {
        f32::from_bits(0x8000_0000 | (-k) as u32)
    }
}

/// The least f32 in `(lo, hi]` for which `pred` holds, given `pred` is false
/// at `lo`, true at `hi` and monotone between.
fn least_true(lo: f32, hi: f32, pred: impl Fn(f32) -> bool) -> f32 {
    let (mut lo, mut hi) = (key(lo), key(hi));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(from_key(mid)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    from_key(hi)
}

/// Bucket boundaries as logits, so a collection pass compares values (16
/// lanes at a time) instead of computing every bucket index: `lower[b]` is
/// the least logit filed in bucket >= b (the map is monotone up to the
/// overflow point), with `lower[0] = -inf` and `lower[128]` = the overflow
/// point, from where logits drop back to bucket 0.
struct Bounds {
    lower: [f32; NBUCKETS + 1],
    overflow: f32,
}

impl Bounds {
    fn new() -> Bounds {
        let overflow = least_true(1.0e8, 1.0e9, |v| {
            BUCKET_SCALE * v + BUCKET_INTER >= I32_OVERFLOW
        });
        let mut lower = [f32::NEG_INFINITY; NBUCKETS + 1];
        for (b, l) in lower.iter_mut().enumerate().take(NBUCKETS).skip(1) {
            *l = least_true(-20.0, 20.0, |v| bucket_of(v) >= b);
        }
        lower[NBUCKETS] = overflow;
        Bounds { lower, overflow }
    }
}

/// llama.cpp's sort order: larger logit first.
#[inline(always)]
pub fn by_logit(a: &Candidate, b: &Candidate) -> bool {
    a.logit > b.logit
}

/// Where candidates come from: the full logits row (id = index), or an
/// already materialised candidate array (in its current order).
#[derive(Clone, Copy)]
pub enum Src<'a> {
    /// The whole vocabulary in id order.
    Row(&'a [f32]),
    /// A candidate array in llama.cpp's current order.
    Toks(&'a [Candidate]),
}

impl Src<'_> {
    /// Number of candidates.
    pub fn len(&self) -> usize {
        match self {
            Src::Row(r) => r.len(),
            Src::Toks(t) => t.len(),
        }
    }
}

/// Reusable state of a lazy bucket sort over one source.
pub struct Buckets {
    bounds: Bounds,
    /// Every source element whose bucket is >= `floor` has been collected.
    floor: usize,
    /// How many buckets the next lowering of the floor reaches down.
    step: usize,
    /// Collected elements per bucket, each in source order.
    per: Vec<Vec<Candidate>>,
    collected: usize,
    /// The partial-sort result (`partial`) or one bucket's sorted contents (`bucket`).
    out: Vec<Candidate>,
    /// A row subset holding every element of buckets >= `hits_cover`.
    pub hits: Hits,
    hits_cover: usize,
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            bounds: Bounds::new(),
            floor: NBUCKETS,
            step: 1,
            per: vec![Vec::new(); NBUCKETS],
            collected: 0,
            out: Vec::new(),
            hits: Hits::default(),
            hits_cover: usize::MAX,
        }
    }
}

impl Buckets {
    /// Forget the previous source.
    pub fn reset(&mut self) {
        self.hits_cover = usize::MAX;
        self.floor = NBUCKETS;
        self.step = 1;
        self.collected = 0;
        for b in &mut self.per {
            b.clear();
        }
    }

    /// The row's top-p denominator replay saw every token with
    /// `fl(l - max) >= bound` (`self.hits`): from the lowest bucket that this
    /// covers completely upward, collect from the hits instead of the row.
    pub fn cover_with_hits(&mut self, max: f32, bound: f32) {
        // fl(l - max) is monotone in l, so a bucket is covered when its least logit is.
        let mut floor = NBUCKETS;
        while floor > 1 && self.bounds.lower[floor - 1] - max >= bound {
            floor -= 1;
        }
        self.hits_cover = floor;
    }

    /// Collect the elements of buckets [`new_floor`, `floor`).
    fn collect(&mut self, src: Src<'_>, new_floor: usize) {
        let (lo, hi) = (new_floor, self.floor);
        if lo >= hi {
            return;
        }
        let (vlo, vhi) = (self.bounds.lower[lo], self.bounds.lower[hi]);
        let above = if lo == 0 {
            self.bounds.overflow
        } else {
            f32::INFINITY
        };
        let wanted = |v: f32| (v >= vlo && v < vhi) || v >= above;
        let (per, collected, hits, cover) = (
            &mut self.per,
            &mut self.collected,
            &self.hits,
            self.hits_cover,
        );
        let mut take = |c: Candidate| {
            let b = bucket_of(c.logit);
            debug_assert!(
                b >= lo && b < hi,
                "logit {} in bucket {b}, not [{lo}, {hi})",
                c.logit
            );
            per[b].push(c);
            *collected += 1;
        };
        // Row ids are indices; from the hits they are looked up.
        let (logits, ids): (&[f32], Option<&[u32]>) = match src {
            Src::Row(_) if lo >= cover => (&hits.logits, Some(&hits.ids)),
            Src::Row(row) => (row, None),
            Src::Toks(_) => (&[], None),
        };
        let id_of = |i: usize| ids.map_or(i as u32, |ids| ids[i]);
        for (ci, c) in logits.chunks_exact(LANES).enumerate() {
            let Ok(c) = <&[f32; LANES]>::try_from(c) else {
                continue;
            };
            let mut m = lanes::range_or_above(c, vlo, vhi, above);
            while m != 0 {
                let i = ci * LANES + m.trailing_zeros() as usize;
                take(Candidate {
                    id: id_of(i),
                    logit: logits[i],
                    p: 0.0,
                });
                m &= m - 1;
            }
        }
        for (i, &v) in logits.iter().enumerate().skip(logits.len() / LANES * LANES) {
            if wanted(v) {
                take(Candidate {
                    id: id_of(i),
                    logit: v,
                    p: 0.0,
                });
            }
        }
        match src {
            Src::Row(_) => {}
            Src::Toks(toks) => {
                for &c in toks {
                    if wanted(c.logit) {
                        take(c);
                    }
                }
            }
        }
        self.floor = lo;
    }

    /// Lower the floor by the next step: doubled after a sparse pass (few
    /// passes to reach far), halved after a dense one (each collected element
    /// costs more than a pass's scan of sixteen).
    fn lower(&mut self, src: Src<'_>) {
        let f = self.floor.saturating_sub(self.step);
        let before = self.collected;
        self.collect(src, f);
        self.step = if self.collected - before > DENSE_PASS {
            (self.step / 2).max(1)
        } else {
            self.step * 2
        };
    }

    /// The first `npartial` elements of llama.cpp's
    /// `llama_token_data_array_partial_sort(src, npartial)`, sorted by logit
    /// descending with llama.cpp's tie order. Requires 1 <= npartial <= len.
    pub fn partial(&mut self, src: Src<'_>, npartial: usize) -> &[Candidate] {
        while self.collected < npartial && self.floor > 0 {
            self.lower(src);
        }
        // The boundary bucket: the highest whose cumulative count reaches npartial.
        let mut nhave = 0;
        let mut ib = NBUCKETS;
        while ib > self.floor {
            ib -= 1;
            nhave += self.per[ib].len();
            if nhave >= npartial {
                break;
            }
        }
        self.out.clear();
        let mut ndone = 0;
        for j in (ib..NBUCKETS).rev() {
            let start = self.out.len();
            self.out.extend_from_slice(&self.per[j]);
            let bucket = &mut self.out[start..];
            if j > ib {
                stdsort::sort(bucket, &mut by_logit);
                ndone += bucket.len();
            } else {
                stdsort::partial_sort(bucket, npartial.saturating_sub(ndone), &mut by_logit);
            }
        }
        let n = npartial.min(self.out.len());
        &self.out[..n]
    }

    /// Bucket `j` of llama.cpp's full sort of the source: `std::sort`ed, or
    /// heap-sorted when it is the source's lowest non-empty bucket (there the
    /// full sort's final `partial_sort` covers the whole bucket).
    pub fn bucket(&mut self, src: Src<'_>, j: usize) -> &[Candidate] {
        while self.floor > j {
            self.lower(src);
        }
        let at_or_above: usize = self.per[j..].iter().map(Vec::len).sum();
        let lowest = at_or_above == src.len();
        self.out.clear();
        self.out.extend_from_slice(&self.per[j]);
        let n = self.out.len();
        if lowest {
            stdsort::partial_sort(&mut self.out, n, &mut by_logit);
        } else {
            stdsort::sort(&mut self.out, &mut by_logit);
        }
        &self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's partial sort written the direct way (histogram over all,
    /// scatter, sort): the oracle for the lazy version.
    fn direct(src: &[Candidate], npartial: usize) -> Vec<Candidate> {
        let mut histo = [0usize; NBUCKETS];
        for c in src {
            histo[bucket_of(c.logit)] += 1;
        }
        let mut nhave = 0;
        let mut ib = NBUCKETS as isize - 1;
        while ib >= 0 {
            nhave += histo[ib as usize];
            if nhave >= npartial {
                break;
            }
            ib -= 1;
        }
        let ib = ib.max(0) as usize;
        let mut res = vec![Candidate::default(); nhave];
        let mut ptr = [0usize; NBUCKETS];
        let mut off = 0;
        for j in (ib..NBUCKETS).rev() {
            ptr[j] = off;
            off += histo[j];
        }
        let starts = ptr;
        for c in src {
            let j = bucket_of(c.logit);
            if j >= ib {
                res[ptr[j]] = *c;
                ptr[j] += 1;
            }
        }
        let mut ndone = 0;
        for j in ((ib + 1)..NBUCKETS).rev() {
            stdsort::sort(&mut res[starts[j]..starts[j] + histo[j]], &mut by_logit);
            ndone += histo[j];
        }
        let s = starts[ib];
        stdsort::partial_sort(&mut res[s..s + histo[ib]], npartial - ndone, &mut by_logit);
        res.truncate(npartial);
        res
    }

    #[test]
    fn lazy_partial_matches_direct_on_tied_rows() {
        let mut seed = 5u64;
        for &(n, levels, scale) in &[
            (3000usize, 40u64, 0.5f32),
            (5000, 7, 3.0),
            (2000, 2000, 0.01),
            (700, 3, 1e9),
        ] {
            let row: Vec<f32> = (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    ((seed >> 33) % levels) as f32 * scale - 8.0
                })
                .collect();
            let toks: Vec<Candidate> = row
                .iter()
                .enumerate()
                .map(|(i, &l)| Candidate {
                    id: i as u32,
                    logit: l,
                    p: 0.0,
                })
                .collect();
            for &np in &[1usize, 40, 129, 256, 1000, n] {
                let np = np.min(n);
                let want = direct(&toks, np);
                let mut b = Buckets::default();
                b.reset();
                let got_row = b.partial(Src::Row(&row), np).to_vec();
                b.reset();
                let got_toks = b.partial(Src::Toks(&toks), np).to_vec();
                assert_eq!(got_row, want, "row n={n} np={np}");
                assert_eq!(got_toks, want, "toks n={n} np={np}");
            }
        }
    }

    #[test]
    fn huge_logits_fall_into_bucket_zero() {
        assert_eq!(bucket_of(1e10), 0);
        assert_eq!(bucket_of(f32::NEG_INFINITY), 0);
        assert_eq!(bucket_of(f32::NAN), 0);
        assert_eq!(bucket_of(9.9), 127);
        assert_eq!(bucket_of(0.0), 64);
        let b = Bounds::new();
        for k in 1..NBUCKETS {
            let t = b.lower[k];
            assert!(
                bucket_of(t) >= k && bucket_of(from_key(key(t) - 1)) < k,
                "bucket {k} starts at {t}"
            );
        }
        assert_eq!(bucket_of(b.overflow), 0);
        assert_eq!(bucket_of(from_key(key(b.overflow) - 1)), NBUCKETS - 1);
    }
}
