//! The MoE expert store: a mixture-of-experts model's expert weights read on
//! demand from its GGUF files instead of being held (or mapped) whole.
//!
//! * [`ExpertStoreBuilder`] / [`ExpertStore`]: stacked expert tensors registered
//!   per layer (offset, per-expert stride, geometry checked; nothing read), single
//!   experts `pread` into a RAM cache of a byte budget with slots per layer,
//!   parallel reads on io threads, uncached reads (`posix_fadvise(DONTNEED)`) so
//!   streaming leaves the page cache of the mmapped dense weights alone, eviction
//!   by decayed heat (LRU as an option, or `FUCINA_MOE_LRU=1`), a pinned tier
//!   seeded from the persisted usage histogram (`<gguf>.experts`) and declined
//!   when that histogram is ~flat, prefetch of guessed experts, and stats.
//! * [`cache`]: the byte-free state machine deciding hits and victims, shared by
//!   the live store and the replay, so a replay reproduces live hit counts exactly.
//! * [`trace`] and [`replay`]: the `(layer, expert)` request trace the store can
//!   record, and its offline replay through LRU, heat, segmented LRU, Belady and
//!   pinned+LRU across a capacity sweep.
//!
//! The crate knows nothing of GGUF or kernels: `fucina-model` registers the
//! stacks and multiplies with the bytes this crate hands out.

pub mod cache;
mod error;
pub mod histogram;
mod io;
pub mod replay;
mod store;
pub mod trace;

pub use cache::{Counts, Eviction, DEFAULT_HEAT_DECAY};
pub use error::{ExpertError, Result};
pub use histogram::{Histogram, PinChoice, DEFAULT_MIN_PIN_ADVANTAGE};
pub use io::ExpertBytes;
pub use replay::{replay_live, sweep, Policy, SweepOptions, SweepRow};
pub use store::{
    Chunk, ExpertStore, ExpertStoreBuilder, StackSpec, StoreOptions, StoreStats,
    DEFAULT_IO_THREADS, LRU_ENV,
};
pub use trace::{Event, Trace};

/// The usage histogram's conventional path beside a model: `<gguf>.experts`.
pub fn histogram_path(gguf: &std::path::Path) -> std::path::PathBuf {
    let mut s = gguf.as_os_str().to_owned();
    s.push(".experts");
    s.into()
}
