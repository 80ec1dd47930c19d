#!/usr/bin/env python3
"""Warm resume: time to first token of turn 5 of a ~2,000-token conversation reopened from disk,
fucina vs llama-cpp-python, same GGUF, same threads.

    python benches/warm_resume.py [--threads 2] [--repeat 3] [--model PATH]

A four-turn conversation (long user messages, short greedy replies) is built once by fucina
(`Conversation` with persistence on) and its token ids are handed to both engines. Each engine,
in its own process with its model already loaded (load time is not counted), then measures:

- warm: reopen the saved state from disk and produce the first token of turn 5 — fucina:
  `Conversation.enable_persistence(file)` (the FUXKV001 sidecar) + `stream(user5)`; the peer:
  `pickle.load` of `Llama.save_state()` + `Llama.load_state` + a streamed completion of the turn-5
  prompt (llama-cpp-python keeps the matching prefix of its evaluated tokens);
- cold: the same first token by re-prefilling the whole history (fucina: a fresh
  `Conversation.stream_messages`; the peer: `reset()` then the same completion).

Both use an f16 KV cache and greedy decoding. Engines alternate (ours, peer, ...) `--repeat`
times; each keeps its best run. Printed: each time, cold/warm speedups (the target is >= 10x),
and ours/peer ratios of the times (< 1 is better).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The peer interpreter: benches/setup_peers.sh's virtualenv, or FUCINA_PEER_PYTHON (one with llama_cpp importable).
PEER_PY = Path(os.environ.get("FUCINA_PEER_PYTHON", ROOT / "benches" / ".peers" / "bin" / "python"))
N_CTX = 4096

PARAGRAPH = (
    "The history of the river towns is a history of trade: salt and timber went down the valley, "
    "wine and cloth came up, and every bridge and ferry charged its toll. "
)
USERS = [PARAGRAPH * 14 + f"Question {i}: summarise the passage in one line." for i in range(4)]
USER5 = "Thanks. What was the main good traded up the valley?"

BUILD = r"""
import json, sys
import fucina
path, model, threads, sidecar, users = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5])
llm = fucina.LLM(model, n_ctx=4096, n_threads=threads)
chat = llm.chat(temperature=0, max_tokens=24)
chat.enable_persistence(sidecar)
for u in users:
    chat.send(u)
history = chat.history
turn5 = llm.apply_chat_template(history + [{"role": "user", "content": sys.argv[6]}])
json.dump({"history": history, "held": chat.tokens, "turn5": turn5}, open(path, "w"))
"""

CHILD = r"""
import json, pickle, sys, time
engine, model, threads, sidecar = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
conv, user5 = json.load(open(sys.argv[5])), sys.argv[6]
if engine == "fucina":
    import fucina
    llm = fucina.LLM(model, n_ctx=4096, n_threads=threads)
    llm.model.wait_repacked()
    import shutil
    def warm():
        # A fresh copy each time: the resumed turn 5 is itself appended to the file it reads.
        for ext in ("", ".json"):
            shutil.copyfile(sidecar + ext, sidecar + ".run" + ext)
        t = time.perf_counter()
        chat = llm.chat(temperature=0, max_tokens=1)
        resumed = chat.enable_persistence(sidecar + ".run")
        next(chat.stream(user5))
        dt = time.perf_counter() - t
        assert resumed == len(conv["held"]), (resumed, len(conv["held"]))
        assert chat.last_reused_tokens == len(conv["held"]), chat.last_reused_tokens
        chat.close()
        return dt
    def cold():
        chat = llm.chat(temperature=0, max_tokens=1)
        t = time.perf_counter()
        next(chat.stream_messages(conv["history"] + [{"role": "user", "content": user5}]))
        dt = time.perf_counter() - t
        assert chat.last_reused_tokens == 0
        chat.close()
        return dt
else:
    from llama_cpp import Llama
    llm = Llama(model, n_ctx=4096, n_threads=threads, n_threads_batch=threads, n_batch=512, verbose=False)
    llm.eval(conv["held"])
    state_path = sidecar + ".llama_state.pkl"
    with open(state_path, "wb") as f:
        pickle.dump(llm.save_state(), f)
    def first(prompt):
        for _ in llm.create_completion(prompt, max_tokens=1, temperature=0.0, stream=True):
            return
    def warm():
        t = time.perf_counter()
        with open(state_path, "rb") as f:
            llm.load_state(pickle.load(f))
        first(conv["turn5"])
        return time.perf_counter() - t
    def cold():
        llm.reset()
        t = time.perf_counter()
        first(conv["turn5"])
        return time.perf_counter() - t
warm(); cold()  # warm-up
print(json.dumps({"warm_s": min(warm() for _ in range(3)), "cold_s": min(cold() for _ in range(2))}))
"""


def run(py: Path | str, engine: str, args: list[str]) -> dict[str, float]:
    r = subprocess.run([str(py), "-c", CHILD, engine, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{engine} failed:\n{r.stderr}")
    result: dict[str, float] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="alternating rounds per engine (best run kept)")
    ap.add_argument("--model", default="", help="GGUF file (default: the embedded Gemma 3 270M)")
    args = ap.parse_args()
    import fucina

    model = args.model or str(fucina.assets.default_model_path())
    with tempfile.TemporaryDirectory() as tmp:
        sidecar, conv_path = f"{tmp}/conv.fuxkv", f"{tmp}/conv.json"
        subprocess.run(
            [sys.executable, "-c", BUILD, conv_path, model, str(args.threads), sidecar, json.dumps(USERS), USER5],
            check=True,
        )
        conv = json.loads(Path(conv_path).read_text())
        child_args = [model, str(args.threads), sidecar, conv_path, USER5]
        ours: list[dict[str, float]] = []
        peer: list[dict[str, float]] = []
        for _ in range(args.repeat):
            ours.append(run(sys.executable, "fucina", child_args))
            peer.append(run(PEER_PY, "llama-cpp-python", child_args))
    best = {name: {k: min(r[k] for r in runs) for k in runs[0]} for name, runs in (("fucina", ours), ("peer", peer))}
    print(
        f"model {Path(model).name}, {args.threads} threads, history {len(conv['held'])} tokens in the cache, "
        f"turn-5 prompt {len(conv['turn5'])} tokens, best of {args.repeat} alternating rounds"
    )
    print(f"{'':<24}{'fucina':>12}{'llama-cpp-python':>20}{'ours/peer':>12}")
    for key, label in (("warm_s", "warm resume TTFT"), ("cold_s", "re-prefill TTFT")):
        o, p = best["fucina"][key], best["peer"][key]
        print(f"{label:<24}{o * 1e3:>10.1f}ms{p * 1e3:>18.1f}ms{o / p:>12.3f}")
    for name in ("fucina", "peer"):
        b = best[name]
        print(f"{name}: warm resume is {b['cold_s'] / b['warm_s']:.1f}x faster than re-prefilling")


if __name__ == "__main__":
    main()
