#!/usr/bin/env python3
"""GEMV side by side: fucina-quant vs llama.cpp's ggml, same shapes, types, threads.

Every time is the best of many repetitions (the statistic least disturbed by other
processes on a shared machine), for ours, the peer and the memory probe alike. Per
matrix, the probe runs in rounds alternating with our GEMVs (row-major, rayon,
packed), so the fraction compares runs that saw the same phases of the machine's
memory system (on this VM the probe reads anywhere from 35 to 72 GB/s over minutes).

Reports, per matrix: effective weight bandwidth (weight bytes / GEMV time) as a
fraction of the memory read bandwidth measured in the same run, our time vs rayon
with the same kernels (the thread-pool choice), and the ratio against ggml's
`ggml_mul_mat` (ours/peer speed; > 1 means we are faster).

Both sides stream weights from memory: a matrix smaller than 256 MiB is copied
until the copies fill 256 MiB and successive GEMVs rotate through them (ours), or
one graph holds one mul_mat node per copy (the peer: a decode step's pattern, so
ggml's per-graph overhead is amortised as in llama.cpp).

Rows marked `x8` are the same matrix repacked into interleaved 8-row groups
(fucina-quant's `repack`, what the model runs on: Q4_K on AVX2/AVX-512, Q8_0 and Q6_K
on AVX-512); their peer column is still ggml's plain `ggml_mul_mat`. That is what
llama.cpp runs for Q8_0 and Q6_K on x86-64 (it repacks neither there); its own
repacked Q4_K GEMV is reachable only through its model loader, so
`benches/generate.py` compares it end to end (decode tok/s).

The peer is the ggml built by llama-cpp-python in benches/.peers (see
benches/setup_peers.sh), driven through ctypes and computed with
`ggml_graph_compute_with_ctx` on the same thread count.

Usage: python3 benches/gemv.py [--threads 2] [--filter Q8_0] [--no-peer]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER_LIB = ROOT / "benches" / ".peers" / "lib"
GGML_TYPES = {"Q8_0": 8, "Q4_K": 12, "Q6_K": 14}


def run_ours(threads: int, filt: str, exe: Path | None) -> list[dict]:
    if exe is None:
        target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target" / "quant"))
        subprocess.run(
            ["cargo", "build", "--release", "-q", "-p", "fucina-quant", "--example", "gemv_bench"],
            cwd=ROOT,
            check=True,
            env={**os.environ, "CARGO_TARGET_DIR": target},
        )
        exe = Path(target) / "release" / "examples" / "gemv_bench"
    out = subprocess.run([str(exe), str(threads), filt], check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


class Ggml:
    """Just enough of the ggml C API (ggml.h / ggml-cpu.h) to time a mul_mat."""

    class InitParams(ctypes.Structure):
        _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]

    def __init__(self, libdir: Path):
        mode = ctypes.RTLD_GLOBAL
        self.base = ctypes.CDLL(str(libdir / "libggml-base.so"), mode=mode)
        self.cpu = ctypes.CDLL(str(libdir / "libggml-cpu.so"), mode=mode)
        b, c, vp = self.base, self.cpu, ctypes.c_void_p
        b.ggml_init.restype = vp
        b.ggml_init.argtypes = [Ggml.InitParams]
        b.ggml_new_tensor_2d.restype = vp
        b.ggml_new_tensor_2d.argtypes = [vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        b.ggml_get_data.restype = vp
        b.ggml_get_data.argtypes = [vp]
        b.ggml_mul_mat.restype = vp
        b.ggml_mul_mat.argtypes = [vp, vp, vp]
        b.ggml_new_graph.restype = vp
        b.ggml_new_graph.argtypes = [vp]
        b.ggml_build_forward_expand.argtypes = [vp, vp]
        b.ggml_quantize_chunk.restype = ctypes.c_size_t
        b.ggml_quantize_chunk.argtypes = [ctypes.c_int, vp, vp, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, vp]
        b.ggml_free.argtypes = [vp]
        c.ggml_graph_compute_with_ctx.restype = ctypes.c_int
        c.ggml_graph_compute_with_ctx.argtypes = [vp, vp, ctypes.c_int]

    def time_gemv(
        self, ty: str, rows: int, cols: int, wbytes: int, threads: int, copies: int, target_s: float = 1.0
    ) -> float:
        import numpy as np

        ctx = self.base.ggml_init(Ggml.InitParams((copies + 1) * wbytes + (256 << 20), None, False))
        try:
            w = self.base.ggml_new_tensor_2d(ctx, GGML_TYPES[ty], cols, rows)
            rng = np.random.default_rng(0)
            step = max(1, (1 << 22) // cols)
            row_bytes = wbytes // rows
            for r0 in range(0, rows, step):
                n = min(step, rows - r0)
                src = rng.uniform(-1, 1, n * cols).astype(np.float32)
                dst = self.base.ggml_get_data(w) + r0 * row_bytes
                self.base.ggml_quantize_chunk(GGML_TYPES[ty], src.ctypes.data, dst, 0, n, cols, None)
            weights = [w]
            for _ in range(copies - 1):
                c = self.base.ggml_new_tensor_2d(ctx, GGML_TYPES[ty], cols, rows)
                ctypes.memmove(self.base.ggml_get_data(c), self.base.ggml_get_data(w), wbytes)
                weights.append(c)
            graph = self.base.ggml_new_graph(ctx)
            repeat = copies
            for w in weights:
                x = self.base.ggml_new_tensor_2d(ctx, 0, cols, 1)
                xs = rng.uniform(-1, 1, cols).astype(np.float32)
                ctypes.memmove(self.base.ggml_get_data(x), xs.ctypes.data, cols * 4)
                self.base.ggml_build_forward_expand(graph, self.base.ggml_mul_mat(ctx, w, x))
            self.cpu.ggml_graph_compute_with_ctx(ctx, graph, threads)
            times = []
            deadline = time.perf_counter() + target_s
            while len(times) < 5 or time.perf_counter() < deadline:
                t = time.perf_counter()
                self.cpu.ggml_graph_compute_with_ctx(ctx, graph, threads)
                times.append((time.perf_counter() - t) / repeat)
            return min(times)
        finally:
            self.base.ggml_free(ctx)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--filter", default="")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--exe", type=Path, help="prebuilt gemv_bench binary (skips cargo build)")
    args = ap.parse_args()

    rows = run_ours(args.threads, args.filter, args.exe)
    mem = next(r for r in rows if r["kind"] == "memory")
    libdir = next(PEER_LIB.glob("python3*/site-packages/llama_cpp/lib"), None)
    peer = None if args.no_peer or libdir is None else Ggml(libdir)
    if peer is None:
        print("# peer: llama-cpp-python's ggml not found in benches/.peers (run benches/setup_peers.sh)")
    bw0 = mem["read_bytes_per_s"] / 1e9
    print(f"# {args.threads} threads, ISA {mem['isa']}, memory read bandwidth {bw0:.1f} GB/s at start")
    print("# 'mem GB/s': the probe's best in rounds alternating with that matrix's GEMVs; 'of mem' is against it")
    header = f"{'matrix':<22}{'MB':>8}{'ours us':>10}{'GB/s':>8}{'mem GB/s':>9}{'of mem':>8}"
    print(f"{header}{'rayon/ours':>11}{'peer us':>10}{'ours/peer':>10}")
    for r in rows:
        if r["kind"] != "gemv":
            continue
        layout = " x8" if r.get("layout") == "x8" else ""
        name = f"{r['type']}{layout} {r['rows']}x{r['cols']}"
        line = (
            f"{name:<22}{r['bytes'] / 1e6:>8.1f}{r['seconds'] * 1e6:>10.1f}{r['bytes_per_s'] / 1e9:>8.1f}"
            f"{r.get('memory_bytes_per_s', mem['read_bytes_per_s']) / 1e9:>9.1f}"
            f"{r['fraction_of_memory_bw']:>8.2f}{r['rayon_seconds'] / r['seconds']:>11.2f}"
        )
        if peer is not None and r["type"] in GGML_TYPES:
            t_peer = peer.time_gemv(r["type"], r["rows"], r["cols"], r["bytes"], args.threads, r["copies"])
            line += f"{t_peer * 1e6:>10.1f}{t_peer / r['seconds']:>10.2f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
