//! The persisted usage histogram (`<gguf>.experts`): routed (token, expert) pair
//! counts per layer and expert, accumulated over sessions and written at store
//! teardown; the next load seeds its pinned tier from it. Text:
//!
//! ```text
//! fucina-experts-histogram 1
//! layer 3 120 4 0 77 ...        (one count per expert)
//! ```
//!
//! Pins are the most-routed experts that fit the pin budget. On a ~flat histogram
//! (a load-balanced router) a pinned set keeps no more traffic than any set of
//! the same size, so the pins would only take slots from the cache: pinning is
//! then declined, unless the budget holds every expert the histogram saw used.

use std::io::Write;
use std::path::Path;

use crate::{ExpertError, Result};

const MAGIC: &str = "fucina-experts-histogram 1";
const MAX_EXPERTS: usize = 1024;
const MAX_LAYERS: usize = 4096;

/// The least traffic advantage of a pinned set over a random set of the same
/// size for auto-pin to go ahead (`share of routed pairs / share of used
/// experts`; 1.0 is a flat histogram). Pins cost cache slots, so a set that keeps
/// barely more than its share of the traffic is better spent on the heat-evicted
/// cache; 1.5 (the set keeps half again its share) is a judgment, not a measured
/// optimum.
pub const DEFAULT_MIN_PIN_ADVANTAGE: f64 = 1.5;

/// Routed pair counts per layer (index) and expert.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// `counts[layer][expert]`; empty for layers without experts.
    pub counts: Vec<Vec<u64>>,
}

/// What auto-pin chose.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PinChoice {
    /// (layer, expert) to pin.
    pub pins: Vec<(usize, u32)>,
    /// Traffic advantage of the candidate set (see [`DEFAULT_MIN_PIN_ADVANTAGE`]).
    pub advantage: f64,
    /// Declined: the histogram is ~flat.
    pub declined_flat: bool,
}

impl Histogram {
    /// An all-zero histogram of `n_expert[layer]` counts per layer.
    pub fn zeros(n_expert: &[usize]) -> Histogram {
        Histogram {
            counts: n_expert.iter().map(|&n| vec![0; n]).collect(),
        }
    }

    /// Whether both have the same layers and expert counts.
    pub fn same_shape(&self, other: &Histogram) -> bool {
        self.counts.len() == other.counts.len()
            && self
                .counts
                .iter()
                .zip(&other.counts)
                .all(|(a, b)| a.len() == b.len())
    }

    /// The element-wise sum (same shapes; see [`Histogram::same_shape`]).
    pub fn plus(&self, other: &Histogram) -> Histogram {
        Histogram {
            counts: self
                .counts
                .iter()
                .zip(&other.counts)
                .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x.saturating_add(*y)).collect())
                .collect(),
        }
    }

    /// The most-routed experts whose bytes (`expert_bytes[layer]` each) fit
    /// `budget`, or none when their advantage is below `min_advantage` and they
    /// are not every used expert.
    pub fn choose_pins(&self, expert_bytes: &[u64], budget: u64, min_advantage: f64) -> PinChoice {
        let mut all: Vec<(u64, usize, u32)> = self
            .counts
            .iter()
            .enumerate()
            .flat_map(|(l, c)| {
                c.iter()
                    .enumerate()
                    .filter(|(_, &n)| n > 0)
                    .map(move |(e, &n)| (n, l, e as u32))
            })
            .collect();
        all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let total: u64 = all.iter().map(|x| x.0).sum();
        let (mut used, mut covered, mut pins) = (0u64, 0u64, Vec::new());
        for &(n, l, e) in &all {
            let b = expert_bytes.get(l).copied().unwrap_or(u64::MAX);
            if used.saturating_add(b) > budget {
                break;
            }
            used += b;
            covered += n;
            pins.push((l, e));
        }
        if pins.is_empty() || total == 0 {
            return PinChoice::default();
        }
        let advantage = (covered as f64 / total as f64) / (pins.len() as f64 / all.len() as f64);
        if pins.len() < all.len() && advantage < min_advantage {
            return PinChoice {
                pins: Vec::new(),
                advantage,
                declined_flat: true,
            };
        }
        PinChoice {
            pins,
            advantage,
            declined_flat: false,
        }
    }

    /// Read `path`; `None` when there is no such file.
    pub fn load(path: &Path) -> Result<Option<Histogram>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ExpertError::io(path, "read the histogram", &e)),
        };
        let mut h = Histogram::default();
        for (i, line) in text.lines().enumerate() {
            let bad = |why: &str| ExpertError::Parse {
                path: path.to_owned(),
                line: i + 1,
                why: why.to_owned(),
            };
            if i == 0 {
                if line.trim() != MAGIC {
                    return Err(bad("not an expert histogram"));
                }
                continue;
            }
            let mut words = line.split_ascii_whitespace();
            match words.next() {
                None => continue,
                Some("layer") => {}
                Some(_) => return Err(bad("want 'layer'")),
            }
            let il = words
                .next()
                .and_then(|w| w.parse::<usize>().ok())
                .filter(|&l| l < MAX_LAYERS)
                .ok_or_else(|| bad("bad layer"))?;
            let counts = words
                .map(|w| w.parse::<u64>().map_err(|_| bad("bad count")))
                .collect::<Result<Vec<_>>>()?;
            if counts.len() > MAX_EXPERTS {
                return Err(bad("too many experts"));
            }
            if h.counts.len() <= il {
                h.counts.resize(il + 1, Vec::new());
            }
            h.counts[il] = counts;
        }
        Ok(Some(h))
    }

    /// Write to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let io = |e: std::io::Error| ExpertError::io(path, "write the histogram", &e);
        let mut out = format!("{MAGIC}\n");
        for (l, c) in self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.is_empty())
        {
            out.push_str(&format!("layer {l}"));
            for n in c {
                out.push_str(&format!(" {n}"));
            }
            out.push('\n');
        }
        let mut f = std::fs::File::create(path).map_err(io)?;
        f.write_all(out.as_bytes()).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_histogram_declines_and_a_skewed_one_pins() {
        let flat = Histogram {
            counts: vec![vec![10, 11, 9, 10, 10, 10, 9, 11]],
        };
        let c = flat.choose_pins(&[1], 2, DEFAULT_MIN_PIN_ADVANTAGE);
        assert!(c.declined_flat && c.pins.is_empty(), "{c:?}");
        // A budget holding every used expert bypasses the guard.
        let c = flat.choose_pins(&[1], 8, DEFAULT_MIN_PIN_ADVANTAGE);
        assert!(!c.declined_flat && c.pins.len() == 8, "{c:?}");
        let skewed = Histogram {
            counts: vec![vec![100, 1, 1, 80, 1, 1, 1, 1]],
        };
        let c = skewed.choose_pins(&[1], 2, DEFAULT_MIN_PIN_ADVANTAGE);
        assert_eq!(c.pins, vec![(0, 0), (0, 3)]);
    }

    #[test]
    fn round_trip() {
        let h = Histogram {
            counts: vec![vec![], vec![1, 2, 3]],
        };
        let p = std::env::temp_dir().join(format!("fx-hist-{}.experts", std::process::id()));
        h.save(&p).expect("save");
        assert_eq!(Histogram::load(&p).expect("load"), Some(h));
        std::fs::remove_file(&p).ok();
        assert_eq!(Histogram::load(&p).expect("missing"), None);
    }
}
