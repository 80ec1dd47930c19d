#!/usr/bin/env python3
"""llama.cpp logits goldens for the tiny random-weight GGUFs (tests/goldens/model/tiny/).

    benches/.peers/bin/python tools/gen_tiny_llamacpp_goldens.py [FAMILY ...]   # default: qwen3moe

The tiny models carry no tokenizer, which llama.cpp needs to load a file, so each
variant is copied to a temporary GGUF with `tokenizer.ggml.model = "none"` and
`<arch>.vocab_size` (llama.cpp's dummy vocabulary; tensors and every other key
unchanged). llama.cpp (through llama-cpp-python, built by benches/setup_peers.sh)
then evaluates the prompts of the family's transformers golden (`<family>.json`,
from tools/gen_tiny_models.py or tools/gen_tiny_hybrid.py) in one batch with logits
for every position, 2 threads, and a 12-token greedy continuation (one token per
decode, as a generation runs). KV cache: f32 for f32 weights, f16 (llama.cpp's
default) for f16 and q8_0 weights. Writes `<family>-llamacpp.json` (an AVX-512
host) or `<family>-llamacpp-avx2.json` (an AVX2 one; see tools/llamacpp_host.py):
per variant and prompt, the logits of every position and the greedy tokens.
"""

from __future__ import annotations

import json
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import gguf
import numpy as np
from llama_cpp import Llama
from llamacpp_host import golden_suffix, host_isa

DIR = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "model" / "tiny"
N_GREEDY = 12
# (variant, KV type name, ggml type id for type_k / type_v)
VARIANTS = [("f32", "f32", 0), ("f16", "f16", 1), ("q8_0", "f16", 1)]


def copy_gguf(src: Path, dst: Path, drop: frozenset[str] = frozenset(), add: dict | None = None) -> None:
    """Copy `src` to `dst`: every key but those in `drop`, then `add` (name -> uint32 or
    str value), and every tensor as it is."""
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in drop:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for name, value in (add or {}).items():
        if isinstance(value, str):
            w.add_string(name, value)
        else:
            w.add_uint32(name, value)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dummy_vocab_keys(src: Path) -> dict:
    """llama.cpp's no-vocabulary keys for `src`: `tokenizer.ggml.model = "none"` and
    `<arch>.vocab_size` (the embedding's row count)."""
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    n_vocab = next(int(t.shape[1]) for t in r.tensors if t.name == "token_embd.weight")
    return {"tokenizer.ggml.model": "none", f"{arch}.vocab_size": n_vocab}


def with_dummy_vocab(src: Path, dst: Path) -> None:
    """Copy `src` to `dst` adding llama.cpp's no-vocabulary keys."""
    copy_gguf(src, dst, add=dummy_vocab_keys(src))


def golden_doc(generator: str, family: str) -> dict:
    """The header of a llama.cpp golden (its variants filled in by the caller)."""
    return {
        "generator": f"{generator} {family}",
        "reference": f"llama-cpp-python {version('llama_cpp_python')}, 2 threads, one batch per prompt",
        "family": family,
        # The ggml kernels that made the logits: their float order differs by ISA.
        "isa": host_isa(),
        "variants": {},
    }


def run(path: Path, kv_type: int, prompts: list[list[int]], digits: int = 8) -> list[dict]:
    """llama.cpp's logits of every position of each prompt (`digits` significant
    digits: 9 give every f32 back exactly) and its greedy continuation."""
    n_ctx = max(64, max(len(p) for p in prompts) + N_GREEDY + 4)
    llm = Llama(
        model_path=str(path),
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_threads=2,
        logits_all=True,
        type_k=kv_type,
        type_v=kv_type,
        verbose=False,
    )
    out = []
    for toks in prompts:
        llm.reset()
        llm.eval(toks)
        logits = np.array(llm.scores[: llm.n_tokens], dtype=np.float32)
        greedy = []
        last = logits[-1]
        for _ in range(N_GREEDY):
            tok = int(np.argmax(last))
            greedy.append(tok)
            llm.eval([tok])
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        out.append(
            {
                "tokens": toks,
                "logits": [[float(f"{v:.{digits}g}") for v in row] for row in logits.tolist()],
                "greedy": greedy,
            }
        )
    return out


def main() -> None:
    families = sys.argv[1:] or ["qwen3moe"]
    for family in families:
        doc = golden_doc("tools/gen_tiny_llamacpp_goldens.py", family)
        ref = json.loads((DIR / f"{family}.json").read_text())
        prompts = [p["tokens"] for p in ref["prompts"]]
        with tempfile.TemporaryDirectory() as tmp:
            for variant, kv_name, kv_type in VARIANTS:
                src = DIR / f"{family}-{variant}.gguf"
                dst = Path(tmp) / src.name
                with_dummy_vocab(src, dst)
                doc["variants"][variant] = {"kv": kv_name, "prompts": run(dst, kv_type, prompts)}
                print(family, variant, "ok")
        out = DIR / f"{family}-llamacpp{golden_suffix()}.json"
        out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
