//! Draft-free speculative decoding's policy half (spec §13.9): deterministic draft
//! sources over text the model has already seen, and the gate deciding when drafting
//! pays. The verify loop itself (one batched forward over the carried token and the
//! draft, the full sampling pipeline per row, KV rewind) lives in `fucina-engine`,
//! which owns sequences and sampling; nothing here touches a model.
//!
//! Sources are deterministic (a one-hot proposal), so the lossless contract reduces to
//! "accept while the sampled token equals the draft": drafts decide how fast tokens
//! come, never which.
//!
//! ```
//! use fucina_spec::{DraftSource, SpeculationIndex};
//! let mut index = SpeculationIndex::new(1024);
//! index.observe(&[1, 2, 3, 4, 1, 2]); // [1, 2] recurred; before, it was followed by [3, 4]
//! let mut draft = Vec::new();
//! index.suggest(&[1, 2, 3, 4, 1, 2], 16, &mut draft);
//! assert_eq!(&draft[..2], &[3, 4]);
//! ```

mod branches;
mod cascade;
mod gate;
mod hash;
mod recycling;
mod sam;

pub use branches::Branches;
pub use cascade::{SpeculationIndex, GATE_WINDOW};
pub use gate::{CostGate, GateState, SpecOptions, Stats};
pub use recycling::{Recycling, TokenRecycling};
pub use sam::{Cursor, SamIndex};

/// One verified position's top candidates: `token` was the row's input, `topk` the
/// most likely next tokens by the row's logits, best first.
#[derive(Clone, Copy, Debug)]
pub struct TopKRow<'a> {
    /// The token whose forward produced the row.
    pub token: u32,
    /// Its most likely successors, best first.
    pub topk: &'a [u32],
}

/// A deterministic proposer of continuation tokens.
pub trait DraftSource: Send {
    /// Append up to `max` proposed continuation tokens of `context` (the committed
    /// tokens, prompt first) to `out` (nothing: no draft).
    fn suggest(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>);
    /// Tokens committed since the last call (every one, in order).
    fn observe(&mut self, committed: &[u32]);
    /// Whether [`DraftSource::observe_topk`] is wanted (computing top-K costs a pass
    /// over each verified row).
    fn wants_topk(&self) -> bool {
        false
    }
    /// Top-K candidates of verified rows.
    fn observe_topk(&mut self, _rows: &[TopKRow<'_>]) {}
    /// The draft just suggested will be verified only up to `new_len` tokens.
    fn truncate_pending(&mut self, _new_len: usize) {}
}
