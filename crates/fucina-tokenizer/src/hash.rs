//! Hash tables for the hot path: byte strings -> ids and id pairs -> merges.
//!
//! Both are open-addressing tables with linear probing and a fixed capacity chosen at
//! build time (vocabularies do not grow), keyed by a cheap multiplicative hash; no
//! lookup allocates. `std`'s SipHash map is several times slower for these keys.

const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// Final avalanche (from splitmix64) so linear probing sees well-spread low bits.
#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Hash of a byte string: 8 bytes per step, then [`mix`].
#[inline]
pub(crate) fn hash_bytes(b: &[u8]) -> u64 {
    let mut h = (b.len() as u64).wrapping_mul(K);
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    mix(h)
}

fn capacity_for(n: usize) -> usize {
    (n.max(4) * 2).next_power_of_two()
}

/// An immutable-after-build map from byte strings to `u32` values. Keys are kept in
/// one arena; a slot holds the hash tag, the value and where its key lies, so a hit
/// costs one slot read and one key comparison.
#[derive(Clone, Debug, Default)]
pub(crate) struct StrMap {
    data: Vec<u8>,
    slots: Vec<Slot>,
    len: usize,
    mask: usize,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    tag: u32,
    value: u32,
    off: u32,
    /// Key length + 1; 0 marks an empty slot.
    len1: u32,
}

impl StrMap {
    /// A map sized for `n` keys of `bytes` total length.
    pub(crate) fn with_capacity(n: usize, bytes: usize) -> Self {
        let cap = capacity_for(n);
        Self {
            data: Vec::with_capacity(bytes),
            slots: vec![Slot::default(); cap],
            len: 0,
            mask: cap - 1,
        }
    }

    #[inline]
    fn key(&self, slot: &Slot) -> &[u8] {
        &self.data[slot.off as usize..(slot.off + slot.len1 - 1) as usize]
    }

    #[inline]
    fn find_slot(&self, key: &[u8], h: u64) -> (usize, bool) {
        let tag = h as u32;
        let mut s = (h >> 32) as usize & self.mask;
        loop {
            let slot = &self.slots[s];
            if slot.len1 == 0 {
                return (s, false);
            }
            if slot.tag == tag && slot.len1 as usize == key.len() + 1 && self.key(slot) == key {
                return (s, true);
            }
            s = (s + 1) & self.mask;
        }
    }

    fn grow(&mut self) {
        let cap = self.slots.len() * 2;
        let mut slots = vec![Slot::default(); cap];
        let mask = cap - 1;
        for slot in self.slots.iter().filter(|s| s.len1 != 0) {
            let h = hash_bytes(self.key(slot));
            let mut s = (h >> 32) as usize & mask;
            while slots[s].len1 != 0 {
                s = (s + 1) & mask;
            }
            slots[s] = *slot;
        }
        self.slots = slots;
        self.mask = mask;
    }

    /// Insert `key -> value`; an existing key is overwritten when `replace`, else kept.
    pub(crate) fn insert(&mut self, key: &[u8], value: u32, replace: bool) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let h = hash_bytes(key);
        let (s, found) = self.find_slot(key, h);
        if found {
            if replace {
                self.slots[s].value = value;
            }
            return;
        }
        let off = self.data.len() as u32;
        self.data.extend_from_slice(key);
        self.slots[s] = Slot {
            tag: h as u32,
            value,
            off,
            len1: key.len() as u32 + 1,
        };
        self.len += 1;
    }

    /// The value of `key`.
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<u32> {
        let (s, found) = self.find_slot(key, hash_bytes(key));
        found.then(|| self.slots[s].value)
    }

    /// Number of keys.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// A map from a pair of symbol ids to `(rank, merged symbol)`.
#[derive(Clone, Debug)]
pub(crate) struct PairMap {
    /// `(key, value)`; key `u64::MAX` marks an empty slot (ids are < 2^31).
    slots: Vec<(u64, u64)>,
    mask: usize,
}

impl PairMap {
    /// A table with room for `n` pairs at load factor <= 1/2.
    pub(crate) fn with_capacity(n: usize) -> Self {
        let cap = capacity_for(n);
        Self {
            slots: vec![(u64::MAX, 0); cap],
            mask: cap - 1,
        }
    }

    #[inline]
    fn key(a: u32, b: u32) -> u64 {
        ((a as u64) << 32) | b as u64
    }

    /// Insert unless the pair is already present (the first, lowest rank, wins, as
    /// llama.cpp's `bpe_ranks.emplace` keeps the first).
    pub(crate) fn insert_first(&mut self, a: u32, b: u32, rank: u32, merged: u32) {
        let key = Self::key(a, b);
        let mut s = mix(key) as usize & self.mask;
        loop {
            let (k, _) = self.slots[s];
            if k == key {
                return;
            }
            if k == u64::MAX {
                self.slots[s] = (key, ((rank as u64) << 32) | merged as u64);
                return;
            }
            s = (s + 1) & self.mask;
        }
    }

    /// `(rank << 32) | merged` for the pair, or `u64::MAX` when they do not merge; the
    /// packed form orders by rank, so callers compare it directly.
    #[inline]
    pub(crate) fn get(&self, a: u32, b: u32) -> u64 {
        let key = Self::key(a, b);
        let mut s = mix(key) as usize & self.mask;
        loop {
            let (k, v) = self.slots[s];
            if k == key {
                return v;
            }
            if k == u64::MAX {
                return u64::MAX;
            }
            s = (s + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strmap_replace_and_keep() {
        let mut m = StrMap::with_capacity(1, 0);
        for i in 0..1000u32 {
            m.insert(format!("k{i}").as_bytes(), i, true);
        }
        m.insert(b"k5", 99, true);
        m.insert(b"k6", 99, false);
        assert_eq!(m.get(b"k5"), Some(99));
        assert_eq!(m.get(b"k6"), Some(6));
        assert_eq!(m.get(b"k999"), Some(999));
        assert_eq!(m.get(b"nope"), None);
        assert_eq!(m.get(b""), None);
        assert_eq!(m.len(), 1000);
    }

    #[test]
    fn pairmap_keeps_first_rank() {
        let mut m = PairMap::with_capacity(10);
        m.insert_first(1, 2, 5, 7);
        m.insert_first(1, 2, 9, 8);
        assert_eq!(m.get(1, 2), (5 << 32) | 7);
        assert_eq!(m.get(2, 1), u64::MAX);
    }
}
