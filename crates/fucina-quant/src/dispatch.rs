//! Run-time kernel selection: detect the CPU's ISA once, build a table of dot
//! kernels per weight type, cache it. x86-64 has AVX2 and AVX-512 variants, AArch64 a
//! NEON one; any type without a SIMD kernel on the chosen ISA uses the scalar reference
//! ([`KernelPath::Scalar`]).
//!
//! `FUCINA_ISA=scalar|avx2|avx512|neon` forces a variant. Naming an ISA this CPU (or
//! this build) cannot run is an error ([`QuantError::IsaUnavailable`]) from
//! [`Kernels::from_env`], never a silent fallback: a benchmark or test that asked for
//! a variant must not measure another one.

use std::sync::OnceLock;

use fucina_gguf::GgmlType;

use crate::activation::ActType;
use crate::formats::{format, DequantFn, Dot, VecDotFn, REGISTRY};
use crate::{QuantError, Result};

/// Environment variable that forces an instruction-set variant.
pub const ISA_ENV: &str = "FUCINA_ISA";

/// An instruction-set variant of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust (the numerics reference); runs everywhere.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL/DQ + VNNI (BF16 kernels when AVX512-BF16 is present).
    Avx512,
    /// AArch64 Advanced SIMD (baseline ARMv8.0-A; no `dotprod`): bitwise the scalar
    /// reference for every quantized format; F32/F16/BF16 differ in summation order.
    Neon,
}

impl Isa {
    /// Every variant, lowest first (per architecture: at most one of the x86-64 and the
    /// AArch64 variants is ever available, so [`Isa::best`] is the last available one).
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon];

    /// The name `FUCINA_ISA` uses.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// Whether this CPU can run the variant.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => crate::arch::x86_64::avx2::FEATURES
                .iter()
                .all(|f| x86_feature(f)),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => crate::arch::x86_64::avx512::FEATURES
                .iter()
                .all(|f| x86_feature(f)),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => false,
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => crate::arch::aarch64::neon::FEATURES
                .iter()
                .all(|f| aarch64_feature(f)),
            #[cfg(not(target_arch = "aarch64"))]
            Isa::Neon => false,
        }
    }

    /// The variants this CPU runs, lowest first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
    }

    /// The best variant this CPU runs.
    pub fn best() -> Isa {
        Isa::available().into_iter().last().unwrap_or(Isa::Scalar)
    }

    /// Parse a `FUCINA_ISA` value; unknown names and ISAs this CPU lacks are errors.
    pub fn parse_available(name: &str) -> Result<Isa> {
        let isa = Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(name.trim()));
        match isa {
            Some(isa) if isa.is_available() => Ok(isa),
            _ => Err(QuantError::IsaUnavailable {
                requested: name.to_owned(),
                available: Isa::available()
                    .iter()
                    .map(|i| i.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn x86_feature(name: &str) -> bool {
    match name {
        "avx2" => std::arch::is_x86_feature_detected!("avx2"),
        "fma" => std::arch::is_x86_feature_detected!("fma"),
        "f16c" => std::arch::is_x86_feature_detected!("f16c"),
        "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
        "avx512bw" => std::arch::is_x86_feature_detected!("avx512bw"),
        "avx512vl" => std::arch::is_x86_feature_detected!("avx512vl"),
        "avx512dq" => std::arch::is_x86_feature_detected!("avx512dq"),
        "avx512vnni" => std::arch::is_x86_feature_detected!("avx512vnni"),
        _ => false,
    }
}

#[cfg(target_arch = "aarch64")]
fn aarch64_feature(name: &str) -> bool {
    match name {
        "neon" => std::arch::is_aarch64_feature_detected!("neon"),
        _ => false,
    }
}

/// Which implementation a table entry uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelPath {
    /// An ISA-specific SIMD kernel.
    Simd(Isa),
    /// The scalar reference kernel (no SIMD kernel for this type, or `Isa::Scalar`).
    Scalar,
    /// The generic path through row dequantization (rare formats).
    ViaDequant,
}

#[derive(Clone, Copy, Debug)]
enum DotImpl {
    Kernel(VecDotFn),
    ViaDequant(DequantFn),
}

/// The dot kernel for one weight type under one ISA.
#[derive(Clone, Copy, Debug)]
pub struct DotEntry {
    /// The weight type.
    pub ty: GgmlType,
    /// The activation format this kernel multiplies with.
    pub act: ActType,
    /// Weight elements per block.
    pub block_size: usize,
    /// Weight bytes per block.
    pub type_size: usize,
    /// Which implementation is installed.
    pub path: KernelPath,
    imp: DotImpl,
}

impl DotEntry {
    /// Dot of a weight row with an activation row already converted to `self.act`.
    /// Uses the whole blocks both slices hold (the shorter wins); never reads out of bounds.
    #[inline]
    pub fn dot(&self, w: &[u8], a: &[u8]) -> f32 {
        match self.imp {
            DotImpl::Kernel(f) => f(w, a),
            DotImpl::ViaDequant(deq) => dot_via_dequant(deq, self.block_size, self.type_size, w, a),
        }
    }
}

/// Generic path through row dequantization: each weight block is dequantized to f32
/// and multiplied with the f32 activations, summed in order.
fn dot_via_dequant(deq: DequantFn, bs: usize, ts: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut buf = [0f32; 256];
    let mut acc = 0f32;
    for (x, y) in w.chunks_exact(ts).zip(a.chunks_exact(4 * bs)) {
        let buf = &mut buf[..bs];
        deq(x, buf);
        for (v, b) in buf.iter().zip(y.chunks_exact(4)) {
            acc += v * f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
    acc
}

/// The dot-kernel table of one ISA.
#[derive(Debug)]
pub struct Kernels {
    isa: Isa,
    table: Vec<(GgmlType, DotEntry)>,
}

impl Kernels {
    fn build(isa: Isa) -> Kernels {
        let table = REGISTRY
            .iter()
            .filter_map(|f| {
                let (act, imp, path) = match f.dot? {
                    Dot::ViaDequant => (
                        ActType::F32,
                        DotImpl::ViaDequant(f.dequantize?),
                        KernelPath::ViaDequant,
                    ),
                    Dot::Kernel { act, scalar } => match simd_kernel(isa, f.ty) {
                        Some(k) => (act, DotImpl::Kernel(k), KernelPath::Simd(isa)),
                        None => (act, DotImpl::Kernel(scalar), KernelPath::Scalar),
                    },
                };
                let entry = DotEntry {
                    ty: f.ty,
                    act,
                    block_size: f.block_size,
                    type_size: f.type_size,
                    path,
                    imp,
                };
                Some((f.ty, entry))
            })
            .collect();
        Kernels { isa, table }
    }

    /// The table for `isa`, built once; an error if this CPU cannot run it.
    pub fn for_isa(isa: Isa) -> Result<&'static Kernels> {
        static TABLES: [OnceLock<Kernels>; Isa::ALL.len()] =
            [const { OnceLock::new() }; Isa::ALL.len()];
        let isa = Isa::parse_available(isa.name())?;
        let slot = &TABLES[Isa::ALL.iter().position(|&i| i == isa).unwrap_or(0)];
        Ok(slot.get_or_init(|| Kernels::build(isa)))
    }

    /// The process-wide table: `FUCINA_ISA` if set (an error if unusable), else the best
    /// ISA this CPU runs. Decided once per process.
    pub fn from_env() -> Result<&'static Kernels> {
        static CHOSEN: OnceLock<std::result::Result<Isa, String>> = OnceLock::new();
        let chosen = CHOSEN.get_or_init(|| match std::env::var(ISA_ENV) {
            Ok(v) if !v.trim().is_empty() => Isa::parse_available(&v).map_err(|_| v),
            _ => Ok(Isa::best()),
        });
        match chosen {
            Ok(isa) => Kernels::for_isa(*isa),
            Err(v) => Err(QuantError::IsaUnavailable {
                requested: v.clone(),
                available: Isa::available()
                    .iter()
                    .map(|i| i.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The ISA of this table.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The dot kernel for weights of type `ty`.
    pub fn entry(&self, ty: GgmlType) -> Result<DotEntry> {
        self.table
            .iter()
            .find(|(t, _)| *t == ty)
            .map(|(_, e)| *e)
            .ok_or(QuantError::Unsupported { ty, op: "dot" })
    }

    /// Every entry of the table.
    pub fn entries(&self) -> impl Iterator<Item = &DotEntry> {
        self.table.iter().map(|(_, e)| e)
    }
}

fn simd_kernel(isa: Isa, ty: GgmlType) -> Option<VecDotFn> {
    match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => crate::arch::x86_64::avx2::kernel(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => crate::arch::x86_64::avx512::kernel(ty),
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::Avx512 => {
            let _ = ty;
            None
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => crate::arch::aarch64::neon::kernel(ty),
        #[cfg(not(target_arch = "aarch64"))]
        Isa::Neon => None,
    }
}

/// The scalar reference kernel for `ty` (`None` for types without a block kernel).
pub fn scalar_reference(ty: GgmlType) -> Option<(ActType, VecDotFn)> {
    match format(ty)?.dot? {
        Dot::Kernel { act, scalar } => Some((act, scalar)),
        Dot::ViaDequant => None,
    }
}
