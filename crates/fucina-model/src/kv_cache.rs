//! Per-sequence KV cache (spec §13.4): post-RoPE keys and values of every layer,
//! indexed by position, pre-allocated at a fixed capacity.
//!
//! Storage per layer, by dtype:
//! - `F16` (default, llama.cpp's default `type_k/type_v`) and `F32` (reference
//!   numerics for parity tests): K as `[pos][kv_head][head_dim]`; V transposed as
//!   `[kv_head][head_dim][capacity]`, llama.cpp's `v_trans` layout, so the
//!   probability-weighted sum over positions is one contiguous dot per output dim.
//! - `Q8_0` (opt-in; `--cache-type-k/v q8_0`): K and V both `[pos][kv_head]` rows of
//!   `head_dim / 32` Q8_0 blocks (34 bytes per 32 values). Scores are integer
//!   Q8_0×Q8_0 dots of a quantized query against the cached K blocks.
//!
//! Each layer's state is a [`LayerState`]: attention K/V ([`KvLayer`]), or the
//! recurrent state of a Gated DeltaNet layer ([`RecurrentLayer`], rewound through
//! ping-pong buffers, a replay log and checkpoints: see [`recurrent`]). Every kind
//! truncates, copies a prefix and persists, so speculation and prefix reuse work on
//! every family. A truncation a recurrent state cannot reach exactly lands on an
//! earlier position; [`KvCache::len`] says where.
//!
//! The cache has no window logic: every position is kept and sliding-window layers
//! mask at read time, which keeps `truncate` (the speculative rewind) trivial.
//! Rows at positions `>= len` may be written by a forward in progress; `advance`
//! publishes them.

use fucina_gguf::GgmlType;
use fucina_quant::formats::{DequantFn, QuantFn};
use fucina_quant::{DotEntry, Kernels};

use crate::config::Config;
use crate::ops::f16dot::to_f16_bits;
use crate::{ModelError, Result};

mod record;
pub mod recurrent;

use recurrent::RecurrentMeta;
pub use recurrent::{RecurrentGeometry, RecurrentIo, RecurrentLayer};

/// Element type of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvDtype {
    /// IEEE half (2 bytes / value).
    F16,
    /// Q8_0 blocks (1.0625 bytes / value); needs head_dim % 32 == 0.
    Q8_0,
    /// f32 (4 bytes / value): exact attention, for reference comparisons.
    F32,
}

impl KvDtype {
    /// The ggml type of the stored elements.
    pub fn ggml_type(self) -> GgmlType {
        match self {
            KvDtype::F16 => GgmlType::F16,
            KvDtype::Q8_0 => GgmlType::Q8_0,
            KvDtype::F32 => GgmlType::F32,
        }
    }

    /// Parse `"f16" | "q8_0" | "f32"`.
    pub fn parse(s: &str) -> Result<KvDtype> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(KvDtype::F16),
            "q8_0" => Ok(KvDtype::Q8_0),
            "f32" => Ok(KvDtype::F32),
            _ => Err(ModelError::InvalidConfig(format!(
                "unknown KV cache type '{s}' (f16, q8_0, f32)"
            ))),
        }
    }
}

/// Geometry of one layer's cache slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvGeometry {
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Key head dimension.
    pub head_dim_k: usize,
    /// Value head dimension.
    pub head_dim_v: usize,
}

/// The kind and shape of one layer's slot, for [`KvCache::with_layers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerSpec {
    /// K/V rows of every position.
    Attention(KvGeometry),
    /// A Gated DeltaNet layer's recurrent state.
    Recurrent(RecurrentGeometry),
}

/// One layer's per-sequence state.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum LayerState {
    /// Post-RoPE keys and values of every position.
    Attention(KvLayer),
    /// Convolution and delta-rule state at the cache's length.
    Recurrent(RecurrentLayer),
}

impl LayerState {
    /// The attention K/V of the layer (a recurrent layer's: empty, zero heads).
    pub fn kv(&self) -> &KvLayer {
        match self {
            LayerState::Attention(l) => l,
            LayerState::Recurrent(r) => r.empty_kv(),
        }
    }

    /// The attention K/V to write, `None` for a recurrent layer.
    fn kv_mut(&mut self) -> Option<&mut KvLayer> {
        match self {
            LayerState::Attention(l) => Some(l),
            LayerState::Recurrent(_) => None,
        }
    }

    /// Bytes of storage.
    pub fn byte_size(&self) -> usize {
        match self {
            LayerState::Attention(l) => l.k.len() + l.v.len(),
            LayerState::Recurrent(r) => r.byte_size(),
        }
    }

    /// The layer's slot shape.
    pub fn spec(&self) -> LayerSpec {
        match self {
            LayerState::Attention(l) => LayerSpec::Attention(l.geom),
            LayerState::Recurrent(r) => LayerSpec::Recurrent(r.geometry()),
        }
    }
}

/// One layer's K/V buffers.
#[derive(Clone, Debug)]
pub struct KvLayer {
    geom: KvGeometry,
    k: Vec<u8>,
    v: Vec<u8>,
    k_row: usize,
    v_row: usize,
    /// Bytes per element of the transposed V (F16: 2, F32: 4; 0 for Q8_0's rows).
    elem: usize,
    capacity: usize,
}

impl KvLayer {
    /// Geometry of the layer.
    pub fn geometry(&self) -> KvGeometry {
        self.geom
    }

    /// Positions the layer's buffers hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes per element of the transposed V of F16/F32 caches (0 for Q8_0, whose V
    /// is stored as rows).
    pub fn elem_size(&self) -> usize {
        self.elem
    }

    /// Bytes of K for (`pos`, `kv_head`).
    #[inline]
    pub fn k_row(&self, pos: usize, kv_head: usize) -> &[u8] {
        let i = pos * self.geom.n_head_kv + kv_head;
        &self.k[i * self.k_row..(i + 1) * self.k_row]
    }

    /// Q8_0 caches: bytes of V for (`pos`, `kv_head`).
    #[inline]
    pub fn v_row(&self, pos: usize, kv_head: usize) -> &[u8] {
        let i = pos * self.geom.n_head_kv + kv_head;
        &self.v[i * self.v_row..(i + 1) * self.v_row]
    }

    /// The K rows of `kv_head` at positions `start..end` (`start < end`) as one
    /// slice: row `start + i` begins at byte `i · n_head_kv · k_row_bytes`.
    #[inline]
    pub fn k_rows(&self, kv_head: usize, start: usize, end: usize) -> &[u8] {
        let first = start * self.geom.n_head_kv + kv_head;
        let last = (end - 1) * self.geom.n_head_kv + kv_head;
        &self.k[first * self.k_row..(last + 1) * self.k_row]
    }

    /// F16/F32 caches: V^T of `kv_head`, dims `dim0..dim0 + n` (`n > 0`), over
    /// positions `start..end` as one slice: dim `dim0 + i` begins at element
    /// `i · capacity`.
    #[inline]
    pub fn vt_dims(
        &self,
        kv_head: usize,
        dim0: usize,
        n: usize,
        start: usize,
        end: usize,
    ) -> &[u8] {
        let (elem, capacity) = (self.elem, self.capacity);
        let base = (kv_head * self.geom.head_dim_v + dim0) * capacity;
        &self.v[(base + start) * elem..(base + (n - 1) * capacity + end) * elem]
    }

    /// F16/F32 caches: element bytes of V^T for (`kv_head`, `dim`) over `positions`.
    #[inline]
    pub fn vt_span(&self, kv_head: usize, dim: usize, start: usize, end: usize) -> &[u8] {
        let (elem, capacity) = (self.elem, self.capacity);
        let base = (kv_head * self.geom.head_dim_v + dim) * capacity;
        &self.v[(base + start) * elem..(base + end) * elem]
    }
}

/// The post-RoPE K/V store of one sequence, for every layer.
#[derive(Clone, Debug)]
pub struct KvCache {
    dtype: KvDtype,
    capacity: usize,
    len: usize,
    layers: Vec<LayerState>,
    quant: QuantFn,
    dequant: DequantFn,
    dot: DotEntry,
    recurrent: RecurrentMeta,
}

impl KvCache {
    /// A cache of `capacity` positions with per-layer geometry (attention layers).
    pub fn new(geoms: &[KvGeometry], capacity: usize, dtype: KvDtype) -> Result<KvCache> {
        let specs: Vec<LayerSpec> = geoms.iter().map(|&g| LayerSpec::Attention(g)).collect();
        KvCache::with_layers(&specs, capacity, dtype)
    }

    /// A cache of `capacity` positions whose layers are attention or recurrent.
    pub fn with_layers(specs: &[LayerSpec], capacity: usize, dtype: KvDtype) -> Result<KvCache> {
        let ty = dtype.ggml_type();
        let format = fucina_quant::format(ty).ok_or_else(|| {
            ModelError::InvalidConfig(format!("KV dtype {ty} has no block format"))
        })?;
        let (Some(quant), Some(dequant)) = (format.quantize, format.dequantize) else {
            return Err(ModelError::InvalidConfig(format!(
                "KV dtype {ty} has no quantizer"
            )));
        };
        let dot = Kernels::from_env()?.entry(ty)?;
        let empty_kv = |geom| KvLayer {
            geom,
            k: Vec::new(),
            v: Vec::new(),
            k_row: 0,
            v_row: 0,
            elem: 0,
            capacity,
        };
        let mut layers = Vec::with_capacity(specs.len());
        for (il, spec) in specs.iter().enumerate() {
            let g = match spec {
                LayerSpec::Attention(g) => g,
                LayerSpec::Recurrent(r) => {
                    let empty = empty_kv(KvGeometry {
                        n_head_kv: 0,
                        head_dim_k: 0,
                        head_dim_v: 0,
                    });
                    layers.push(LayerState::Recurrent(RecurrentLayer::new(*r, empty)));
                    continue;
                }
            };
            let (k_row, v_row) = match dtype {
                KvDtype::Q8_0 => {
                    for d in [g.head_dim_k, g.head_dim_v] {
                        if d % 32 != 0 {
                            return Err(ModelError::KvCacheHeadDimNotBlockAligned {
                                layer: il,
                                head_dim: d,
                            });
                        }
                    }
                    (g.head_dim_k / 32 * 34, g.head_dim_v / 32 * 34)
                }
                KvDtype::F16 => (g.head_dim_k * 2, g.head_dim_v * 2),
                KvDtype::F32 => (g.head_dim_k * 4, g.head_dim_v * 4),
            };
            let bytes = |row: usize| {
                capacity
                    .checked_mul(g.n_head_kv)
                    .and_then(|n| n.checked_mul(row))
                    .ok_or_else(|| {
                        ModelError::InvalidConfig(format!(
                            "KV cache of {capacity} positions overflows"
                        ))
                    })
            };
            layers.push(LayerState::Attention(KvLayer {
                geom: *g,
                k: vec![0u8; bytes(k_row)?],
                v: vec![0u8; bytes(v_row)?],
                k_row,
                v_row,
                // A layer of no heads (Gemma 4's shared-KV layers) holds no bytes:
                // give it the row layout, which never indexes into its buffers.
                elem: match dtype {
                    _ if g.n_head_kv == 0 => 0,
                    KvDtype::F16 => 2,
                    KvDtype::F32 => 4,
                    KvDtype::Q8_0 => 0,
                },
                capacity,
            }));
        }
        Ok(KvCache {
            dtype,
            capacity,
            len: 0,
            layers,
            quant,
            dequant,
            dot,
            recurrent: RecurrentMeta::default(),
        })
    }

    /// A cache shaped for `config`'s layers.
    pub fn for_config(config: &Config, capacity: usize, dtype: KvDtype) -> Result<KvCache> {
        let specs: Vec<LayerSpec> = config.layers.iter().map(|l| l.cache_spec()).collect();
        KvCache::with_layers(&specs, capacity, dtype)
    }

    /// Storage dtype.
    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Number of layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }
    /// Layer `il`'s attention K/V.
    pub fn layer(&self, il: usize) -> &KvLayer {
        self.layers[il].kv()
    }
    /// Layer `il`'s state.
    pub fn state(&self, il: usize) -> &LayerState {
        &self.layers[il]
    }
    /// Bytes of storage (all layers, full capacity; recurrent layers with their
    /// rewind buffers, log and checkpoints).
    pub fn byte_size(&self) -> usize {
        self.layers.iter().map(LayerState::byte_size).sum::<usize>() + self.recurrent.byte_size()
    }
    /// The score kernel for this dtype (K rows × converted query).
    pub(crate) fn dot(&self) -> &DotEntry {
        &self.dot
    }
    /// Dequantizer of the stored rows.
    pub(crate) fn dequant(&self) -> DequantFn {
        self.dequant
    }

    /// Write the K/V rows of one position of layer `il` (at `pos >= len`, pending
    /// until [`advance`](Self::advance)). `k` is `n_head_kv × head_dim_k`, `v`
    /// is `n_head_kv × head_dim_v`.
    pub fn write(&mut self, il: usize, pos: usize, k: &[f32], v: &[f32]) -> Result<()> {
        let cap = self.capacity;
        let (quant, dtype) = (self.quant, self.dtype);
        let layer = self
            .layers
            .get_mut(il)
            .ok_or_else(|| ModelError::KvCacheShapeMismatch(format!("no layer {il}")))?
            .kv_mut()
            .ok_or_else(|| {
                ModelError::KvCacheShapeMismatch(format!("layer {il} holds no K/V rows"))
            })?;
        let g = layer.geom;
        if k.len() != g.n_head_kv * g.head_dim_k || v.len() != g.n_head_kv * g.head_dim_v {
            return Err(ModelError::KvCacheShapeMismatch(format!(
                "layer {il}: k/v rows of {} / {} values, expected {} / {}",
                k.len(),
                v.len(),
                g.n_head_kv * g.head_dim_k,
                g.n_head_kv * g.head_dim_v
            )));
        }
        if pos >= cap {
            return Err(ModelError::KvCacheOverflow {
                needed: pos + 1,
                capacity: cap,
            });
        }
        let kb = layer.k_row * g.n_head_kv;
        let k_dst = &mut layer.k[pos * kb..(pos + 1) * kb];
        match dtype {
            // The same conversion as `quant` (f32_to_f16), batched through F16C.
            KvDtype::F16 => {
                let mut h = [0u16; 64];
                for (src, dst) in k.chunks(64).zip(k_dst.chunks_mut(128)) {
                    let h = &mut h[..src.len()];
                    to_f16_bits(src, h);
                    for (b, x) in dst.chunks_exact_mut(2).zip(h.iter()) {
                        b.copy_from_slice(&x.to_le_bytes());
                    }
                }
            }
            _ => quant(k, k_dst),
        }
        match dtype {
            KvDtype::Q8_0 => {
                let vb = layer.v_row * g.n_head_kv;
                quant(v, &mut layer.v[pos * vb..(pos + 1) * vb]);
            }
            KvDtype::F16 => {
                let mut h = [0u16; 64];
                for (c, src) in v.chunks(64).enumerate() {
                    let h = &mut h[..src.len()];
                    to_f16_bits(src, h);
                    for (j, x) in h.iter().enumerate() {
                        let o = ((c * 64 + j) * cap + pos) * 2;
                        layer.v[o..o + 2].copy_from_slice(&x.to_le_bytes());
                    }
                }
            }
            KvDtype::F32 => {
                for (i, &x) in v.iter().enumerate() {
                    let o = (i * cap + pos) * 4;
                    layer.v[o..o + 4].copy_from_slice(&x.to_le_bytes());
                }
            }
        }
        Ok(())
    }

    /// Append `m` positions' rows for layer `il` at offset `len` (does not advance:
    /// call [`advance`](Self::advance) once after every layer is written).
    pub fn append_layer(
        &mut self,
        il: usize,
        k_rows: &[f32],
        v_rows: &[f32],
        m: usize,
    ) -> Result<()> {
        if m == 0 {
            return Ok(());
        }
        if k_rows.len() % m != 0 || v_rows.len() % m != 0 {
            return Err(ModelError::KvCacheShapeMismatch(format!(
                "{} / {} values are not {m} rows",
                k_rows.len(),
                v_rows.len()
            )));
        }
        let (kw, vw) = (k_rows.len() / m, v_rows.len() / m);
        for r in 0..m {
            let pos = self.len + r;
            self.write(
                il,
                pos,
                &k_rows[r * kw..(r + 1) * kw],
                &v_rows[r * vw..(r + 1) * vw],
            )?;
        }
        Ok(())
    }

    /// Publish `m` more positions.
    pub fn advance(&mut self, m: usize) -> Result<()> {
        let new = self.len.checked_add(m).filter(|&n| n <= self.capacity);
        self.len = new.ok_or(ModelError::KvCacheOverflow {
            needed: self.len.saturating_add(m),
            capacity: self.capacity,
        })?;
        Ok(())
    }

    /// Forget every position (buffers are kept; recurrent states return to zeros).
    pub fn reset(&mut self) {
        self.len = 0;
        if self.has_recurrent() {
            self.reset_recurrent();
        }
    }

    /// Keep the first `keep_len` positions (no-op when `keep_len >= len`). With
    /// recurrent layers the cache may keep fewer (the latest position at or below
    /// `keep_len` whose state it can restore bitwise; see [`recurrent`]): `len()`
    /// says how many.
    pub fn truncate(&mut self, keep_len: usize) {
        if keep_len >= self.len {
            return;
        }
        self.len = if self.has_recurrent() {
            self.rewind_recurrent(keep_len)
        } else {
            keep_len
        };
    }

    /// Copy positions `start..end` of `src` into the same positions here and set
    /// `len = end` (prefix sharing between sequences). Requires `len == start`,
    /// `end <= src.len()` and identical dtype and geometry. With recurrent layers the
    /// copy may stop earlier (at the latest position `<= end` whose state `src` can
    /// give without changing itself): `len()` says where.
    pub fn copy_rows(&mut self, src: &KvCache, start: usize, end: usize) -> Result<()> {
        if self.dtype != src.dtype
            || self.layers.len() != src.layers.len()
            || self
                .layers
                .iter()
                .zip(&src.layers)
                .any(|(a, b)| a.spec() != b.spec())
        {
            return Err(ModelError::KvCacheShapeMismatch(
                "copy_rows between caches of different dtype or geometry".into(),
            ));
        }
        if self.len != start || start > end || end > src.len {
            return Err(ModelError::KvCacheShapeMismatch(format!(
                "copy_rows {start}..{end}: destination len {}, source len {}",
                self.len, src.len
            )));
        }
        if end > self.capacity {
            return Err(ModelError::KvCacheOverflow {
                needed: end,
                capacity: self.capacity,
            });
        }
        let (cap_d, cap_s) = (self.capacity, src.capacity);
        let end = if self.has_recurrent() {
            self.copy_recurrent_from(src, end)
        } else {
            end
        };
        if end < start {
            self.len = end;
            return Ok(());
        }
        for (d, s) in self.layers.iter_mut().zip(&src.layers) {
            let Some(d) = d.kv_mut() else { continue };
            let s = s.kv();
            let elem = d.elem;
            let kb = d.k_row * d.geom.n_head_kv;
            d.k[start * kb..end * kb].copy_from_slice(&s.k[start * kb..end * kb]);
            if elem == 0 {
                let vb = d.v_row * d.geom.n_head_kv;
                d.v[start * vb..end * vb].copy_from_slice(&s.v[start * vb..end * vb]);
            } else {
                for row in 0..d.geom.n_head_kv * d.geom.head_dim_v {
                    let (od, os) = (row * cap_d, row * cap_s);
                    d.v[(od + start) * elem..(od + end) * elem]
                        .copy_from_slice(&s.v[(os + start) * elem..(os + end) * elem]);
                }
            }
        }
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom() -> Vec<KvGeometry> {
        vec![KvGeometry {
            n_head_kv: 2,
            head_dim_k: 32,
            head_dim_v: 32,
        }]
    }

    #[test]
    fn append_advance_truncate() {
        let mut c = KvCache::new(&geom(), 8, KvDtype::F16).unwrap();
        let k = vec![0.5f32; 3 * 64];
        let v = vec![0.25f32; 3 * 64];
        c.append_layer(0, &k, &v, 3).unwrap();
        c.advance(3).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c.layer(0).k_row(2, 1), &[0x00, 0x38].repeat(32)[..]); // f16 0.5
        c.truncate(1);
        assert_eq!(c.len(), 1);
        c.truncate(5);
        assert_eq!(c.len(), 1);
        assert!(matches!(
            c.advance(8),
            Err(ModelError::KvCacheOverflow { .. })
        ));
        assert!(c.write(0, 8, &k[..64], &v[..64]).is_err());
        assert!(c.write(0, 0, &k[..63], &v[..64]).is_err());
    }

    #[test]
    fn f16_rows_are_the_software_conversion() {
        let mut c = KvCache::new(&geom(), 4, KvDtype::F16).unwrap();
        let k: Vec<f32> = (0..64)
            .map(|i| (i as f32 * 0.37).sin() * 70_000.0 / (i + 1) as f32)
            .collect();
        let v: Vec<f32> = k.iter().map(|x| x * 1e-7).collect();
        c.write(0, 2, &k, &v).unwrap();
        let l = c.layer(0);
        for (i, &x) in k.iter().enumerate() {
            let b = &l.k_row(2, i / 32)[(i % 32) * 2..(i % 32) * 2 + 2];
            assert_eq!(
                u16::from_le_bytes([b[0], b[1]]),
                fucina_quant::half::f32_to_f16(x)
            );
        }
        for (i, &x) in v.iter().enumerate() {
            let b = l.vt_span(i / 32, i % 32, 2, 3);
            assert_eq!(
                u16::from_le_bytes([b[0], b[1]]),
                fucina_quant::half::f32_to_f16(x)
            );
        }
    }

    #[test]
    fn q8_0_halves_f16_and_needs_aligned_heads() {
        let f16 = KvCache::new(&geom(), 64, KvDtype::F16).unwrap();
        let q8 = KvCache::new(&geom(), 64, KvDtype::Q8_0).unwrap();
        assert!(q8.byte_size() * 100 <= f16.byte_size() * 54);
        let bad = [KvGeometry {
            n_head_kv: 1,
            head_dim_k: 48,
            head_dim_v: 48,
        }];
        assert!(matches!(
            KvCache::new(&bad, 4, KvDtype::Q8_0),
            Err(ModelError::KvCacheHeadDimNotBlockAligned { head_dim: 48, .. })
        ));
    }

    #[test]
    fn copy_rows_reproduces_the_source() {
        for dtype in [KvDtype::F16, KvDtype::Q8_0, KvDtype::F32] {
            let mut a = KvCache::new(&geom(), 6, dtype).unwrap();
            for p in 0..4 {
                let k: Vec<f32> = (0..64).map(|i| (i + p * 64) as f32 * 0.01).collect();
                let v: Vec<f32> = k.iter().map(|x| -x).collect();
                a.write(0, p, &k, &v).unwrap();
            }
            a.advance(4).unwrap();
            let mut b = KvCache::new(&geom(), 6, dtype).unwrap();
            assert!(b.copy_rows(&a, 1, 3).is_err()); // len must equal start
            b.copy_rows(&a, 0, 3).unwrap();
            assert_eq!(b.len(), 3);
            let (la, lb) = (a.layer(0), b.layer(0));
            for p in 0..3 {
                assert_eq!(la.k_row(p, 1), lb.k_row(p, 1));
            }
            if dtype == KvDtype::Q8_0 {
                assert_eq!(la.v_row(2, 0), lb.v_row(2, 0));
            } else {
                assert_eq!(la.elem_size(), if dtype == KvDtype::F16 { 2 } else { 4 });
                assert_eq!(la.vt_span(1, 5, 0, 3), lb.vt_span(1, 5, 0, 3));
            }
            let mut c = KvCache::new(&geom(), 6, KvDtype::F32).unwrap();
            if dtype != KvDtype::F32 {
                assert!(c.copy_rows(&a, 0, 2).is_err());
            }
        }
    }
}
