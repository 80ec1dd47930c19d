#!/usr/bin/env python3
"""Where fucina's numerics first leave llama.cpp's: per layer, per decode step.

    cargo build --release -p fucina-model --example dump_logits
    benches/.peers/bin/python tools/trace_llamacpp_layers.py MODEL.gguf [--tokens 8]
        [--tensors Qcur_pos,Kcur_pos,Vcur_normed,kqv_out,attn_out,pe_in,l_out] [--max-layer N]

Both engines evaluate the same token ids one per forward (2 threads, f16 KV cache).
llama.cpp's intermediate tensors are read through its eval callback (`cb_eval`,
patched into llama-cpp-python's context creation); fucina's through
`FUCINA_TRACE_LAYERS` (`dump_logits` writes, per layer, the tensors named by
llama.cpp's graph: the q/k/v rows after norms and RoPE, the attention output before
its projection, the residual after the mixer, after the FFN and at the layer's end).
Prints one line per step: `.` where a tensor is bitwise llama.cpp's, else
`[name-layer:relative error]`, `|` between layers. Nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import tempfile
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import _internals

ROOT = Path(__file__).resolve().parent.parent
DUMP = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "examples" / "dump_logits"


class GgmlTensor(ctypes.Structure):
    """`struct ggml_tensor` of the vendored ggml (GGML_MAX_DIMS 4, GGML_MAX_SRC 10)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def llama_cpp_steps(model: Path, toks: list[int], want: set[str]) -> list[dict[str, np.ndarray]]:
    steps: list[dict[str, np.ndarray]] = []

    def cb(t: int, ask: bool, _ud: int) -> bool:
        tt = GgmlTensor.from_address(t)
        name = tt.name.decode()
        if name.rsplit("-", 1)[0] not in want:
            return False
        if ask:
            return True
        ne = list(tt.ne)
        n = ne[0] * ne[1] * ne[2] * ne[3]
        if tt.type == 0 and tt.nb[1] == 4 * ne[0]:  # contiguous f32
            steps[-1][name] = np.ctypeslib.as_array((ctypes.c_float * n).from_address(tt.data)).copy()
        return True

    callback = llama_cpp.ggml_backend_sched_eval_callback(cb)
    init = _internals.llama_cpp.llama_init_from_model

    def patched(m: object, params: llama_cpp.llama_context_params) -> object:
        params.cb_eval = callback
        return init(m, params)

    _internals.llama_cpp.llama_init_from_model = patched
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=512, n_batch=512, n_threads=2, verbose=False)
    for t in toks:
        steps.append({})
        llm.eval([t])
    return steps


def fucina_steps(model: Path, toks: list[int]) -> list[dict[str, np.ndarray]]:
    with tempfile.TemporaryDirectory() as tmp:
        tf, of, tr = Path(tmp) / "tokens.txt", Path(tmp) / "logits.bin", Path(tmp) / "trace.bin"
        tf.write_text(" ".join(map(str, toks)))
        env = {**os.environ, "FUCINA_TRACE_LAYERS": str(tr)}
        subprocess.run([str(DUMP), str(model), str(tf), str(of), "2", "decode"], check=True, env=env)
        raw = tr.read_bytes()
    steps: list[dict[str, np.ndarray]] = []
    off, first = 0, None
    while off < len(raw):
        n = int(np.frombuffer(raw, "<u4", 1, off)[0])
        tag = raw[off + 4 : off + 4 + n].decode()
        off += 4 + n
        il, rows, width = (int(v) for v in np.frombuffer(raw, "<u4", 3, off))
        off += 12
        data = np.frombuffer(raw, "<f4", rows * width, off)
        off += 4 * rows * width
        key = f"{tag}-{il}"
        if first is None:
            first = key
        if key == first:
            steps.append({})
        steps[-1][key] = data
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--tensors", default="Qcur_pos,Kcur_pos,Vcur_normed,kqv_out,attn_out,pe_in,l_out")
    ap.add_argument("--max-layer", type=int, default=1 << 30)
    args = ap.parse_args()
    want = set(args.tensors.split(","))
    vocab = llama_cpp.Llama(model_path=str(args.model), vocab_only=True, verbose=False).n_vocab()
    toks = [2 + (i * 7919) % (vocab - 2) for i in range(args.tokens)]
    theirs = llama_cpp_steps(args.model, toks, want)
    ours = fucina_steps(args.model, toks)
    for p, (a_step, b_step) in enumerate(zip(ours, theirs, strict=True)):
        line = []
        for key, a in a_step.items():
            tag, il = key.rsplit("-", 1)
            if tag not in want or int(il) > args.max_layer:
                continue
            b = b_step.get(key)
            if b is None or b.size < a.size:
                line.append(f"[{key}:?]")
            elif (a.view("<u4") == b[-a.size :].view("<u4")).all():
                line.append(".")
            else:
                b = b[-a.size :]
                line.append(f"[{key}:{np.abs(a - b).max() / np.abs(b).max():.0e}]")
            if tag == "l_out":
                line.append("|")
        print(p, "".join(line))


if __name__ == "__main__":
    main()
