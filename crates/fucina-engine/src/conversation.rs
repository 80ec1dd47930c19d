//! A conversation's engine state: one sequence of the pool that holds the whole
//! history across turns, the prefix reuse that makes each turn prefill only what is
//! new, and the optional crash-safe sidecar that lets it reopen warm.
//!
//! Chat orchestration (messages, templates, sampling defaults) is the caller's: a turn
//! is a full token history in (the rendered conversation so far, ending with the
//! assistant-turn opener), and [`Conversation::turn`] keeps the longest common prefix
//! of that history and what the sequence holds ([`SeqPool::reuse_prefix`]), so an
//! incremental `send` and a stateless `send_messages` of the same history are the
//! same computation, and an edited history simply reuses less.

use std::path::Path;
use std::sync::Arc;

use fucina_sample::LogitProcessor;
use fucina_tokenizer::Tokenizer;

use crate::error::Result;
use crate::generation::{Generation, GenerationOptions};
use crate::persist::{model_fingerprint, KvSidecar};
use crate::pool::{SeqId, SeqPool};

/// A conversation's sequence, its reuse accounting and its sidecar.
#[derive(Debug)]
pub struct Conversation {
    seq: SeqId,
    last_reused: usize,
    sidecar: Option<KvSidecar>,
}

/// What [`Conversation::enable_persistence`] found.
#[derive(Debug, Default)]
pub struct Resumed {
    /// Positions resumed from the file (0: a fresh start).
    pub positions: usize,
    /// Why an existing file was ignored and reset (for a warning).
    pub ignored: Option<String>,
}

impl Conversation {
    /// A new, empty conversation on a sequence of `pool`.
    pub fn new(pool: &mut SeqPool) -> Result<Conversation> {
        Ok(Conversation {
            seq: pool.alloc()?,
            last_reused: 0,
            sidecar: None,
        })
    }

    /// Its sequence.
    pub fn seq(&self) -> SeqId {
        self.seq
    }

    /// Tokens its sequence holds.
    pub fn tokens<'a>(&self, pool: &'a SeqPool) -> Result<&'a [u32]> {
        pool.tokens(self.seq)
    }

    /// History positions the last turn kept instead of prefilling.
    pub fn last_reused(&self) -> usize {
        self.last_reused
    }

    /// Start a turn: generate after `history` (the full conversation, ending with the
    /// assistant-turn opener), reusing the common prefix with what the sequence holds.
    pub fn turn(
        &mut self,
        pool: &mut SeqPool,
        tokenizer: Arc<Tokenizer>,
        history: &[u32],
        opts: GenerationOptions,
        processors: Vec<Box<dyn LogitProcessor>>,
    ) -> Result<Generation> {
        let g = Generation::on_sequence(pool, self.seq, tokenizer, history, opts, processors)?;
        self.last_reused = g.reused();
        Ok(g)
    }

    /// Forget the history (the sidecar too, when persistence is on).
    pub fn reset(&mut self, pool: &mut SeqPool) -> Result<()> {
        pool.clear(self.seq)?;
        self.last_reused = 0;
        if let Some(s) = &mut self.sidecar {
            s.clear()?;
        }
        Ok(())
    }

    /// Persist the conversation at `path` from now on: a compatible file there is
    /// resumed (tokens and KV rows restored, nothing prefilled) into this conversation,
    /// which must be empty; anything else there is reset (see [`crate::persist`]).
    /// Call [`Conversation::sync`] after each turn.
    pub fn enable_persistence(&mut self, pool: &mut SeqPool, path: &Path) -> Result<Resumed> {
        if pool.len(self.seq)? != 0 || self.sidecar.is_some() {
            return Err(crate::error::invalid(
                "persistence",
                "enable it once, on a conversation that has not started",
            ));
        }
        let fingerprint = model_fingerprint(pool.model());
        let opened = KvSidecar::open(path, pool.cache(self.seq)?, fingerprint, pool.n_ctx())?;
        pool.restore_with_state(
            self.seq,
            &opened.tokens,
            opened.records(),
            opened.recurrent_state(),
        )?;
        self.sidecar = Some(opened.sidecar);
        Ok(Resumed {
            positions: opened.tokens.len(),
            ignored: opened.ignored,
        })
    }

    /// Write the positions the sidecar does not hold yet (no-op without one).
    pub fn sync(&mut self, pool: &SeqPool) -> Result<()> {
        if let Some(s) = &mut self.sidecar {
            s.sync(pool.cache(self.seq)?, pool.tokens(self.seq)?)?;
        }
        Ok(())
    }

    /// Write the conversation's current state to a new sidecar at `path` (a snapshot
    /// that [`Conversation::enable_persistence`] can resume; persistence, if on,
    /// goes on to its own file).
    pub fn save(&self, pool: &SeqPool, path: &Path) -> Result<()> {
        let fingerprint = model_fingerprint(pool.model());
        KvSidecar::snapshot(
            path,
            pool.cache(self.seq)?,
            pool.tokens(self.seq)?,
            fingerprint,
        )
    }

    /// Whether persistence is on.
    pub fn persistent(&self) -> bool {
        self.sidecar.is_some()
    }

    /// Give the sequence back to the pool.
    pub fn release(self, pool: &mut SeqPool) {
        pool.remove(self.seq);
    }
}
