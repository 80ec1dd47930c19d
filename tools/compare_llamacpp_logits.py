#!/usr/bin/env python3
"""fucina's logits vs llama.cpp's on one GGUF: a prompt batch and token-by-token decode.

    cargo build --release -p fucina-model --example dump_logits
    benches/.peers/bin/python tools/compare_llamacpp_logits.py MODEL.gguf [--tokens 96] [--decode 8]

For realistic shapes without real weights, make the model with
tools/make_synthetic_model.py (e.g. `--arch qwen3-30b-a3b --layers 4`: Qwen3-30B-A3B's
tensor shapes and Q4_K_M type mix, random weights). Both engines get the same token
ids (a fixed pseudo-random sequence), 2 threads and an f16 KV cache; llama.cpp runs
through llama-cpp-python (benches/setup_peers.sh). Prints, for the batch and for
decode: argmax agreement, positions whose logits are bitwise equal, and the worst
max |Δlogit| / max |logit|; then llama.cpp's greedy continuation (`--greedy` tokens)
replayed through fucina as llama.cpp ran it (the prompt as one batch, then one token
per forward) and in one batch: the first step where
fucina's argmax differs and llama.cpp's top-1/top-2 margin there (a near-tie when small). Nothing is
written to the repository.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from llama_cpp import Llama

ROOT = Path(__file__).resolve().parent.parent
DUMP = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "examples" / "dump_logits"


def ours(model: Path, toks: list[int], mode: str, n_vocab: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        tf, of = Path(tmp) / "tokens.txt", Path(tmp) / "logits.bin"
        tf.write_text(" ".join(map(str, toks)))
        subprocess.run([str(DUMP), str(model), str(tf), str(of), "2", mode], check=True)
        return np.fromfile(of, dtype="<f4").reshape(len(toks), n_vocab)


def summary(a: np.ndarray, b: np.ndarray) -> str:
    """Ours `a` against llama.cpp's `b` (positions x vocabulary): argmax agreement, bitwise-equal
    positions and the worst relative error."""
    agree = int((a.argmax(1) == b.argmax(1)).sum())
    exact = int((a.view("<u4") == b.view("<u4")).all(1).sum())
    rel = float((np.abs(a - b).max(1) / np.abs(b).max(1)).max())
    return f"argmax {agree}/{len(a)}, bitwise positions {exact}/{len(a)}, worst rel {rel:.2e}"


def report(label: str, a: np.ndarray, b: np.ndarray) -> None:
    print(f"{label}: {summary(a, b)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--decode", type=int, default=8)
    ap.add_argument("--greedy", type=int, default=32)
    args = ap.parse_args()
    llm = Llama(model_path=str(args.model), n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)
    n_vocab = llm.n_vocab()
    toks = [2 + (i * 7919) % (n_vocab - 2) for i in range(args.tokens)]
    llm.eval(toks)
    batch = np.array(llm.scores[: len(toks)], dtype=np.float32)
    llm.reset()
    for t in toks[: args.decode]:
        llm.eval([t])
    decode = np.array(llm.scores[: args.decode], dtype=np.float32)
    report("prompt batch", ours(args.model, toks, "batch", n_vocab), batch)
    report("decode", ours(args.model, toks[: args.decode], "decode", n_vocab), decode)
    llm.reset()
    llm.eval(toks)
    greedy, margins = [], []
    last = np.array(llm.scores[len(toks) - 1], dtype=np.float32)
    for _ in range(args.greedy):
        top = np.sort(last)[-2:]
        margins.append(float(top[1] - top[0]))
        greedy.append(int(last.argmax()))
        llm.eval([greedy[-1]])
        last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    # Replayed as llama.cpp ran it (the prompt as one batch, then one token per forward)
    # and as one batch (fucina's prompt kernels for the continuation too).
    for mode in (f"prompt:{len(toks)}", "batch"):
        mine = ours(args.model, toks + greedy[:-1], mode, n_vocab)[len(toks) - 1 :].argmax(1)
        diff = next((i for i, (a, b) in enumerate(zip(mine, greedy, strict=False)) if a != b), None)
        if diff is None:
            print(f"greedy ({mode} replay): {args.greedy}/{args.greedy} tokens identical")
        else:
            print(
                f"greedy ({mode} replay): first difference at step {diff} (llama.cpp's top-1/top-2 "
                f"margin there {margins[diff]:.3g}, smallest margin before it {min(margins[: diff + 1]):.3g})"
            )


if __name__ == "__main__":
    main()
