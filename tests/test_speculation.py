"""Speculative decoding never changes output: the README's examples give the same text with
speculation on (the default) and off; multi-turn conversations with persistence leave the same
replies and byte-identical KV files; a reference document drafts without changing the answer;
`fucina run --stats` reports the decoder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fucina

DOC = (
    "The river towns traded salt and timber down the valley, and wine and cloth came up. "
    "Every bridge and every ferry charged its toll, and the tolls paid for the walls. "
)


@pytest.fixture(scope="module")
def llm(gemma_path: Path) -> fucina.LLM:
    return fucina.LLM(gemma_path, n_ctx=2048)


def both(fn: Any) -> tuple[Any, Any]:
    return fn(True), fn(False)


def test_readme_examples_are_the_same_with_speculation_off(llm: fucina.LLM) -> None:
    cases = [
        lambda s: llm.generate("The capital of France is", max_tokens=32, stop="\n", speculation=s),
        lambda s: "".join(
            llm.stream("Once upon a time", max_tokens=64, temperature=0.8, top_p=0.95, seed=7, speculation=s)
        ),
        lambda s: list(
            llm.stream_tokens(
                "def fib(n):",
                max_tokens=32,
                params=fucina.SamplingParams(temperature=0.7, top_k=40, min_p=0.05, repeat_penalty=1.1, seed=1),
                speculation=s,
            )
        ),
        lambda s: llm.generate("1, 2, 3, 4, 1, 2, 3, 4, 1, 2,", max_tokens=40, speculation=s),
        lambda s: llm.create_completion(
            "Q: Name a planet.\nA:", max_tokens=16, stop=["\n"], logprobs=2, seed=3, speculation=s
        )["choices"],
        # Without the prompt cache: as in llama.cpp, a request that reuses the previous one's
        # prompt re-evaluates only its last token, one row in decode order, whose logits differ
        # in the last bits from the same row inside a prompt batch. Both runs must start alike.
        lambda s: llm.create_chat_completion(
            [{"role": "user", "content": "Count to ten: 1, 2, 3,"}],
            max_tokens=24,
            seed=5,
            speculation=s,
            cache_prompt=False,
        )["choices"][0]["message"],
    ]
    for i, case in enumerate(cases):
        on, off = both(case)
        assert on == off, f"case {i}"


def test_conversations_with_persistence_are_identical_down_to_the_kv_file(llm: fucina.LLM, tmp_path: Path) -> None:
    users = ["Repeat after me: red, green, blue, red, green, blue.", "Again, twice.", "And once more."]
    files = {}
    replies = {}
    for spec in (True, False):
        chat = llm.chat(seed=11, max_tokens=24, speculation=spec)
        files[spec] = tmp_path / f"{spec}.fuxkv"
        chat.enable_persistence(files[spec])
        replies[spec] = [chat.send(u) for u in users]
        if spec:
            stats = chat.spec_stats
            assert stats is not None and stats["steps"] > 0
        else:
            assert chat.spec_stats is None
        chat.close()
    assert replies[True] == replies[False]
    assert files[True].read_bytes() == files[False].read_bytes()


def test_a_reference_drafts_without_changing_the_answer(llm: fucina.LLM) -> None:
    prompt = "Copy this text exactly.\n\n" + DOC + "\n\nCopy:\n" + DOC[:30]
    plain = llm.generate(prompt, max_tokens=48, speculation=False)
    gen = llm.engine.generate(
        llm.tokenize(prompt), max_tokens=48, seed=0, speculation=True, reference=llm.tokenize(DOC, add_special=False)
    )
    text = "".join(step[2] for step in gen)
    assert text == plain
    stats = gen.spec_stats
    assert stats is not None and stats["accepted"] > 0 and stats["committed"] > stats["steps"]
    assert llm.generate(prompt, max_tokens=48, reference=DOC) == plain
    ask = [{"role": "user", "content": "Copy this text exactly.\n\n" + DOC}]
    replies = [
        llm.create_chat_completion(ask, temperature=0, max_tokens=32, reference=ref, speculation=spec)
        for ref, spec in ((DOC, True), (None, False))
    ]
    assert replies[0]["choices"][0]["message"] == replies[1]["choices"][0]["message"]
    chat = llm.chat(temperature=0, max_tokens=16)
    chat.add_reference(DOC)
    assert chat.send("Say hello.") == llm.chat(temperature=0, max_tokens=16, speculation=False).send("Say hello.")
    with pytest.raises(fucina.ArgumentTypeError, match="reference"):
        llm.generate("x", reference=3.5)  # type: ignore[arg-type]


def test_scheduler_requests_take_a_reference(llm: fucina.LLM) -> None:
    """``Scheduler.submit(reference=...)`` (the server's predicted outputs): drafted from, never
    changing a token; ids outside the vocabulary are refused before queueing."""
    prompt = llm.tokenize("Once upon a time, in a kingdom by the sea,")
    text = llm.generate(prompt, max_tokens=24, speculation=False, ignore_eos=True)
    plain = llm.tokenize(text, add_special=False)
    s = fucina.Scheduler(llm.model, llm.tokenizer, n_slots=1, n_ctx=256)
    try:
        r = s.submit(prompt, max_tokens=24, seed=0, ignore_eos=True, speculation=True, reference=plain)
        tokens, finished = [], None
        while finished is None:
            s.wait_ready(0.1)
            for ev in r.take():
                if ev[0] == "token":
                    tokens.append(ev[1])
                elif ev[0] in ("finished", "error"):
                    finished = ev
        assert finished[0] == "finished" and finished[4] > 0
        assert llm.detokenize(tokens) == text
        with pytest.raises(fucina.InvalidArgumentError, match="reference"):
            s.submit(prompt, max_tokens=4, seed=0, reference=[10**9])
    finally:
        s.shutdown()


def test_python_processors_decode_plainly_and_identically(llm: fucina.LLM) -> None:
    calls: list[int] = []

    def proc(ids: list[int], logits: np.ndarray[Any, np.dtype[np.float32]]) -> None:
        calls.append(len(ids))

    on = llm.generate("1, 2, 3, 1, 2, 3, 1,", max_tokens=12, logit_processors=[proc])
    n = len(calls)
    off = llm.generate("1, 2, 3, 1, 2, 3, 1,", max_tokens=12, logit_processors=[proc], speculation=False)
    assert on == off and n == len(calls) - n


def test_run_stats_reports_the_decoder(gemma_path: Path) -> None:
    cmd = [sys.executable, "-m", "fucina", "run", "1, 2, 3, 1, 2, 3, 1,", "-m", str(gemma_path), "--temp", "0"]
    r = subprocess.run(
        [*cmd, "-n", "24", "--stats"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "[speculation:" in r.stderr and "per step" in r.stderr and "gate" in r.stderr
    off = subprocess.run(
        [*cmd, "-n", "24", "--stats", "--no-speculation"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert off.stdout == r.stdout and "[speculation off]" in off.stderr
