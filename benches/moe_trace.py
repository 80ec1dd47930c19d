"""Record expert traces on a MoE GGUF and compare the cache policies on them.

    python benches/moe_trace.py MODEL.gguf [--prompt 64] [--tokens 300] [--cache-pct 25 50]
                                [--mode forced|greedy] [--threads 2] [--out DIR]

For each budget (a percentage of the model's expert bytes) the model runs twice with
its experts streamed, live: once with heat eviction (recording a trace) and once with
LRU. Each run prefills ``--prompt`` token ids, then decodes ``--tokens`` more one at a
time: ``forced`` feeds seeded random ids (a stand-in for text; the routing then reflects
the inputs), ``greedy`` feeds back each argmax. It prints the live hit rates, checks that
replaying the heat trace reproduces the live counts exactly, and prints the replay sweep
(LRU, heat, segmented LRU, Belady, pinned+LRU) of the trace across capacities.

Random-weight models route far less skewed than trained ones (no expert specialises), so
the gaps between policies here are smaller than on real traces.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

from fucina import _core, experts


def run(
    model_path: Path, args: argparse.Namespace, cache_mb: float | None, eviction: str, trace: Path | None
) -> dict[str, Any]:
    model = _core.Model(
        model_path,
        n_threads=args.threads,
        moe_stream=True,
        moe_cache_mb=cache_mb,
        moe_eviction=eviction,
        moe_trace=trace,
        moe_pins=False,
        moe_prefetch=args.prefetch,
    )
    rng = random.Random(args.seed)
    vocab = model.n_vocab
    session = _core.Session(model, n_ctx=args.prompt + args.tokens + 8)
    t0 = time.perf_counter()
    next_id = session.eval_argmax([rng.randrange(vocab) for _ in range(args.prompt)])
    for _ in range(args.tokens):
        tok = rng.randrange(vocab) if args.mode == "forced" else next_id
        next_id = session.eval_argmax([tok])
    dt = time.perf_counter() - t0
    model.moe_flush()
    stats = model.moe_stats()
    assert stats is not None, "the model has no experts"
    stats["seconds"] = dt
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--cache-pct", type=float, nargs="+", default=[25.0, 50.0])
    ap.add_argument("--mode", choices=["forced", "greedy"], default="forced")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefetch", action="store_true", help="router-lookahead prefetch on (live runs)")
    ap.add_argument("--out", type=Path, default=Path("/tmp"))
    args = ap.parse_args()
    probe = _core.Model(args.model, n_threads=args.threads, moe_stream=True, moe_pins=False).moe_stats()
    assert probe is not None, "the model has no experts"
    total = probe["expert_bytes"]
    what = f"{args.prompt} prompt + {args.tokens} {args.mode} tokens"
    print(f"{args.model.name}: {total / 2**20:.0f} MiB of experts; {what}")
    for pct in args.cache_pct:
        mb = total * pct / 100 / 2**20
        trace = args.out / f"{args.model.stem}-{args.mode}-{pct:g}.trace"
        heat = run(args.model, args, mb, "heat", trace)
        lru = run(args.model, args, mb, "lru", None)
        result = experts.replay(trace)
        live = result["live"]
        agree = live["hits"] == heat["hits"] and live["misses"] == heat["misses"]
        print(f"\nbudget {pct:g}% ({heat['slots_per_layer']} slots per layer): ", end="")
        for name, s in (("heat", heat), ("LRU", lru)):
            mib, sec = s["bytes_read"] / 2**20, s["seconds"]
            print(f"live {name} {100 * s['hit_rate']:.1f}% ({mib:.0f} MiB read, {sec:.1f} s), ", end="")
        print(f"replay reproduces live heat: {agree}")
        if args.prefetch:
            print(
                f"prefetch (heat run): {heat['prefetch_loads']} loads, {heat['prefetch_hits']} used "
                f"({heat['prefetch_late']} late), {heat['prefetch_wasted']} wasted"
            )
        print(experts.table(result))


if __name__ == "__main__":
    main()
