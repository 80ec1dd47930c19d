//! One position of a [`KvCache`] as a flat byte record (every layer's K then V, in
//! the cache's own dtype, V gathered out of its transposed layout): what persistence
//! writes and reads back, bit for bit.

use super::{KvCache, KvGeometry};
use crate::{ModelError, Result};

impl KvCache {
    /// Per-layer geometry (persistence compares it before loading anything); a
    /// recurrent layer's is zero heads (see [`KvCache::specs`]).
    pub fn geometries(&self) -> Vec<KvGeometry> {
        self.layers.iter().map(|l| l.kv().geom).collect()
    }

    /// Every layer's slot shape, recurrent layers included.
    pub fn specs(&self) -> Vec<super::LayerSpec> {
        self.layers.iter().map(super::LayerState::spec).collect()
    }

    /// Bytes of one position's record.
    pub fn record_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| {
                let l = l.kv();
                (l.k_row + l.v_row) * l.geom.n_head_kv
            })
            .sum()
    }

    /// Append position `pos`'s record to `out`.
    pub fn read_record(&self, pos: usize, out: &mut Vec<u8>) -> Result<()> {
        if pos >= self.len {
            return Err(ModelError::KvCacheShapeMismatch(format!(
                "record {pos} of a cache holding {}",
                self.len
            )));
        }
        for layer in &self.layers {
            let l = layer.kv();
            let kb = l.k_row * l.geom.n_head_kv;
            out.extend_from_slice(&l.k[pos * kb..(pos + 1) * kb]);
            if l.elem == 0 {
                let vb = l.v_row * l.geom.n_head_kv;
                out.extend_from_slice(&l.v[pos * vb..(pos + 1) * vb]);
            } else {
                let (e, cap) = (l.elem, l.capacity);
                let src = &l.v[pos * e..];
                for row in 0..l.geom.n_head_kv * l.geom.head_dim_v {
                    out.extend_from_slice(&src[row * cap * e..row * cap * e + e]);
                }
            }
        }
        Ok(())
    }

    /// Write `record` (from [`read_record`](Self::read_record) of a cache of the same
    /// dtype and geometry) as the next position.
    pub fn push_record(&mut self, record: &[u8]) -> Result<()> {
        self.push_records(&[record])
    }
}

/// Positions restored together by [`KvCache::push_records`]: the transposed V of a
/// block is written row by row, so a row's elements land in one page instead of one
/// page per position (a page per element thrashes the TLB on long histories).
const RESTORE_BLOCK: usize = 64;

impl KvCache {
    /// [`push_record`](Self::push_record) for many positions at once (what a resume
    /// does), bit for bit the same, blocked for memory locality.
    pub fn push_records(&mut self, records: &[&[u8]]) -> Result<()> {
        let rb = self.record_bytes();
        if let Some(bad) = records.iter().find(|r| r.len() != rb) {
            return Err(ModelError::KvCacheShapeMismatch(format!(
                "a record of {} bytes; this cache's are {rb}",
                bad.len()
            )));
        }
        if self.len + records.len() > self.capacity {
            return Err(ModelError::KvCacheOverflow {
                needed: self.len + records.len(),
                capacity: self.capacity,
            });
        }
        for block in records.chunks(RESTORE_BLOCK) {
            let start = self.len;
            let mut at = 0;
            for layer in &mut self.layers {
                let Some(l) = layer.kv_mut() else { continue };
                let kb = l.k_row * l.geom.n_head_kv;
                for (r, rec) in block.iter().enumerate() {
                    let pos = start + r;
                    l.k[pos * kb..(pos + 1) * kb].copy_from_slice(&rec[at..at + kb]);
                }
                at += kb;
                if l.elem == 0 {
                    let vb = l.v_row * l.geom.n_head_kv;
                    for (r, rec) in block.iter().enumerate() {
                        let pos = start + r;
                        l.v[pos * vb..(pos + 1) * vb].copy_from_slice(&rec[at..at + vb]);
                    }
                    at += vb;
                } else {
                    let (e, cap) = (l.elem, l.capacity);
                    let rows = l.geom.n_head_kv * l.geom.head_dim_v;
                    for row in 0..rows {
                        let dst = &mut l.v
                            [(row * cap + start) * e..(row * cap + start + block.len()) * e];
                        let src = at + row * e;
                        for (d, rec) in dst.chunks_exact_mut(e).zip(block) {
                            d.copy_from_slice(&rec[src..src + e]);
                        }
                    }
                    at += rows * e;
                }
            }
            self.len = start + block.len();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::kv_cache::{KvCache, KvDtype, KvGeometry};

    #[test]
    fn records_round_trip_bit_for_bit_in_every_dtype() {
        let geoms = [
            KvGeometry {
                n_head_kv: 2,
                head_dim_k: 32,
                head_dim_v: 64,
            },
            KvGeometry {
                n_head_kv: 1,
                head_dim_k: 64,
                head_dim_v: 32,
            },
        ];
        for dtype in [KvDtype::F16, KvDtype::F32, KvDtype::Q8_0] {
            let mut a = KvCache::new(&geoms, 5, dtype).unwrap();
            for pos in 0..3 {
                for (il, g) in geoms.iter().enumerate() {
                    let k: Vec<f32> = (0..g.n_head_kv * g.head_dim_k)
                        .map(|i| (i as f32 * 0.37 + pos as f32 + il as f32).sin())
                        .collect();
                    let v: Vec<f32> = (0..g.n_head_kv * g.head_dim_v)
                        .map(|i| (i as f32 * 0.11 - pos as f32).cos())
                        .collect();
                    a.write(il, pos, &k, &v).unwrap();
                }
                a.advance(1).unwrap();
            }
            let mut b = KvCache::new(&geoms, 4, dtype).unwrap();
            let mut rec = Vec::new();
            for pos in 0..3 {
                rec.clear();
                a.read_record(pos, &mut rec).unwrap();
                assert_eq!(rec.len(), a.record_bytes());
                b.push_record(&rec).unwrap();
            }
            assert_eq!(b.len(), 3);
            for (il, g) in geoms.iter().enumerate() {
                let (la, lb) = (a.layer(il), b.layer(il));
                for h in 0..g.n_head_kv {
                    assert_eq!(la.k_rows(h, 0, 3), lb.k_rows(h, 0, 3), "{dtype:?}");
                    if la.elem_size() == 0 {
                        for p in 0..3 {
                            assert_eq!(la.v_row(p, h), lb.v_row(p, h));
                        }
                    } else {
                        for d in 0..g.head_dim_v {
                            assert_eq!(la.vt_span(h, d, 0, 3), lb.vt_span(h, d, 0, 3));
                        }
                    }
                }
            }
            let mut recs = Vec::new();
            for pos in 0..3 {
                let mut r = Vec::new();
                a.read_record(pos, &mut r).unwrap();
                recs.push(r);
            }
            let mut c = KvCache::new(&geoms, 4, dtype).unwrap();
            c.push_records(&recs.iter().map(Vec::as_slice).collect::<Vec<_>>())
                .unwrap();
            for (il, layer) in c.layers.iter().enumerate() {
                assert_eq!(layer.kv().k, b.layers[il].kv().k, "{dtype:?}");
                assert_eq!(layer.kv().v, b.layers[il].kv().v, "{dtype:?}");
            }
            assert!(
                c.push_records(&[&recs[0], &recs[1]]).is_err(),
                "over capacity"
            );
            assert!(a.read_record(3, &mut rec).is_err());
            assert!(b.push_record(&rec[1..]).is_err());
            b.push_record(&rec[..a.record_bytes()]).unwrap();
            assert!(b.push_record(&rec[..a.record_bytes()]).is_err(), "full");
        }
    }
}
