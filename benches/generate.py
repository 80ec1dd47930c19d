#!/usr/bin/env python3
"""Generation speed: fucina vs llama.cpp (llama-cpp-python), same GGUF, same threads.

    python benches/generate.py [--threads 2] [--models default,synthetic] [--repeat 3]

Models (`--models`, comma-separated keys): `default`, the embedded Gemma 3 270M;
`synthetic`, `benches/.models/qwen3-4b-synthetic-q4_k_m.gguf` (Qwen3-4B shapes,
random weights in the Q4_K_M type mix; make it with
`python tools/make_synthetic_model.py benches/.models/qwen3-4b-synthetic-q4_k_m.gguf`);
and the hybrids, made the same way with `--arch A --vocab qwen2` (random weights
in llama.cpp's Q4_K_M mix for them, the real Qwen2 BPE vocabulary padded to the
model's width so both engines load a tokenizer):

- `qwen35`: `benches/.models/qwen35-0.8b-synthetic-q4_k_m.gguf`
  (`--arch qwen35-0.8b`: Qwen3.5-0.8B, Gated DeltaNet + gated attention);
- `gemma4`: `benches/.models/gemma4-e2b-synthetic-q4_k_m.gguf`
  (`--arch gemma4-e2b`: Gemma 4 E2B, sliding/global layers, shared KV, per-layer
  embeddings);
- `gemma4-e4b`: `benches/.models/gemma4-e4b-synthetic-q4_k_m.gguf` (`--arch gemma4-e4b`).

For a hybrid, "weight bytes per token" counts every matrix a decode step reads
(DeltaNet projections, the routed experts actually used, per-layer-embedding
projections and one table row, the head), not the recurrent state, which a step
reads and writes too (Qwen3.5-0.8B: 18 DeltaNet layers x 16 heads x 128 x 128 f32,
19 MB each way).
The peer runs from benches/.peers (benches/setup_peers.sh). Each engine runs in
its own process, one after the other, on identical token ids; both use an f16
KV cache and greedy argmax. Reported per model:

- load: constructing the model + context (file in page cache);
- prefill: tokens/s evaluating a 512-token prompt into an empty context;
- decode@128 / decode@2048: tokens/s of 32 single-token steps after a 128- or
  2048-token context;
- peak RSS of the process;
- the generation loop (GEN_STEPS tokens after a 128-token prompt, end-of-generation
  ignored): fucina's `LLM.generate` (time of GEN_STEPS + 1 tokens minus that of 1) greedy,
  sampled with llama.cpp's defaults (temperature 0.8, top_k 40, top_p 0.95, min_p
  0.05), as an exact full-vocabulary nucleus (top_k 0, top_p 0.95, min_p 0), and
  sampled with a no-op Python logit processor; against the raw forward
  (`Session.eval_argmax`, the same steps) inside fucina, and against llama-cpp-python's
  `Llama.generate` with the same parameters;

and ours/peer ratios (>1 is better for speeds, <1 for RSS and load time), plus the
fraction of memory bandwidth decode reaches (weight bytes per token x tok/s, against
a read probe on the same thread count).

The engines alternate (ours, peer, ours, peer, ...) `--repeat` times and each
metric keeps every engine's best run (highest speed, lowest time and memory): on a
shared machine the best run is the one least disturbed by other processes, and
alternating gives both engines the same conditions. The spread of the per-round
ratios is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The peer interpreter: benches/setup_peers.sh's virtualenv, or FUCINA_PEER_PYTHON (one with llama_cpp importable).
PEER_PY = Path(os.environ.get("FUCINA_PEER_PYTHON", ROOT / "benches" / ".peers" / "bin" / "python"))
MODELS_DIR = ROOT / "benches" / ".models"
SYNTHETIC = MODELS_DIR / "qwen3-4b-synthetic-q4_k_m.gguf"
HYBRIDS = {
    "qwen35": MODELS_DIR / "qwen35-0.8b-synthetic-q4_k_m.gguf",
    "gemma4": MODELS_DIR / "gemma4-e2b-synthetic-q4_k_m.gguf",
    "gemma4-e4b": MODELS_DIR / "gemma4-e4b-synthetic-q4_k_m.gguf",
}
DECODE_STEPS = 32
GEN_STEPS = 96

CHILD = r"""
import json, sys, time
import numpy as np
engine, path, threads, loop_rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
ids = [int(x) for x in rng.integers(1000, 20000, size=2048 + 64)]
n_ctx = 2048 + 64
out = {}
t0 = time.perf_counter()
if engine == "fucina":
    import fucina
    llm = fucina.LLM(path, n_ctx=n_ctx, n_threads=threads)  # model + tokenizer + engine
    model = llm.model
    sess = fucina.Session(model, n_ctx=n_ctx)
    out["load_s"] = time.perf_counter() - t0
    out["weight_bytes_per_token"] = model.weight_bytes_per_token
    def reset(): sess.reset()
    def prefill(toks): sess.eval(toks)
    def step(tok): return sess.eval_argmax([tok])
    def gen_tps(params, procs=None):
        # LLM.generate itself: the time of N + 1 tokens minus that of 1 (prefill + first).
        def timed(n):
            t = time.perf_counter()
            llm.generate(ids[:128], max_tokens=n, params=params, logit_processors=procs, ignore_eos=True)
            return time.perf_counter() - t
        return GEN_STEPS / (timed(GEN_STEPS + 1) - timed(1))
    def P(**kw): return fucina.SamplingParams(**kw)
else:
    import llama_cpp
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False)
    out["load_s"] = time.perf_counter() - t0
    n_vocab = llm.n_vocab()
    def reset(): llm.reset()
    def prefill(toks): llm.eval(toks)
    def step(tok):
        llm.eval([tok])
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
        return int(np.argmax(logits))
    def gen_tps(params, procs=None):
        # Llama.generate's token iterator (it never stops by itself), first token untimed.
        llm.reset()
        it = llm.generate(ids[:128], temp=params["temperature"], top_k=params.get("top_k", 40),
                          top_p=params.get("top_p", 0.95), min_p=params.get("min_p", 0.05),
                          repeat_penalty=1.0, reset=True)
        next(it)
        t = time.perf_counter()
        for _ in range(GEN_STEPS):
            next(it)
        return GEN_STEPS / (time.perf_counter() - t)
    def P(**kw): return kw

def decode_after(ctx):
    reset(); prefill(ids[:ctx])
    tok = ids[ctx]
    step(tok)  # warm-up step
    t = time.perf_counter()
    for _ in range(STEPS):
        tok = step(tok)
    return STEPS / (time.perf_counter() - t)

def raw_tps():
    reset(); prefill(ids[:128])
    tok = ids[128]
    step(tok)
    t = time.perf_counter()
    for _ in range(GEN_STEPS):
        tok = step(tok)
    return GEN_STEPS / (time.perf_counter() - t)

GEN = {
    "gen_greedy_tps": dict(temperature=0.0),
    "gen_sampled_tps": dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=1),
    "gen_nucleus_tps": dict(temperature=0.8, top_k=0, top_p=0.95, min_p=0.0, seed=1),
}
noop = lambda ids, logits: None
for _ in range(loop_rounds):  # interleaved rounds, best kept: the loop costs are a few percent
    for k, v in [("raw_tps", raw_tps)] + [(k, (lambda p=p: gen_tps(P(**p)))) for k, p in GEN.items()] + (
        [("gen_procs_tps", lambda: gen_tps(P(**GEN["gen_sampled_tps"]), [noop]))] if engine == "fucina" else []
    ):
        out[k] = max(out.get(k, 0.0), v())

reset(); prefill(ids[:64])  # warm-up
reset()
t = time.perf_counter(); prefill(ids[:512]); out["prefill_tps"] = 512 / (time.perf_counter() - t)
out["decode128_tps"] = decode_after(128)
out["decode2048_tps"] = decode_after(2048)
# VmHWM, not ru_maxrss: a forked child inherits the parent's ru_maxrss across exec.
out["peak_rss"] = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps(out))
""".replace("GEN_STEPS", str(GEN_STEPS)).replace("STEPS", str(DECODE_STEPS))


def run(engine: str, path: Path, threads: int, loop_rounds: int) -> dict[str, float]:
    py = sys.executable if engine == "fucina" else str(PEER_PY)
    args = [py, "-c", CHILD, engine, str(path), str(threads), str(loop_rounds)]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{engine} failed on {path}:\n{r.stderr[-3000:]}")
    result: dict[str, float] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def memory_bandwidth(threads: int) -> float:
    """Read bandwidth of this machine (bytes/s): `threads` numpy sums (which release
    the GIL) over 512 MiB each at once, best of 5."""
    import time
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


LOWER_IS_BETTER = {"load_s", "peak_rss"}


def best(runs: list[dict[str, float]], k: str) -> float:
    """The best value of metric `k` over runs (lowest time / memory, highest speed)."""
    return min(r[k] for r in runs) if k in LOWER_IS_BETTER else max(r[k] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="default,synthetic", help="model keys (see above) or GGUF paths")
    ap.add_argument("--repeat", type=int, default=3, help="alternating rounds per engine (best run kept)")
    ap.add_argument(
        "--loop-rounds",
        type=int,
        default=3,
        help="generation-loop measurements per engine run (best kept); 1 saves time on slow peers",
    )
    args = ap.parse_args()
    if not PEER_PY.exists():
        raise SystemExit("peer virtualenv missing: run benches/setup_peers.sh")
    import fucina

    models = {"synthetic": SYNTHETIC, **HYBRIDS}
    if "default" in args.models.split(","):  # only then is the default model's package needed
        models["default"] = fucina.assets.default_model_path()
    bw = memory_bandwidth(args.threads)
    print(
        f"# {args.threads} threads; memory read bandwidth (numpy, {args.threads} threads) {bw / 1e9:.1f} GB/s; "
        f"best of {args.repeat} alternating rounds"
    )
    for key in args.models.split(","):
        # A key that names no model above is a GGUF's path.
        path = models.get(key, Path(key))
        if not path.exists():
            print(f"# {key}: {path} missing (see tools/make_synthetic_model.py)")
            continue
        once = (args.threads, args.loop_rounds)
        rounds = [(run("fucina", path, *once), run("llama.cpp", path, *once)) for _ in range(args.repeat)]
        keys = [k for k in rounds[0][0] if k in rounds[0][1]]
        ours = {k: best([o for o, _ in rounds], k) for k in rounds[0][0]}
        ours["weight_bytes_per_token"] = rounds[0][0]["weight_bytes_per_token"]
        peer = {k: best([p for _, p in rounds], k) for k in keys}
        print(f"\n## {path.name} ({path.stat().st_size / 1e9:.2f} GB)")
        print(f"{'metric':<16}{'fucina':>12}{'llama.cpp':>12}{'ours/peer':>11}")
        for k, label, fmt in [
            ("load_s", "load s", "{:.3f}"),
            ("prefill_tps", "prefill tok/s", "{:.1f}"),
            ("decode128_tps", "decode@128", "{:.2f}"),
            ("decode2048_tps", "decode@2048", "{:.2f}"),
            ("peak_rss", "peak RSS MB", "{:.0f}"),
        ]:
            a, b = ours[k], peer[k]
            if k == "peak_rss":
                a, b = a / 1e6, b / 1e6
            per_round = sorted(o[k] / p[k] for o, p in rounds)
            spread = f"  (rounds {per_round[0]:.3f}-{per_round[-1]:.3f})" if len(rounds) > 1 else ""
            print(f"{label:<16}{fmt.format(a):>12}{fmt.format(b):>12}{a / b:>11.3f}{spread}")
        print(f"\ngeneration loop, {GEN_STEPS} tokens after 128 (tok/s; loop cost = 1 - loop/raw forward)")
        print(f"{'path':<22}{'fucina':>10}{'loop cost':>11}{'llama-cpp-py':>14}{'ours/peer':>11}")
        raw = ours["raw_tps"]
        print(f"{'raw forward':<22}{raw:>10.2f}{'':>11}{peer['raw_tps']:>14.2f}{raw / peer['raw_tps']:>11.3f}")
        for k, label in [
            ("gen_greedy_tps", "greedy"),
            ("gen_sampled_tps", "sampled (defaults)"),
            ("gen_nucleus_tps", "nucleus top_p 0.95"),
            ("gen_procs_tps", "sampled + no-op proc"),
        ]:
            a = ours[k]
            ref = ours["gen_sampled_tps"] if k == "gen_procs_tps" else raw
            cost = f"{1 - a / ref:>+11.3f}"
            pk = "gen_sampled_tps" if k == "gen_procs_tps" else k
            b = peer.get(pk)
            peer_s = f"{b:>14.2f}{a / b:>11.3f}" if b else ""
            print(f"{label:<22}{a:>10.2f}{cost}{peer_s}")
        print("(no-op processor cost is against the sampled loop; peer column: llama-cpp-python's sampled loop)")
        frac = ours["weight_bytes_per_token"] * ours["decode128_tps"] / bw
        print(
            f"decode@128 reads {ours['weight_bytes_per_token'] / 1e6:.0f} MB of weights/token: {frac:.2f} of bandwidth"
        )


if __name__ == "__main__":
    main()
