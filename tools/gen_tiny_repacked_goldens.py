#!/usr/bin/env python3
"""Q4_0 and IQ4_NL tiny models, and llama.cpp's exact logits for them.

    benches/.peers/bin/python tools/gen_tiny_repacked_goldens.py [FAMILY ...]   # default: qwen3 qwen3moe

On any x86-64 CPU with AVX2, llama.cpp repacks Q4_0 and IQ4_NL matrices with
rows % 8 == 0 and multiplies them in its own float order (`fucina_quant::whole_block`).
This tool makes the files that show fucina follows it:

* `<family>-q4_0.gguf`, `<family>-iq4_nl.gguf`: the family's f32 tiny model
  (tests/goldens/model/tiny/, from tools/gen_tiny_models.py) requantized by llama.cpp's
  own quantizer (`llama_model_quantize`, `pure`: every matrix of the type, the token
  embedding and output included; vectors stay f32), then stripped of the dummy
  vocabulary keys llama.cpp needed to read it;
* `<family>-repacked-llamacpp.json` (an AVX-512 host; `-avx2` on an AVX2 one): llama.cpp's
  logits for the family's prompts, every position, f16 cache, 2 threads, with 9
  significant digits (each f32 exactly), and its 12-token greedy continuations.
"""

from __future__ import annotations

import ctypes
import json
import sys
import tempfile
from pathlib import Path

import gguf
import llama_cpp
from gen_tiny_llamacpp_goldens import DIR, copy_gguf, dummy_vocab_keys, golden_doc, run, with_dummy_vocab
from llamacpp_host import golden_suffix

VARIANTS = [("q4_0", "Q4_0"), ("iq4_nl", "IQ4_NL")]


def quantize(src: Path, dst: Path, ftype: str) -> None:
    """llama.cpp's quantizer, every matrix to `ftype`."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.pure = True
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize {src} -> {ftype} failed ({rc})")


def main() -> None:
    families = sys.argv[1:] or ["qwen3", "qwen3moe"]
    for family in families:
        doc = golden_doc("tools/gen_tiny_repacked_goldens.py", family)
        ref = json.loads((DIR / f"{family}.json").read_text())
        prompts = [p["tokens"] for p in ref["prompts"]]
        with tempfile.TemporaryDirectory() as tmp:
            f32 = Path(tmp) / f"{family}-f32.gguf"
            with_dummy_vocab(DIR / f"{family}-f32.gguf", f32)
            for variant, ftype in VARIANTS:
                quantized = Path(tmp) / f"{family}-{variant}-vocab.gguf"
                quantize(f32, quantized, ftype)
                out = DIR / f"{family}-{variant}.gguf"
                # The committed file without the vocabulary keys llama.cpp needed.
                copy_gguf(quantized, out, drop=frozenset(dummy_vocab_keys(quantized)))
                types = {t.tensor_type.name for t in gguf.GGUFReader(str(out)).tensors}
                doc["variants"][variant] = {"kv": "f16", "prompts": run(quantized, 1, prompts, digits=9)}
                print(family, variant, sorted(types), "ok")
        out = DIR / f"{family}-repacked-llamacpp{golden_suffix()}.json"
        out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
