//! One position of a [`KvCache`] as a flat byte record (every layer's K then V, in
//! the cache's own dtype, V gathered out of its transposed layout): what persistence
//! writes and reads back, bit for bit.

use super::{KvCache, KvGeometry};
use crate::{ModelError, Result};

impl KvCache {
    /// Per-layer geometry (persistence compares it before loading anything).
    pub fn geometries(&self) -> Vec<KvGeometry> {
        self.layers.iter().map(|l| l.kv().geom).collect()
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
                let e = l.elem;
                for row in 0..l.geom.n_head_kv * l.geom.head_dim_v {
                    let o = (row * l.capacity + pos) * e;
                    out.extend_from_slice(&l.v[o..o + e]);
                }
            }
        }
        Ok(())
    }

    /// Write `record` (from [`read_record`](Self::read_record) of a cache of the same
    /// dtype and geometry) as the next position.
    pub fn push_record(&mut self, record: &[u8]) -> Result<()> {
        if record.len() != self.record_bytes() {
            return Err(ModelError::KvCacheShapeMismatch(format!(
                "a record of {} bytes; this cache's are {}",
                record.len(),
                self.record_bytes()
            )));
        }
        let pos = self.len;
        if pos >= self.capacity {
            return Err(ModelError::KvCacheOverflow {
                needed: pos + 1,
                capacity: self.capacity,
            });
        }
        let mut at = 0;
        for layer in &mut self.layers {
            let l = layer.kv_mut();
            let kb = l.k_row * l.geom.n_head_kv;
            l.k[pos * kb..(pos + 1) * kb].copy_from_slice(&record[at..at + kb]);
            at += kb;
            if l.elem == 0 {
                let vb = l.v_row * l.geom.n_head_kv;
                l.v[pos * vb..(pos + 1) * vb].copy_from_slice(&record[at..at + vb]);
                at += vb;
            } else {
                let e = l.elem;
                for row in 0..l.geom.n_head_kv * l.geom.head_dim_v {
                    let o = (row * l.capacity + pos) * e;
                    l.v[o..o + e].copy_from_slice(&record[at..at + e]);
                    at += e;
                }
            }
        }
        self.len = pos + 1;
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
            for il in 0..2 {
                let (la, lb) = (a.layer(il), b.layer(il));
                for h in 0..geoms[il].n_head_kv {
                    assert_eq!(la.k_rows(h, 0, 3), lb.k_rows(h, 0, 3), "{dtype:?}");
                    if la.elem_size() == 0 {
                        for p in 0..3 {
                            assert_eq!(la.v_row(p, h), lb.v_row(p, h));
                        }
                    } else {
                        for d in 0..geoms[il].head_dim_v {
                            assert_eq!(la.vt_span(h, d, 0, 3), lb.vt_span(h, d, 0, 3));
                        }
                    }
                }
            }
            assert!(a.read_record(3, &mut rec).is_err());
            assert!(b.push_record(&rec[1..]).is_err());
            b.push_record(&rec[..a.record_bytes()]).unwrap();
            assert!(b.push_record(&rec[..a.record_bytes()]).is_err(), "full");
        }
    }
}
