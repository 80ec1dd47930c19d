//! The multi-token-prediction (`nextn`) head of GLM-4.5 (the `nextn_predict_layers`
//! trailing block of a `glm4moe` file): llama.cpp's `graph_mtp`.
//!
//! A row at position p takes the token at p and the trunk's output-normed hidden
//! state at p − 1 (zeros where there is none): `enorm(embed(token))` and
//! `hnorm(h)` concatenated → `eh_proj` → one full decoder block (attention over the
//! head's OWN K/V rows, one per position, then the routed + shared experts) →
//! `shared_head_norm` (else the trunk's `output_norm`) → `shared_head_head` (else the
//! trunk's output). Its logits predict the token at p + 1; its normed output stands
//! in for the trunk's hidden state when drafting further ahead.
//!
//! The head's K/V live in their own one-layer [`KvCache`] ([`Model::new_mtp_cache`]),
//! which the caller keeps the same length as (and rewinds with) the trunk's cache of
//! the sequence. Tensors are bound only when the file has them
//! (`blk.{n_layer}.nextn.eh_proj.weight`; trunk-only files have none).

use std::sync::Arc;

use fucina_gguf::GgufFile;

use crate::config::{Config, FfnConfig, LayerConfig, Mixer};
use crate::families::{self, FamilySpec, LayerWeights};
use crate::forward::{grow, par_rows, residual, BatchRow, Scratch};
use crate::kv_cache::{KvCache, KvDtype};
use crate::matmul::matmul;
use crate::mixer::{attention, MixerWeights};
use crate::model::Model;
use crate::ops::norm::rms_norm;
use crate::ops::rope::rope_cache;
use crate::weights::{has_tensor, layer_name, load_vector, Linear};
use crate::{ModelError, Result};

/// The bound MTP head.
#[derive(Clone, Debug)]
pub struct MtpWeights {
    /// Block index in the file (the first after the trunk).
    pub block: usize,
    /// The decoder block's geometry (a MoE layer of the trunk's shape).
    pub config: LayerConfig,
    /// The decoder block's weights.
    pub layer: LayerWeights,
    /// `nextn.eh_proj`: `[n_embd, 2·n_embd]` over `[enorm(embedding), hnorm(h)]`.
    pub eh_proj: Linear,
    /// `nextn.enorm`.
    pub enorm: Vec<f32>,
    /// `nextn.hnorm`.
    pub hnorm: Vec<f32>,
    /// `nextn.shared_head_norm`, else the trunk's `output_norm`.
    pub head_norm: Vec<f32>,
    /// `nextn.embed_tokens` (`None`: the trunk's `token_embd`).
    pub embed: Option<Linear>,
    /// `nextn.shared_head_head` (`None`: the trunk's output).
    pub head: Option<Linear>,
}

/// Reusable buffers of [`Model::mtp_forward`].
#[derive(Default, Debug)]
pub struct MtpScratch {
    cat: Vec<f32>,
    emb: Vec<f32>,
}

impl MtpWeights {
    /// Bind the first MTP block of `file` (`config.n_layer`), or `None` when the file
    /// has none (`nextn_predict_layers` = 0, or a trunk-only file without
    /// `nextn.eh_proj`). A present head with a missing or misshapen tensor is an error
    /// naming it.
    pub(crate) fn bind(
        file: &Arc<GgufFile>,
        config: &Config,
        spec: &FamilySpec,
        output_norm: &[f32],
        n_blocks: usize,
    ) -> Result<Option<MtpWeights>> {
        let il = config.n_layer;
        let n = |s: &str| layer_name(il, s);
        if n_blocks <= il || !has_tensor(file, &n("nextn.eh_proj.weight")) {
            return Ok(None);
        }
        let e = config.n_embd;
        // The block is a MoE layer of the trunk's geometry (llama.cpp: every block
        // past `leading_dense_block_count`).
        let moe = config
            .layers
            .iter()
            .find_map(|l| l.ffn.moe().copied())
            .ok_or_else(|| {
                ModelError::InvalidConfig("an MTP block needs the trunk's expert shape".into())
            })?;
        let last = config
            .layers
            .last()
            .copied()
            .ok_or_else(|| ModelError::InvalidConfig("no layers".into()))?;
        let lc = LayerConfig {
            ffn: FfnConfig::Moe(moe),
            mixer: Mixer::Attention { gated: false },
            kv_source: None,
            sliding_window: None,
            ..last
        };
        let mut ext = config.clone();
        ext.layers.push(lc);
        ext.n_layer += 1;
        let layer = families::bind_layer(file, &ext, spec, il, None)?;
        let opt = |name: &str, rows: usize| -> Result<Option<Linear>> {
            let name = n(name);
            if has_tensor(file, &name) {
                Linear::bind(file, &name, rows, e).map(Some)
            } else {
                Ok(None)
            }
        };
        let head_norm =
            match crate::weights::load_vector_opt(file, &n("nextn.shared_head_norm.weight"), e)? {
                Some(v) => v,
                None => output_norm.to_vec(),
            };
        Ok(Some(MtpWeights {
            block: il,
            config: lc,
            layer,
            eh_proj: Linear::bind(file, &n("nextn.eh_proj.weight"), e, 2 * e)?,
            enorm: load_vector(file, &n("nextn.enorm.weight"), e)?,
            hnorm: load_vector(file, &n("nextn.hnorm.weight"), e)?,
            head_norm,
            embed: opt("nextn.embed_tokens.weight", config.n_vocab)?,
            head: opt("nextn.shared_head_head.weight", config.n_vocab)?,
        }))
    }

    /// Every matrix a draft step multiplies with in full (what repacking applies to).
    pub fn resident_matrices(&self) -> Vec<&Linear> {
        let mut v = self.layer.mixer.matrices();
        v.extend(self.layer.ffn.resident_matrices());
        v.push(&self.eh_proj);
        v.extend(&self.head);
        v
    }
}

impl Model {
    /// The multi-token-prediction head, where the file has one.
    pub fn mtp(&self) -> Option<&MtpWeights> {
        self.mtp.as_ref()
    }

    /// A one-layer cache for the MTP head's K/V of one sequence.
    pub fn new_mtp_cache(&self, capacity: usize, dtype: KvDtype) -> Result<KvCache> {
        let mtp = self.mtp_or_err()?;
        KvCache::with_layers(&[mtp.config.cache_spec()], capacity, dtype)
    }

    fn mtp_or_err(&self) -> Result<&MtpWeights> {
        self.mtp
            .as_ref()
            .ok_or_else(|| ModelError::InvalidConfig("the model has no MTP (nextn) head".into()))
    }

    /// Run the MTP head over `rows` (tokens at their positions, continuing each
    /// `caches[row.seq]`, an MTP cache), each paired with its row of `h_prev`
    /// (`rows.len() × n_embd`: the trunk's output-normed hidden state at the previous
    /// position, or the head's own for a draft further ahead). Returns the logits of
    /// the flagged rows (`n_flagged × n_vocab`) and leaves their normed outputs in
    /// [`Scratch::captured_hidden`]. On error no cache length changes.
    pub fn mtp_forward<'s>(
        &self,
        rows: &[BatchRow],
        h_prev: &[f32],
        caches: &mut [KvCache],
        s: &'s mut Scratch,
    ) -> Result<&'s [f32]> {
        let mtp = self.mtp_or_err()?;
        let cfg = &self.config;
        let (m, e, lc) = (rows.len(), cfg.n_embd, &mtp.config);
        self.validate_mtp(rows, h_prev, caches, lc)?;
        for r in rows {
            caches[r.seq].begin_forward();
        }
        s.out_rows.clear();
        s.out_rows.extend(
            rows.iter()
                .enumerate()
                .filter(|(_, r)| r.logits)
                .map(|(i, _)| i),
        );
        s.all_rows.clear();
        s.all_rows.extend(0..m);

        // [enorm(embedding), hnorm(h)] → eh_proj.
        let embed = mtp.embed.as_ref().unwrap_or(&self.tok_embd);
        let emb = grow(&mut s.mtp.emb, m * e);
        for (r, row) in rows.iter().enumerate() {
            embed.dequantize_row(row.token as usize, &mut emb[r * e..(r + 1) * e])?;
        }
        let cat = grow(&mut s.mtp.cat, m * 2 * e);
        let emb_ro: &[f32] = emb;
        par_rows(&self.pool, cat, 2 * e, &|rr, cat| {
            for (r, c) in rr.zip(cat.chunks_exact_mut(2 * e)) {
                let (ce, ch) = c.split_at_mut(e);
                rms_norm(&emb_ro[r * e..(r + 1) * e], &mtp.enorm, cfg.rms_eps, ce);
                rms_norm(&h_prev[r * e..(r + 1) * e], &mtp.hnorm, cfg.rms_eps, ch);
            }
        });
        let x = grow(&mut s.x, m * e);
        matmul(
            &self.pool,
            &mtp.eh_proj,
            &s.mtp.cat[..m * 2 * e],
            m,
            x,
            &mut s.mm,
        )?;

        // RoPE cos/sin of the block's one config, per row.
        let n_rot = lc.rope.n_rot;
        s.rope_group.clear();
        s.rope_group.push(0);
        let cs = grow(&mut s.cs, m * n_rot);
        if n_rot > 0 {
            par_rows(&self.pool, cs, n_rot, &|rr, cs| {
                for (r, c) in rr.zip(cs.chunks_exact_mut(n_rot)) {
                    rope_cache(&lc.rope, None, rows[r].pos as i64, c);
                }
            });
        }

        // The decoder block, every row through (the caller's batches are small).
        let lw = &mtp.layer;
        let MixerWeights::Attention(aw) = &lw.mixer else {
            return Err(ModelError::InvalidConfig(
                "the MTP block is not an attention block".into(),
            ));
        };
        let xn = grow(&mut s.xn, m * e);
        let x_ro: &[f32] = &s.x;
        par_rows(&self.pool, xn, e, &|rr, xn| {
            for (r, o) in rr.zip(xn.chunks_exact_mut(e)) {
                rms_norm(&x_ro[r * e..(r + 1) * e], &lw.attn_norm, cfg.rms_eps, o);
            }
        });
        attention::forward_layer(self, 0, lc, aw, rows, caches, s, false, n_rot)?;
        residual(
            &self.pool,
            &mut s.x[..m * e],
            &mut s.o[..m * e],
            e,
            None,
            cfg.rms_eps,
        );
        let xn = grow(&mut s.xn, m * e);
        let x_ro: &[f32] = &s.x;
        par_rows(&self.pool, xn, e, &|rr, xn| {
            for (r, o) in rr.zip(xn.chunks_exact_mut(e)) {
                rms_norm(&x_ro[r * e..(r + 1) * e], &lw.ffn_norm, cfg.rms_eps, o);
            }
        });
        let o = grow(&mut s.o, m * e);
        lw.ffn.forward(
            &self.pool,
            cfg.activation,
            &s.x[..m * e],
            xn,
            m,
            o,
            cfg.rms_eps,
            &mut s.ffn,
            &mut s.mm,
        )?;
        residual(
            &self.pool,
            &mut s.x[..m * e],
            &mut s.o[..m * e],
            e,
            None,
            cfg.rms_eps,
        );

        s.counts.clear();
        s.counts.resize(caches.len(), 0);
        for r in rows {
            s.counts[r.seq] += 1;
        }
        let pinned = s.mm.pinned();
        for (c, &n) in caches.iter_mut().zip(&s.counts) {
            c.commit(n, pinned)?;
        }

        // The flagged rows: head norm (kept as their hidden states), then the head.
        let n_out = s.out_rows.len();
        let h = grow(&mut s.hidden_all, n_out * e);
        for (i, &r) in s.out_rows.iter().enumerate() {
            rms_norm(
                &s.x[r * e..(r + 1) * e],
                &mtp.head_norm,
                cfg.rms_eps,
                &mut h[i * e..(i + 1) * e],
            );
        }
        s.captured_len = n_out * e;
        let vsz = cfg.n_vocab;
        let logits = grow(&mut s.logits, n_out * vsz);
        if n_out > 0 {
            let head = mtp.head.as_ref().unwrap_or(&self.output);
            matmul(
                &self.pool,
                head,
                &s.hidden_all[..n_out * e],
                n_out,
                logits,
                &mut s.mm,
            )?;
        }
        Ok(&s.logits[..n_out * vsz])
    }

    fn validate_mtp(
        &self,
        rows: &[BatchRow],
        h_prev: &[f32],
        caches: &[KvCache],
        lc: &LayerConfig,
    ) -> Result<()> {
        let e = self.config.n_embd;
        if rows.is_empty() {
            return Err(ModelError::InvalidBatch("empty batch".into()));
        }
        if h_prev.len() != rows.len() * e {
            return Err(ModelError::InvalidBatch(format!(
                "{} hidden values for {} rows of {e}",
                h_prev.len(),
                rows.len()
            )));
        }
        let mut next: Vec<Option<usize>> = vec![None; caches.len()];
        for (i, r) in rows.iter().enumerate() {
            let cache = caches.get(r.seq).ok_or_else(|| {
                ModelError::InvalidBatch(format!("row {i}: sequence {} out of range", r.seq))
            })?;
            if r.token as usize >= self.config.n_vocab {
                return Err(ModelError::InvalidBatch(format!(
                    "row {i}: token {} outside the vocabulary",
                    r.token
                )));
            }
            let want = next[r.seq].unwrap_or(cache.len());
            if r.pos != want {
                return Err(ModelError::InvalidBatch(format!(
                    "row {i}: MTP sequence {} continues at {want}, row says {}",
                    r.seq, r.pos
                )));
            }
            if r.pos >= cache.capacity() {
                return Err(ModelError::KvCacheOverflow {
                    needed: r.pos + 1,
                    capacity: cache.capacity(),
                });
            }
            if cache.n_layers() != 1 || cache.state(0).spec() != lc.cache_spec() {
                return Err(ModelError::KvCacheShapeMismatch(format!(
                    "cache {} is not an MTP cache of this model",
                    r.seq
                )));
            }
            next[r.seq] = Some(want + 1);
        }
        Ok(())
    }
}
