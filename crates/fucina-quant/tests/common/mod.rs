//! Shared helpers for the golden tests: the manifest reader, the seeded generators
//! (mirrors of `tools/gen_quant_goldens.py`) and a small SHA-256.

#![allow(dead_code)]

use std::path::PathBuf;

use fucina_quant::GgmlType;

/// `tests/goldens/quant` at the repository root.
pub fn goldens_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/goldens/quant")
}

/// The manifest lines (comments dropped) split into fields, and the case bytes.
pub fn load() -> (Vec<Vec<String>>, Vec<u8>) {
    let dir = goldens_dir();
    let text =
        std::fs::read_to_string(dir.join("manifest.txt")).expect("manifest.txt is committed");
    let blob = std::fs::read(dir.join("cases.bin")).expect("cases.bin is committed");
    let lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(' ').map(str::to_owned).collect())
        .collect();
    (lines, blob)
}

/// Parse a manifest type name.
pub fn ty(name: &str) -> GgmlType {
    GgmlType::from_name(name).unwrap_or_else(|| panic!("unknown type {name} in manifest"))
}

/// Bytes `off..off+len` of the case blob, from two manifest fields.
pub fn slice<'a>(blob: &'a [u8], off: &str, len: &str) -> &'a [u8] {
    let off: usize = off.parse().expect("offset");
    let len: usize = len.parse().expect("length");
    &blob[off..off + len]
}

/// splitmix64 words as a little-endian byte stream.
pub fn splitmix_words(seed: u64, n: usize) -> Vec<u64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
        .collect()
}

/// `n` bytes of the splitmix64 stream.
/// `n` floats uniform in `[-scale, scale)` from the splitmix stream of `seed`.
pub fn uniform(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    splitmix_words(seed, n)
        .iter()
        .map(|w| (((w >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale)
        .collect()
}

pub fn prng_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut out: Vec<u8> = splitmix_words(seed, n.div_ceil(8))
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    out.truncate(n);
    out
}

/// Byte offsets of the f16 scale fields of each type (as the generator's `F16_FIELDS`).
pub fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ4_NL
        | IQ4_XS | Q1_0 | Q2_0 => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        TQ1_0 => &[52],
        TQ2_0 => &[64],
        _ => &[],
    }
}

/// Seeded random blocks with every scale made finite (the generator's `prng_blocks`).
pub fn prng_blocks(ty: GgmlType, seed: u64, n_blocks: usize) -> Vec<u8> {
    let ts = ty.type_size() as usize;
    let mut b = prng_bytes(seed, n_blocks * ts);
    for blk in b.chunks_exact_mut(ts) {
        for &off in f16_fields(ty) {
            let v = u16::from_le_bytes([blk[off], blk[off + 1]]);
            if v & 0x7c00 == 0x7c00 {
                blk[off..off + 2].copy_from_slice(&(v & 0xbfff).to_le_bytes());
            }
        }
        if ty == GgmlType::Q8_K {
            let v = u32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
            if v & 0x7f80_0000 == 0x7f80_0000 {
                blk[0..4].copy_from_slice(&(v & 0xbfff_ffff).to_le_bytes());
            }
        }
        if ty == GgmlType::IQ1_M {
            let sc: Vec<u16> = (0..4)
                .map(|k| u16::from_le_bytes([blk[48 + 2 * k], blk[49 + 2 * k]]))
                .collect();
            let d =
                (sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000);
            if d & 0x7c00 == 0x7c00 {
                blk[54..56].copy_from_slice(&(sc[3] & 0xbfff).to_le_bytes());
            }
        }
    }
    b
}

/// Seeded random floats with bounded exponents (the generator's `prng_floats`).
pub fn prng_floats(seed: u64, n: usize) -> Vec<f32> {
    splitmix_words(seed, n)
        .into_iter()
        .map(|w| {
            let bits = ((w >> 63) << 31) | ((100 + (w >> 32) % 40) << 23) | (w & 0x7f_ffff);
            f32::from_bits(bits as u32)
        })
        .collect()
}

/// f32 values as little-endian bytes.
pub fn f32_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Little-endian bytes as f32 values.
pub fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// SHA-256 (FIPS 180-4), hex digest. Test-only: small and dependency-free.
pub fn sha256_hex(data: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(data);
    h.hex()
}

/// Incremental SHA-256, so large tensors can be hashed as they are produced.
pub struct Sha256 {
    state: [u32; 8],
    buf: Vec<u8>,
    len: u64,
}

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

impl Sha256 {
    pub fn new() -> Self {
        Sha256 {
            state: [
                0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
                0x5be0cd19,
            ],
            buf: Vec::with_capacity(64),
            len: 0,
        }
    }

    fn block(&mut self, chunk: &[u8]) {
        let mut w = [0u32; 64];
        for (i, c) in chunk.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = self.state;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = h
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            (h, g, f, e, d, c, b, a) = (g, f, e, d.wrapping_add(t1), c, b, a, t1.wrapping_add(t2));
        }
        for (s, v) in self.state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *s = s.wrapping_add(v);
        }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if !self.buf.is_empty() {
            let take = (64 - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buf.len() == 64 {
                let b = std::mem::take(&mut self.buf);
                self.block(&b);
            }
        }
        let mut chunks = data.chunks_exact(64);
        for c in &mut chunks {
            self.block(c);
        }
        self.buf.extend_from_slice(chunks.remainder());
    }

    pub fn hex(mut self) -> String {
        let bits = self.len.wrapping_mul(8);
        let mut tail = std::mem::take(&mut self.buf);
        tail.push(0x80);
        while tail.len() % 64 != 56 {
            tail.push(0);
        }
        tail.extend_from_slice(&bits.to_be_bytes());
        for c in tail.chunks_exact(64) {
            self.block(c);
        }
        self.state.iter().map(|v| format!("{v:08x}")).collect()
    }
}
