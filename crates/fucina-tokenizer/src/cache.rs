//! A per-thread cache of chunk -> token ids for byte-level BPE.
//!
//! Natural text repeats its words constantly, so most chunks have been merged before.
//! Entries live in two arenas (key bytes, ids) indexed by an open-addressing table;
//! nothing is allocated per lookup or per insert once the arenas have grown, and the
//! whole cache is dropped when it fills (simpler than LRU, and refills in microseconds).

/// Chunks longer than this are not cached (long runs rarely repeat).
pub(crate) const MAX_KEY: usize = 48;
const SLOTS: usize = 1 << 15;
const MAX_ENTRIES: usize = SLOTS / 2;

#[derive(Clone, Copy, Default)]
struct Slot {
    hash: u64,
    key_off: u32,
    key_len: u32,
    ids_off: u32,
    ids_len: u32,
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct PieceCache {
    slots: Vec<Slot>,
    keys: Vec<u8>,
    ids: Vec<u32>,
    entries: usize,
}

impl PieceCache {
    #[inline]
    fn probe(&self, key: &[u8], hash: u64) -> (usize, bool) {
        let mask = SLOTS - 1;
        let mut s = (hash as usize) & mask;
        loop {
            let slot = self.slots[s];
            if slot.key_len == 0 {
                return (s, false);
            }
            if slot.hash == hash
                && &self.keys[slot.key_off as usize..(slot.key_off + slot.key_len) as usize] == key
            {
                return (s, true);
            }
            s = (s + 1) & mask;
        }
    }

    /// The cached ids of `key` (whose hash is `hash`).
    #[inline]
    pub(crate) fn get(&self, key: &[u8], hash: u64) -> Option<&[u32]> {
        if self.slots.is_empty() {
            return None;
        }
        let (s, found) = self.probe(key, hash);
        found.then(|| {
            let slot = self.slots[s];
            &self.ids[slot.ids_off as usize..(slot.ids_off + slot.ids_len) as usize]
        })
    }

    /// Remember `key -> ids`; `key` must be non-empty and at most [`MAX_KEY`] bytes.
    pub(crate) fn insert(&mut self, key: &[u8], hash: u64, ids: &[u32]) {
        if key.is_empty() || key.len() > MAX_KEY {
            return;
        }
        if self.slots.is_empty() || self.entries >= MAX_ENTRIES {
            self.slots.clear();
            self.slots.resize(SLOTS, Slot::default());
            self.keys.clear();
            self.ids.clear();
            self.entries = 0;
        }
        let (s, found) = self.probe(key, hash);
        if found {
            return;
        }
        self.slots[s] = Slot {
            hash,
            key_off: self.keys.len() as u32,
            key_len: key.len() as u32,
            ids_off: self.ids.len() as u32,
            ids_len: ids.len() as u32,
        };
        self.keys.extend_from_slice(key);
        self.ids.extend_from_slice(ids);
        self.entries += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::hash_bytes;

    #[test]
    fn hits_after_insert_and_survives_reset() {
        let mut c = PieceCache::default();
        assert_eq!(c.get(b"abc", hash_bytes(b"abc")), None);
        c.insert(b"abc", hash_bytes(b"abc"), &[1, 2]);
        assert_eq!(c.get(b"abc", hash_bytes(b"abc")), Some(&[1u32, 2][..]));
        for i in 0..(MAX_ENTRIES as u32 + 10) {
            let k = i.to_le_bytes();
            c.insert(&k, hash_bytes(&k), &[i]);
        }
        let k = (MAX_ENTRIES as u32 + 9).to_le_bytes();
        assert_eq!(
            c.get(&k, hash_bytes(&k)),
            Some(&[MAX_ENTRIES as u32 + 9][..])
        );
    }
}
