//! The f16 dot products of attention (`q·k` over the head dim, `p·v` over cache
//! cells) in the float order llama.cpp executes for prompt batches on AVX-512
//! machines: llamafile's tinyBLAS f16 kernel, one 16-lane FMA accumulator per
//! output (lane = element index mod 16), reduced with `_mm512_reduce_add_ps`.
//!
//! llama.cpp runs single-token decode through `ggml_vec_dot_f16` instead (four
//! 16-lane accumulators); fucina keeps one order so a batch of rows equals the
//! same rows one at a time, bitwise, and follows the prompt order, which also
//! fixes the KV state a continuation starts from.
//!
//! Inputs are f16 values widened to f32, padded with zeros to a multiple of
//! [`F16_PAD`]: `fma(0, v, acc) = acc`, so padding (like llama.cpp's masked
//! cells) changes nothing.

/// Element alignment of the inputs (a multiple of the 16 lanes).
pub const F16_PAD: usize = 64;

/// `_mm512_reduce_add_ps` of 16 lanes in GCC's order (halves, then quarters, …).
#[inline(always)]
pub fn reduce16(v: &[f32; 16]) -> f32 {
    let t8: [f32; 8] = core::array::from_fn(|k| v[k + 8] + v[k]);
    let t4: [f32; 4] = core::array::from_fn(|k| t8[k + 4] + t8[k]);
    (t4[0] + t4[2]) + (t4[1] + t4[3])
}

#[inline(always)]
fn body(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (xc, yc) in x.chunks_exact(16).zip(y.chunks_exact(16)) {
        for l in 0..16 {
            acc[l] = xc[l].mul_add(yc[l], acc[l]);
        }
    }
    reduce16(&acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn body_fma(x: &[f32], y: &[f32]) -> f32 {
    body(x, y)
}

#[cfg(target_arch = "x86_64")]
fn has_fma() -> bool {
    use std::sync::OnceLock;
    static FMA: OnceLock<bool> = OnceLock::new();
    *FMA.get_or_init(|| std::arch::is_x86_feature_detected!("fma"))
}

/// `Σ x·y` over the first `x.len()` elements (a multiple of 16; `y` at least as
/// long) in tinyBLAS order. FMA hardware is used where present; elsewhere
/// `mul_add` is the same single-rounding FMA in software.
pub fn dot(x: &[f32], y: &[f32]) -> f32 {
    let y = &y[..x.len().min(y.len())];
    #[cfg(target_arch = "x86_64")]
    if has_fma() {
        // SAFETY: the CPU supports FMA (checked at run time above).
        return unsafe { body_fma(x, y) };
    }
    body(x, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_f64_and_ignores_zero_padding() {
        let x: Vec<f32> = (0..128).map(|i| ((i * 7) as f32 * 0.13).sin()).collect();
        let y: Vec<f32> = (0..128).map(|i| ((i * 3) as f32 * 0.29).cos()).collect();
        let exact: f64 = x
            .iter()
            .zip(&y)
            .map(|(a, b)| f64::from(*a) * f64::from(*b))
            .sum();
        let d = dot(&x, &y);
        assert!((f64::from(d) - exact).abs() < 1e-4, "{d} vs {exact}");
        let mut xp = x[..100].to_vec();
        xp.resize(128, 0.0);
        let part = dot(&xp, &y);
        let mut xs = x[..100].to_vec();
        xs.resize(192, 0.0);
        let mut ys = y.clone();
        ys.resize(192, 5.0);
        assert_eq!(part.to_bits(), dot(&xs, &ys).to_bits());
        assert_eq!(part.to_bits(), body(&xp, &y).to_bits());
    }

    #[test]
    fn reduce16_pairs_lanes_as_gcc() {
        // (1e8 + 1) rounds back to 1e8 in f32, so the result shows the pairing.
        let v: [f32; 16] = core::array::from_fn(|i| if i == 0 { 1e8 } else { 1.0 });
        assert_eq!(reduce16(&v), 1e8 + 8.0);
    }
}
