"""fucina.LLM on the real Gemma 3 270M: the Python generation API and its contracts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fucina
from conftest import GOLDENS


@pytest.fixture(scope="module")
def llm(gemma_path: Path) -> fucina.LLM:
    return fucina.LLM(gemma_path, n_ctx=256, n_threads=2)


def golden_prompts() -> list[dict[str, object]]:
    data = json.loads((GOLDENS / "model" / "gemma3-270m" / "logits.json").read_text())
    prompts: list[dict[str, object]] = data["prompts"]
    return prompts


def test_tokenize_matches_llama_cpp_for_golden_prompts(llm: fucina.LLM) -> None:
    for p in golden_prompts():
        assert llm.tokenize(str(p["prompt"]), parse_special=True) == p["tokens"]


def test_generate_equals_joined_stream(llm: fucina.LLM) -> None:
    prompt = "The three primary colors are"
    text = llm.generate(prompt, max_tokens=16)
    assert isinstance(text, str) and len(text) > 0
    assert "".join(llm.stream(prompt, max_tokens=16)) == text
    # Token ids and text agree.
    ids = list(llm.stream_tokens(prompt, max_tokens=16))
    assert llm.detokenize(ids) == text


def test_stop_strings_cut_before_the_stop(llm: fucina.LLM) -> None:
    prompt = "Shopping list:\n- eggs\n- milk\n-"
    full = llm.generate(prompt, max_tokens=24)
    assert "\n" in full
    cut = llm.generate(prompt, max_tokens=24, stop="\n")
    assert cut == full[: full.index("\n")]
    assert llm.generate(prompt, max_tokens=24, stop=["zzz-not-there"]) == full


def test_logits_shapes_and_incremental_eval(llm: fucina.LLM) -> None:
    ids = llm.tokenize("The quick brown fox")
    all_rows = llm.logits(ids, all=True)
    assert all_rows.shape == (len(ids), llm.n_vocab) and all_rows.dtype == np.float32
    # logits() runs on its own sequence: the low-level context is left as it was.
    llm.reset()
    llm.eval(ids[:2])
    last = llm.logits(ids)
    assert llm.tokens == ids[:2]
    assert last.shape == (llm.n_vocab,)
    # Prefill in one batch vs token-by-token: same argmax at every position.
    llm.reset()
    stepwise = np.stack([llm.eval([t]) for t in ids])
    assert (stepwise.argmax(axis=1) == all_rows.argmax(axis=1)).all()
    np.testing.assert_allclose(stepwise, all_rows, rtol=0, atol=1e-2 * float(np.ptp(all_rows)))


def test_pinned_session_batch_equals_single_tokens(gemma_path: Path) -> None:
    """Pinned numerics: a batch's logits equal token-by-token evaluation bitwise (the
    default follows llama.cpp's batch-dependent kernel orders, which differ from 4 rows)."""
    model = fucina.Model(str(gemma_path), n_threads=2)
    ids = fucina.LLM(gemma_path, n_ctx=32).tokenize("Once upon a time, in a small village by the sea,")
    assert len(ids) >= 8

    def batch(pinned: bool) -> np.ndarray:
        s = fucina.Session(model, n_ctx=64)
        s.pinned = pinned
        assert s.pinned is pinned
        return s.eval(ids, all=True)

    single = fucina.Session(model, n_ctx=64)
    single.pinned = True
    stepwise = np.stack([single.eval([t]) for t in ids])
    assert np.array_equal(batch(True), stepwise)
    assert not np.array_equal(batch(False), stepwise)


def test_q8_0_kv_cache_halves_memory(gemma_path: Path) -> None:
    f16 = fucina.LLM(gemma_path, n_ctx=256, kv_cache_type="f16")
    q8 = fucina.LLM(gemma_path, n_ctx=256, kv_cache_type="q8_0")
    ratio = q8.session.kv_cache_bytes / f16.session.kv_cache_bytes
    assert ratio == pytest.approx(34 / 64, rel=1e-6)
    ids = f16.tokenize("Water boils at a temperature of")
    a, b = f16.logits(ids), q8.logits(ids)
    assert int(a.argmax()) == int(b.argmax())


def test_context_overflow_and_bad_arguments(gemma_path: Path, llm: fucina.LLM) -> None:
    small = fucina.LLM(gemma_path, n_ctx=8)
    with pytest.raises(fucina.FucinaError, match="KV cache overflow"):
        small.logits(list(range(2, 20)))
    with pytest.raises(ValueError, match="kv_cache_type"):
        fucina.LLM(gemma_path, kv_cache_type="q4")
    with pytest.raises(ValueError, match="empty"):
        llm.generate("", max_tokens=4) if not llm.tokenizer.add_bos else llm.generate([], max_tokens=4)


def test_unsupported_architecture_is_named(tmp_path: Path) -> None:
    p = tmp_path / "m.gguf"
    w = fucina.GGUFWriter()
    w.add("general.architecture", "mamba")
    w.write(p)
    with pytest.raises(fucina.UnsupportedModelError, match=r"'mamba'.*gemma3"):
        fucina.Model(p)


def test_background_repacking_is_waitable_and_changes_no_logit(gemma_path: Path) -> None:
    """The load returns before the Q4_K weights are repacked; waiting finishes it, and
    the logits are bitwise those of a model computed before."""
    model = fucina.Model(str(gemma_path), n_threads=2)
    before = fucina.Session(model, n_ctx=32).eval([2, 818, 5279, 529], all=True)
    model.wait_repacked()
    if fucina.build_info()["isa"] in {"avx2", "avx512"}:
        assert model.repacked_bytes > 0
    after = fucina.Session(model, n_ctx=32).eval([2, 818, 5279, 529], all=True)
    assert np.array_equal(before.view(np.uint32), after.view(np.uint32))


def test_bad_arguments_raised_from_rust_are_fucina_errors(llm: fucina.LLM, gemma_path: Path) -> None:
    """Every bad argument the extension module rejects is a FucinaError and the builtin
    a Python user expects (ValueError for a bad value, TypeError for a bad type)."""
    tok = llm.tokenizer
    cases: list[tuple[object, type[Exception]]] = [
        (lambda: tok.decode([-1]), ValueError),
        (lambda: tok.decode(["a"]), TypeError),  # type: ignore[list-item]
        (lambda: tok.decode("abc"), TypeError),  # type: ignore[arg-type]
        (lambda: tok.token_to_piece(1 << 40), ValueError),
        (lambda: tok.is_eog(True), TypeError),
        (lambda: tok.encode(5), TypeError),  # type: ignore[arg-type]
        (lambda: fucina.Session(llm.model, n_ctx=-5), ValueError),
        (lambda: fucina.Session(llm.model, n_ctx=0), ValueError),
        (lambda: fucina.Session(llm.model, kv_cache_type="q4"), ValueError),
        (lambda: llm.engine.logits([llm.n_vocab]), ValueError),
        (lambda: llm.engine.generate([2, 3], max_tokens=-1, seed=0), ValueError),
        (lambda: llm.engine.generate([2, 3], max_tokens=4, seed=0, top_p=7.0), ValueError),
        (lambda: llm.engine.generate([2, 3], max_tokens=4, seed=0, processors=[1]), TypeError),  # type: ignore[list-item]
        (lambda: fucina.Model(gemma_path, n_threads=-1), ValueError),
        (lambda: fucina.Model(123), TypeError),  # type: ignore[arg-type]
        (lambda: fucina.Tokenizer.from_gguf(None), TypeError),  # type: ignore[arg-type]
        (lambda: llm.engine.generate([2, 3], max_tokens=4, seed=0, temperature="hot"), TypeError),  # type: ignore[arg-type]
        (lambda: llm.engine.generate([2, 3], max_tokens=4, seed=-1), ValueError),
        (lambda: llm.engine.generate([2, 3], max_tokens=4, seed=0, top_k=1 << 40), ValueError),
        (lambda: llm.engine.generate([2, 3], max_tokens=4, seed=0, logit_bias=[(1, "a")]), TypeError),  # type: ignore[list-item]
    ]
    for i, (call, builtin) in enumerate(cases):
        assert callable(call)
        with pytest.raises(builtin) as e:
            call()
            pytest.fail(f"case {i} did not raise")
        assert isinstance(e.value, fucina.FucinaError), (e.value, type(e.value).__mro__)


def test_boolean_options_are_keyword_only(llm: fucina.LLM, gemma_path: Path) -> None:
    # Untyped handles: the point is the runtime refusal (mypy already rejects these calls).
    untyped: Any = llm
    gguf_file: Any = fucina.GGUFFile
    calls: list[Callable[[], object]] = [
        lambda: untyped.tokenize("x", False),
        lambda: untyped.detokenize([2], True),
        lambda: untyped.logits([2], True),
        lambda: untyped.tokenizer.encode("x", False),
        lambda: untyped.tokenizer.decode([2], True),
        lambda: untyped.create_completion("x", 4, 0.5),
        lambda: gguf_file(gemma_path, False),
        lambda: untyped.session.eval([2], True),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="positional"):
            call()
