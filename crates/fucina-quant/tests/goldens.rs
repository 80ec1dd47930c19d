//! Dequantize / quantize against the committed goldens (gguf-py, and ggml's C
//! reference for what gguf-py lacks): every comparison is on f32 bits or bytes.

mod common;

use common::{bytes_f32, f32_bytes, load, prng_blocks, prng_floats, sha256_hex, slice, ty, Sha256};
use fucina_quant::{dequantize, quantize, GgmlType};

fn dequant_bytes(t: GgmlType, input: &[u8]) -> Vec<u8> {
    let n = fucina_quant::elements_in(t, input.len()).expect("whole blocks");
    let mut out = vec![0f32; n];
    dequantize(t, input, &mut out).unwrap_or_else(|e| panic!("{t}: {e}"));
    f32_bytes(&out)
}

fn first_diff(a: &[u8], b: &[u8]) -> String {
    let (fa, fb) = (bytes_f32(a), bytes_f32(b));
    match fa
        .iter()
        .zip(&fb)
        .position(|(x, y)| x.to_bits() != y.to_bits())
    {
        Some(i) => format!(
            "first difference at element {i}: ours {:?} ({:#x}) vs {:?} ({:#x})",
            fa[i],
            fa[i].to_bits(),
            fb[i],
            fb[i].to_bits()
        ),
        None => format!("lengths {} vs {}", a.len(), b.len()),
    }
}

#[test]
fn sha256_known_answers() {
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let long = vec![b'a'; 1000];
    let mut h = Sha256::new();
    h.update(&long[..3]);
    h.update(&long[3..]);
    assert_eq!(h.hex(), sha256_hex(&long));
}

#[test]
fn dequantize_matches_goldens_bit_for_bit() {
    let (lines, blob) = load();
    let mut checked = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for f in &lines {
        let (got, want, what) = match f[0].as_str() {
            "dequant" => {
                let t = ty(&f[2]);
                let got = dequant_bytes(t, slice(&blob, &f[4], &f[5]));
                (
                    got,
                    slice(&blob, &f[6], &f[7]).to_vec(),
                    format!("{} {}", f[2], f[3]),
                )
            }
            "dequant_hash" => {
                let t = ty(&f[2]);
                let got = dequant_bytes(t, slice(&blob, &f[4], &f[5]));
                if sha256_hex(&got) != f[6] {
                    failures.push(format!("{} {}: hash differs", f[2], f[3]));
                }
                checked.insert(f[2].clone());
                continue;
            }
            "dequant_prng" => {
                let t = ty(&f[2]);
                let blocks = prng_blocks(t, f[3].parse().expect("seed"), f[4].parse().expect("n"));
                let got = dequant_bytes(t, &blocks);
                if sha256_hex(&got) != f[5] {
                    failures.push(format!("{} prng seed {}: hash differs", f[2], f[3]));
                }
                checked.insert(f[2].clone());
                continue;
            }
            "dequant_all16" => {
                let t = ty(&f[2]);
                let raw: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
                if sha256_hex(&dequant_bytes(t, &raw)) != f[3] {
                    failures.push(format!("{} all 2^16 patterns: hash differs", f[2]));
                }
                continue;
            }
            _ => continue,
        };
        checked.insert(f[2].clone());
        if got != want {
            failures.push(format!("{what}: {}", first_diff(&got, &want)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Every type with a public definition has goldens (Q8_1 has no unambiguous layout).
    for fmt in fucina_quant::REGISTRY
        .iter()
        .filter(|f| f.dequantize.is_some())
    {
        assert!(
            checked.contains(fmt.ty.name()),
            "no dequantize goldens for {}",
            fmt.ty
        );
    }
}

#[test]
fn quantize_matches_goldens_bit_for_bit() {
    let (lines, blob) = load();
    let mut checked = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for f in &lines {
        match f[0].as_str() {
            "quant" => {
                let t = ty(&f[2]);
                let x = bytes_f32(slice(&blob, &f[4], &f[5]));
                let mut got = Vec::new();
                quantize(t, &x, &mut got).unwrap_or_else(|e| panic!("{t}: {e}"));
                let want = slice(&blob, &f[6], &f[7]);
                if got != want {
                    let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                    failures.push(format!("{} {}: first differing byte {i}", f[2], f[3]));
                }
            }
            "quant_prng" => {
                let t = ty(&f[2]);
                let n: usize = f[4].parse().expect("n");
                let x = prng_floats(f[3].parse().expect("seed"), n * t.block_size() as usize);
                let mut got = Vec::new();
                quantize(t, &x, &mut got).unwrap_or_else(|e| panic!("{t}: {e}"));
                if sha256_hex(&got) != f[5] {
                    failures.push(format!("{} prng seed {}: hash differs", f[2], f[3]));
                }
            }
            _ => continue,
        }
        checked.insert(f[2].clone());
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    for fmt in fucina_quant::REGISTRY
        .iter()
        .filter(|f| f.quantize.is_some())
    {
        assert!(
            checked.contains(fmt.ty.name()),
            "no quantize goldens for {}",
            fmt.ty
        );
    }
}

#[test]
fn length_errors_are_errors() {
    let mut out = vec![0f32; 32];
    assert!(dequantize(GgmlType::Q4_0, &[0u8; 17], &mut out).is_err());
    assert!(dequantize(GgmlType::Q4_0, &[0u8; 18], &mut out[..31]).is_err());
    assert!(dequantize(GgmlType::Q4_0, &[0u8; 36], &mut out).is_err());
    assert!(dequantize(GgmlType::Q8_1, &[0u8; 40], &mut out).is_err());
    assert!(dequantize(GgmlType::I32, &[0u8; 4], &mut out[..1]).is_err());
    let mut q = Vec::new();
    assert!(quantize(GgmlType::Q4_K, &[0f32; 255], &mut q).is_err());
    assert!(quantize(GgmlType::IQ2_XXS, &[0f32; 256], &mut q).is_err());
    assert!(q.is_empty());
    assert!(dequantize(GgmlType::Q4_0, &[], &mut []).is_ok());
}
