//! The cache's bookkeeping without any bytes: which expert sits in which slot of
//! a layer, which experts are pinned, which slot a miss evicts, and the counts.
//!
//! The live store ([`crate::ExpertStore`]) and the offline replay
//! ([`crate::replay`]) drive this same state machine with the same calls in the
//! same order, so replaying a recorded trace reproduces the live run's hit counts
//! exactly.
//!
//! A layer call (every expert one layer's forward needs, with the number of
//! routed (token, expert) pairs of each) is [`CacheCore::plan`]ned once: it decays
//! and adds the layer's heat and splits the request into chunks of at most the
//! layer's slot count of unpinned experts, in request order. Each chunk is then
//! [`CacheCore::acquire`]d: its hits are touched first, then each miss takes a
//! victim among the slots this acquire has not touched (the guard of a chunk
//! keeps all of its experts resident at once).
//!
//! Victims: an empty slot first; else, with [`Eviction::Heat`] (the default), the
//! slot whose expert has the lowest decayed routed count, least recently used
//! breaking ties; with [`Eviction::Lru`] the least recently used slot. Pinned
//! experts live outside the slots, are loaded on first use (a miss) and never
//! leave.

use std::ops::Range;

use crate::{ExpertError, Result};

/// The heat decay per layer call used when none is given: a layer's heat halves
/// in about 7 of its calls (decode tokens), long enough to remember the experts a
/// topic keeps using, short enough to follow a change of topic. On a recorded
/// 364-token trace of a Qwen3-30B-A3B-shaped random-weight model (4 layers), decays
/// from 0.8 to 0.99 gave hit rates within 0.6 points of each other at 16 and 32
/// slots per layer, all above LRU.
pub const DEFAULT_HEAT_DECAY: f64 = 0.9;

/// How a miss picks the slot it evicts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Eviction {
    /// Lowest decayed routed-pair count, recency breaking ties. Every call of a
    /// layer multiplies its experts' heat by `decay` (in `(0, 1]`) before adding
    /// each requested expert's routed pairs.
    Heat {
        /// Multiplier per layer call.
        decay: f64,
    },
    /// Least recently used.
    Lru,
}

impl Default for Eviction {
    fn default() -> Self {
        Eviction::Heat {
            decay: DEFAULT_HEAT_DECAY,
        }
    }
}

/// Where a requested expert is (or will be, once read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In the pinned tier.
    Pinned,
    /// In slot `i` of the layer.
    Slot(usize),
}

/// The outcome of one expert of an acquire or prefetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// The expert.
    pub expert: u32,
    /// Where it lives.
    pub place: Place,
    /// It must be read (a miss, or a prefetch load).
    pub load: bool,
    /// A hit on a slot a prefetch filled and no acquire had used yet.
    pub prefetched: bool,
}

/// What the cache has counted. Hits and misses are per requested expert of an
/// acquire (pinned hits included in the hits); prefetch loads are not misses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requested experts found resident (slots or pinned tier).
    pub hits: u64,
    /// Requested experts that had to be read.
    pub misses: u64,
    /// Hits in the pinned tier.
    pub pinned_hits: u64,
    /// Experts read by prefetches.
    pub prefetch_loads: u64,
    /// Hits on a prefetched slot before any other use.
    pub prefetch_hits: u64,
    /// Prefetched experts evicted before any acquire used them.
    pub prefetch_wasted: u64,
    /// Bytes read for misses and prefetches.
    pub bytes: u64,
}

impl Counts {
    /// `hits / (hits + misses)`, 0 with no requests.
    pub fn hit_rate(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            0.0
        } else {
            self.hits as f64 / n as f64
        }
    }
}

#[derive(Clone, Debug)]
struct Slot {
    expert: Option<u32>,
    /// Clock of the last touch.
    last: u64,
    /// Filled by a prefetch and not used since.
    prefetched: bool,
}

#[derive(Clone, Debug)]
struct Layer {
    slots: Vec<Slot>,
    /// Per expert: its slot.
    slot_of: Vec<Option<usize>>,
    /// Per expert: pinned, and whether the pinned copy is loaded.
    pinned: Vec<Pin>,
    heat: Vec<f64>,
    expert_bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pin {
    No,
    Cold,
    Loaded,
}

/// The shape of one layer's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerShape {
    /// Experts in the layer (0 for a layer without experts).
    pub n_expert: usize,
    /// Cache slots (outside the pinned tier).
    pub slots: usize,
    /// Bytes of one expert (all its stacks).
    pub expert_bytes: u64,
}

/// The cache state machine (see the module doc).
#[derive(Clone, Debug)]
pub struct CacheCore {
    layers: Vec<Layer>,
    eviction: Eviction,
    clock: u64,
    counts: Counts,
}

impl CacheCore {
    /// An empty cache of `shapes[layer]` per layer.
    pub fn new(shapes: &[LayerShape], eviction: Eviction) -> Result<CacheCore> {
        if let Eviction::Heat { decay } = eviction {
            if !(decay > 0.0 && decay <= 1.0) {
                return Err(ExpertError::BadOptions(format!(
                    "heat decay {decay} is not in (0, 1]"
                )));
            }
        }
        let layers = shapes
            .iter()
            .map(|s| Layer {
                slots: vec![
                    Slot {
                        expert: None,
                        last: 0,
                        prefetched: false,
                    };
                    s.slots.min(s.n_expert)
                ],
                slot_of: vec![None; s.n_expert],
                pinned: vec![Pin::No; s.n_expert],
                heat: vec![0.0; s.n_expert],
                expert_bytes: s.expert_bytes,
            })
            .collect();
        Ok(CacheCore {
            layers,
            eviction,
            clock: 0,
            counts: Counts::default(),
        })
    }

    /// The eviction policy.
    pub fn eviction(&self) -> Eviction {
        self.eviction
    }

    /// What has been counted so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Slots of `layer` (0 for an unknown layer).
    pub fn slots(&self, layer: usize) -> usize {
        self.layers.get(layer).map_or(0, |l| l.slots.len())
    }

    /// Pin `expert` of `layer`: it will be loaded on its first use and never evicted.
    pub fn pin(&mut self, layer: usize, expert: u32) -> Result<()> {
        let l = self.layer_mut(layer, &[expert])?;
        let e = expert as usize;
        if l.pinned[e] == Pin::No {
            l.pinned[e] = Pin::Cold;
        }
        Ok(())
    }

    /// Whether `expert` of `layer` is pinned.
    pub fn is_pinned(&self, layer: usize, expert: u32) -> bool {
        self.layers
            .get(layer)
            .and_then(|l| l.pinned.get(expert as usize))
            .is_some_and(|p| *p != Pin::No)
    }

    /// Start a layer call over `req` (distinct experts, each with its routed pair
    /// count): update the layer's heat and return the chunks (ranges of `req`) to
    /// acquire one after the other.
    pub fn plan(&mut self, layer: usize, req: &[(u32, u32)]) -> Result<Vec<Range<usize>>> {
        let ids: Vec<u32> = req.iter().map(|r| r.0).collect();
        let eviction = self.eviction;
        let l = self.layer_mut(layer, &ids)?;
        let mut seen = vec![false; l.slot_of.len()];
        for &e in &ids {
            if std::mem::replace(&mut seen[e as usize], true) {
                return Err(ExpertError::BadRequest(format!(
                    "layer {layer}: expert {e} requested twice in one call"
                )));
            }
        }
        if let Eviction::Heat { decay } = eviction {
            l.heat.iter_mut().for_each(|h| *h *= decay);
            for &(e, pairs) in req {
                l.heat[e as usize] += f64::from(pairs);
            }
        }
        let cap = l.slots.len();
        let mut chunks = Vec::new();
        let (mut start, mut unpinned) = (0, 0);
        for (i, &e) in ids.iter().enumerate() {
            if l.pinned[e as usize] != Pin::No {
                continue;
            }
            if unpinned == cap {
                chunks.push(start..i);
                (start, unpinned) = (i, 0);
            }
            unpinned += 1;
        }
        if start < ids.len() || chunks.is_empty() {
            chunks.push(start..ids.len());
        }
        if cap == 0 && unpinned > 0 {
            return Err(ExpertError::BadRequest(format!(
                "layer {layer} has no cache slots for its unpinned experts"
            )));
        }
        Ok(chunks)
    }

    /// Acquire one chunk of a planned call: every expert resident at once.
    /// `out` receives one [`Lookup`] per expert, in order.
    pub fn acquire(&mut self, layer: usize, chunk: &[u32], out: &mut Vec<Lookup>) -> Result<()> {
        self.clock += 1;
        let clock = self.clock;
        let eviction = self.eviction;
        let l = self.layer_mut(layer, chunk)?;
        let unpinned = chunk
            .iter()
            .filter(|&&e| l.pinned[e as usize] == Pin::No)
            .count();
        if unpinned > l.slots.len() {
            return Err(ExpertError::BadRequest(format!(
                "layer {layer}: {unpinned} unpinned experts in one acquire, {} slots",
                l.slots.len()
            )));
        }
        out.clear();
        let mut c = Counts::default();
        // Hits first, so no miss of this chunk evicts an expert it also needs.
        for &e in chunk {
            let ei = e as usize;
            let lookup = match (l.pinned[ei], l.slot_of[ei]) {
                (Pin::Loaded, _) => {
                    c.hits += 1;
                    c.pinned_hits += 1;
                    Some((Place::Pinned, false, false))
                }
                (Pin::Cold, _) => {
                    l.pinned[ei] = Pin::Loaded;
                    c.misses += 1;
                    c.bytes += l.expert_bytes;
                    Some((Place::Pinned, true, false))
                }
                (Pin::No, Some(s)) => {
                    let slot = &mut l.slots[s];
                    slot.last = clock;
                    c.hits += 1;
                    let pre = std::mem::take(&mut slot.prefetched);
                    c.prefetch_hits += u64::from(pre);
                    Some((Place::Slot(s), false, pre))
                }
                (Pin::No, None) => None,
            };
            out.push(Lookup {
                expert: e,
                place: lookup.map_or(Place::Pinned, |x| x.0),
                load: lookup.is_some_and(|x| x.1),
                prefetched: lookup.is_some_and(|x| x.2),
            });
        }
        for (i, &e) in chunk.iter().enumerate() {
            let ei = e as usize;
            if l.pinned[ei] != Pin::No || l.slot_of[ei].is_some() {
                continue;
            }
            let s = l.victim(eviction, clock).ok_or_else(|| {
                ExpertError::BadRequest(format!("layer {layer}: no slot to evict"))
            })?;
            c.prefetch_wasted += u64::from(l.fill(s, e, clock, false));
            c.misses += 1;
            c.bytes += l.expert_bytes;
            out[i] = Lookup {
                expert: e,
                place: Place::Slot(s),
                load: true,
                prefetched: false,
            };
        }
        self.add(c);
        Ok(())
    }

    /// Prefetch `experts` of `layer` (a guess of its next call): each one neither
    /// resident nor pinned-and-loaded takes a victim as a miss would (not a slot
    /// this prefetch filled) and is returned in `out` to be read. Pinned cold
    /// experts load into the pinned tier.
    pub fn prefetch(&mut self, layer: usize, experts: &[u32], out: &mut Vec<Lookup>) -> Result<()> {
        self.clock += 1;
        let clock = self.clock;
        let eviction = self.eviction;
        let l = self.layer_mut(layer, experts)?;
        out.clear();
        let mut c = Counts::default();
        for &e in experts {
            let ei = e as usize;
            let place = match (l.pinned[ei], l.slot_of[ei]) {
                (Pin::Loaded, _) | (Pin::No, Some(_)) => continue,
                (Pin::Cold, _) => {
                    l.pinned[ei] = Pin::Loaded;
                    Place::Pinned
                }
                (Pin::No, None) => {
                    let Some(s) = l.victim(eviction, clock) else {
                        break;
                    };
                    c.prefetch_wasted += u64::from(l.fill(s, e, clock, true));
                    Place::Slot(s)
                }
            };
            c.prefetch_loads += 1;
            c.bytes += l.expert_bytes;
            out.push(Lookup {
                expert: e,
                place,
                load: true,
                prefetched: true,
            });
        }
        self.add(c);
        Ok(())
    }

    /// Forget `expert` of `layer` (its read failed): the next request misses again.
    pub fn invalidate(&mut self, layer: usize, expert: u32) {
        if let Some(l) = self.layers.get_mut(layer) {
            let ei = expert as usize;
            if let Some(p) = l.pinned.get_mut(ei) {
                if *p == Pin::Loaded {
                    *p = Pin::Cold;
                }
            }
            if let Some(s) = l.slot_of.get_mut(ei).and_then(Option::take) {
                l.slots[s].expert = None;
                l.slots[s].prefetched = false;
            }
        }
    }

    fn add(&mut self, c: Counts) {
        let t = &mut self.counts;
        t.hits += c.hits;
        t.misses += c.misses;
        t.pinned_hits += c.pinned_hits;
        t.prefetch_loads += c.prefetch_loads;
        t.prefetch_hits += c.prefetch_hits;
        t.prefetch_wasted += c.prefetch_wasted;
        t.bytes += c.bytes;
    }

    fn layer_mut(&mut self, layer: usize, experts: &[u32]) -> Result<&mut Layer> {
        let l = self
            .layers
            .get_mut(layer)
            .filter(|l| !l.slot_of.is_empty())
            .ok_or_else(|| ExpertError::BadRequest(format!("layer {layer} has no experts")))?;
        if let Some(&bad) = experts.iter().find(|&&e| e as usize >= l.slot_of.len()) {
            return Err(ExpertError::BadRequest(format!(
                "layer {layer}: expert {bad} of {}",
                l.slot_of.len()
            )));
        }
        Ok(l)
    }
}

impl Layer {
    /// The slot a miss at `clock` evicts (never one touched at `clock`).
    fn victim(&self, eviction: Eviction, clock: u64) -> Option<usize> {
        let free = self.slots.iter().position(|s| s.expert.is_none());
        if free.is_some() {
            return free;
        }
        let candidates = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.last != clock);
        match eviction {
            Eviction::Lru => candidates.min_by_key(|(_, s)| s.last).map(|(i, _)| i),
            Eviction::Heat { .. } => candidates
                .min_by(|(_, a), (_, b)| {
                    let heat = |s: &Slot| s.expert.map_or(0.0, |e| self.heat[e as usize]);
                    heat(a).total_cmp(&heat(b)).then(a.last.cmp(&b.last))
                })
                .map(|(i, _)| i),
        }
    }

    /// Put `expert` in slot `s`; whether the evicted expert was an unused prefetch.
    fn fill(&mut self, s: usize, expert: u32, clock: u64, prefetched: bool) -> bool {
        let slot = &mut self.slots[s];
        if let Some(old) = slot.expert {
            self.slot_of[old as usize] = None;
        }
        let wasted = slot.expert.is_some() && slot.prefetched;
        *slot = Slot {
            expert: Some(expert),
            last: clock,
            prefetched,
        };
        self.slot_of[expert as usize] = Some(s);
        wasted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(slots: usize, eviction: Eviction) -> CacheCore {
        let shape = LayerShape {
            n_expert: 8,
            slots,
            expert_bytes: 10,
        };
        CacheCore::new(&[shape], eviction).expect("core")
    }

    fn call(c: &mut CacheCore, req: &[(u32, u32)]) -> Vec<Lookup> {
        let mut all = Vec::new();
        let ids: Vec<u32> = req.iter().map(|r| r.0).collect();
        for r in c.plan(0, req).expect("plan") {
            let mut out = Vec::new();
            c.acquire(0, &ids[r], &mut out).expect("acquire");
            all.extend(out);
        }
        all
    }

    #[test]
    fn heat_keeps_the_hot_expert_lru_does_not() {
        // Expert 0 is hot (many pairs); 1, 2, 3 pass through once each.
        let mut heat = core(2, Eviction::default());
        let mut lru = core(2, Eviction::Lru);
        for c in [&mut heat, &mut lru] {
            call(c, &[(0, 8)]);
            call(c, &[(1, 1)]);
            call(c, &[(2, 1)]);
            call(c, &[(3, 1)]);
            call(c, &[(0, 8)]);
        }
        assert_eq!(heat.counts().hits, 1);
        assert_eq!(lru.counts().hits, 0);
    }

    #[test]
    fn a_call_larger_than_the_slots_is_chunked_and_never_evicts_its_own_chunk() {
        let mut c = core(2, Eviction::Lru);
        let out = call(&mut c, &[(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]);
        assert_eq!(out.len(), 5);
        assert!(out.iter().all(|l| l.load));
        assert_eq!(
            c.plan(0, &[(0, 1), (1, 1), (2, 1)]).expect("plan"),
            vec![0..2, 2..3]
        );
    }

    #[test]
    fn pinned_experts_load_once_and_stay() {
        let mut c = core(1, Eviction::Lru);
        c.pin(0, 5).expect("pin");
        call(&mut c, &[(5, 1), (1, 1)]);
        call(&mut c, &[(5, 1), (2, 1)]);
        let k = c.counts();
        assert_eq!((k.hits, k.misses, k.pinned_hits), (1, 3, 1));
    }

    #[test]
    fn prefetch_hits_and_waste_are_counted() {
        let mut c = core(2, Eviction::Lru);
        let mut out = Vec::new();
        c.prefetch(0, &[3, 4], &mut out).expect("prefetch");
        assert_eq!(out.len(), 2);
        let got = call(&mut c, &[(3, 1)]);
        assert!(got[0].prefetched && !got[0].load);
        call(&mut c, &[(5, 1)]);
        let k = c.counts();
        assert_eq!(
            (k.prefetch_loads, k.prefetch_hits, k.prefetch_wasted),
            (2, 1, 1)
        );
    }

    #[test]
    fn bad_requests_are_errors() {
        let mut c = core(2, Eviction::Lru);
        assert!(c.plan(0, &[(9, 1)]).is_err());
        assert!(c.plan(1, &[(0, 1)]).is_err());
        assert!(c.plan(0, &[(1, 1), (1, 1)]).is_err());
        let mut out = Vec::new();
        assert!(c.acquire(0, &[0, 1, 2], &mut out).is_err());
        assert!(CacheCore::new(&[], Eviction::Heat { decay: 0.0 }).is_err());
    }
}
