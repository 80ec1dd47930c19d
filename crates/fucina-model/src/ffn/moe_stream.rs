//! A MoE layer's experts streamed by the expert store (`fucina-experts`) instead
//! of borrowed from the mapping: registering the layer's stacks with the store
//! (their file ranges; nothing read), the per-layer handle the forward uses, the
//! streamed experts as [`Linear`]s over the bytes the store read (the same
//! kernels then run on the same bytes, so streamed results are bitwise the
//! resident ones), and the router lookahead.
//!
//! Lookahead (when the store prefetches): while layer `l` computes, the next MoE
//! layer's router is run on layer `l`'s normed FFN input (the next layer's real
//! router input is not known yet; the residual stream changes little from one
//! layer to the next) and that router's top-k experts of each row are prefetched.
//! Only for calls whose guesses fit the next layer's slots (decode, small batches).

use std::sync::Arc;

use fucina_experts::{ExpertBytes, ExpertStore, ExpertStoreBuilder, StackSpec};

use super::moe::MoeFfn;
use crate::matmul::{matmul, MatmulScratch};
use crate::parallel::ThreadPool;
use crate::weights::{Linear, OwnedBytes};
use crate::{ModelError, Result};

/// The store a MoE layer streams its experts from.
#[derive(Clone, Debug)]
pub struct MoeStream {
    /// The model's store.
    pub store: Arc<ExpertStore>,
    /// This layer's index in the store.
    pub layer: usize,
    /// The next MoE layer's router, for the lookahead prefetch.
    pub lookahead: Option<Lookahead>,
}

/// The next MoE layer's router (`MoeStream::lookahead`).
#[derive(Clone, Debug)]
pub struct Lookahead {
    /// That layer's index.
    pub layer: usize,
    /// Its router `[n_expert, n_embd]`.
    pub router: Linear,
    /// Its experts per token.
    pub k: usize,
}

/// The matrices of one expert: gate, up, down.
pub(crate) type ExpertMatrices = [Linear; 3];

/// Register layer `il`'s expert stacks (gate, up, down) with the store: each stack
/// is expert 0's file range, the stride between experts and one expert's bytes.
pub fn register(builder: &mut ExpertStoreBuilder, il: usize, moe: &MoeFfn) -> Result<()> {
    let stacks = [&moe.gate, &moe.up, &moe.down]
        .into_iter()
        .map(|stack| stack_spec(stack))
        .collect::<Result<Vec<_>>>()?;
    builder.register(il, stacks)?;
    Ok(())
}

fn stack_spec(stack: &[Linear]) -> Result<StackSpec> {
    let first = stack
        .first()
        .ok_or_else(|| ModelError::InvalidConfig("an empty expert stack".into()))?;
    let name = first.name().trim_end_matches("[0]").to_owned();
    let not_mapped = || ModelError::InvalidConfig(format!("'{name}' is not in the mapping"));
    let (part, r0) = first.file_range().ok_or_else(not_mapped)?;
    let stride = match stack.get(1) {
        Some(w) => {
            let (p1, r1) = w.file_range().ok_or_else(not_mapped)?;
            if p1 != part || r1.start < r0.start {
                return Err(ModelError::InvalidConfig(format!(
                    "'{name}': experts out of order in the file"
                )));
            }
            r1.start - r0.start
        }
        None => r0.len(),
    };
    Ok(StackSpec {
        name,
        part,
        offset: r0.start as u64,
        stride: stride as u64,
        expert_bytes: r0.len() as u64,
        n_expert: stack.len(),
    })
}

impl MoeStream {
    /// Expert `e`'s matrices over the bytes the store read (`moe`'s own matrices as
    /// templates: names, types, shapes, kernels).
    pub(crate) fn matrices(
        &self,
        moe: &MoeFfn,
        e: usize,
        bytes: &Arc<ExpertBytes>,
    ) -> Result<ExpertMatrices> {
        let owned: OwnedBytes = bytes.clone();
        let one = |stack: &[Linear], s: usize| -> Result<Linear> {
            let range = self.store.stack_range(self.layer, s).ok_or_else(|| {
                ModelError::InvalidConfig(format!("layer {}: stack {s} not registered", self.layer))
            })?;
            let w = stack.get(e).ok_or_else(|| {
                ModelError::InvalidBatch(format!("layer {}: expert {e}", self.layer))
            })?;
            w.with_bytes(Arc::clone(&owned), range)
        };
        Ok([one(&moe.gate, 0)?, one(&moe.up, 1)?, one(&moe.down, 2)?])
    }

    /// Prefetch the next MoE layer's likely experts for these `m` rows of `x`
    /// (see the module doc); `buf` is scratch for the router logits.
    pub(crate) fn lookahead(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        m: usize,
        buf: &mut Vec<f32>,
        mm: &mut MatmulScratch,
    ) -> Result<()> {
        let Some(la) = &self.lookahead else {
            return Ok(());
        };
        if !self.store.prefetches() || m * la.k > self.store.slots(la.layer) {
            return Ok(());
        }
        let (n, e) = (la.router.rows(), la.router.cols());
        buf.resize(m * n, 0.0);
        matmul(pool, &la.router, &x[..m * e], m, buf, mm)?;
        let mut guess: Vec<u32> = Vec::with_capacity(m * la.k);
        let mut order: Vec<u32> = (0..n as u32).collect();
        for row in buf.chunks_exact(n) {
            order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
            guess.extend_from_slice(&order[..la.k.min(n)]);
        }
        guess.sort_unstable();
        guess.dedup();
        self.store.prefetch(la.layer, &guess)?;
        Ok(())
    }
}
