#!/usr/bin/env python3
"""Q4_0, IQ4_NL and IQ4_XS tiny models, and llama.cpp's exact logits for them.

    benches/.peers/bin/python tools/gen_tiny_repacked_goldens.py [FAMILY ...]   # default: qwen3 qwen3moe qwen3w256

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
  significant digits (each f32 exactly), and its 12-token greedy continuations;
* `qwen3w256-iq4_xs.gguf` and `qwen3w256-iq4_xs-llamacpp.json`: the same for IQ4_XS, whose
  256-weight super-blocks need wider rows than the tiny models': a random-weight qwen3 256
  wide (2 layers, vocabulary 512, `WIDE`) written here in f32 and quantized by llama.cpp;
  llama.cpp multiplies its prompt batches of 8 rows or more in its tiled order.
"""

from __future__ import annotations

import ctypes
import json
import sys
import tempfile
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
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


# A qwen3 256 wide: IQ4_XS blocks hold 256 weights, more than the tiny models' rows.
WIDE = dict(n_layer=2, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_vocab=512)
WIDE_PROMPTS = [[1, 7, 300, 42, 99, 5, 17, 256, 3, 511, 8, 64], list(range(20, 40)), [5, 4, 3, 2, 1, 0, 9, 8, 7]]


def write_wide_f32(dst: Path, seed: int = 0) -> None:
    """`WIDE`'s random-weight qwen3 in f32, with llama.cpp's dummy vocabulary keys."""
    h = WIDE
    rng = np.random.default_rng(seed)
    e, d, f, v = h["n_embd"], h["head_dim"], h["n_ff"], h["n_vocab"]
    w = gguf.GGUFWriter(str(dst), "qwen3")
    w.add_name("tiny-random-qwen3-256")
    w.add_block_count(h["n_layer"])
    w.add_context_length(256)
    w.add_embedding_length(e)
    w.add_feed_forward_length(f)
    w.add_head_count(h["n_head"])
    w.add_head_count_kv(h["n_head_kv"])
    w.add_key_length(d)
    w.add_value_length(d)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_string("tokenizer.ggml.model", "none")
    w.add_uint32("qwen3.vocab_size", v)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(v, e))
    w.add_tensor("output_norm.weight", norm(e))
    for i in range(h["n_layer"]):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", norm(e))
        w.add_tensor(b + "attn_q.weight", mat(h["n_head"] * d, e))
        w.add_tensor(b + "attn_k.weight", mat(h["n_head_kv"] * d, e))
        w.add_tensor(b + "attn_v.weight", mat(h["n_head_kv"] * d, e))
        w.add_tensor(b + "attn_output.weight", mat(e, h["n_head"] * d))
        w.add_tensor(b + "attn_q_norm.weight", norm(d))
        w.add_tensor(b + "attn_k_norm.weight", norm(d))
        w.add_tensor(b + "ffn_norm.weight", norm(e))
        w.add_tensor(b + "ffn_gate.weight", mat(f, e))
        w.add_tensor(b + "ffn_up.weight", mat(f, e))
        w.add_tensor(b + "ffn_down.weight", mat(e, f))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def wide_iq4_xs() -> None:
    """`qwen3w256-iq4_xs.gguf` and `qwen3w256-iq4_xs-llamacpp.json`: IQ4_XS matrices (every
    one, 256-weight super-blocks) that llama.cpp multiplies in its tiled order in prompt
    batches of 8 rows or more, and in `ggml_vec_dot_iq4_xs_q8_K`'s in decode."""
    doc = golden_doc("tools/gen_tiny_repacked_goldens.py", "qwen3w256")
    with tempfile.TemporaryDirectory() as tmp:
        f32 = Path(tmp) / "qwen3w256-f32.gguf"
        write_wide_f32(f32)
        quantized = Path(tmp) / "qwen3w256-iq4_xs-vocab.gguf"
        quantize(f32, quantized, "IQ4_XS")
        out = DIR / "qwen3w256-iq4_xs.gguf"
        copy_gguf(quantized, out, drop=frozenset(dummy_vocab_keys(quantized)))
        types = {t.tensor_type.name for t in gguf.GGUFReader(str(out)).tensors}
        doc["variants"]["iq4_xs"] = {"kv": "f16", "prompts": run(quantized, 1, WIDE_PROMPTS, digits=9)}
        print("qwen3w256 iq4_xs", sorted(types), "ok")
    (DIR / f"qwen3w256-iq4_xs-llamacpp{golden_suffix()}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")


def main() -> None:
    families = sys.argv[1:] or ["qwen3", "qwen3moe", "qwen3w256"]
    for family in families:
        if family == "qwen3w256":
            wide_iq4_xs()
            continue
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
