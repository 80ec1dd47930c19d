#!/usr/bin/env python3
"""Speculative decoding: plain vs speculative decode speed on five task kinds, fucina vs
llama-cpp-python's prompt-lookup speculation, same GGUF, same threads.

    python benches/speculative.py [--threads 2] [--repeat 2] [--model PATH] [--max-tokens 128]

Inputs are built from real text in this repository (not written to flatter drafting):

- (a) code: reproduce a source file of the repo given in the prompt (`python/fucina/sampling.py`);
- (b) document QA: a README section in the prompt (and as `reference=`), then a question that
  the document answers;
- (c) chat: a two-turn conversation whose second turn asks to repeat the first turn's text
  (the reply to turn 2 is timed; turn 1 is the same for both modes);
- (d) story: an open-ended continuation;
- (e) translation: English sentences from the README to translate.

Greedy decoding, `--max-tokens` tokens per task, end-of-generation ignored for (a), (d) and
(e) so every run times the same number of tokens. Decode speed is (tokens - 1) / (time of the
last token - time of the first), so prefill is excluded. fucina runs each task plain
(`speculation=False`) and speculative (the default) in alternating rounds; the peer runs
`Llama.create_completion` plain and with `draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10)`
(its default). Printed per task: tok/s of each, speculative/plain for both engines (fucina's also as the range
of the ratios within each round, which a shared machine's noise moves less than the best-of ratio), ours/peer
for the speculative runs, fucina's tokens per step and acceptance; and the verify cost ratio
(time of a pinned forward of 1 + k rows over a one-row decode step, from the Rust
`verify_cost` example so no logits are copied to Python) at k = 1 .. 16, with full logits and with
greedy picks (the head's shortcut a greedy verify takes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The peer interpreter: benches/setup_peers.sh's virtualenv, or FUCINA_PEER_PYTHON (one with llama_cpp importable).
PEER_PY = Path(os.environ.get("FUCINA_PEER_PYTHON", ROOT / "benches" / ".peers" / "bin" / "python"))


def tasks() -> dict[str, dict[str, object]]:
    source = (ROOT / "python" / "fucina" / "sampling.py").read_text()[:2400]
    readme = (ROOT / "README.md").read_text()
    start = readme.find("### Conversations")
    section = readme[start : start + 2200] if start >= 0 else readme[:2200]
    sentences = [s.strip() for s in readme[:1500].replace("\n", " ").split(". ") if len(s.strip()) > 40][:4]
    return {
        "a_code": {
            "prompt": f"Here is a Python file:\n\n{source}\n\nHere is the same file again, unchanged:\n\n"
            + source[:200],
            "ignore_eos": True,
        },
        "b_document": {
            "prompt": f"{section}\n\nQuestion: What does enable_persistence write, and where?\n"
            "Answer, quoting the text above:",
            "reference": section,
            "ignore_eos": False,
        },
        "c_chat": {
            "turns": [
                "Remember this text:\n" + section[:900],
                "Now repeat the text I gave you, word for word.",
            ],
        },
        "d_story": {"prompt": "Once upon a time, in a small village by the sea,", "ignore_eos": True},
        "e_translation": {
            "prompt": "Translate from English to French.\n\n"
            + "\n".join(f"English: {s}.\nFrench:" for s in sentences[:1]),
            "ignore_eos": True,
        },
    }


CHILD = r"""
import json, sys, time
engine, model, threads, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
tasks = json.loads(sys.argv[5])
out = {}

def rate(times):
    # tokens - 1 over the time from the first token to the last
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0

if engine == "fucina":
    import fucina
    llm = fucina.LLM(model, n_ctx=4096, n_threads=threads)
    llm.model.wait_repacked()
    def timed_gen(prompt, spec, reference=None, ignore_eos=False):
        ids = llm.tokenize(prompt)
        gen = llm.engine.generate(ids, max_tokens=max_tokens, seed=0, ignore_eos=ignore_eos, speculation=spec,
                                  reference=llm.tokenize(reference, add_special=False) if reference else None)
        times = []
        for step in gen:
            if step[1]:
                times.append(time.perf_counter())
        return rate(times), gen.spec_stats
    for name, t in tasks.items():
        for spec in (False, True):
            if "turns" in t:
                chat = llm.chat(temperature=0, max_tokens=max_tokens, speculation=spec)
                chat.send(t["turns"][0])
                times = []
                for _ in chat.stream(t["turns"][1]):
                    times.append(time.perf_counter())
                r, stats = rate(times), chat.spec_stats
            else:
                r, stats = timed_gen(t["prompt"], spec, t.get("reference"), t.get("ignore_eos", False))
            out[f"{name}/{'spec' if spec else 'plain'}"] = r
            if spec and stats:
                out[f"{name}/tokens_per_step"] = stats["committed"] / max(stats["steps"], 1)
                out[f"{name}/acceptance"] = stats["accepted"] / max(stats["drafted"], 1)
else:
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    plain = Llama(model, n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    # Its speculative path needs logits for every position (logits_all): a smaller context
    # keeps that array (n_ctx x n_vocab floats) in memory.
    lookup = Llama(model, n_ctx=1536, n_threads=threads, n_threads_batch=threads, verbose=False, logits_all=True,
                   draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))
    def timed(llm, prompt):
        llm.reset()
        times = []
        for _ in llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, stream=True):
            times.append(time.perf_counter())
        return rate(times)
    for name, t in tasks.items():
        for label, llm in (("plain", plain), ("spec", lookup)):
            if "turns" in t:
                msgs = [{"role": "user", "content": t["turns"][0]}]
                first = llm.create_chat_completion(msgs, max_tokens=max_tokens, temperature=0.0)
                msgs += [first["choices"][0]["message"], {"role": "user", "content": t["turns"][1]}]
                times = []
                for _ in llm.create_chat_completion(msgs, max_tokens=max_tokens, temperature=0.0, stream=True):
                    times.append(time.perf_counter())
                out[f"{name}/{label}"] = rate(times)
            else:
                out[f"{name}/{label}"] = timed(llm, t["prompt"])
print(json.dumps(out))
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
    ap.add_argument("--repeat", type=int, default=2, help="alternating rounds per engine (best run kept)")
    ap.add_argument("--model", default="", help="GGUF file (default: the embedded Gemma 3 270M)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-peer", action="store_true", help="fucina only")
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all five)")
    args = ap.parse_args()
    import fucina

    model = args.model or str(fucina.assets.default_model_path())
    t = tasks()
    if args.tasks:
        unknown = sorted(set(args.tasks.split(",")) - set(t))
        if unknown:
            ap.error(f"unknown task(s) {', '.join(unknown)}; the tasks are {', '.join(t)}")
        t = {k: v for k, v in t.items() if k in args.tasks.split(",")}
    child_args = [model, str(args.threads), str(args.max_tokens), json.dumps(t)]
    ours: list[dict[str, float]] = []
    peer: list[dict[str, float]] = []
    for _ in range(args.repeat):
        ours.append(run(sys.executable, "fucina", child_args))
        if not args.no_peer:
            peer.append(run(PEER_PY, "llama-cpp-python", child_args))

    def best(runs: list[dict[str, float]], key: str, low: bool = False) -> float:
        vals = [r[key] for r in runs if key in r]
        return (min(vals) if low else max(vals)) if vals else float("nan")

    def spread(runs: list[dict[str, float]], name: str) -> str:
        # spec/plain within each round (both modes ran in the same process, back to back):
        # on a shared machine the best-of columns can come from different rounds.
        r = [x[f"{name}/spec"] / x[f"{name}/plain"] for x in runs if x.get(f"{name}/plain")]
        return f"{min(r):.2f}-{max(r):.2f}" if r else "-"

    print(
        f"model {Path(model).name}, {args.threads} threads, {args.max_tokens} tokens per task, greedy, "
        f"best of {args.repeat} alternating rounds"
    )
    head = f"{'task':<14}{'plain':>8}{'spec':>8}{'spec/plain':>11}{'rounds':>11}{'tok/step':>9}{'accept':>8}"
    if peer:
        head += f"{'peer plain':>11}{'peer spec':>10}{'peer s/p':>9}{'ours/peer':>10}"
    print(head + "   (tok/s)")
    for name in t:
        p, s = best(ours, f"{name}/plain"), best(ours, f"{name}/spec")
        line = (
            f"{name:<14}{p:>8.1f}{s:>8.1f}{s / p:>11.2f}{spread(ours, name):>11}"
            f"{best(ours, f'{name}/tokens_per_step'):>9.2f}"
            f"{best(ours, f'{name}/acceptance'):>8.0%}"
        )
        if peer:
            pp, ps = best(peer, f"{name}/plain"), best(peer, f"{name}/spec")
            line += f"{pp:>11.1f}{ps:>10.1f}{ps / pp:>9.2f}{s / ps:>10.2f}"
        print(line)
    print(
        "verify cost (pinned forward of 1 + k rows / one-row step, examples/verify_cost): "
        + verify_cost(model, args.threads)
    )


def verify_cost(model: str, threads: int) -> str:
    """The Rust `verify_cost` example's line for `model`: the forward alone, no logits
    copied to Python (a Session.eval(all=True) from Python adds a 1 MB copy per row)."""
    built = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "examples" / "verify_cost"
    cmd = (
        [str(built)]
        if built.exists() and not shutil.which("cargo")
        else ["cargo", "run", "--release", "-q", "-p", "fucina-model", "--example", "verify_cost", "--"]
    )
    r = subprocess.run([*cmd, model, str(threads)], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        return f"(verify_cost failed: {r.stderr.strip()[-300:]})"
    # The full-logits line, then the greedy-picks line (a greedy verify's cost).
    return "\n  ".join(r.stdout.strip().splitlines()[-2:])


if __name__ == "__main__":
    main()
