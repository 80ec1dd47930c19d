//! A fast hasher for small integer keys (automaton transitions, recycling rows): the
//! keys are not attacker-chosen hash-flooding targets but token ids, and SipHash would
//! dominate an append.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-xorshift mixing of one u64 (splitmix64's finaliser).
#[derive(Default, Clone, Copy)]
pub(crate) struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        let mut z = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).rotate_left(5);
        }
    }
    fn write_u32(&mut self, x: u32) {
        self.0 = (self.0 << 32) ^ u64::from(x);
    }
    fn write_u64(&mut self, x: u64) {
        self.0 ^= x;
    }
}

/// A `HashMap` with [`Mix`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Mix>>;
