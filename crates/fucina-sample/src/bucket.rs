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

use crate::stdsort;
use crate::Candidate;

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

/// The lowest non-empty bucket of a set whose smallest and largest logits are
/// `min` and `max`: the bucket map is monotone except that overflowing values
/// drop to bucket 0.
pub fn lowest_bucket(min: f32, max: f32) -> usize {
    if BUCKET_SCALE * max + BUCKET_INTER >= I32_OVERFLOW {
        0
    } else {
        bucket_of(min)
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
    /// Every source element whose bucket is >= `floor` has been collected.
    floor: usize,
    /// Collected elements; each collection pass covers a disjoint bucket range
    /// in source order, so within one bucket they keep source order.
    coll: Vec<Candidate>,
    coll_b: Vec<u8>,
    counts: [usize; NBUCKETS],
    /// The partial-sort result (`partial`) or one bucket's sorted contents (`bucket`).
    out: Vec<Candidate>,
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            floor: NBUCKETS,
            coll: Vec::new(),
            coll_b: Vec::new(),
            counts: [0; NBUCKETS],
            out: Vec::new(),
        }
    }
}

impl Buckets {
    /// Forget the previous source.
    pub fn reset(&mut self) {
        self.floor = NBUCKETS;
        self.coll.clear();
        self.coll_b.clear();
        self.counts = [0; NBUCKETS];
    }

    /// Collect the elements of buckets [`new_floor`, `floor`).
    fn collect(&mut self, src: Src<'_>, new_floor: usize) {
        let (lo, hi) = (new_floor, self.floor);
        if lo >= hi {
            return;
        }
        let take = |c: Candidate, b: usize, s: &mut Self| {
            s.coll.push(c);
            s.coll_b.push(b as u8);
            s.counts[b] += 1;
        };
        match src {
            Src::Row(row) => {
                const CH: usize = 16;
                for (ci, chunk) in row.chunks(CH).enumerate() {
                    // Bucket indices for a whole chunk first: the test vectorises, and
                    // most chunks of a large vocabulary hold no wanted element.
                    let mut hit = false;
                    for &v in chunk {
                        let b = bucket_of(v);
                        hit |= b >= lo && b < hi;
                    }
                    if !hit {
                        continue;
                    }
                    for (j, &v) in chunk.iter().enumerate() {
                        let b = bucket_of(v);
                        if b >= lo && b < hi {
                            let id = (ci * CH + j) as u32;
                            take(
                                Candidate {
                                    id,
                                    logit: v,
                                    p: 0.0,
                                },
                                b,
                                self,
                            );
                        }
                    }
                }
            }
            Src::Toks(toks) => {
                for &c in toks {
                    let b = bucket_of(c.logit);
                    if b >= lo && b < hi {
                        take(c, b, self);
                    }
                }
            }
        }
        self.floor = lo;
    }

    /// Lower the floor until at least `need` elements are collected (or all are).
    fn ensure_count(&mut self, src: Src<'_>, need: usize) {
        let mut step = 1;
        while self.coll.len() < need && self.floor > 0 {
            let f = self.floor.saturating_sub(step);
            self.collect(src, f);
            step *= 4;
        }
    }

    /// Lower the floor to at least `b`.
    fn ensure_floor(&mut self, src: Src<'_>, b: usize) {
        if self.floor > b {
            self.collect(src, b);
        }
    }

    /// The first `npartial` elements of llama.cpp's
    /// `llama_token_data_array_partial_sort(src, npartial)`, sorted by logit
    /// descending with llama.cpp's tie order. Requires 1 <= npartial <= len.
    pub fn partial(&mut self, src: Src<'_>, npartial: usize) -> &[Candidate] {
        self.ensure_count(src, npartial);
        // The boundary bucket: the highest whose cumulative count reaches npartial.
        let mut nhave = 0;
        let mut ib = NBUCKETS;
        while ib > self.floor {
            ib -= 1;
            nhave += self.counts[ib];
            if nhave >= npartial {
                break;
            }
        }
        let nhave = nhave.min(self.coll.len());
        let mut start = [0usize; NBUCKETS];
        let mut off = 0;
        for j in (ib..NBUCKETS).rev() {
            start[j] = off;
            off += self.counts[j];
        }
        self.out.clear();
        self.out.resize(nhave, Candidate::default());
        let mut next = start;
        for (c, &b) in self.coll.iter().zip(&self.coll_b) {
            let b = b as usize;
            if b >= ib {
                self.out[next[b]] = *c;
                next[b] += 1;
            }
        }
        let mut ndone = 0;
        for j in ((ib + 1)..NBUCKETS).rev() {
            let n = self.counts[j];
            stdsort::sort(&mut self.out[start[j]..start[j] + n], &mut by_logit);
            ndone += n;
        }
        if ib < NBUCKETS {
            let s = start[ib];
            let e = s + self.counts[ib];
            stdsort::partial_sort(
                &mut self.out[s..e],
                npartial.saturating_sub(ndone),
                &mut by_logit,
            );
        }
        &self.out[..npartial.min(nhave)]
    }

    /// Bucket `j` of llama.cpp's full sort of the source: `std::sort`ed, or
    /// heap-sorted when it is the source's lowest non-empty bucket (there the
    /// full sort's final `partial_sort` covers the whole bucket).
    pub fn bucket(&mut self, src: Src<'_>, j: usize, lowest: usize) -> &[Candidate] {
        self.ensure_floor(src, j);
        self.out.clear();
        for (c, &b) in self.coll.iter().zip(&self.coll_b) {
            if b as usize == j {
                self.out.push(*c);
            }
        }
        let n = self.out.len();
        if j == lowest {
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
        assert_eq!(lowest_bucket(1.0, 1e10), 0);
        assert_eq!(lowest_bucket(1.0, 2.0), bucket_of(1.0));
    }
}
