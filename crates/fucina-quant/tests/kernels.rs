//! Every dot kernel × every ISA this CPU runs against the scalar reference:
//! bit-exact where all arithmetic is integer (unit scales), within a stated bound
//! where only the float summation order differs. Each ISA is also forced through
//! `FUCINA_ISA` in a child process.

mod common;

use common::{f16_fields, prng_blocks, splitmix_words, uniform};
use fucina_quant::dispatch::scalar_reference;
use fucina_quant::{ActType, GgmlType, Isa, KernelPath, Kernels};

/// Summation-order bound. Scalar and SIMD kernels compute the same exact integer
/// block sums and the same per-block scale products; they differ only in the order
/// the per-block f32 terms are added (SIMD: 8–16 lanes, then a tree) and in FMA vs
/// separate multiply-add. The forward error of recursive summation of n terms is at
/// most (n−1)·u·Σ|term| per method (Higham, "Accuracy and Stability of Numerical
/// Algorithms", §4.2), so two methods differ by at most 2(n−1)·u·Σ|term|; the extra
/// factor 4 covers the scale-product rounding and the split of min-type blocks into
/// a scale part and a min part whose magnitudes exceed |w·a| by a small factor.
const ORDER_BOUND_FACTOR: f64 = 8.0;

/// Realistic weight rows: quantized from uniform floats where a quantizer exists,
/// else random blocks with moderate scales.
fn weights(ty: GgmlType, n: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    if fucina_quant::format(ty).and_then(|f| f.quantize).is_some() {
        let x: Vec<f32> = uniform(seed, n, 1.0).iter().map(|v| v * 3.0).collect();
        fucina_quant::quantize(ty, &x, &mut out).expect("quantize");
        return out;
    }
    let nb = n / ty.block_size() as usize;
    let mut b = prng_blocks(ty, seed, nb);
    let ts = ty.type_size() as usize;
    let words = splitmix_words(seed ^ 0x5eed, nb * 2);
    for (i, blk) in b.chunks_exact_mut(ts).enumerate() {
        for (k, &off) in f16_fields(ty).iter().enumerate() {
            // |scale| in about [2^-6, 1): 0x2400..0x3c00.
            let h = 0x2400 + (words[2 * i + k] % 0x1800) as u16;
            blk[off..off + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    b
}

fn activations(act: ActType, x: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    act.quantize_row(x, &mut out).expect("activation");
    out
}

/// Set every scale to 1 so that all kernel arithmetic is exact integer arithmetic.
fn unit_scales(ty: GgmlType, w: &mut [u8], act: ActType, a: &mut [u8]) {
    let ts = ty.type_size() as usize;
    for blk in w.chunks_exact_mut(ts) {
        for &off in f16_fields(ty) {
            blk[off..off + 2].copy_from_slice(&0x3c00u16.to_le_bytes());
        }
    }
    match act {
        ActType::Q8_0 => a
            .chunks_exact_mut(34)
            .for_each(|b| b[0..2].copy_from_slice(&0x3c00u16.to_le_bytes())),
        ActType::Q8_1 => a
            .chunks_exact_mut(36)
            .for_each(|b| b[0..4].copy_from_slice(&[0x00, 0x3c, 0x00, 0x3c])),
        ActType::Q8_K => a
            .chunks_exact_mut(292)
            .for_each(|b| b[0..4].copy_from_slice(&1f32.to_le_bytes())),
        _ => {}
    }
}

/// Small integers as floats of the weight's own format (exact products and sums).
fn small_int_floats(ty: GgmlType, n: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
    let v: Vec<f32> = splitmix_words(seed, n)
        .iter()
        .map(|w| (w % 17) as f32 - 8.0)
        .collect();
    let mut w = Vec::new();
    fucina_quant::quantize(ty, &v, &mut w).expect("float quantize");
    (
        w,
        splitmix_words(seed + 1, n)
            .iter()
            .map(|w| (w % 17) as f32 - 8.0)
            .collect(),
    )
}

/// Σ|w_j·a_j| of the dequantized rows, in f64.
fn magnitude(ty: GgmlType, w: &[u8], act: ActType, a: &[u8], n: usize) -> f64 {
    let mut wf = vec![0f32; n];
    fucina_quant::dequantize(ty, w, &mut wf).expect("dequantize");
    let af: Vec<f32> = match act {
        ActType::Q8_1 => a
            .chunks_exact(36)
            .flat_map(|b| {
                let d = fucina_quant::half::f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                b[4..].iter().map(move |&q| d * f32::from(q as i8))
            })
            .collect(),
        _ => {
            let t = match act {
                ActType::F32 => GgmlType::F32,
                ActType::F16 => GgmlType::F16,
                ActType::BF16 => GgmlType::BF16,
                ActType::Q8_0 => GgmlType::Q8_0,
                _ => GgmlType::Q8_K,
            };
            let mut af = vec![0f32; n];
            fucina_quant::dequantize(t, a, &mut af).expect("dequantize activations");
            af
        }
    };
    wf.iter()
        .zip(&af)
        .map(|(x, y)| (f64::from(*x) * f64::from(*y)).abs())
        .sum()
}

fn check_isa(kernels: &Kernels) -> usize {
    let isa = kernels.isa();
    let mut checked = 0;
    let mut worst = 0f64;
    for entry in kernels.entries() {
        let Some((act, scalar)) = scalar_reference(entry.ty) else {
            assert_eq!(entry.path, KernelPath::ViaDequant, "{}", entry.ty);
            continue;
        };
        assert_eq!(entry.act, act);
        let ty = entry.ty;
        let n = 4096;
        for seed in 0..4u64 {
            // Realistic scales: summation order only.
            let w = weights(ty, n, 1000 + seed);
            let a = activations(act, &uniform(2000 + seed, n, 1.0));
            let (got, want) = (entry.dot(&w, &a), scalar(&w, &a));
            let nb = (n / entry.block_size) as f64;
            let bound =
                ORDER_BOUND_FACTOR * nb * f64::from(f32::EPSILON) * magnitude(ty, &w, act, &a, n);
            let err = (f64::from(got) - f64::from(want)).abs();
            assert!(
                err <= bound,
                "{ty} on {isa:?}: {got} vs scalar {want}, |diff| {err:e} > bound {bound:e}"
            );
            worst = worst.max(err / bound);
            // Unit scales (or small-integer floats): every operation is exact.
            let (w, a) = if entry.block_size == 1 {
                let (w, x) = small_int_floats(ty, n, 3000 + seed);
                (w, activations(act, &x))
            } else {
                let (mut w, mut a) = (w, a);
                unit_scales(ty, &mut w, act, &mut a);
                (w, a)
            };
            let (got, want) = (entry.dot(&w, &a), scalar(&w, &a));
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{ty} on {isa:?} with unit scales: {got} vs {want}"
            );
            // Rows of different lengths (tails, single blocks) agree too.
            for blocks in [1usize, 3] {
                let wb = &w[..blocks * entry.type_size];
                let ab = &a[..act.row_bytes(blocks * entry.block_size)];
                assert_eq!(
                    entry.dot(wb, ab).to_bits(),
                    scalar(wb, ab).to_bits(),
                    "{ty} {isa:?} {blocks} blocks"
                );
            }
        }
        if isa != Isa::Scalar && !matches!(entry.path, KernelPath::Simd(_)) {
            eprintln!("note: {ty} has no {isa:?} kernel (scalar reference used)");
        }
        checked += 1;
    }
    eprintln!("{isa:?}: {checked} block kernels checked; worst |diff|/bound = {worst:.2e}");
    checked
}

#[test]
fn every_kernel_on_every_isa_matches_scalar() {
    let isas = Isa::available();
    assert!(isas.contains(&Isa::Scalar));
    for isa in isas {
        let k = Kernels::for_isa(isa).expect("available ISA");
        assert_eq!(k.isa(), isa);
        assert!(check_isa(k) >= 15, "hot formats all have block kernels");
    }
}

#[test]
fn via_dequant_path_matches_dequantized_dot() {
    let k = Kernels::for_isa(Isa::best()).expect("best ISA");
    for entry in k.entries().filter(|e| e.path == KernelPath::ViaDequant) {
        let ty = entry.ty;
        let n = 1024;
        let w = prng_blocks(ty, 7, n / entry.block_size);
        let x = uniform(8, n, 1.0);
        let a = activations(ActType::F32, &x);
        let mut wf = vec![0f32; n];
        fucina_quant::dequantize(ty, &w, &mut wf).expect("dequantize");
        let want = wf.iter().zip(&x).fold(0f32, |s, (p, q)| s + p * q);
        assert_eq!(entry.dot(&w, &a).to_bits(), want.to_bits(), "{ty}");
    }
}

#[test]
fn unavailable_or_unknown_isa_is_an_error() {
    assert!(Isa::parse_available("bogus").is_err());
    assert!(Isa::parse_available("neon").is_err() || cfg!(target_arch = "aarch64"));
    for isa in Isa::ALL {
        assert_eq!(Kernels::for_isa(isa).is_ok(), isa.is_available());
    }
}

const CHILD_ENV: &str = "FUCINA_QUANT_TEST_CHILD";

/// Runs only as a child of `forced_isa_through_env`: checks what `FUCINA_ISA` selected.
#[test]
fn env_child() {
    let Ok(expect) = std::env::var(CHILD_ENV) else {
        return;
    };
    match Kernels::from_env() {
        Ok(k) => {
            assert_eq!(k.isa().name(), expect);
            check_isa(k);
        }
        Err(e) => assert_eq!(expect, "error", "unexpected error {e}"),
    }
}

/// A command running this test binary again: directly, or through the runner cargo
/// launched it with when the test runs under emulation (an AArch64 build run by
/// qemu-user on an x86-64 host without binfmt_misc cannot exec itself directly).
fn child_command(exe: &std::path::Path) -> std::process::Command {
    let runner = if cfg!(all(target_arch = "aarch64", target_os = "linux")) {
        std::env::var("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER").unwrap_or_default()
    } else {
        String::new()
    };
    let mut words = runner.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut cmd = std::process::Command::new(program);
            cmd.args(words).arg(exe);
            cmd
        }
        None => std::process::Command::new(exe),
    }
}

/// On AArch64 the NEON table must hold a NEON kernel for every format that has one
/// (a silent fall back to the scalar reference fails here), and NEON is the default.
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_kernels_are_installed_for_the_hot_formats() {
    use GgmlType::*;
    assert!(Isa::Neon.is_available(), "every AArch64 Linux CPU has NEON");
    assert_eq!(Isa::best(), Isa::Neon);
    let k = Kernels::for_isa(Isa::Neon).expect("NEON table");
    for ty in [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, F32, F16, BF16,
    ] {
        let entry = k.entry(ty).expect("entry");
        assert_eq!(entry.path, KernelPath::Simd(Isa::Neon), "{ty}");
    }
}

/// The NEON kernels of every quantized format are bitwise the scalar reference on
/// realistic rows (not only with unit scales): same exact integer sums, and the
/// reference's float steps in its order. Only F32/F16/BF16 sum in another order.
#[cfg(target_arch = "aarch64")]
#[test]
fn neon_quantized_kernels_are_bitwise_the_scalar_reference() {
    let k = Kernels::for_isa(Isa::Neon).expect("NEON table");
    let mut checked = 0;
    for entry in k.entries().filter(|e| e.block_size > 1) {
        let Some((act, scalar)) = scalar_reference(entry.ty) else {
            continue;
        };
        let n = 4096;
        for seed in 0..4u64 {
            let w = weights(entry.ty, n, 5000 + seed);
            let x: Vec<f32> = uniform(6000 + seed, n, 1.0 + 9.0 * seed as f32);
            let a = activations(act, &x);
            for blocks in [n / entry.block_size, 1, 5] {
                let wb = &w[..blocks * entry.type_size];
                let ab = &a[..act.row_bytes(blocks * entry.block_size)];
                assert_eq!(
                    entry.dot(wb, ab).to_bits(),
                    scalar(wb, ab).to_bits(),
                    "{} seed {seed}, {blocks} blocks",
                    entry.ty
                );
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 12, "every quantized format with a NEON kernel");
}

#[test]
fn forced_isa_through_env() {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cases: Vec<(&str, &str)> = Isa::available()
        .iter()
        .map(|i| (i.name(), i.name()))
        .collect();
    cases.push(("no-such-isa", "error"));
    for (value, expect) in cases {
        let out = child_command(&exe)
            .args(["--exact", "env_child", "--test-threads=1"])
            .env(fucina_quant::ISA_ENV, value)
            .env(CHILD_ENV, expect)
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "FUCINA_ISA={value} ({}): {text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
