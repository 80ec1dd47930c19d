//! The expert store: a model's stacked expert tensors registered per layer
//! (geometry checked, nothing read), single experts read on demand into a RAM
//! cache of a byte budget (slots per layer plus a pinned tier), parallel reads on
//! io threads, optional prefetch, stats, and the trace and usage histogram
//! written at teardown.
//!
//! The forward calls [`ExpertStore::with_experts`] with a layer's used experts:
//! the store runs the call through [`CacheCore`] (which decides hits, misses and
//! victims), reads the misses, and hands the callback each chunk's experts while
//! its guard (the `Arc`s of their bytes) keeps them resident. Bytes are only ever
//! handed out once fully read; a short read (a truncated file) is an error for
//! every caller waiting on that expert, and the expert is forgotten.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::cache::{CacheCore, Counts, Eviction, LayerShape, Lookup, Place};
use crate::histogram::{Histogram, PinChoice, DEFAULT_MIN_PIN_ADVANTAGE};
use crate::io::{ExpertBytes, IoPool, Source, Ticket};
use crate::trace::{Event, Trace};
use crate::{ExpertError, Result};

/// `FUCINA_MOE_LRU=1` makes the store evict least-recently-used instead of by heat
/// (A/B runs without code changes).
pub const LRU_ENV: &str = "FUCINA_MOE_LRU";
/// Reader threads when none are asked for: enough to keep a few expert reads in
/// flight per layer (a decode miss burst is `n_expert_used` experts).
pub const DEFAULT_IO_THREADS: usize = 4;
const MAX_IO_THREADS: usize = 64;

/// How a store streams (the `--moe-*` flags and the `LLM(moe_*=...)` arguments).
#[derive(Clone, Debug, PartialEq)]
pub struct StoreOptions {
    /// RAM for experts (slots and pinned tier). `None`: room for every expert
    /// (nothing is evicted; experts are still read only when first used).
    pub cache_bytes: Option<u64>,
    /// Slots per layer instead of the ones the budget gives.
    pub slots_per_layer: Option<usize>,
    /// Eviction policy. `None`: heat, or LRU when `FUCINA_MOE_LRU=1`.
    pub eviction: Option<Eviction>,
    /// Drop each streamed expert's pages from the page cache after reading it.
    pub uncached: bool,
    /// Reader threads (0: reads run on the forward's thread, no prefetch).
    pub io_threads: usize,
    /// Router-lookahead prefetch of the next layer's likely experts.
    pub prefetch: bool,
    /// Seed a pinned tier from the usage histogram (when there is one).
    pub auto_pin: bool,
    /// Bytes of the budget for the pinned tier. `None`: half the budget.
    pub pin_bytes: Option<u64>,
    /// See [`DEFAULT_MIN_PIN_ADVANTAGE`].
    pub min_pin_advantage: f64,
    /// The usage histogram read at load and written at teardown (by convention
    /// `<gguf>.experts`). `None`: neither.
    pub histogram: Option<PathBuf>,
    /// Record the trace and write it here at teardown.
    pub trace: Option<PathBuf>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_bytes: None,
            slots_per_layer: None,
            eviction: None,
            uncached: false,
            io_threads: DEFAULT_IO_THREADS,
            prefetch: false,
            auto_pin: true,
            pin_bytes: None,
            min_pin_advantage: DEFAULT_MIN_PIN_ADVANTAGE,
            histogram: None,
            trace: None,
        }
    }
}

impl StoreOptions {
    /// The eviction policy these options give (see [`StoreOptions::eviction`]).
    pub fn resolved_eviction(&self) -> Eviction {
        self.eviction.unwrap_or_else(|| {
            match std::env::var(LRU_ENV)
                .map(|v| v.trim().to_owned())
                .as_deref()
            {
                Ok("1") => Eviction::Lru,
                _ => Eviction::default(),
            }
        })
    }
}

/// One stacked expert tensor of a layer (`ffn_{gate,up,down}_exps`): expert `i`'s
/// bytes are `expert_bytes` at `offset + i * stride` of file part `part`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackSpec {
    /// The tensor's name (errors).
    pub name: String,
    /// Which file of a split model.
    pub part: usize,
    /// Byte offset of expert 0 in that file.
    pub offset: u64,
    /// Bytes from one expert to the next.
    pub stride: u64,
    /// Bytes of one expert.
    pub expert_bytes: u64,
    /// Experts in the stack.
    pub n_expert: usize,
}

#[derive(Debug)]
struct LayerLayout {
    stacks: Vec<StackSpec>,
    /// Each stack's bytes inside an [`ExpertBytes`].
    ranges: Vec<Range<usize>>,
    bytes: usize,
    n_expert: usize,
}

/// Collects the stacks of every layer, then builds the store
/// ([`ExpertStoreBuilder::build`]).
#[derive(Debug)]
pub struct ExpertStoreBuilder {
    sources: Vec<Source>,
    layers: Vec<Option<LayerLayout>>,
    options: StoreOptions,
}

impl ExpertStoreBuilder {
    /// A store over the files `paths` (the parts of a split GGUF, in order) of a
    /// model of `n_layers` layers.
    pub fn new(paths: &[PathBuf], n_layers: usize, options: StoreOptions) -> Result<Self> {
        if options.io_threads > MAX_IO_THREADS {
            return Err(ExpertError::BadOptions(format!(
                "{} io threads (at most {MAX_IO_THREADS})",
                options.io_threads
            )));
        }
        if options.min_pin_advantage.is_nan() || options.min_pin_advantage < 0.0 {
            return Err(ExpertError::BadOptions("negative pin advantage".into()));
        }
        let sources = paths
            .iter()
            .map(|p| Source::open(p.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(ExpertStoreBuilder {
            sources,
            layers: (0..n_layers).map(|_| None).collect(),
            options,
        })
    }

    /// Register layer `layer`'s expert stacks (gate, up, down: one expert is the
    /// same index of each). Checked: every stack has the same expert count, fits
    /// its file, and its experts do not overlap; nothing is read.
    pub fn register(&mut self, layer: usize, stacks: Vec<StackSpec>) -> Result<()> {
        let n_layers = self.layers.len();
        let entry = self.layers.get_mut(layer).ok_or_else(|| {
            ExpertError::BadRequest(format!("layer {layer} of a {n_layers}-layer model"))
        })?;
        if entry.is_some() {
            return Err(ExpertError::BadRequest(format!(
                "layer {layer} registered twice"
            )));
        }
        let n_expert = stacks.first().map_or(0, |s| s.n_expert);
        let mut ranges = Vec::with_capacity(stacks.len());
        let mut bytes = 0usize;
        for s in &stacks {
            let bad = |why: String| ExpertError::BadStack {
                stack: s.name.clone(),
                why,
            };
            if s.n_expert != n_expert || n_expert == 0 {
                return Err(bad(format!(
                    "{} experts, the layer has {n_expert}",
                    s.n_expert
                )));
            }
            if s.expert_bytes == 0 || s.stride < s.expert_bytes {
                return Err(bad(format!(
                    "{} bytes per expert at a stride of {}",
                    s.expert_bytes, s.stride
                )));
            }
            let file = self
                .sources
                .get(s.part)
                .ok_or_else(|| bad(format!("file part {} of {}", s.part, self.sources.len())))?;
            let end = (s.n_expert as u64 - 1)
                .checked_mul(s.stride)
                .and_then(|x| x.checked_add(s.offset))
                .and_then(|x| x.checked_add(s.expert_bytes));
            if end.is_none_or(|end| end > file.len) {
                return Err(bad(format!(
                    "experts end past {} ({} bytes; truncated file?)",
                    file.path.display(),
                    file.len
                )));
            }
            let len = usize::try_from(s.expert_bytes).map_err(|_| bad("too large".into()))?;
            ranges.push(bytes..bytes + len);
            bytes = bytes
                .checked_add(len)
                .ok_or_else(|| bad("too large".into()))?;
        }
        if stacks.is_empty() {
            return Err(ExpertError::BadRequest(format!("layer {layer}: no stacks")));
        }
        *entry = Some(LayerLayout {
            stacks,
            ranges,
            bytes,
            n_expert,
        });
        Ok(())
    }

    /// Size the cache from the budget (and the pinned tier from the histogram) and
    /// start the readers.
    pub fn build(self) -> Result<ExpertStore> {
        let o = &self.options;
        let eviction = o.resolved_eviction();
        let eb: Vec<u64> = self
            .layers
            .iter()
            .map(|l| l.as_ref().map_or(0, |l| l.bytes as u64))
            .collect();
        let n_expert: Vec<usize> = self
            .layers
            .iter()
            .map(|l| l.as_ref().map_or(0, |l| l.n_expert))
            .collect();
        let all_bytes: u64 = eb.iter().zip(&n_expert).map(|(b, n)| b * *n as u64).sum();
        let per_layer: u64 = eb.iter().sum();
        let budget = o.cache_bytes.unwrap_or(all_bytes);
        let mut notes = Vec::new();

        let loaded = match (&o.histogram, o.auto_pin) {
            (Some(p), _) => match Histogram::load(p) {
                Ok(Some(h)) if h.same_shape(&Histogram::zeros(&n_expert)) => Some(h),
                Ok(Some(_)) => {
                    notes.push(format!(
                        "{}: histogram of another model shape, ignored",
                        p.display()
                    ));
                    None
                }
                Ok(None) => None,
                Err(e) => {
                    notes.push(format!("histogram ignored: {e}"));
                    None
                }
            },
            (None, _) => None,
        };
        let choice = match &loaded {
            Some(h) if o.auto_pin && budget < all_bytes => {
                let pin_budget = o.pin_bytes.unwrap_or(budget / 2).min(budget);
                h.choose_pins(&eb, pin_budget, o.min_pin_advantage)
            }
            _ => PinChoice::default(),
        };
        if choice.declined_flat {
            notes.push(format!(
                "auto-pin declined: the usage histogram is ~flat (advantage {:.2} < {:.2}); the whole budget goes to the cache",
                choice.advantage, o.min_pin_advantage
            ));
        }
        let pinned_bytes: u64 = choice.pins.iter().map(|&(l, _)| eb[l]).sum();
        let slots = match o.slots_per_layer {
            Some(s) => s,
            None if per_layer == 0 => 0,
            None => usize::try_from(budget.saturating_sub(pinned_bytes) / per_layer)
                .unwrap_or(usize::MAX),
        };
        let shapes: Vec<LayerShape> = n_expert
            .iter()
            .zip(&eb)
            .map(|(&n, &b)| LayerShape {
                n_expert: n,
                slots: slots.clamp(1, n.max(1)) * usize::from(n > 0),
                expert_bytes: b,
            })
            .collect();
        if o.slots_per_layer.is_none() && slots == 0 && per_layer > 0 {
            notes.push(format!(
                "cache budget {budget} B is under one expert per layer ({per_layer} B): using one slot per layer"
            ));
        }
        let mut core = CacheCore::new(&shapes, eviction)?;
        for &(l, e) in &choice.pins {
            core.pin(l, e)?;
        }
        let trace = o
            .trace
            .as_ref()
            .map(|_| Trace::new(shapes.clone(), eviction, choice.pins.clone()));
        let state = State {
            slots: shapes.iter().map(|s| vec![None; s.slots]).collect(),
            pinned: n_expert.iter().map(|&n| vec![None; n]).collect(),
            core,
            trace,
            usage: Histogram::zeros(&n_expert),
            prefetch_late: 0,
            notes,
        };
        Ok(ExpertStore {
            io: IoPool::new(o.io_threads)?,
            sources: Arc::new(self.sources),
            layers: self.layers.into_iter().map(|l| l.map(Arc::new)).collect(),
            options: self.options,
            state: Mutex::new(state),
            bytes_read: Arc::new(AtomicU64::new(0)),
            stall_ns: AtomicU64::new(0),
            shapes,
            all_bytes,
            choice,
            loaded,
        })
    }
}

#[derive(Debug)]
struct State {
    core: CacheCore,
    /// Per layer, per slot: the read of its expert.
    slots: Vec<Vec<Option<Arc<Ticket>>>>,
    /// Per layer, per expert: the read of its pinned copy.
    pinned: Vec<Vec<Option<Arc<Ticket>>>>,
    trace: Option<Trace>,
    usage: Histogram,
    prefetch_late: u64,
    /// For the report (a declined auto-pin, an ignored or unwritable histogram).
    notes: Vec<String>,
}

impl State {
    fn entry(&mut self, layer: usize, l: &Lookup) -> &mut Option<Arc<Ticket>> {
        match l.place {
            Place::Pinned => &mut self.pinned[layer][l.expert as usize],
            Place::Slot(s) => &mut self.slots[layer][s],
        }
    }
}

/// The store's numbers ([`ExpertStore::stats`]).
#[derive(Clone, Debug, PartialEq)]
pub struct StoreStats {
    /// Hits, misses, prefetches, bytes (see [`Counts`]).
    pub counts: Counts,
    /// Bytes actually read from the files.
    pub bytes_read: u64,
    /// Prefetched experts an acquire had to wait for.
    pub prefetch_late: u64,
    /// Time the forward waited for reads, in nanoseconds.
    pub stall_ns: u64,
    /// Cache slots of each layer with experts.
    pub slots_per_layer: usize,
    /// Bytes of every expert of the model.
    pub expert_bytes: u64,
    /// Bytes the slots and the pinned tier can hold.
    pub cache_bytes: u64,
    /// Pinned experts.
    pub pinned: usize,
    /// Auto-pin was declined on a ~flat histogram.
    pub pins_declined_flat: bool,
    /// The pinned candidates' traffic advantage (0 without a histogram).
    pub pin_advantage: f64,
    /// The eviction policy.
    pub eviction: Eviction,
    /// Reads drop their pages from the page cache.
    pub uncached: bool,
    /// Reader threads.
    pub io_threads: usize,
    /// Things worth telling the user (a declined auto-pin, an ignored histogram).
    pub notes: Vec<String>,
}

impl StoreStats {
    /// The exit report, one paragraph.
    pub fn report(&self) -> String {
        let c = &self.counts;
        let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
        let policy = match self.eviction {
            Eviction::Heat { decay } => format!("heat (decay {decay})"),
            Eviction::Lru => "LRU".into(),
        };
        let mut s = format!(
            "[moe stream: {} hits / {} misses ({:.1}% hit rate; {} pinned hits), {:.1} MiB read; \
             cache {:.1} of {:.1} MiB of experts, {} slots per layer, {} pinned, {policy}, \
             {} io threads{}; prefetch {} loads, {} used ({} late), {} wasted; {:.1} ms waiting for reads]",
            c.hits,
            c.misses,
            100.0 * c.hit_rate(),
            c.pinned_hits,
            mb(self.bytes_read),
            mb(self.cache_bytes),
            mb(self.expert_bytes),
            self.slots_per_layer,
            self.pinned,
            self.io_threads,
            if self.uncached { ", uncached" } else { "" },
            c.prefetch_loads,
            c.prefetch_hits,
            self.prefetch_late,
            c.prefetch_wasted,
            self.stall_ns as f64 / 1e6,
        );
        for n in &self.notes {
            s.push_str("\n[moe stream: ");
            s.push_str(n);
            s.push(']');
        }
        s
    }
}

/// The expert store (see the module doc). Dropping it writes the trace and the
/// histogram (errors then are lost: call [`ExpertStore::finish`] to see them).
#[derive(Debug)]
pub struct ExpertStore {
    sources: Arc<Vec<Source>>,
    layers: Vec<Option<Arc<LayerLayout>>>,
    options: StoreOptions,
    state: Mutex<State>,
    io: IoPool,
    bytes_read: Arc<AtomicU64>,
    stall_ns: AtomicU64,
    shapes: Vec<LayerShape>,
    all_bytes: u64,
    choice: PinChoice,
    loaded: Option<Histogram>,
}

/// One chunk of a layer call handed to [`ExpertStore::with_experts`]'s callback.
pub struct Chunk<'a> {
    /// (expert, routed pairs) of the chunk, in request order.
    pub experts: &'a [(u32, u32)],
    /// Their bytes, same order (stack `s` of an expert is `bytes[..][range(s)]`).
    pub bytes: &'a [Arc<ExpertBytes>],
}

impl ExpertStore {
    /// The options the store was built with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Slots of `layer`'s cache.
    pub fn slots(&self, layer: usize) -> usize {
        self.shapes.get(layer).map_or(0, |s| s.slots)
    }

    /// Where stack `stack` of `layer` lies inside each [`ExpertBytes`].
    pub fn stack_range(&self, layer: usize, stack: usize) -> Option<Range<usize>> {
        self.layers.get(layer)?.as_ref()?.ranges.get(stack).cloned()
    }

    /// Run one layer call: `used` holds the distinct experts the layer needs with
    /// their routed pair counts. `f` is called once per chunk (at most the layer's
    /// slots of unpinned experts) with the chunk's experts resident.
    pub fn with_experts<E: From<ExpertError>>(
        &self,
        layer: usize,
        used: &[(u32, u32)],
        mut f: impl FnMut(&Chunk<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let chunks = {
            let mut st = self.lock();
            let chunks = st.core.plan(layer, used)?;
            for &(e, pairs) in used {
                let c = &mut st.usage.counts[layer][e as usize];
                *c = c.saturating_add(u64::from(pairs));
            }
            if let Some(t) = st.trace.as_mut() {
                t.events.push(Event::Call {
                    layer,
                    experts: used.to_vec(),
                });
            }
            chunks
        };
        let mut lookups = Vec::new();
        for r in chunks {
            let part = &used[r];
            let ids: Vec<u32> = part.iter().map(|p| p.0).collect();
            let mut jobs = Vec::new();
            let tickets: Vec<(Lookup, Arc<Ticket>)> = {
                let mut st = self.lock();
                st.core.acquire(layer, &ids, &mut lookups)?;
                lookups
                    .iter()
                    .map(|l| {
                        let t = match (l.load, st.entry(layer, l).clone()) {
                            (false, Some(t)) => t,
                            (false, None) => {
                                return Err(ExpertError::BadRequest(format!(
                                    "layer {layer}: expert {} is resident without bytes",
                                    l.expert
                                )))
                            }
                            (true, _) => {
                                let t = Arc::new(Ticket::default());
                                *st.entry(layer, l) = Some(Arc::clone(&t));
                                jobs.push((l.expert, Arc::clone(&t)));
                                t
                            }
                        };
                        if l.prefetched && !t.is_done() {
                            st.prefetch_late += 1;
                        }
                        Ok((*l, t))
                    })
                    .collect::<Result<_>>()?
            };
            self.submit(layer, jobs)?;
            let start = Instant::now();
            let mut bytes = Vec::with_capacity(tickets.len());
            let mut failed = None;
            for (l, t) in &tickets {
                match t.wait() {
                    Ok(b) => bytes.push(b),
                    Err(e) => {
                        self.forget(layer, l, t);
                        failed.get_or_insert(e);
                    }
                }
            }
            self.stall_ns.fetch_add(
                u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            if let Some(e) = failed {
                return Err(e.into());
            }
            f(&Chunk {
                experts: part,
                bytes: &bytes,
            })?;
        }
        Ok(())
    }

    /// Ask for `experts` of `layer` ahead of its call (a guess): those not resident
    /// are read in the background into slots chosen as a miss would choose them.
    /// A no-op unless the store prefetches (and has reader threads).
    pub fn prefetch(&self, layer: usize, experts: &[u32]) -> Result<()> {
        if !self.options.prefetch || !self.io.is_async() || experts.is_empty() {
            return Ok(());
        }
        let mut jobs = Vec::new();
        {
            let mut st = self.lock();
            let mut lookups = Vec::new();
            st.core.prefetch(layer, experts, &mut lookups)?;
            if let Some(t) = st.trace.as_mut() {
                t.events.push(Event::Prefetch {
                    layer,
                    experts: experts.to_vec(),
                });
            }
            for l in &lookups {
                let t = Arc::new(Ticket::default());
                *st.entry(layer, l) = Some(Arc::clone(&t));
                jobs.push((l.expert, t));
            }
        }
        self.submit(layer, jobs)
    }

    /// Whether prefetches do anything.
    pub fn prefetches(&self) -> bool {
        self.options.prefetch && self.io.is_async()
    }

    /// The numbers so far.
    pub fn stats(&self) -> StoreStats {
        let st = self.lock();
        let slots = self.shapes.iter().map(|s| s.slots).max().unwrap_or(0);
        let slot_bytes: u64 = self
            .shapes
            .iter()
            .map(|s| s.slots as u64 * s.expert_bytes)
            .sum();
        let pinned_bytes: u64 = self
            .choice
            .pins
            .iter()
            .map(|&(l, _)| self.shapes[l].expert_bytes)
            .sum();
        StoreStats {
            counts: st.core.counts(),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            prefetch_late: st.prefetch_late,
            stall_ns: self.stall_ns.load(Ordering::Relaxed),
            slots_per_layer: slots,
            expert_bytes: self.all_bytes,
            cache_bytes: slot_bytes + pinned_bytes,
            pinned: self.choice.pins.len(),
            pins_declined_flat: self.choice.declined_flat,
            pin_advantage: self.choice.advantage,
            eviction: st.core.eviction(),
            uncached: self.options.uncached,
            io_threads: self.options.io_threads,
            notes: st.notes.clone(),
        }
    }

    /// The usage of this session so far (routed pairs per layer and expert).
    pub fn usage(&self) -> Histogram {
        self.lock().usage.clone()
    }

    /// The trace recorded so far (`None` unless recording).
    pub fn trace(&self) -> Option<Trace> {
        self.lock().trace.clone()
    }

    /// Write the trace and the histogram (earlier sessions' counts plus this
    /// one's) now; teardown does it again with whatever came after. The histogram
    /// is a cache: failing to write it (a read-only model directory) is a note in
    /// the report, not an error; failing to write the trace is an error.
    pub fn finish(&self) -> Result<()> {
        let (trace, usage) = {
            let st = self.lock();
            (st.trace.clone(), st.usage.clone())
        };
        if let (Some(t), Some(p)) = (trace, &self.options.trace) {
            t.save(p)?;
        }
        if let Some(p) = &self.options.histogram {
            let h = match &self.loaded {
                Some(old) => old.plus(&usage),
                None => usage,
            };
            if let Err(e) = h.save(p) {
                let note = format!("usage histogram not saved: {e}");
                let mut st = self.lock();
                if !st.notes.contains(&note) {
                    st.notes.push(note);
                }
            }
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forget a failed read (unless the entry was reused meanwhile).
    fn forget(&self, layer: usize, l: &Lookup, t: &Arc<Ticket>) {
        let mut st = self.lock();
        let entry = st.entry(layer, l);
        if entry.as_ref().is_some_and(|x| Arc::ptr_eq(x, t)) {
            *entry = None;
            st.core.invalidate(layer, l.expert);
        }
    }

    fn submit(&self, layer: usize, jobs: Vec<(u32, Arc<Ticket>)>) -> Result<()> {
        let layout = self
            .layers
            .get(layer)
            .and_then(Clone::clone)
            .ok_or_else(|| {
                ExpertError::BadRequest(format!("layer {layer} has no registered experts"))
            })?;
        for (expert, ticket) in jobs {
            let (sources, layout) = (Arc::clone(&self.sources), Arc::clone(&layout));
            let counter = Arc::clone(&self.bytes_read);
            let uncached = self.options.uncached;
            self.io.submit(Box::new(move || {
                let r = read_expert(&sources, &layout, expert, uncached);
                if r.is_ok() {
                    counter.fetch_add(layout.bytes as u64, Ordering::Relaxed);
                }
                ticket.finish(r.map(Arc::new));
            }));
        }
        Ok(())
    }
}

impl Drop for ExpertStore {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Read every stack of one expert into one buffer.
fn read_expert(
    sources: &[Source],
    layout: &LayerLayout,
    expert: u32,
    uncached: bool,
) -> Result<ExpertBytes> {
    let mut buf = vec![0u8; layout.bytes];
    for (s, r) in layout.stacks.iter().zip(&layout.ranges) {
        let offset = s.offset + u64::from(expert) * s.stride;
        sources[s.part].read_exact(&mut buf[r.clone()], offset, uncached, (&s.name, expert))?;
    }
    Ok(ExpertBytes::new(buf))
}
