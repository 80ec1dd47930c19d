"""Which llama.cpp x86-64 build the peer on this machine is, and where its goldens go.

A native llama.cpp build's widest vector decides the float order of a few ops
(the f16 attention dots, softmax, SiLU, tinyBLAS; `fucina_quant::GgmlBuild`), so
goldens made by llama.cpp are kept per build: the AVX-512 build's under the plain
names, the AVX2 build's with an `-avx2` suffix. fucina's tests read the set of the
build they follow (`fucina.build_info()["ggml_build"]`).
"""

from __future__ import annotations


def host_isa() -> str:
    """The widest x86-64 vector ISA ggml's native build uses here (fucina's names)."""
    flags: set[str] = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "scalar"


def golden_suffix() -> str:
    """`""` on an AVX-512 host, `"-avx2"` on an AVX2 one (no goldens from others)."""
    isa = host_isa()
    if isa == "scalar":
        raise SystemExit("llama.cpp goldens come from an AVX2 or AVX-512 build; this CPU has neither")
    return "" if isa == "avx512" else f"-{isa}"
