//! Python bindings for `fucina-experts`: the stream options of `Model(...,
//! moe_stream=...)`, the store's stats as a dict, and the offline trace replay
//! (`experts_replay`, behind `fucina experts replay`).

use std::path::PathBuf;

use fucina_experts::{
    replay_live, sweep, Eviction, ExpertError, Histogram, StoreOptions, StoreStats, SweepOptions,
    Trace,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{fucina_error, raise, value_err};

/// Map an expert store error: file failures are `OSError`s, bad options and
/// malformed trace files `InvalidArgumentError`s (`ValueError`), the rest
/// `FucinaError`s.
pub(crate) fn experts_err(e: ExpertError) -> PyErr {
    match e {
        ExpertError::Io { .. } | ExpertError::ShortRead { .. } => {
            pyo3::exceptions::PyOSError::new_err(e.to_string())
        }
        ExpertError::BadOptions(_) | ExpertError::Parse { .. } => value_err(e.to_string()),
        other => Python::attach(|py| match fucina_error(py) {
            Ok(ty) => raise(ty, other.to_string()),
            Err(err) => err,
        }),
    }
}

/// The arguments of `Model(..., moe_*=...)`.
pub(crate) struct StreamArgs {
    pub stream: bool,
    pub cache_mb: Option<f64>,
    pub uncached: bool,
    pub io_threads: Option<usize>,
    pub trace: Option<PathBuf>,
    pub prefetch: bool,
    pub eviction: Option<String>,
    pub heat_decay: Option<f64>,
    pub pins: bool,
}

impl StreamArgs {
    /// The store options, `None` when nothing asks for streaming (a trace does).
    pub(crate) fn options(self, model: &std::path::Path) -> PyResult<Option<StoreOptions>> {
        if !self.stream && self.trace.is_none() {
            return Ok(None);
        }
        let cache_bytes = match self.cache_mb {
            None => None,
            Some(mb) if mb.is_finite() && mb >= 0.0 => Some((mb * 1024.0 * 1024.0) as u64),
            Some(mb) => return Err(value_err(format!("moe_cache_mb must be >= 0, not {mb}"))),
        };
        let eviction = match (self.eviction.as_deref(), self.heat_decay) {
            (None, None) => None,
            (None | Some("heat"), d) => Some(Eviction::Heat {
                decay: d.unwrap_or(fucina_experts::DEFAULT_HEAT_DECAY),
            }),
            (Some("lru"), None) => Some(Eviction::Lru),
            (Some("lru"), Some(_)) => {
                return Err(value_err(
                    "moe_heat_decay applies to the heat policy, not lru",
                ))
            }
            (Some(other), _) => {
                return Err(value_err(format!(
                    "moe_eviction must be 'heat' or 'lru', not {other:?}"
                )))
            }
        };
        Ok(Some(StoreOptions {
            cache_bytes,
            eviction,
            uncached: self.uncached,
            io_threads: self
                .io_threads
                .unwrap_or(fucina_experts::DEFAULT_IO_THREADS),
            prefetch: self.prefetch,
            auto_pin: self.pins,
            histogram: self.pins.then(|| fucina_experts::histogram_path(model)),
            trace: self.trace,
            ..StoreOptions::default()
        }))
    }
}

/// The store's numbers as a dict (`Model.moe_stats()`).
pub(crate) fn stats_dict<'py>(py: Python<'py>, s: &StoreStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let c = &s.counts;
    d.set_item("hits", c.hits)?;
    d.set_item("misses", c.misses)?;
    d.set_item("hit_rate", c.hit_rate())?;
    d.set_item("pinned_hits", c.pinned_hits)?;
    d.set_item("bytes_read", s.bytes_read)?;
    d.set_item("prefetch_loads", c.prefetch_loads)?;
    d.set_item("prefetch_hits", c.prefetch_hits)?;
    d.set_item("prefetch_late", s.prefetch_late)?;
    d.set_item("prefetch_wasted", c.prefetch_wasted)?;
    d.set_item("stall_s", s.stall_ns as f64 / 1e9)?;
    d.set_item("slots_per_layer", s.slots_per_layer)?;
    d.set_item("cache_bytes", s.cache_bytes)?;
    d.set_item("expert_bytes", s.expert_bytes)?;
    d.set_item("pinned", s.pinned)?;
    d.set_item("pins_declined_flat", s.pins_declined_flat)?;
    d.set_item("eviction", eviction_name(s.eviction))?;
    d.set_item("uncached", s.uncached)?;
    d.set_item("io_threads", s.io_threads)?;
    d.set_item("notes", PyList::new(py, &s.notes)?)?;
    d.set_item("report", s.report())?;
    Ok(d)
}

fn eviction_name(e: Eviction) -> String {
    match e {
        Eviction::Heat { decay } => format!("heat:{decay}"),
        Eviction::Lru => "lru".into(),
    }
}

/// Replay a recorded expert trace: the live policy's counts (as the store
/// reported them) and a capacity sweep of LRU, heat, segmented LRU, Belady and
/// pinned+LRU, one dict per (policy, capacity).
#[pyfunction]
#[pyo3(signature = (trace, slots = None, pins_from = None, heat_decay = None))]
fn experts_replay<'py>(
    py: Python<'py>,
    #[pyo3(from_py_with = crate::args::path)] trace: PathBuf,
    slots: Option<Vec<usize>>,
    pins_from: Option<PathBuf>,
    heat_decay: Option<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    let (t, live, rows) = py
        .detach(|| -> Result<_, ExpertError> {
            let t = Trace::load(&trace)?;
            let pins = match &pins_from {
                Some(p) => Some(Histogram::load(p)?.ok_or_else(|| ExpertError::Io {
                    path: p.clone(),
                    what: "read the histogram",
                    message: "no such file".into(),
                })?),
                None => None,
            };
            let live = replay_live(&t)?;
            let options = SweepOptions {
                slots: slots.unwrap_or_default(),
                heat_decay,
                pins_from: pins,
            };
            let rows = sweep(&t, &options)?;
            Ok((t, live, rows))
        })
        .map_err(experts_err)?;
    let d = PyDict::new(py);
    d.set_item("eviction", eviction_name(t.eviction))?;
    let live_slots = t.layers.iter().map(|l| l.slots).max().unwrap_or(0);
    d.set_item("live_slots", live_slots)?;
    d.set_item(
        "moe_layers",
        t.layers.iter().filter(|l| l.n_expert > 0).count(),
    )?;
    d.set_item(
        "n_expert",
        t.layers.iter().map(|l| l.n_expert).max().unwrap_or(0),
    )?;
    d.set_item(
        "calls",
        t.events
            .iter()
            .filter(|e| matches!(e, fucina_experts::Event::Call { .. }))
            .count(),
    )?;
    let l = PyDict::new(py);
    l.set_item("hits", live.hits)?;
    l.set_item("misses", live.misses)?;
    l.set_item("pinned_hits", live.pinned_hits)?;
    l.set_item("prefetch_loads", live.prefetch_loads)?;
    l.set_item("bytes", live.bytes)?;
    d.set_item("live", l)?;
    let out = PyList::empty(py);
    for r in rows {
        let row = PyDict::new(py);
        row.set_item("policy", r.policy.name())?;
        row.set_item("slots", r.slots)?;
        row.set_item("hits", r.hits)?;
        row.set_item("requests", r.requests)?;
        row.set_item("hit_rate", r.hit_rate())?;
        row.set_item("bytes", r.bytes)?;
        out.append(row)?;
    }
    d.set_item("rows", out)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(experts_replay, m)?)?;
    Ok(())
}
