//! The SIMD activation quantizers (Q8_0, Q8_1, Q8_K) against the scalar ones: bitwise
//! the same bytes on every ISA this CPU runs, over random rows of many magnitudes,
//! rounding ties, repeated maxima of both signs, zeros, subnormals, infinities and NaNs.

mod common;

use common::uniform;
use fucina_quant::{ActType, Isa};

const TYPES: [ActType; 3] = [ActType::Q8_0, ActType::Q8_1, ActType::Q8_K];

/// Rows of 512 elements (two Q8_K blocks, sixteen Q8_0 blocks) that stress the edges.
fn rows() -> Vec<Vec<f32>> {
    let mut rows = Vec::new();
    for (i, scale) in [1e-30f32, 1e-6, 0.01, 1.0, 3.7, 100.0, 6e4, 1e30]
        .into_iter()
        .enumerate()
    {
        for seed in 0..4u64 {
            rows.push(uniform(seed * 17 + i as u64, 512, scale));
        }
    }
    // Ties: with amax 127 (Q8_0 scale 1) and a first maximum of −127 (Q8_K scale 1)
    // every k + 0.5 lands exactly on a tie.
    let ties: Vec<f32> = (0..512)
        .map(|i| match i % 32 {
            0 => -127.0,
            1 => 127.0,
            j => (j as f32 - 16.0) * 7.0 + 0.5,
        })
        .collect();
    rows.push(ties.clone());
    rows.push(ties.iter().map(|v| -v).collect());
    rows.push(ties.iter().map(|v| v * 0.5).collect());
    // Halves of a power-of-two grid around every integer.
    rows.push((0..512).map(|i| (i as f32 - 256.0) * 0.5).collect());
    rows.push(
        (0..512)
            .map(|i| (i as f32 - 256.0) * 0.25 + 0.125)
            .collect(),
    );
    // The maximum magnitude appears with both signs, the negative first or second.
    let mut both = uniform(7, 512, 1.0);
    for (k, b) in both.chunks_exact_mut(32).enumerate() {
        let s = if k % 2 == 0 { 1.0 } else { -1.0 };
        b[3 + k % 5] = -2.0 * s;
        b[20 + k % 7] = 2.0 * s;
    }
    rows.push(both);
    // Zero blocks (signed zeros), one nonzero element, subnormals.
    let mut z = vec![0f32; 512];
    for (i, v) in z.iter_mut().enumerate() {
        if i % 3 == 0 {
            *v = -0.0;
        }
    }
    z[300] = 1e-3;
    rows.push(z);
    rows.push(
        (0..512)
            .map(|i| f32::from_bits(1 + i as u32 * 977))
            .collect(),
    );
    rows.push(
        (0..512)
            .map(|i| f32::from_bits(0x0080_0000 + i as u32 * 3))
            .collect(),
    );
    let mut tiny = uniform(9, 512, 1.0);
    for (k, v) in tiny.iter_mut().enumerate() {
        if k < 256 {
            *v *= 1e-37;
        }
    }
    rows.push(tiny);
    // Infinities and NaNs (with payloads) mixed into ordinary blocks.
    let mut odd = uniform(11, 512, 2.0);
    odd[5] = f32::INFINITY;
    odd[40] = f32::NEG_INFINITY;
    odd[70] = f32::NAN;
    odd[100] = f32::from_bits(0x7fc0_1234);
    odd[101] = f32::from_bits(0xffc0_0007);
    odd[300] = f32::from_bits(0x7fa0_0001);
    odd[400] = f32::NAN;
    odd[401] = f32::INFINITY;
    rows.push(odd);
    rows
}

#[test]
fn simd_activation_quantizers_equal_scalar_bitwise() {
    let rows = rows();
    let mut checked = 0;
    for isa in Isa::available() {
        for ty in TYPES {
            for (r, row) in rows.iter().enumerate() {
                let mut want = Vec::new();
                ty.quantize_row_isa(Isa::Scalar, row, &mut want)
                    .expect("scalar");
                let mut got = Vec::new();
                ty.quantize_row_isa(isa, row, &mut got).expect("isa");
                assert_eq!(got.len(), want.len());
                if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
                    panic!("{ty:?} on {isa:?}, row {r}: first differing byte {i}");
                }
                // The default entry (whatever ISA the process picked) agrees too.
                let mut dflt = Vec::new();
                ty.quantize_row(row, &mut dflt).expect("default");
                assert_eq!(dflt, want, "{ty:?} default ISA, row {r}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 3 * rows.len());
}

#[test]
fn quantize_row_isa_rejects_bad_lengths() {
    for isa in Isa::available() {
        for ty in TYPES {
            let mut out = Vec::new();
            assert!(ty.quantize_row_isa(isa, &[1.0; 33], &mut out).is_err());
        }
    }
}
