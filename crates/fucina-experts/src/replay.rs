//! Offline replay of a recorded trace ([`crate::trace`]): the live policy exactly
//! as the store ran it ([`replay_live`]), and a capacity sweep through LRU, heat,
//! segmented LRU, Belady-optimal and pinned+LRU ([`sweep`]) — whether more cache
//! would help, and whether the policy or the capacity is the bottleneck (LRU flat
//! where Belady climbs means the policy).
//!
//! Every policy of the sweep sees the same demand sequence: the trace's layer
//! calls, each layer's requests in call order, a capacity of `C` experts per layer
//! (pins included), every requested expert cached (no bypass), prefetches left
//! out. LRU, heat and pinned+LRU run through [`CacheCore`], chunks and all, as the
//! live store would at that capacity; segmented LRU and Belady run per request.
//! Belady (evict the expert whose next request is furthest away) is optimal for
//! such a sequence, so it bounds every other column.

use std::collections::BTreeSet;

use crate::cache::{CacheCore, Counts, Eviction, LayerShape, DEFAULT_HEAT_DECAY};
use crate::histogram::Histogram;
use crate::trace::{Event, Trace};
use crate::Result;

/// A replayed policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Least recently used.
    Lru,
    /// Decayed routed counts (the store's default).
    Heat,
    /// Segmented LRU: a probation segment and a protected one (80% of the slots)
    /// for experts hit at least twice.
    Slru,
    /// Belady's optimal offline policy.
    Belady,
    /// A pinned set (half the capacity: the layer's most-routed experts) and LRU
    /// over the rest.
    PinnedLru,
}

impl Policy {
    /// Every policy, in table order.
    pub const ALL: [Policy; 5] = [
        Policy::Lru,
        Policy::Heat,
        Policy::Slru,
        Policy::Belady,
        Policy::PinnedLru,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Lru => "lru",
            Policy::Heat => "heat",
            Policy::Slru => "slru",
            Policy::Belady => "belady",
            Policy::PinnedLru => "pinned+lru",
        }
    }
}

/// One cell of the sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepRow {
    /// The policy.
    pub policy: Policy,
    /// Capacity in experts per layer.
    pub slots: usize,
    /// Requests served from the cache.
    pub hits: u64,
    /// Requests.
    pub requests: u64,
    /// Bytes the misses read.
    pub bytes: u64,
}

impl SweepRow {
    /// `hits / requests`.
    pub fn hit_rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.hits as f64 / self.requests as f64
        }
    }
}

/// How to sweep.
#[derive(Clone, Debug, Default)]
pub struct SweepOptions {
    /// Capacities (experts per layer). Empty: powers of two up to the largest
    /// expert count, and the live capacity.
    pub slots: Vec<usize>,
    /// The heat policy's decay. `None`: the trace's live decay, else the default.
    pub heat_decay: Option<f64>,
    /// Draw pinned+LRU's pins from this histogram (a `<gguf>.experts` of earlier
    /// sessions) instead of the trace's own counts (the oracle).
    pub pins_from: Option<Histogram>,
}

/// Replay the trace through the live policy, pins and prefetches included: the
/// counts the live store reported.
pub fn replay_live(trace: &Trace) -> Result<Counts> {
    let mut core = CacheCore::new(&trace.layers, trace.eviction)?;
    for &(l, e) in &trace.pins {
        core.pin(l, e)?;
    }
    let mut out = Vec::new();
    for ev in &trace.events {
        match ev {
            Event::Call { layer, experts } => call(&mut core, *layer, experts, &mut out)?,
            Event::Prefetch { layer, experts } => core.prefetch(*layer, experts, &mut out)?,
        }
    }
    Ok(core.counts())
}

fn call(
    core: &mut CacheCore,
    layer: usize,
    experts: &[(u32, u32)],
    out: &mut Vec<crate::cache::Lookup>,
) -> Result<()> {
    let ids: Vec<u32> = experts.iter().map(|e| e.0).collect();
    for r in core.plan(layer, experts)? {
        core.acquire(layer, &ids[r], out)?;
    }
    Ok(())
}

/// The capacity sweep (see the module doc): one row per capacity and policy.
pub fn sweep(trace: &Trace, options: &SweepOptions) -> Result<Vec<SweepRow>> {
    let max_n = trace.layers.iter().map(|l| l.n_expert).max().unwrap_or(0);
    let mut caps = options.slots.clone();
    if caps.is_empty() {
        caps.extend((0..).map(|i| 1usize << i).take_while(|&c| c < max_n));
        caps.push(max_n);
        caps.extend(
            trace
                .layers
                .iter()
                .filter(|l| l.n_expert > 0)
                .map(|l| l.slots),
        );
    }
    caps.retain(|&c| c > 0);
    caps.sort_unstable();
    caps.dedup();
    let decay = options.heat_decay.unwrap_or(match trace.eviction {
        Eviction::Heat { decay } => decay,
        Eviction::Lru => DEFAULT_HEAT_DECAY,
    });
    let oracle = usage(trace);
    let pin_counts = match &options.pins_from {
        Some(h) if h.same_shape(&oracle) => h,
        Some(_) => {
            return Err(crate::ExpertError::BadOptions(
                "the pins histogram is of another model shape than the trace".into(),
            ))
        }
        None => &oracle,
    };
    let requests: u64 = trace
        .events
        .iter()
        .map(|e| match e {
            Event::Call { experts, .. } => experts.len() as u64,
            Event::Prefetch { .. } => 0,
        })
        .sum();
    let mut rows = Vec::new();
    for &c in &caps {
        for policy in Policy::ALL {
            let (hits, bytes) = match policy {
                Policy::Lru => through_core(trace, c, Eviction::Lru, None)?,
                Policy::Heat => through_core(trace, c, Eviction::Heat { decay }, None)?,
                Policy::PinnedLru => through_core(trace, c, Eviction::Lru, Some(pin_counts))?,
                Policy::Slru => per_layer(trace, c, slru),
                Policy::Belady => per_layer(trace, c, belady),
            };
            rows.push(SweepRow {
                policy,
                slots: c,
                hits,
                requests,
                bytes,
            });
        }
    }
    Ok(rows)
}

/// Routed pairs per layer and expert over the trace's calls.
pub fn usage(trace: &Trace) -> Histogram {
    let n: Vec<usize> = trace.layers.iter().map(|l| l.n_expert).collect();
    let mut h = Histogram::zeros(&n);
    for ev in &trace.events {
        if let Event::Call { layer, experts } = ev {
            for &(e, p) in experts {
                h.counts[*layer][e as usize] += u64::from(p);
            }
        }
    }
    h
}

/// (hits, bytes) of the calls through a [`CacheCore`] of `c` experts per layer;
/// with `pins`, each layer's `c / 2` most-routed experts are pinned.
fn through_core(
    trace: &Trace,
    c: usize,
    eviction: Eviction,
    pins: Option<&Histogram>,
) -> Result<(u64, u64)> {
    let mut chosen: Vec<Vec<u32>> = vec![Vec::new(); trace.layers.len()];
    if let Some(h) = pins {
        for (l, counts) in h.counts.iter().enumerate() {
            let mut order: Vec<u32> = (0..counts.len() as u32)
                .filter(|&e| counts[e as usize] > 0)
                .collect();
            order.sort_by(|&a, &b| counts[b as usize].cmp(&counts[a as usize]).then(a.cmp(&b)));
            order.truncate(c.min(counts.len()) / 2);
            chosen[l] = order;
        }
    }
    let shapes: Vec<LayerShape> = trace
        .layers
        .iter()
        .zip(&chosen)
        .map(|(l, p)| LayerShape {
            slots: c.min(l.n_expert).saturating_sub(p.len()).max(1),
            ..*l
        })
        .collect();
    let mut core = CacheCore::new(&shapes, eviction)?;
    for (l, p) in chosen.iter().enumerate() {
        for &e in p {
            core.pin(l, e)?;
        }
    }
    let mut out = Vec::new();
    for ev in &trace.events {
        if let Event::Call { layer, experts } = ev {
            call(&mut core, *layer, experts, &mut out)?;
        }
    }
    let k = core.counts();
    Ok((k.hits, k.bytes))
}

/// (hits, bytes) of a per-request policy run on each layer's request sequence.
fn per_layer(trace: &Trace, c: usize, policy: fn(&[u32], usize, usize) -> u64) -> (u64, u64) {
    let mut seqs: Vec<Vec<u32>> = vec![Vec::new(); trace.layers.len()];
    for ev in &trace.events {
        if let Event::Call { layer, experts } = ev {
            seqs[*layer].extend(experts.iter().map(|e| e.0));
        }
    }
    let (mut hits, mut bytes) = (0, 0);
    for (l, seq) in seqs.iter().enumerate() {
        let shape = &trace.layers[l];
        let h = policy(seq, c.min(shape.n_expert).max(1), shape.n_expert);
        hits += h;
        bytes += (seq.len() as u64 - h) * shape.expert_bytes;
    }
    (hits, bytes)
}

/// Hits of segmented LRU of capacity `c` on `seq`.
fn slru(seq: &[u32], c: usize, _n: usize) -> u64 {
    let prot_cap = c * 4 / 5;
    // Most recent last.
    let (mut prob, mut prot): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
    let mut hits = 0;
    for &e in seq {
        if let Some(i) = prot.iter().position(|&x| x == e) {
            hits += 1;
            prot.remove(i);
            prot.push(e);
        } else if let Some(i) = prob.iter().position(|&x| x == e) {
            hits += 1;
            prob.remove(i);
            if prot_cap == 0 {
                prob.push(e);
                continue;
            }
            if prot.len() == prot_cap {
                let demoted = prot.remove(0);
                prob.push(demoted);
            }
            prot.push(e);
        } else {
            if prob.len() + prot.len() == c {
                if prob.is_empty() {
                    prot.remove(0);
                } else {
                    prob.remove(0);
                }
            }
            prob.push(e);
        }
    }
    hits
}

/// Hits of Belady's policy of capacity `c` on `seq` (experts below `n`).
fn belady(seq: &[u32], c: usize, n: usize) -> u64 {
    let mut next = vec![usize::MAX; seq.len()];
    let mut last = vec![usize::MAX; n];
    for i in (0..seq.len()).rev() {
        next[i] = last[seq[i] as usize];
        last[seq[i] as usize] = i;
    }
    // (next use, expert) of every resident expert; the largest is evicted.
    let mut resident: BTreeSet<(usize, u32)> = BTreeSet::new();
    let mut next_of = vec![None::<usize>; n];
    let mut hits = 0;
    for (i, &e) in seq.iter().enumerate() {
        if let Some(nu) = next_of[e as usize] {
            hits += 1;
            resident.remove(&(nu, e));
        } else if resident.len() == c {
            if let Some(&(nu, victim)) = resident.iter().next_back() {
                resident.remove(&(nu, victim));
                next_of[victim as usize] = None;
            }
        }
        resident.insert((next[i], e));
        next_of[e as usize] = Some(next[i]);
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn belady_on_a_textbook_sequence() {
        // 1 2 3 4 1 2 5 1 2 3 4 5 with 3 frames: 7 faults, 5 hits.
        let seq = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5];
        assert_eq!(belady(&seq, 3, 6), 5);
        // LRU on it with 3 frames: 10 faults.
        assert_eq!(slru(&seq, 1, 6), 0);
    }
}
