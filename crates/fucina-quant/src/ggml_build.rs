//! Which llama.cpp x86-64 build the ISA-dependent float orders follow.
//!
//! Most of llama.cpp's CPU arithmetic is the same whatever vector width it was built
//! for (the quantized dots, RoPE, norms, the GELU table), and fucina's kernels follow
//! it bit for bit. A few ops are not: their lane counts, and so the order of their
//! sums, come from the build's widest vector. A build for AVX-512 (`__AVX512F__`)
//! runs the f16 attention dots (`ggml_vec_dot_f16`, tinyBLAS) in 16-lane
//! accumulators, the softmax and SiLU in 16-value chunks and its `ggml_v_expf` with
//! `scalef`; a build for AVX2 (`__AVX2__`, `__FMA__`, `__F16C__`) uses 8 lanes, 8-value
//! chunks and another `ggml_v_expf` (the last step is `k·j + k` rather than
//! `scalef(j + 1)`), so the two builds' logits differ in the last bits, which a model
//! can carry into a different argmax.
//!
//! fucina follows the build a `pip install llama-cpp-python` on the same machine
//! would make ([`GgmlBuild::host`]): the AVX2 one where the kernels run on AVX2, else
//! the AVX-512 one (also the machine-independent reference for the scalar and NEON
//! kernels). `FUCINA_GGML_BUILD=avx2|avx512` forces either (both run on any CPU: the
//! order is arithmetic, not instructions).

use std::sync::OnceLock;

/// Environment variable that forces a [`GgmlBuild`].
pub const GGML_BUILD_ENV: &str = "FUCINA_GGML_BUILD";

/// The llama.cpp x86-64 build whose ISA-dependent float orders fucina follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlBuild {
    /// Built for AVX-512 F/DQ: 16-lane attention dots, softmax and SiLU chunks.
    Avx512,
    /// Built for AVX2 + FMA + F16C: 8-lane attention dots, softmax and SiLU chunks.
    Avx2,
}

impl GgmlBuild {
    /// The build this process follows: `FUCINA_GGML_BUILD` when it names one, else the
    /// AVX2 build where the kernels' ISA ([`crate::Kernels::from_env`]) is AVX2 and
    /// the AVX-512 build otherwise. Decided once per process.
    pub fn host() -> GgmlBuild {
        static B: OnceLock<GgmlBuild> = OnceLock::new();
        *B.get_or_init(|| {
            if let Some(b) = std::env::var(GGML_BUILD_ENV)
                .ok()
                .and_then(|v| GgmlBuild::parse(&v))
            {
                return b;
            }
            let isa = crate::Kernels::from_env().map_or_else(|_| crate::Isa::best(), |k| k.isa());
            GgmlBuild::for_isa(isa)
        })
    }

    /// The build llama.cpp makes for a machine whose best kernels are `isa`.
    pub fn for_isa(isa: crate::Isa) -> GgmlBuild {
        match isa {
            crate::Isa::Avx2 => GgmlBuild::Avx2,
            _ => GgmlBuild::Avx512,
        }
    }

    /// `"avx2"` / `"avx512"` (any case); `None` for anything else.
    pub fn parse(name: &str) -> Option<GgmlBuild> {
        [GgmlBuild::Avx512, GgmlBuild::Avx2]
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The name `FUCINA_GGML_BUILD` and the goldens use.
    pub fn name(self) -> &'static str {
        match self {
            GgmlBuild::Avx512 => "avx512",
            GgmlBuild::Avx2 => "avx2",
        }
    }

    /// f32 lanes of the build's widest vector: 16 or 8.
    pub fn lanes(self) -> usize {
        match self {
            GgmlBuild::Avx512 => 16,
            GgmlBuild::Avx2 => 8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_isas_map() {
        for b in [GgmlBuild::Avx512, GgmlBuild::Avx2] {
            assert_eq!(GgmlBuild::parse(b.name()), Some(b));
            assert_eq!(GgmlBuild::parse(&b.name().to_uppercase()), Some(b));
        }
        assert_eq!(GgmlBuild::parse("sse"), None);
        assert_eq!(GgmlBuild::for_isa(crate::Isa::Avx2), GgmlBuild::Avx2);
        assert_eq!(GgmlBuild::for_isa(crate::Isa::Avx512), GgmlBuild::Avx512);
        assert_eq!(GgmlBuild::for_isa(crate::Isa::Scalar), GgmlBuild::Avx512);
        assert_eq!(GgmlBuild::for_isa(crate::Isa::Neon), GgmlBuild::Avx512);
    }
}
