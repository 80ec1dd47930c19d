"""Embeddings from Python and the server: ``LLM.embed`` / ``LLM.create_embedding``, the ``fucina.Llama``
drop-in's ``embed`` / ``create_embedding`` and ``/v1/embeddings``, against llama.cpp's pooled embeddings
of the default model (``tools/gen_embedding_goldens.py``: llama-cpp-python with
``LLAMA_POOLING_TYPE_MEAN``, ``_CLS`` and ``_LAST``), and the pooling a GGUF declares."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fucina
from conftest import load_llamacpp_golden
from fucina.server import ServerConfig
from serverkit import live, openai_client

GOLDEN = load_llamacpp_golden("model", "embeddings.json")["cases"]


@pytest.fixture(scope="module")
def llm(gemma_path: Path) -> fucina.LLM:
    return fucina.LLM(gemma_path, n_ctx=256, n_threads=2)


def _close(ours: Any, theirs: Any) -> None:
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    assert a.shape == b.shape
    # llama.cpp sums the rows in f32 (a pooling matmul), fucina in f64: a few ulps of the largest value.
    assert np.abs(a - b).max() <= 1e-6 * np.abs(b).max() * 4, np.abs(a - b).max()


def test_mean_pooling_matches_llama_cpp(llm: fucina.LLM) -> None:
    for case in GOLDEN:
        assert llm.tokenize(case["text"]) == case["tokens"]
        raw = llm.embed(case["text"], normalize=False)
        _close(raw, case["embedding"])
        unit = np.asarray(llm.embed(case["text"]))
        assert math.isclose(float(np.linalg.norm(unit)), 1.0, rel_tol=1e-6)
        _close(unit, np.asarray(case["embedding"]) / np.linalg.norm(case["embedding"]))
        # Token ids embed the same as their text.
        assert llm.embed(case["tokens"]) == llm.embed(case["text"])


def test_lists_shapes_and_errors(llm: fucina.LLM) -> None:
    texts = [c["text"] for c in GOLDEN]
    many = llm.embed(texts)
    assert len(many) == len(texts) and all(v == llm.embed(t) for v, t in zip(many, texts, strict=True))
    r = llm.create_embedding(texts[:2], model="m")
    assert r["object"] == "list" and r["model"] == "m"
    assert [d["index"] for d in r["data"]] == [0, 1] and r["data"][1]["embedding"] == many[1]
    n = sum(len(c["tokens"]) for c in GOLDEN[:2])
    assert r["usage"] == {"prompt_tokens": n, "total_tokens": n}
    with pytest.raises(fucina.InvalidArgumentError, match="empty"):
        llm.embed("")
    with pytest.raises(fucina.ArgumentTypeError, match="input"):
        llm.embed(42)  # type: ignore[arg-type]
    with pytest.raises(fucina.ArgumentTypeError, match="input"):
        llm.embed([])
    with pytest.raises(fucina.InvalidArgumentError, match=r"token id"):
        llm.embed([1, 10**8])
    with pytest.raises(fucina.InvalidArgumentError, match="pooling"):
        llm.embed("x", pooling="max")
    long = "word " * 400
    with pytest.raises(fucina.InvalidArgumentError, match="truncate"):
        llm.embed(long)
    assert llm.embed(long, truncate=True) == llm.embed(llm.tokenize(long)[: llm.n_ctx])


def test_the_llama_drop_in(gemma_path: Path) -> None:
    plain = fucina.Llama(str(gemma_path), n_ctx=256, n_threads=2, verbose=False)
    with pytest.raises(RuntimeError, match="embedding=True"):
        plain.embed("x")
    none = fucina.Llama(str(gemma_path), n_ctx=256, n_threads=2, embedding=True, pooling_type=0, verbose=False)
    with pytest.raises(fucina.InvalidArgumentError, match="pooling_type=0"):
        none.embed("x")
    last = fucina.Llama(str(gemma_path), n_ctx=256, n_threads=2, embedding=True, pooling_type=3, verbose=False)
    _close(last.embed(GOLDEN[0]["text"]), GOLDEN[0]["last"])
    llama = fucina.Llama(str(gemma_path), n_ctx=256, n_threads=2, embedding=True, verbose=False)
    case = GOLDEN[0]
    # llama-cpp-python's defaults: not normalized.
    _close(llama.embed(case["text"]), case["embedding"])
    vectors, count = llama.embed([c["text"] for c in GOLDEN], normalize=True, return_count=True)
    assert count == sum(len(c["tokens"]) for c in GOLDEN)
    for v, c in zip(vectors, GOLDEN, strict=True):
        _close(v, np.asarray(c["embedding"]) / np.linalg.norm(c["embedding"]))
    r = llama.create_embedding(case["text"])
    assert len(r["data"]) == 1 and r["usage"]["prompt_tokens"] == len(case["tokens"])
    _close(r["data"][0]["embedding"], case["embedding"])


def test_first_and_last_token_pooling_match_llama_cpp(llm: fucina.LLM) -> None:
    assert llm.pooling == "mean"  # the default model declares none
    for case in GOLDEN:
        for pooling in ("cls", "last"):
            _close(llm.embed(case["text"], normalize=False, pooling=pooling), case[pooling])


def test_the_pooling_a_gguf_declares_is_the_default(gemma_path: Path, tmp_path: Path) -> None:
    # An embedding model's GGUF says how it pools (Qwen3-Embedding: the last token).
    writer = fucina.GGUFWriter.from_file(fucina.GGUFFile(gemma_path))
    writer.add("gemma3.pooling_type", 3, type="uint32")
    path = tmp_path / "last-pooled.gguf"
    writer.write(path)
    llm = fucina.LLM(path, n_ctx=256, n_threads=2)
    assert llm.pooling == "last"
    case = GOLDEN[1]
    _close(llm.embed(case["text"], normalize=False), case["last"])
    _close(llm.embed(case["text"], normalize=False, pooling="mean"), case["embedding"])
    llama = fucina.Llama(str(path), n_ctx=256, n_threads=2, embedding=True, verbose=False)
    _close(llama.embed(case["text"]), case["last"])
    with live(ServerConfig(parallel=1, ctx_size=256), llm=llm) as server:
        served = openai_client(server).embeddings.create(model=server.model_id, input=case["text"])
    unit = np.asarray(case["last"]) / np.linalg.norm(case["last"])
    _close(served.data[0].embedding, unit)
