"""Sampling, logit processors and completions through fucina.LLM on the real Gemma 3 270M.

The sampler's parity with llama.cpp and its distribution (chi-square) are tested in
Rust (crates/fucina-sample/tests); here: the Python surface, determinism across the
three entry points, processors, argument checking, and OpenAI-shaped completions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import fucina

PROMPT = "Once upon a time, in a village by the sea,"
SAMPLED: dict[str, Any] = {"temperature": 0.9, "top_k": 0, "top_p": 0.95, "min_p": 0.0}


@pytest.fixture(scope="module")
def llm(gemma_path: Path) -> fucina.LLM:
    return fucina.LLM(gemma_path, n_ctx=256, n_threads=2)


# -- SamplingParams ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", math.nan),
        ("min_p", -0.1),
        ("min_p", 1.01),
        ("typical_p", 0.0),
        ("repeat_penalty", 0.0),
        ("repeat_penalty", math.nan),
        ("presence_penalty", math.inf),
        ("frequency_penalty", math.nan),
        ("repeat_last_n", -2),
        ("seed", -1),
        ("seed", 1 << 64),
        ("logit_bias", {-3: 1.0}),
        ("logit_bias", {5: math.nan}),
        ("mirostat_mode", 3),
        ("mirostat_tau", math.inf),
        ("mirostat_eta", math.nan),
    ],
)
def test_bad_sampling_values_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(fucina.InvalidArgumentError, match=field.split("_")[0]) as e:
        fucina.SamplingParams(**{field: value})
    assert isinstance(e.value, ValueError) and isinstance(e.value, fucina.FucinaError)


@pytest.mark.parametrize(("field", "value"), [("top_k", 2.5), ("temperature", "hot"), ("seed", True)])
def test_bad_sampling_types_are_type_errors(field: str, value: Any) -> None:
    with pytest.raises(fucina.ArgumentTypeError, match=field) as e:
        fucina.SamplingParams(**{field: value})
    assert isinstance(e.value, TypeError) and isinstance(e.value, fucina.FucinaError)


def test_bad_generation_arguments_fail_before_any_compute(llm: fucina.LLM) -> None:
    bad: list[dict[str, Any]] = [
        {"max_tokens": -1},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"top_p": 1.01},
        {"min_p": math.nan},
        {"stop": [""]},
    ]
    for kwargs in bad:
        with pytest.raises(ValueError):
            llm.generate(PROMPT, **kwargs)
        with pytest.raises(ValueError):
            llm.stream(PROMPT, **kwargs)  # raises at the call, not at the first next()
        assert llm.engine.n_live == 0, kwargs
    with pytest.raises(TypeError, match="temprature"):
        llm.generate(PROMPT, temprature=0.5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="both"):
        llm.generate(PROMPT, params=fucina.SamplingParams(), temperature=0.5)
    with pytest.raises(ValueError, match="vocabulary"):
        llm.generate([2, llm.n_vocab + 5])
    with pytest.raises(ValueError, match="context"):
        llm.generate(list(range(2, 300)))
    with pytest.raises(ValueError, match="top_p"):
        llm.create_completion(PROMPT, top_p=2.0)
    assert llm.engine.n_live == 0


# -- determinism ---------------------------------------------------------------------
def test_same_seed_same_tokens_across_calls_and_entry_points(llm: fucina.LLM) -> None:
    a = llm.generate(PROMPT, max_tokens=24, seed=1234, **SAMPLED)
    b = llm.generate(PROMPT, max_tokens=24, seed=1234, **SAMPLED)
    assert a == b
    assert "".join(llm.stream(PROMPT, max_tokens=24, seed=1234, **SAMPLED)) == a
    params = fucina.SamplingParams(seed=1234, **SAMPLED)
    ids = list(llm.stream_tokens(PROMPT, max_tokens=24, params=params))
    assert llm.detokenize(ids) == a
    c = llm.create_completion(PROMPT, max_tokens=24, seed=1234, top_k=0, temperature=0.9, min_p=0.0)
    assert c["choices"][0]["text"] == a
    chunks = llm.create_completion(PROMPT, max_tokens=24, seed=1234, top_k=0, temperature=0.9, min_p=0.0, stream=True)
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == a
    # Other seeds give other continuations (at temperature 0.9 over the full nucleus).
    others = {llm.generate(PROMPT, max_tokens=24, seed=s, **SAMPLED) for s in range(5)}
    assert len(others - {a}) >= 3


def test_mirostat_is_seeded_lossless_under_speculation_and_follows_its_target(llm: fucina.LLM) -> None:
    # The algorithm itself is checked against llama.cpp's samplers in fucina-sample's parity tests.
    prompt = "Write a list of fruits: apple, banana, cherry, apple, banana, cherry, apple,"
    for mode in (1, 2):
        kw: dict[str, Any] = {"max_tokens": 32, "temperature": 0.8, "mirostat_mode": mode, "seed": 7}
        a = llm.generate(prompt, speculation=False, **kw)
        assert llm.generate(prompt, speculation=False, **kw) == a
        # Mirostat's state moves with every committed token: speculation commits the same ones.
        assert llm.generate(prompt, speculation=True, **kw) == a
        # A tiny target surprise keeps only near-certain tokens: the greedy continuation.
        tight = llm.generate(prompt, speculation=False, **{**kw, "mirostat_tau": 0.01, "mirostat_eta": 0.0})
        assert tight == llm.generate(prompt, max_tokens=32)
    loose = {
        llm.generate(prompt, max_tokens=16, temperature=1.0, mirostat_mode=2, mirostat_tau=8.0, seed=s)
        for s in range(4)
    }
    assert len(loose) >= 3


def test_greedy_is_the_default_and_ignores_the_seed(llm: fucina.LLM) -> None:
    g = llm.generate(PROMPT, max_tokens=12)
    assert llm.generate(PROMPT, max_tokens=12, seed=99) == g
    assert llm.generate(PROMPT, max_tokens=12, temperature=0.0, top_k=1) == g
    ids = llm.tokenize(PROMPT)
    first = int(llm.logits(ids).argmax())
    assert next(iter(llm.stream_tokens(ids, max_tokens=1))) == first


def test_interleaved_generations_do_not_disturb_each_other(llm: fucina.LLM) -> None:
    a_alone = list(llm.stream_tokens(PROMPT, max_tokens=10, seed=5, **SAMPLED))
    b_alone = list(llm.stream_tokens("The capital of France is", max_tokens=10))
    a_it = llm.stream_tokens(PROMPT, max_tokens=10, seed=5, **SAMPLED)
    b_it = llm.stream_tokens("The capital of France is", max_tokens=10)
    a, b = [], []
    for x, y in zip(a_it, b_it, strict=True):
        a.append(x)
        b.append(y)
    assert (a, b) == (a_alone, b_alone)


def test_logit_bias_bans_and_forces(llm: fucina.LLM) -> None:
    ids = llm.tokenize(PROMPT)
    first = int(llm.logits(ids).argmax())
    banned = list(llm.stream_tokens(ids, max_tokens=8, logit_bias={first: -math.inf}))
    assert banned[0] != first and first not in banned
    forced = list(llm.stream_tokens(ids, max_tokens=3, logit_bias={1234: 100.0}))
    assert forced == [1234, 1234, 1234]


def test_stop_strings_split_over_tokens_are_never_emitted(llm: fucina.LLM) -> None:
    full = llm.generate(PROMPT, max_tokens=40)
    words = full.split()
    assert len(words) > 4
    stop = " " + words[3]  # most likely spans several tokens with the space
    cut = llm.generate(PROMPT, max_tokens=40, stop=[stop, "zzz"])
    assert cut == full[: full.index(stop)]
    assert "".join(llm.stream(PROMPT, max_tokens=40, stop=stop)) == cut


def test_closing_a_stream_early_stops_generation(llm: fucina.LLM) -> None:
    it = llm.stream(PROMPT, max_tokens=100)
    next(it)
    assert llm.engine.n_live == 1
    it.close()
    assert llm.engine.n_live == 0


# -- logit processors ----------------------------------------------------------------
def test_processor_sees_a_writable_zero_copy_row_and_history(llm: fucina.LLM) -> None:
    seen: list[tuple[int, int, bool]] = []
    views: list[npt.NDArray[np.float32]] = []

    def look(ids: list[int], logits: npt.NDArray[np.float32]) -> None:
        assert logits.dtype == np.float32 and logits.shape == (llm.n_vocab,)
        seen.append((len(ids), ids[-1], logits.flags.writeable))
        views.append(logits)

    prompt = llm.tokenize(PROMPT)
    out = list(llm.stream_tokens(prompt, max_tokens=5, logit_processors=[look]))
    assert [n for n, _, _ in seen] == [len(prompt) + i for i in range(5)]
    assert [last for _, last, _ in seen] == [prompt[-1], *out[:4]]
    assert all(w for _, _, w in seen)
    # Zero-copy: every call got a view of the same row buffer.
    assert len({v.__array_interface__["data"][0] for v in views}) == 1


def test_processor_that_bans_a_token_is_obeyed(llm: fucina.LLM) -> None:
    greedy = list(llm.stream_tokens(PROMPT, max_tokens=12))
    banned = greedy[0]

    def ban(_ids: list[int], logits: npt.NDArray[np.float32]) -> None:
        logits[banned] = -np.inf

    for kwargs in ({}, SAMPLED | {"seed": 3}):
        out = list(llm.stream_tokens(PROMPT, max_tokens=12, logit_processors=ban, **kwargs))
        assert banned not in out and len(out) == 12


def test_processor_masking_everything_raises_and_leaves_llm_usable(llm: fucina.LLM) -> None:
    def mask_all(_ids: list[int], logits: npt.NDArray[np.float32]) -> None:
        logits[:] = -np.inf

    for kwargs in ({}, SAMPLED | {"seed": 3}):
        with pytest.raises(fucina.FucinaError, match="mask") as e:
            llm.generate(PROMPT, max_tokens=4, logit_processors=[mask_all], **kwargs)
        assert isinstance(e.value, ValueError)
    assert llm.engine.n_live == 0
    assert llm.generate(PROMPT, max_tokens=6) == llm.generate(PROMPT, max_tokens=6)


class Boom(RuntimeError):
    pass


def test_raising_processor_propagates_and_leaves_llm_usable(llm: fucina.LLM) -> None:
    calls = 0

    def flaky(_ids: list[int], _logits: npt.NDArray[np.float32]) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise Boom("processor failed on its third call")

    it = llm.stream_tokens(PROMPT, max_tokens=10, logit_processors=[flaky])
    with pytest.raises(Boom, match="third call"):
        list(it)
    assert llm.engine.n_live == 0
    before = llm.generate(PROMPT, max_tokens=8)
    assert before == llm.generate(PROMPT, max_tokens=8, logit_processors=[lambda _i, _l: None])


def test_non_callable_processor_is_a_type_error(llm: fucina.LLM) -> None:
    with pytest.raises(TypeError, match="callable"):
        llm.generate(PROMPT, logit_processors=[42])  # type: ignore[list-item]


# -- completions ---------------------------------------------------------------------
def test_create_completion_is_openai_shaped(llm: fucina.LLM) -> None:
    c = llm.create_completion(PROMPT, max_tokens=6, seed=0)
    assert c["object"] == "text_completion" and c["id"].startswith("cmpl-")
    assert isinstance(c["created"], int) and c["model"]
    (choice,) = c["choices"]
    assert choice["index"] == 0 and choice["logprobs"] is None and choice["finish_reason"] == "length"
    n_prompt = len(llm.tokenize(PROMPT))
    assert c["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": 6, "total_tokens": n_prompt + 6}
    # Greedy, stopped by a stop string: finish_reason "stop".
    full = llm.create_completion(PROMPT, max_tokens=30, temperature=0.0)["choices"][0]["text"]
    word = full.split()[2]
    cut = llm.create_completion(PROMPT, max_tokens=30, temperature=0.0, stop=[word])
    assert cut["choices"][0]["finish_reason"] == "stop"
    assert cut["choices"][0]["text"] == full[: full.index(word)]
    echo = llm.create_completion(PROMPT, max_tokens=4, temperature=0.0, echo=True)
    assert echo["choices"][0]["text"] == PROMPT + full[: len(echo["choices"][0]["text"]) - len(PROMPT)]


def log_softmax(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    x64 = x.astype(np.float64)
    m = x64.max()
    out: npt.NDArray[np.float64] = x64 - m - math.log(float(np.exp(x64 - m).sum()))
    return out


def test_completion_logprobs_match_the_model_distribution(llm: fucina.LLM) -> None:
    c = llm.create_completion(PROMPT, max_tokens=5, temperature=0.0, logprobs=3)
    lp = c["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == 5
    assert "".join(lp["tokens"]) == c["choices"][0]["text"]
    assert lp["text_offset"][0] == len(PROMPT)
    assert all(b - a == len(t) for a, b, t in zip(lp["text_offset"], lp["text_offset"][1:], lp["tokens"], strict=False))
    ids = llm.tokenize(PROMPT)
    ref = log_softmax(llm.logits(ids))
    first = int(ref.argmax())
    assert lp["token_logprobs"][0] == pytest.approx(ref[first], abs=1e-4)
    top = lp["top_logprobs"][0]
    assert len(top) <= 3 and max(top.values()) == pytest.approx(ref[first], abs=1e-4)
    want = sorted(ref, reverse=True)[:3]
    assert sorted(top.values(), reverse=True) == pytest.approx(want[: len(top)], abs=1e-4)
    # Echo: the prompt's tokens come first, the first with no logprob.
    e = llm.create_completion(PROMPT, max_tokens=2, temperature=0.0, logprobs=1, echo=True)
    elp = e["choices"][0]["logprobs"]
    assert len(elp["tokens"]) == len(ids) + 2 and elp["token_logprobs"][0] is None
    all_rows = llm.logits(ids, all=True)
    assert elp["token_logprobs"][1] == pytest.approx(log_softmax(all_rows[0])[ids[1]], abs=1e-4)
    assert e["choices"][0]["text"].startswith(PROMPT)


def test_penalties_count_generated_tokens_only(llm: fucina.LLM) -> None:
    prompt = "one two one two one two one two one"
    plain = list(llm.stream_tokens(prompt, max_tokens=20))
    assert plain[0] in llm.tokenize(prompt), "the greedy continuation repeats the prompt"
    # The prompt is not counted (llama-cpp-python): the first token is unchanged even
    # under a huge penalty, and no generated token is ever repeated.
    pen = list(llm.stream_tokens(prompt, max_tokens=20, presence_penalty=1e4))
    assert pen[0] == plain[0]
    assert len(set(pen)) == len(pen)
    # A window of 1 only forbids immediate repeats.
    win = list(llm.stream_tokens(prompt, max_tokens=20, presence_penalty=1e4, repeat_last_n=1))
    assert all(a != b for a, b in zip(win, win[1:], strict=False))
