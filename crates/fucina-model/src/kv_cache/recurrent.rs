//! The recurrent state of a Gated DeltaNet layer in a sequence's [`KvCache`]: the
//! convolution's last `k − 1` input rows and every value head's `dk × dv` delta-rule
//! state, all f32 (as llama.cpp keeps them), and how a cache rewinds them.
//!
//! A recurrent state exists only at the cache's length, so an earlier position must
//! be reconstructed, bitwise as a plain run would have it:
//!
//! - **Ping-pong buffers**: a forward reads the state at `len` from one buffer and
//!   writes the new one into the other, flipping at commit. The state at the start
//!   of the latest forward (its *base*) therefore survives at no copying cost, and a
//!   forward that fails leaves the state at `len` untouched.
//! - **Replay log**: a forward of at most [`REPLAY_ROWS`] rows of a sequence (decode
//!   steps and speculative verifies) also records, per row, the raw convolution
//!   input and the prepared delta-rule input. Truncating to `base + r` reruns the
//!   first `r` logged rows from the base state through the same
//!   [`crate::ops::deltanet`] code in the form a forward of `r` rows uses, so the
//!   state is bitwise what a plain run of those rows leaves (a verify's rows run the
//!   recurrent form, as decode steps do).
//! - **Checkpoints**: after each unpinned multi-row forward (a prompt chunk) the
//!   state is copied into a small ring ([`MAX_CHECKPOINTS`]).
//!
//! A truncation into an unlogged forward lands on its base; below the latest
//! forward, on the newest checkpoint at or below the target, or on position 0. The
//! cache reports the length it reached (`len()`), and callers evaluate the rest.

use super::{KvCache, KvLayer};
use crate::ops::deltanet::{
    conv_state_after, delta_rows_from, uses_chunks, DeltaScratch, DeltaShape,
};
use crate::{ModelError, Result};

/// Most rows of one sequence a forward logs for replay: a speculative verify (17 rows
/// with the default draft budget, up to 64 with `max_draft` 63) always fits; prompt
/// chunks do not (they would cost `rows × 2 · conv_channels` floats per layer). A
/// truncation into a longer forward lands on its base or a checkpoint instead:
/// correct, but the rows after it are evaluated again.
pub const REPLAY_ROWS: usize = 64;

/// Prompt-chunk checkpoints kept per sequence: the end of the latest prompt (what a
/// Conversation turn that drops the previous reply's reasoning rewinds to) and the
/// chunk boundary before it.
pub const MAX_CHECKPOINTS: usize = 2;

/// Shape of one DeltaNet layer's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecurrentGeometry {
    /// Head geometry of the delta rule.
    pub shape: DeltaShape,
    /// Convolution kernel length (the state keeps `conv_kernel − 1` input rows).
    pub conv_kernel: usize,
}

impl RecurrentGeometry {
    /// Floats of the convolution state.
    pub fn conv_len(&self) -> usize {
        (self.conv_kernel - 1) * self.shape.conv_channels()
    }

    /// Floats of the delta-rule state (every value head).
    pub fn ssm_len(&self) -> usize {
        self.shape.n_v_heads * self.shape.head_state()
    }
}

/// f32 storage whose first element starts a 64-byte cache line: every head's
/// `dk × dv` state (a multiple of 16 floats where `dv` is) then starts one too, so
/// the decode step can write it with streaming stores (see
/// [`crate::ops::deltanet`]).
#[derive(Clone, Debug)]
struct LineAligned {
    lines: Box<[Line]>,
    len: usize,
}

/// One cache line of f32 (no padding: 16 floats fill its 64 bytes).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Line([f32; 16]);

impl LineAligned {
    fn zeroed(len: usize) -> LineAligned {
        LineAligned {
            lines: vec![Line([0.0; 16]); len.div_ceil(16)].into_boxed_slice(),
            len,
        }
    }

    /// Floats allocated.
    fn capacity(&self) -> usize {
        16 * self.lines.len()
    }
}

impl std::ops::Deref for LineAligned {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `lines` is `lines.len() · 16 ≥ len` contiguous initialised f32
        // (`Line` is `repr(C)` over `[f32; 16]`, 64 bytes, no padding), borrowed with `self`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }
}

impl std::ops::DerefMut for LineAligned {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`, borrowed mutably with `self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f32>(), self.len) }
    }
}

/// One DeltaNet layer's per-sequence state.
#[derive(Clone, Debug)]
pub struct RecurrentLayer {
    geom: RecurrentGeometry,
    conv: [Vec<f32>; 2],
    ssm: [LineAligned; 2],
    /// Raw convolution inputs of the logged rows (`conv_channels` each).
    log_raw: Vec<f32>,
    /// Prepared delta-rule inputs of the logged rows ([`DeltaShape::row_width`] each).
    log_in: Vec<f32>,
    /// A recurrent layer holds no K/V rows: what [`KvCache::layer`] returns for it.
    empty: KvLayer,
}

impl RecurrentLayer {
    pub(super) fn new(geom: RecurrentGeometry, empty: KvLayer) -> RecurrentLayer {
        RecurrentLayer {
            geom,
            conv: [vec![0.0; geom.conv_len()], vec![0.0; geom.conv_len()]],
            ssm: [
                LineAligned::zeroed(geom.ssm_len()),
                LineAligned::zeroed(geom.ssm_len()),
            ],
            log_raw: Vec::new(),
            log_in: Vec::new(),
            empty,
        }
    }

    /// The layer's geometry.
    pub fn geometry(&self) -> RecurrentGeometry {
        self.geom
    }

    pub(super) fn empty_kv(&self) -> &KvLayer {
        &self.empty
    }

    pub(super) fn byte_size(&self) -> usize {
        4 * (self.conv[0].capacity()
            + self.conv[1].capacity()
            + self.ssm[0].capacity()
            + self.ssm[1].capacity()
            + self.log_raw.capacity()
            + self.log_in.capacity())
    }

    /// The convolution and delta-rule state held in buffer `b`.
    pub(super) fn state(&self, b: usize) -> (&[f32], &[f32]) {
        (&self.conv[b], &self.ssm[b])
    }

    fn zero(&mut self, b: usize) {
        self.conv[b].fill(0.0);
        self.ssm[b].fill(0.0);
    }
}

/// What a forward may rewind to: the state at `base` in the non-current buffers,
/// and, when `logged`, the replay log of the `rows` rows after it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rewind {
    base: usize,
    rows: usize,
    logged: bool,
    pinned: bool,
}

/// A copy of every recurrent layer's state at `pos`.
#[derive(Clone, Debug)]
pub(super) struct Checkpoint {
    pos: usize,
    states: Vec<(Vec<f32>, Vec<f32>)>,
}

/// The per-sequence recurrent bookkeeping of a [`KvCache`].
#[derive(Clone, Debug, Default)]
pub(super) struct RecurrentMeta {
    /// Buffer holding the state at `len`.
    pub(super) cur: usize,
    pub(super) rewind: Option<Rewind>,
    pub(super) checkpoints: Vec<Checkpoint>,
}

impl RecurrentMeta {
    pub(super) fn byte_size(&self) -> usize {
        self.checkpoints
            .iter()
            .flat_map(|c| &c.states)
            .map(|(a, b)| 4 * (a.capacity() + b.capacity()))
            .sum()
    }
}

/// One sequence's view of a recurrent layer during a forward.
#[derive(Debug)]
pub struct RecurrentIo<'a> {
    /// The layer's geometry.
    pub geom: RecurrentGeometry,
    /// Convolution state at the cache's length.
    pub conv_src: &'a [f32],
    /// Where the state after the forward's rows goes.
    pub conv_dst: &'a mut [f32],
    /// Delta-rule state at the cache's length (value head h at `h · dk · dv`).
    pub ssm_src: &'a [f32],
    /// Where the state after the forward's rows goes.
    pub ssm_dst: &'a mut [f32],
    /// The replay log (raw rows, prepared rows), when the forward's rows fit it.
    pub log: Option<(&'a mut Vec<f32>, &'a mut Vec<f32>)>,
}

impl KvCache {
    /// Whether any layer is recurrent.
    pub fn has_recurrent(&self) -> bool {
        self.layers
            .iter()
            .any(|l| matches!(l, super::LayerState::Recurrent(_)))
    }

    fn recurrent_layers_mut(&mut self) -> impl Iterator<Item = &mut RecurrentLayer> {
        self.layers.iter_mut().filter_map(|l| match l {
            super::LayerState::Recurrent(r) => Some(r),
            _ => None,
        })
    }

    fn recurrent_layers(&self) -> impl Iterator<Item = &RecurrentLayer> {
        self.layers.iter().filter_map(|l| match l {
            super::LayerState::Recurrent(r) => Some(r),
            _ => None,
        })
    }

    /// Layer `il`'s recurrent state, or an error naming the layer.
    pub fn recurrent(&self, il: usize) -> Result<&RecurrentLayer> {
        match self.layers.get(il) {
            Some(super::LayerState::Recurrent(r)) => Ok(r),
            _ => Err(ModelError::KvCacheShapeMismatch(format!(
                "layer {il} holds no recurrent state"
            ))),
        }
    }

    /// The state at `len` of layer `il` and the buffers a forward of `rows` rows
    /// writes (logged when `rows <= REPLAY_ROWS`). Call `KvCache::begin_forward`
    /// first and `KvCache::commit` after every layer.
    pub fn recurrent_io(&mut self, il: usize, rows: usize) -> Result<RecurrentIo<'_>> {
        let cur = self.recurrent.cur;
        let layer = match self.layers.get_mut(il) {
            Some(super::LayerState::Recurrent(r)) => r,
            _ => {
                return Err(ModelError::KvCacheShapeMismatch(format!(
                    "layer {il} holds no recurrent state"
                )))
            }
        };
        let [c0, c1] = &mut layer.conv;
        let [s0, s1] = &mut layer.ssm;
        let (conv_src, conv_dst, ssm_src, ssm_dst) = if cur == 0 {
            (&*c0, c1, &*s0, s1)
        } else {
            (&*c1, c0, &*s1, s0)
        };
        let log = (rows <= REPLAY_ROWS).then(|| {
            layer.log_raw.clear();
            layer.log_in.clear();
            (&mut layer.log_raw, &mut layer.log_in)
        });
        Ok(RecurrentIo {
            geom: layer.geom,
            conv_src,
            conv_dst,
            ssm_src,
            ssm_dst,
            log,
        })
    }

    /// Before a forward writes recurrent layers: their other buffers stop holding
    /// the previous forward's base state.
    pub(crate) fn begin_forward(&mut self) {
        self.recurrent.rewind = None;
    }

    /// Publish a forward's `n` rows (computed with `pinned` numerics): the length
    /// advances, recurrent layers flip to the buffers the forward wrote, and the
    /// rewind information (and, after a prompt chunk, a checkpoint) is recorded.
    pub(crate) fn commit(&mut self, n: usize, pinned: bool) -> Result<()> {
        let base = self.len;
        self.advance(n)?;
        if n == 0 || !self.has_recurrent() {
            return Ok(());
        }
        self.recurrent.cur ^= 1;
        self.recurrent.rewind = Some(Rewind {
            base,
            rows: n,
            logged: n <= REPLAY_ROWS,
            pinned,
        });
        if uses_chunks(n, pinned) {
            self.push_checkpoint();
        }
        Ok(())
    }

    fn push_checkpoint(&mut self) {
        let cur = self.recurrent.cur;
        let pos = self.len;
        let mut slot = if self.recurrent.checkpoints.len() >= MAX_CHECKPOINTS {
            self.recurrent.checkpoints.remove(0)
        } else {
            Checkpoint {
                pos,
                states: Vec::new(),
            }
        };
        slot.pos = pos;
        let layers: Vec<(&[f32], &[f32])> = self.recurrent_layers().map(|l| l.state(cur)).collect();
        slot.states.resize_with(layers.len(), Default::default);
        for ((c, s), (dc, ds)) in layers.into_iter().zip(slot.states.iter_mut()) {
            dc.clear();
            dc.extend_from_slice(c);
            ds.clear();
            ds.extend_from_slice(s);
        }
        self.recurrent.checkpoints.push(slot);
    }

    /// Forget every position: recurrent states back to zeros.
    pub(super) fn reset_recurrent(&mut self) {
        let cur = self.recurrent.cur;
        self.recurrent.rewind = None;
        self.recurrent.checkpoints.clear();
        for l in self.recurrent_layers_mut() {
            l.zero(cur);
        }
    }

    /// Bring the recurrent states to the latest position `<= keep` they can reach
    /// (see the module doc) and return it; the caller sets `len` to it.
    pub(super) fn rewind_recurrent(&mut self, keep: usize) -> usize {
        if keep >= self.len {
            return self.len;
        }
        if let Some(rw) = self.recurrent.rewind {
            let replayable = rw.logged && keep - rw.base.min(keep) < rw.rows;
            if keep == rw.base || (keep > rw.base && !replayable) {
                // The base state is in the other buffers.
                self.recurrent.cur ^= 1;
                self.recurrent.rewind = None;
                self.drop_checkpoints_after(rw.base);
                return rw.base;
            }
            if keep > rw.base {
                let r = keep - rw.base;
                let cur = self.recurrent.cur;
                let pinned = rw.pinned;
                for l in self.recurrent_layers_mut() {
                    replay(l, 1 - cur, cur, r, pinned);
                    let g = l.geom;
                    l.log_raw.truncate(r * g.shape.conv_channels());
                    l.log_in.truncate(r * g.shape.row_width());
                }
                self.recurrent.rewind = Some(Rewind { rows: r, ..rw });
                self.drop_checkpoints_after(keep);
                return keep;
            }
        }
        self.recurrent.rewind = None;
        self.drop_checkpoints_after(keep);
        let cur = self.recurrent.cur;
        match self.recurrent.checkpoints.pop() {
            Some(cp) => {
                let pos = cp.pos;
                for (l, (c, s)) in self.recurrent_layers_mut().zip(&cp.states) {
                    l.conv[cur].copy_from_slice(c);
                    l.ssm[cur].copy_from_slice(s);
                }
                self.recurrent.checkpoints.push(cp);
                pos
            }
            None => {
                for l in self.recurrent_layers_mut() {
                    l.zero(cur);
                }
                0
            }
        }
    }

    fn drop_checkpoints_after(&mut self, keep: usize) {
        self.recurrent.checkpoints.retain(|c| c.pos <= keep);
    }

    /// Set every recurrent layer of `self` to `src`'s state at the latest position
    /// `<= end` `src` can reach without changing itself (its current state, its
    /// latest forward's base or a replay from it, a checkpoint, or zeros); returns
    /// that position.
    pub(super) fn copy_recurrent_from(&mut self, src: &KvCache, end: usize) -> usize {
        let cur = self.recurrent.cur;
        self.recurrent.rewind = None;
        self.recurrent.checkpoints.clear();
        let scur = src.recurrent.cur;
        let take = |dst: &mut KvCache, b: usize| {
            for (d, s) in dst.recurrent_layers_mut().zip(src.recurrent_layers()) {
                let (c, ss) = s.state(b);
                d.conv[cur].copy_from_slice(c);
                d.ssm[cur].copy_from_slice(ss);
            }
        };
        if end >= src.len {
            take(self, scur);
            return src.len;
        }
        if let Some(rw) = src.recurrent.rewind {
            let replayable = rw.logged && end - rw.base.min(end) < rw.rows;
            if end == rw.base || (end > rw.base && !replayable) {
                take(self, 1 - scur);
                return rw.base;
            }
            if end > rw.base {
                let r = end - rw.base;
                for (d, s) in self.recurrent_layers_mut().zip(src.recurrent_layers()) {
                    let (c, ss) = s.state(1 - scur);
                    d.conv[1 - cur].copy_from_slice(c);
                    d.ssm[1 - cur].copy_from_slice(ss);
                    d.log_raw.clone_from(&s.log_raw);
                    d.log_in.clone_from(&s.log_in);
                    replay(d, 1 - cur, cur, r, rw.pinned);
                    d.log_raw.clear();
                    d.log_in.clear();
                }
                return end;
            }
        }
        match src
            .recurrent
            .checkpoints
            .iter()
            .rev()
            .find(|c| c.pos <= end)
        {
            Some(cp) => {
                for (d, (c, s)) in self.recurrent_layers_mut().zip(&cp.states) {
                    d.conv[cur].copy_from_slice(c);
                    d.ssm[cur].copy_from_slice(s);
                }
                cp.pos
            }
            None => {
                for d in self.recurrent_layers_mut() {
                    d.zero(cur);
                }
                0
            }
        }
    }

    /// Bytes of every recurrent layer's state at `len` (convolution then delta-rule
    /// state per layer, f32 little-endian): what persistence stores beside the
    /// per-position K/V records. 0 for a cache without recurrent layers.
    pub fn recurrent_state_bytes(&self) -> usize {
        self.recurrent_layers()
            .map(|l| 4 * (l.geom.conv_len() + l.geom.ssm_len()))
            .sum()
    }

    /// Append the recurrent state at `len` to `out` ([`Self::recurrent_state_bytes`]).
    pub fn read_recurrent_state(&self, out: &mut Vec<u8>) {
        let cur = self.recurrent.cur;
        for l in self.recurrent_layers() {
            let (c, s) = l.state(cur);
            for v in c.iter().chain(s) {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }

    /// Replace the recurrent state at `len` with `bytes` (from
    /// [`Self::read_recurrent_state`] of a cache of the same geometry at the same
    /// length): a resumed sequence.
    pub fn set_recurrent_state(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() != self.recurrent_state_bytes() {
            return Err(ModelError::KvCacheShapeMismatch(format!(
                "a recurrent state of {} bytes; this cache's is {}",
                bytes.len(),
                self.recurrent_state_bytes()
            )));
        }
        let cur = self.recurrent.cur;
        self.recurrent.rewind = None;
        self.recurrent.checkpoints.clear();
        let mut words = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        for l in self.recurrent_layers_mut() {
            for v in l.conv[cur].iter_mut().chain(l.ssm[cur].iter_mut()) {
                *v = words.next().unwrap_or(0.0);
            }
        }
        Ok(())
    }
}

/// Rerun the first `r` logged rows of `l` from the state in buffer `from` into
/// buffer `to` with the form a forward of `r` rows uses.
fn replay(l: &mut RecurrentLayer, from: usize, to: usize, r: usize, pinned: bool) {
    let g = l.geom;
    let (c_all, w) = (g.shape.conv_channels(), g.shape.row_width());
    let [c0, c1] = &mut l.conv;
    let (src, dst) = if from == 0 { (&*c0, c1) } else { (&*c1, c0) };
    conv_state_after(g.conv_kernel, c_all, src, &l.log_raw[..r * c_all], r, dst);
    let [s0, s1] = &mut l.ssm;
    let (src, dst) = if from == 0 { (&*s0, s1) } else { (&*s1, s0) };
    debug_assert_ne!(from, to);
    let hs = g.shape.head_state();
    let mut o = vec![0f32; r * g.shape.dv];
    let mut sc = DeltaScratch::default();
    let chunked = uses_chunks(r, pinned);
    for (h, (st, from)) in dst
        .chunks_exact_mut(hs)
        .zip(src.chunks_exact(hs))
        .enumerate()
    {
        let rows = &l.log_in[..r * w];
        delta_rows_from(
            &g.shape,
            h,
            rows,
            r,
            chunked,
            Some(from),
            st,
            &mut o,
            &mut sc,
        );
    }
}
