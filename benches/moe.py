#!/usr/bin/env python3
"""MoE speed: fucina vs llama.cpp (llama-cpp-python) on the same GGUF and threads, fully
resident and under a memory limit that holds about half of the expert bytes.

    python benches/moe.py [--threads 2] [--models dsv2lite,qwen3moe] [--file KEY=PATH]
                          [--repeat 3] [--limited-repeat 2] [--limited-steps 32]
                          [--cache-fraction 0.5] [--headroom-mb 256] [--no-limited] [--json]

Models (`--models`, comma-separated keys; `--file KEY=PATH` points a key at another file):
random weights in the real tensor shapes and llama.cpp's Q4_K_M type mix, cut to their
first layers to fit this machine's disk and memory (the timings per layer are what counts;
the output head, a fixed cost per token, weighs more in a cut model than in the full one):

- `dsv2lite`: `benches/.models/deepseek-v2-lite-5l-synthetic-q4_k_m.gguf` (DeepSeek-V2-Lite,
  `deepseek2` with MLA, 64 experts of 1408, 6 routed + 2 shared, first layer dense; first 5 of
  27 layers: `python tools/make_synthetic_model.py OUT --arch deepseek-v2-lite --layers 5
  --zero-mean`);
- `qwen3moe`: `benches/.models/qwen3-30b-a3b-3l-synthetic-q4_k_m.gguf` (Qwen3-30B-A3B, 128
  experts of 768, 8 routed; first 3 of 48 layers: `--arch qwen3-30b-a3b --layers 3
  --zero-mean`).

`--zero-mean` matters: without it every Q4_K weight shares a positive mean, the hidden states
collapse onto one token-independent vector and the routers pick the same experts for every
token, so neither engine would ever miss in its cache (and prefill would group all rows onto
a handful of experts). With it the routing spreads over most experts within a few dozen tokens.

Each engine runs in its own process, one after the other; the engines alternate (ours, peer,
ours, ...) and each metric keeps every engine's best run, as in benches/generate.py (the
per-round ratio range is printed too). fucina runs through `fucina._core.Model` / `Session`
(the files carry llama.cpp's "none" vocabulary, so there is no tokenizer for `fucina.LLM`;
the forward is the same). Both use an f16 KV cache.

Resident (the file read into the page cache first; fucina maps its experts): prefill
tokens/s of a 512-token prompt into an empty context, and decode tokens/s of 32 greedy
single-token argmax steps after a 128- or 2048-token context, on identical seeded token ids;
plus peak RSS and the fraction of memory bandwidth decode@128 reaches (fucina's weight bytes
per token x tok/s, against a numpy read probe on the same threads).

Limited: each run starts in a fresh child memory cgroup (cgroup v1, created under this
process's own memory cgroup, removed afterwards) whose `memory.limit_in_bytes` is the file's
non-expert bytes + `--cache-fraction` of its expert bytes + `--headroom-mb` (interpreter,
KV cache, buffers). It counts page cache and anonymous memory alike, and the machine has no
swap. Before each limited run the model file's pages are dropped from the page cache with
`posix_fadvise(DONTNEED)` (no global drop_caches), so both engines start cold and their
page-cache pages are charged to their own cgroup. fucina streams its experts
(`moe_stream=True, moe_uncached=True, moe_pins=False`, a cache of `--cache-fraction` of the
expert bytes: the limit minus the dense weights minus the headroom); llama.cpp maps the file
(its default mmap) and the kernel evicts its pages at the limit. Each engine prefills 128
seeded ids, takes 4 untimed steps, then `--limited-steps` timed steps fed seeded random ids
(the same for both engines: the routing then follows the inputs, not each engine's own
greedy choices, which on random weights fall into short cycles). Reported: decode tokens/s,
bytes read from disk per token (the process's `/proc/self/io` read_bytes over the timed
steps, which counts page-fault and pread reads alike; for fucina also the expert store's own
`bytes_read` from `moe_stats()` and its hit rate) and the cgroup's peak usage.

If no child memory cgroup can be made (no cgroup v1 memory hierarchy, not root, read-only
cgroupfs), the limited rows are skipped with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The peer interpreter: benches/setup_peers.sh's virtualenv, or FUCINA_PEER_PYTHON (one with llama_cpp importable).
PEER_PY = Path(os.environ.get("FUCINA_PEER_PYTHON", ROOT / "benches" / ".peers" / "bin" / "python"))
MODELS_DIR = ROOT / "benches" / ".models"
MODELS = {
    "dsv2lite": MODELS_DIR / "deepseek-v2-lite-5l-synthetic-q4_k_m.gguf",
    "qwen3moe": MODELS_DIR / "qwen3-30b-a3b-3l-synthetic-q4_k_m.gguf",
}
DECODE_STEPS = 32
WARMUP_STEPS = 4
LIMITED_PROMPT = 128
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
MiB = 1 << 20

CHILD = r"""
import json, sys, time
import numpy as np
engine, path, threads, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cache_mb, limited_steps, prefetch = float(sys.argv[5]), int(sys.argv[6]), sys.argv[7] == "1"
rng = np.random.default_rng(0)
ids = [int(x) for x in rng.integers(1000, 20000, size=2048 + 64)]
forced = [int(x) for x in np.random.default_rng(1).integers(1000, 20000, size=limited_steps + 8)]
n_ctx = 2048 + 64 if mode == "resident" else LIMITED_PROMPT + limited_steps + 16
out = {}

def read_bytes():
    return next(int(l.split()[1]) for l in open("/proc/self/io") if l.startswith("read_bytes:"))

t0 = time.perf_counter()
if engine == "fucina":
    from fucina import _core
    if mode == "resident":
        model = _core.Model(path, n_threads=threads)
    else:
        model = _core.Model(path, n_threads=threads, moe_stream=True, moe_cache_mb=cache_mb, moe_uncached=True,
                            moe_pins=False, moe_prefetch=prefetch)
    model.wait_repacked()  # load-time repacking counted in the load time, as llama.cpp's
    sess = _core.Session(model, n_ctx=n_ctx)
    out["weight_bytes_per_token"] = model.weight_bytes_per_token
    def reset(): sess.reset()
    def prefill(toks): sess.eval(toks)
    def step(tok): return sess.eval_argmax([tok])
    def stats(): return model.moe_stats()
else:
    import llama_cpp
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False)
    n_vocab = llm.n_vocab()
    def reset(): llm.reset()
    def prefill(toks): llm.eval(toks)
    def step(tok):
        llm.eval([tok])
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
        return int(np.argmax(logits))
    def stats(): return None
out["load_s"] = time.perf_counter() - t0

def decode_after(ctx):
    reset(); prefill(ids[:ctx])
    tok = ids[ctx]
    step(tok)  # warm-up step
    t = time.perf_counter()
    for _ in range(STEPS):
        tok = step(tok)
    return STEPS / (time.perf_counter() - t)

if mode == "resident":
    reset(); prefill(ids[:64])  # warm-up
    reset()
    t = time.perf_counter(); prefill(ids[:512]); out["prefill_tps"] = 512 / (time.perf_counter() - t)
    out["decode128_tps"] = decode_after(128)
    out["decode2048_tps"] = decode_after(2048)
else:
    t = time.perf_counter(); prefill(ids[:LIMITED_PROMPT]); out["limited_prefill_s"] = time.perf_counter() - t
    for tok in forced[:WARMUP]:
        step(tok)
    s0, r0 = stats(), read_bytes()
    t = time.perf_counter()
    for tok in forced[WARMUP:WARMUP + limited_steps]:
        step(tok)
    dt = time.perf_counter() - t
    out["limited_tps"] = limited_steps / dt
    out["read_per_token"] = (read_bytes() - r0) / limited_steps
    s1 = stats()
    if s1 is not None:
        out["store_read_per_token"] = (s1["bytes_read"] - s0["bytes_read"]) / limited_steps
        hits, misses = s1["hits"] - s0["hits"], s1["misses"] - s0["misses"]
        out["hit_rate"] = hits / max(hits + misses, 1)
        out["cache_bytes"] = s1["cache_bytes"]
        out["expert_bytes"] = s1["expert_bytes"]
# VmHWM, not ru_maxrss: a forked child inherits the parent's ru_maxrss across exec.
out["peak_rss"] = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps(out))
""".replace("LIMITED_PROMPT", str(LIMITED_PROMPT)).replace("WARMUP", str(WARMUP_STEPS))
CHILD = CHILD.replace("STEPS", str(DECODE_STEPS))


class MemoryCgroup:
    """A child memory cgroup (v1) under this process's own, with a byte limit; `preexec`
    moves a starting child into it. Removed on exit (the pages its processes charged move
    to the parent)."""

    def __init__(self, limit: int) -> None:
        own = own_memory_cgroup()
        self.path = CGROUP_V1 / own.lstrip("/") / f"fucina-bench-{os.getpid()}"
        self.limit = limit

    def __enter__(self) -> MemoryCgroup:
        self.path.mkdir()
        try:
            (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
            # With swap, anonymous pages could leave the limit instead of the file's pages.
            with contextlib.suppress(OSError):
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(self.limit))
        except BaseException:
            self.path.rmdir()
            raise
        return self

    def preexec(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self) -> int:
        return int((self.path / "memory.max_usage_in_bytes").read_text())

    def failcnt(self) -> int:
        return int((self.path / "memory.failcnt").read_text())

    def __exit__(self, *exc: object) -> None:
        for _ in range(50):  # the exited child's charges may take a moment to drain
            try:
                self.path.rmdir()
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                time.sleep(0.1)
        self.path.rmdir()


def own_memory_cgroup() -> str:
    """This process's path in the cgroup v1 memory hierarchy."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    raise OSError("no cgroup v1 memory controller in /proc/self/cgroup")


def cgroup_unavailable() -> str | None:
    """Why no child memory cgroup can be made here, or None if one can."""
    if not (CGROUP_V1 / "memory.limit_in_bytes").exists():
        v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
        return "cgroup v2 only (not supported here)" if v2 else f"no cgroup v1 memory hierarchy at {CGROUP_V1}"
    try:
        with MemoryCgroup(1 << 30):
            pass
    except OSError as e:
        return f"cannot create a child memory cgroup under {own_memory_cgroup()}: {e}"
    return None


def drop_file_cache(path: Path) -> None:
    """Evict `path`'s clean, unmapped pages from the page cache (this file only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm_file(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(16 * MiB):
            pass


def resident_fraction(path: Path) -> float:
    """The fraction of `path`'s pages in the page cache (mincore over a fresh mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size, page = path.stat().st_size, os.sysconf("SC_PAGE_SIZE")
    pages = (size + page - 1) // page
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        try:
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
            return sum(b & 1 for b in bytes(vec)) / pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def run(
    engine: str,
    path: Path,
    threads: int,
    mode: str,
    cache_mb: float = 0.0,
    steps: int = 0,
    cg: MemoryCgroup | None = None,
    prefetch: bool = False,
) -> dict[str, Any]:
    py = sys.executable if engine == "fucina" else str(PEER_PY)
    args = [py, "-c", CHILD, engine, str(path), str(threads), mode, str(cache_mb), str(steps), str(int(prefetch))]
    r = subprocess.run(args, capture_output=True, text=True, preexec_fn=cg.preexec if cg else None)
    if r.returncode != 0:
        why = " (killed: out of memory in the cgroup?)" if r.returncode == -9 else ""
        raise SystemExit(f"{engine} {mode} failed on {path}{why}:\n{r.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def memory_bandwidth(threads: int) -> float:
    """Read bandwidth of this machine (bytes/s): `threads` numpy sums (which release
    the GIL) over 512 MiB each at once, best of 5."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    arrays = [np.ones(1 << 26, dtype=np.float64) for _ in range(threads)]
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(np.sum, arrays))
        best = 0.0
        for _ in range(5):
            t = time.perf_counter()
            list(ex.map(np.sum, arrays))
            best = max(best, sum(a.nbytes for a in arrays) / (time.perf_counter() - t))
    return best


LOWER_IS_BETTER = {"load_s", "peak_rss", "read_per_token", "store_read_per_token", "limited_prefill_s", "cg_peak"}


def best(runs: list[dict[str, Any]], k: str) -> float:
    """The best value of metric `k` over runs (lowest time / memory / bytes, highest speed)."""
    return float(min(r[k] for r in runs) if k in LOWER_IS_BETTER else max(r[k] for r in runs))


def expert_bytes(path: Path, threads: int) -> int:
    from fucina import _core

    stats = _core.Model(path, n_threads=threads, moe_stream=True, moe_cache_mb=1, moe_pins=False).moe_stats()
    if stats is None:
        raise SystemExit(f"{path} has no experts")
    return int(stats["expert_bytes"])


def bench_model(key: str, path: Path, args: argparse.Namespace, cg_why: str | None, bw: float) -> dict[str, Any]:
    size = path.stat().st_size
    experts = expert_bytes(path, args.threads)
    res: dict[str, Any] = {"file": str(path), "file_bytes": size, "expert_bytes": experts}
    print(f"\n## {key}: {path.name} ({size / 1e9:.2f} GB, {experts / 1e9:.2f} GB of experts)")

    warm_file(path)
    res["resident_fraction_before"] = resident_fraction(path)
    once = (path, args.threads, "resident")
    rounds = [(run("fucina", *once), run("llama.cpp", *once)) for _ in range(args.repeat)]
    ours = {k: best([o for o, _ in rounds], k) for k in rounds[0][0]}
    peer = {k: best([p for _, p in rounds], k) for k in rounds[0][1]}
    rows = []
    print(f"resident (file {100 * res['resident_fraction_before']:.0f}% in the page cache), best of {args.repeat}")
    print(f"{'metric':<16}{'fucina':>12}{'llama.cpp':>12}{'ours/peer':>11}")
    for k, label, fmt in [
        ("prefill_tps", "prefill 512", "{:.1f}"),
        ("decode128_tps", "decode@128", "{:.2f}"),
        ("decode2048_tps", "decode@2048", "{:.2f}"),
        ("load_s", "load s", "{:.3f}"),
        ("peak_rss", "peak RSS MB", "{:.0f}"),
    ]:
        a, b = ours[k], peer[k]
        if k == "peak_rss":
            a, b = a / 1e6, b / 1e6
        per_round = sorted(o[k] / p[k] for o, p in rounds)
        spread = f"  (rounds {per_round[0]:.3f}-{per_round[-1]:.3f})" if len(rounds) > 1 else ""
        print(f"{label:<16}{fmt.format(a):>12}{fmt.format(b):>12}{a / b:>11.3f}{spread}")
        rows.append(
            {
                "metric": k,
                "fucina": ours[k],
                "llama.cpp": peer[k],
                "ratio": ours[k] / peer[k],
                "round_ratios": per_round,
            }
        )
    wbt = ours["weight_bytes_per_token"]
    frac = wbt * ours["decode128_tps"] / bw
    print(f"decode@128 reads {wbt / 1e6:.0f} MB of weights/token: {frac:.2f} of bandwidth")
    res["resident"] = {"rows": rows, "weight_bytes_per_token": wbt, "bandwidth_fraction": frac}

    if args.no_limited or cg_why is not None:
        res["limited"] = {"skipped": "--no-limited" if args.no_limited else cg_why}
        print(f"limited: skipped ({res['limited']['skipped']})")
        return res
    cache = int(experts * args.cache_fraction)
    limit = (size - experts) + cache + args.headroom_mb * MiB
    cache_mb = cache / MiB
    lim_rounds: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for _ in range(args.limited_repeat):
        pair = []
        for engine in ("fucina", "llama.cpp"):
            drop_file_cache(path)
            cold = resident_fraction(path)
            with MemoryCgroup(limit) as cg:
                r = run(engine, path, args.threads, "limited", cache_mb, args.limited_steps, cg, args.prefetch)
                r["cg_peak"], r["cg_failcnt"], r["cold_fraction"] = cg.peak(), cg.failcnt(), cold
            pair.append(r)
        lim_rounds.append((pair[0], pair[1]))
    ours = {k: best([o for o, _ in lim_rounds], k) for k in lim_rounds[0][0] if k != "cg_failcnt"}
    peer = {k: best([p for _, p in lim_rounds], k) for k in lim_rounds[0][1] if k != "cg_failcnt"}
    per_round = sorted(o["limited_tps"] / p["limited_tps"] for o, p in lim_rounds)
    spread = f"  (rounds {per_round[0]:.3f}-{per_round[-1]:.3f})" if len(lim_rounds) > 1 else ""
    cold = max(r["cold_fraction"] for pr in lim_rounds for r in pr)
    print(
        f"limited to {limit / MiB:.0f} MiB (dense {(size - experts) / MiB:.0f} + {args.cache_fraction:g} of experts "
        f"{cache_mb:.0f} + headroom {args.headroom_mb}; file at most {100 * cold:.1f}% cached at start), "
        f"{args.limited_steps} steps after {LIMITED_PROMPT}, best of {args.limited_repeat}"
    )
    print(f"{'metric':<24}{'fucina stream':>14}{'llama.cpp mmap':>16}{'ours/peer':>11}")
    print(
        f"{'decode tok/s':<24}{ours['limited_tps']:>14.2f}{peer['limited_tps']:>16.2f}"
        f"{ours['limited_tps'] / peer['limited_tps']:>11.3f}{spread}"
    )
    ours_mb, peer_mb = ours["read_per_token"] / 1e6, peer["read_per_token"] / 1e6
    print(f"{'disk MB read/token':<24}{ours_mb:>14.1f}{peer_mb:>16.1f}")
    print(f"{'store MB read/token':<24}{ours['store_read_per_token'] / 1e6:>14.1f}")
    print(f"{'store hit rate':<24}{100 * ours['hit_rate']:>13.1f}%")
    print(f"{'cgroup peak MiB':<24}{ours['cg_peak'] / MiB:>14.0f}{peer['cg_peak'] / MiB:>16.0f}")
    print(f"{'prefill 128 s (cold)':<24}{ours['limited_prefill_s']:>14.1f}{peer['limited_prefill_s']:>16.1f}")
    res["limited"] = {
        "limit_bytes": limit,
        "cache_mb": cache_mb,
        "fucina": ours,
        "llama.cpp": peer,
        "ratio": ours["limited_tps"] / peer["limited_tps"],
        "round_ratios": per_round,
        "rounds": [list(p) for p in lim_rounds],
    }
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="dsv2lite,qwen3moe")
    ap.add_argument("--file", action="append", default=[], metavar="KEY=PATH", help="use PATH for model KEY")
    ap.add_argument("--repeat", type=int, default=3, help="alternating resident rounds per engine (best run kept)")
    ap.add_argument("--limited-repeat", type=int, default=2, help="alternating memory-limited rounds per engine")
    ap.add_argument("--limited-steps", type=int, default=DECODE_STEPS, help="timed decode steps under the limit")
    ap.add_argument("--cache-fraction", type=float, default=0.5, help="expert bytes the limit holds (and our cache)")
    ap.add_argument("--headroom-mb", type=int, default=256, help="limit on top of dense weights + expert share")
    ap.add_argument("--prefetch", action="store_true", help="limited runs: fucina's router-lookahead prefetch on")
    ap.add_argument("--no-limited", action="store_true", help="only the resident comparison")
    ap.add_argument("--json", action="store_true", help="also print the results as one JSON object")
    args = ap.parse_args()
    if not PEER_PY.exists():
        raise SystemExit("peer virtualenv missing: run benches/setup_peers.sh")
    models = dict(MODELS)
    for spec in args.file:
        key, _, p = spec.partition("=")
        models[key] = Path(p)
    cg_why = None if args.no_limited else cgroup_unavailable()
    bw = memory_bandwidth(args.threads)
    print(
        f"# {args.threads} threads; memory read bandwidth (numpy, {args.threads} threads) {bw / 1e9:.1f} GB/s; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if cg_why:
        print(f"# memory-limited runs skipped: {cg_why}")
    out: dict[str, Any] = {"threads": args.threads, "bandwidth": bw, "cgroup": cg_why or "ok", "models": {}}
    for key in args.models.split(","):
        path = models[key]
        if not path.exists():
            print(f"# {key}: {path} missing (see the docstring: tools/make_synthetic_model.py)")
            continue
        out["models"][key] = bench_model(key, path, args, cg_why, bw)
    out["load_average_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
