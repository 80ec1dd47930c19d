//! The expert trace (`--moe-trace=PATH`): the store's shape and policy, its pins,
//! and every layer call and prefetch in request order, as text:
//!
//! ```text
//! fucina-experts-trace 1
//! eviction heat 0.9                      (or: eviction lru)
//! layer 3 experts 64 bytes 1769472 slots 12
//! pin 3 17
//! call 3 5:1 17:2 40:1                   (expert:routed pairs, request order)
//! prefetch 4 8 9
//! ```
//!
//! A trace holds what replaying needs: the policies see the calls in order; the
//! live policy also sees the prefetches and pins, which is how a replay
//! reproduces the live hit counts exactly.

use std::io::{BufRead, BufWriter, Write};
use std::path::Path;

use crate::cache::{Eviction, LayerShape};
use crate::{ExpertError, Result};

const MAGIC: &str = "fucina-experts-trace 1";
/// Bounds on untrusted counts in a trace (llama.cpp's `LLAMA_MAX_EXPERTS`; a
/// generous layer count).
const MAX_EXPERTS: usize = 1024;
const MAX_LAYERS: usize = 4096;

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A layer call: its distinct experts with their routed pair counts.
    Call {
        /// The layer.
        layer: usize,
        /// (expert, routed pairs), request order.
        experts: Vec<(u32, u32)>,
    },
    /// A prefetch of a layer's experts.
    Prefetch {
        /// The layer.
        layer: usize,
        /// The experts asked for.
        experts: Vec<u32>,
    },
}

/// A recorded run of the store.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// The live eviction policy.
    pub eviction: Eviction,
    /// Per layer (index = layer): its experts, bytes per expert and live slots
    /// (`n_expert == 0` for layers without experts).
    pub layers: Vec<LayerShape>,
    /// The live pinned tier: (layer, expert).
    pub pins: Vec<(usize, u32)>,
    /// Calls and prefetches in order.
    pub events: Vec<Event>,
}

impl Trace {
    /// An empty trace of a store of this shape.
    pub fn new(layers: Vec<LayerShape>, eviction: Eviction, pins: Vec<(usize, u32)>) -> Trace {
        Trace {
            eviction,
            layers,
            pins,
            events: Vec::new(),
        }
    }

    /// Write the trace to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let io = |e: std::io::Error| ExpertError::io(path, "write the trace", &e);
        let f = std::fs::File::create(path).map_err(io)?;
        let mut w = BufWriter::new(f);
        writeln!(w, "{MAGIC}").map_err(io)?;
        match self.eviction {
            Eviction::Heat { decay } => writeln!(w, "eviction heat {decay}"),
            Eviction::Lru => writeln!(w, "eviction lru"),
        }
        .map_err(io)?;
        for (i, l) in self.layers.iter().enumerate() {
            if l.n_expert > 0 {
                writeln!(
                    w,
                    "layer {i} experts {} bytes {} slots {}",
                    l.n_expert, l.expert_bytes, l.slots
                )
                .map_err(io)?;
            }
        }
        for (l, e) in &self.pins {
            writeln!(w, "pin {l} {e}").map_err(io)?;
        }
        for ev in &self.events {
            match ev {
                Event::Call { layer, experts } => {
                    write!(w, "call {layer}").map_err(io)?;
                    for (e, p) in experts {
                        write!(w, " {e}:{p}").map_err(io)?;
                    }
                }
                Event::Prefetch { layer, experts } => {
                    write!(w, "prefetch {layer}").map_err(io)?;
                    for e in experts {
                        write!(w, " {e}").map_err(io)?;
                    }
                }
            }
            writeln!(w).map_err(io)?;
        }
        w.flush().map_err(io)
    }

    /// Read a trace written by [`Trace::save`].
    pub fn load(path: &Path) -> Result<Trace> {
        let f = std::fs::File::open(path).map_err(|e| ExpertError::io(path, "open", &e))?;
        let mut t = Trace::new(Vec::new(), Eviction::Lru, Vec::new());
        let mut have_eviction = false;
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|e| ExpertError::io(path, "read", &e))?;
            let bad = |why: String| ExpertError::Parse {
                path: path.to_owned(),
                line: i + 1,
                why,
            };
            if i == 0 {
                if line.trim() != MAGIC {
                    return Err(bad(format!("not an expert trace (want '{MAGIC}')")));
                }
                continue;
            }
            let mut words = line.split_ascii_whitespace();
            let Some(kind) = words.next() else { continue };
            let num = |w: Option<&str>, what: &str, max: usize| -> Result<usize> {
                w.and_then(|w| w.parse::<usize>().ok())
                    .filter(|&n| n < max)
                    .ok_or_else(|| bad(format!("bad {what}")))
            };
            match kind {
                "eviction" => {
                    t.eviction = match (words.next(), words.next()) {
                        (Some("lru"), None) => Eviction::Lru,
                        (Some("heat"), Some(d)) => Eviction::Heat {
                            decay: d
                                .parse()
                                .ok()
                                .filter(|d: &f64| *d > 0.0 && *d <= 1.0)
                                .ok_or_else(|| bad("bad heat decay".into()))?,
                        },
                        _ => return Err(bad("bad eviction".into())),
                    };
                    have_eviction = true;
                }
                "layer" => {
                    let il = num(words.next(), "layer", MAX_LAYERS)?;
                    let mut field = |name: &str, max: usize| {
                        if words.next() != Some(name) {
                            return Err(bad(format!("want '{name}'")));
                        }
                        num(words.next(), name, max)
                    };
                    let n_expert = field("experts", MAX_EXPERTS + 1)?;
                    let expert_bytes = field("bytes", usize::MAX)? as u64;
                    let slots = field("slots", MAX_EXPERTS + 1)?;
                    if t.layers.len() <= il {
                        t.layers.resize(
                            il + 1,
                            LayerShape {
                                n_expert: 0,
                                slots: 0,
                                expert_bytes: 0,
                            },
                        );
                    }
                    t.layers[il] = LayerShape {
                        n_expert,
                        slots,
                        expert_bytes,
                    };
                }
                "pin" | "call" | "prefetch" => {
                    let il = num(words.next(), "layer", t.layers.len())?;
                    let n = t.layers[il].n_expert;
                    if n == 0 {
                        return Err(bad(format!("layer {il} was not declared")));
                    }
                    let expert = |w: &str| {
                        w.parse::<u32>()
                            .ok()
                            .filter(|&e| (e as usize) < n)
                            .ok_or_else(|| bad(format!("bad expert '{w}'")))
                    };
                    match kind {
                        "pin" => {
                            let e = expert(words.next().unwrap_or(""))?;
                            t.pins.push((il, e));
                        }
                        "call" => {
                            let experts = words
                                .map(|w| {
                                    let (e, p) = w
                                        .split_once(':')
                                        .ok_or_else(|| bad(format!("bad '{w}'")))?;
                                    let p = p.parse().map_err(|_| bad(format!("bad '{w}'")))?;
                                    Ok((expert(e)?, p))
                                })
                                .collect::<Result<Vec<_>>>()?;
                            t.events.push(Event::Call { layer: il, experts });
                        }
                        _ => {
                            let experts = words.map(expert).collect::<Result<Vec<_>>>()?;
                            t.events.push(Event::Prefetch { layer: il, experts });
                        }
                    }
                }
                other => return Err(bad(format!("unknown line kind '{other}'"))),
            }
        }
        if !have_eviction {
            return Err(ExpertError::Parse {
                path: path.to_owned(),
                line: 0,
                why: "no 'eviction' line".into(),
            });
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_lines() {
        let shape = LayerShape {
            n_expert: 4,
            slots: 2,
            expert_bytes: 100,
        };
        let empty = LayerShape {
            n_expert: 0,
            slots: 0,
            expert_bytes: 0,
        };
        let mut t = Trace::new(
            vec![empty, shape],
            Eviction::Heat { decay: 0.5 },
            vec![(1, 3)],
        );
        t.events.push(Event::Call {
            layer: 1,
            experts: vec![(0, 2), (3, 1)],
        });
        t.events.push(Event::Prefetch {
            layer: 1,
            experts: vec![1],
        });
        let dir = std::env::temp_dir().join(format!("fx-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("t.trace");
        t.save(&p).expect("save");
        assert_eq!(Trace::load(&p).expect("load"), t);
        std::fs::write(
            &p,
            format!("{MAGIC}\neviction lru\nlayer 0 experts 2 bytes 1 slots 1\ncall 0 5:1\n"),
        )
        .expect("write");
        let err = Trace::load(&p).expect_err("expert 5 of 2");
        assert!(err.to_string().contains(":4:"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
