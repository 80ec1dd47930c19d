//! The sampler's random source: llama.cpp's, draw for draw.
//!
//! llama.cpp's `dist` and Mirostat samplers draw from a `std::mt19937` seeded with
//! the 32-bit seed, through `std::uniform_real_distribution<double>(0, 1)` (or a
//! `std::discrete_distribution`), both of which take one `generate_canonical<double,
//! 53>`: two 32-bit outputs, the first the low word, `(g1 + g2 · 2^32) / 2^64` in
//! double arithmetic, clamped below 1 (GNU libstdc++, which Linux builds of llama.cpp
//! and llama-cpp-python use). Replaying that here makes a seed name the same tokens
//! here as in llama.cpp, on every platform.

const N: usize = 624;
const M: usize = 397;

/// The Mersenne Twister MT19937 (32-bit), as `std::mt19937`.
#[derive(Clone)]
pub struct Rng {
    state: Box<[u32; N]>,
    index: usize,
}

impl std::fmt::Debug for Rng {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rng")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Rng {
    fn eq(&self, other: &Rng) -> bool {
        self.index == other.index && self.state[..] == other.state[..]
    }
}

impl Eq for Rng {}

impl Rng {
    /// The generator `std::mt19937(seed)` is for the seed llama.cpp's samplers take
    /// (a `uint32_t`: wider seeds are taken modulo 2^32, as the C API truncates them).
    pub fn new(seed: u64) -> Rng {
        let mut state = Box::new([0u32; N]);
        state[0] = seed as u32;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Rng { state, index: N }
    }

    fn twist(&mut self) {
        let s = &mut self.state;
        for i in 0..N {
            let y = (s[i] & 0x8000_0000) | (s[(i + 1) % N] & 0x7fff_ffff);
            let mut next = s[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= 0x9908_b0df;
            }
            s[i] = next;
        }
        self.index = 0;
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// A uniform double in [0, 1): libstdc++'s `generate_canonical<double, 53>`
    /// over two outputs (what `std::uniform_real_distribution<double>(0, 1)` and
    /// `std::discrete_distribution` draw).
    pub fn next_f64(&mut self) -> f64 {
        const R: f64 = 4_294_967_296.0; // 2^32
        let lo = f64::from(self.next_u32());
        let hi = f64::from(self.next_u32());
        let v = (lo + hi * R) / (R * R);
        if v >= 1.0 {
            1.0 - f64::EPSILON / 2.0 // nextafter(1.0, 0.0)
        } else {
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_standard() {
        // C++ [rand.predef]: the 10000th output of a default-constructed mt19937 (seed 5489).
        let mut r = Rng::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = r.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
        // The first outputs for seed 5489 (reference implementation).
        let mut r = Rng::new(5489);
        assert_eq!([r.next_u32(), r.next_u32()], [3_499_211_612, 581_869_302]);
    }

    #[test]
    fn seeds_are_taken_modulo_2_pow_32() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7 + (1 << 32));
        assert_eq!(a.next_u32(), b.next_u32());
    }

    #[test]
    fn next_f64_is_in_unit_interval_and_seeded() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..10_000 {
            let x = a.next_f64();
            assert!((0.0..1.0).contains(&x));
            assert_eq!(x.to_bits(), b.next_f64().to_bits());
        }
        assert_ne!(Rng::new(1).next_u32(), Rng::new(2).next_u32());
        // Two outputs per draw, the first the low word.
        let want =
            (3_499_211_612.0 + 581_869_302.0 * 4_294_967_296.0) / 18_446_744_073_709_551_616.0;
        assert_eq!(Rng::new(5489).next_f64().to_bits(), f64::to_bits(want));
    }
}
