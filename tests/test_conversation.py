"""fucina.Conversation on the real Gemma 3 270M: turns on one KV cache equal a stateless replay of
the same history, reuse prefills only the changed suffix (counted through on_prefill), lockstep
batches equal sequential sends, stop strings are never committed, and persistence resumes warm
(and ignores files that are not its own)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fucina
from fucina import InvalidArgumentError

USERS = ["Name a colour.", "And a fruit?", "Now a city in Italy."]


@pytest.fixture(scope="module")
def llm(gemma_path: Path) -> fucina.LLM:
    # Batch-invariant numerics: a row's logits never depend on how the history was chunked.
    return fucina.LLM(gemma_path, n_ctx=1024, batch_invariant=True)


def prefill_counter() -> tuple[list[int], Any]:
    seen: list[int] = []

    def on_prefill(done: int, total: int) -> None:
        if done == total:
            seen.append(total)

    return seen, on_prefill


def test_turns_equal_a_stateless_replay_and_prefill_only_new_tokens(llm: fucina.LLM) -> None:
    chat = llm.chat(system="Be brief.", seed=3, max_tokens=12)
    replies = []
    for i, user in enumerate(USERS):
        before = chat.tokens
        seen, on_prefill = prefill_counter()
        replies.append(chat.send(user, on_prefill=on_prefill))
        ids = llm.apply_chat_template(chat.history[:-1])
        assert isinstance(ids, list)
        # Everything the cache held is a prefix of the new render; only the rest was evaluated.
        assert ids[: len(before)] == before
        assert chat.last_reused_tokens == len(before)
        assert seen == [len(ids) - len(before)], f"turn {i}"
        assert chat.last_prefilled_tokens == len(ids) - len(before)
        assert chat.tokens[: len(ids)] == ids
    assert [m["role"] for m in chat.history] == ["system"] + ["user", "assistant"] * 3
    assert [m["content"] for m in chat.history[2::2]] == replies

    fresh = llm.chat(system="Be brief.", seed=3, max_tokens=12)
    seen, on_prefill = prefill_counter()
    assert fresh.send_messages(chat.history[:-1], on_prefill=on_prefill) == replies[-1]
    assert fresh.last_reused_tokens == 0
    assert seen == [chat.last_prompt_tokens]
    assert fresh.tokens == chat.tokens


def test_send_messages_reuses_exactly_the_common_prefix(llm: fucina.LLM) -> None:
    chat = llm.chat(temperature=0, max_tokens=6)
    chat.send(USERS[0])
    chat.send(USERS[1])
    held = chat.tokens
    edited = chat.history[:-1]
    edited[2] = {"role": "user", "content": "And a vegetable?"}
    render = llm.apply_chat_template(edited)
    assert isinstance(render, list)
    common = next(i for i, (a, b) in enumerate(zip(held, render, strict=False)) if a != b)
    seen, on_prefill = prefill_counter()
    chat.send_messages(edited, on_prefill=on_prefill)
    assert chat.last_reused_tokens == common
    assert seen == [len(render) - common]
    assert chat.history[:-1] == edited


def test_send_batch_equals_sequential_sends(llm: fucina.LLM) -> None:
    def make(i: int) -> fucina.Conversation:
        return llm.chat(system="Answer in one word." if i == 1 else None, seed=10 + i, max_tokens=6 + 3 * i)

    sequential = []
    for i in range(3):
        c = make(i)
        sequential.append([c.send(USERS[i]), c.send(USERS[(i + 1) % 3])])
    convs = [make(i) for i in range(3)]
    first = fucina.Conversation.send_batch(convs, [USERS[i] for i in range(3)])
    second = fucina.Conversation.send_batch(convs, [USERS[(i + 1) % 3] for i in range(3)])
    assert [list(p) for p in zip(first, second, strict=True)] == sequential
    for c, (a, b) in zip(convs, sequential, strict=True):
        assert [m["content"] for m in c.history if m["role"] == "assistant"] == [a, b]


def test_a_failing_stream_does_not_stop_the_batch(gemma_path: Path) -> None:
    small = fucina.LLM(gemma_path, n_ctx=64)
    ok, too_long = small.chat(temperature=0, max_tokens=8), small.chat(temperature=0)
    results = fucina.Conversation.send_batch([ok, too_long], ["Hi", "word " * 80], return_exceptions=True)
    assert isinstance(results[0], str) and results[0]
    assert isinstance(results[1], InvalidArgumentError) and "context" in str(results[1])
    assert too_long.history == []  # resendable: the failed turn left no trace
    with pytest.raises(InvalidArgumentError, match="context"):
        fucina.Conversation.send_batch([ok, too_long], ["Again", "word " * 80])
    assert len(ok.history) == 4, "the healthy stream still finished its turn"
    with pytest.raises(InvalidArgumentError, match="twice"):
        fucina.Conversation.send_batch([ok, ok], ["a", "b"])
    with pytest.raises(InvalidArgumentError, match="2 texts"):
        fucina.Conversation.send_batch([ok], ["a", "b"])


def test_a_stop_string_is_neither_returned_nor_committed(llm: fucina.LLM) -> None:
    probe = llm.chat(temperature=0, max_tokens=12)
    full = probe.send(USERS[0])
    assert len(full) > 4
    stop = full[2:4]
    chat = llm.chat(temperature=0, max_tokens=12, stop=[stop])
    reply = chat.send(USERS[0])
    assert reply == full[: full.index(stop)]
    assert chat.last_finish_reason == "stop"
    held = llm.detokenize(chat.tokens[chat.last_prompt_tokens :])
    assert stop not in held


def test_stream_reset_and_errors(llm: fucina.LLM) -> None:
    chat = llm.chat(temperature=0, max_tokens=8)
    pieces = chat.stream(USERS[0])
    first = next(pieces)
    pieces.close()  # stopped early: the partial reply is the turn
    assert chat.history[-1] == {"role": "assistant", "content": first}
    chat.reset()
    assert chat.history == [] and chat.tokens == []
    with pytest.raises(fucina.ArgumentTypeError, match="unknown sampling"):
        chat.send("x", temprature=0.5)
    with pytest.raises(fucina.ArgumentTypeError, match="text must be a str"):
        chat.send(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="max_tokens"):
        chat.send("x", max_tokens=-1)
    assert chat.history == []


def _reopen(llm: fucina.LLM, path: Path) -> tuple[fucina.Conversation, int]:
    c = llm.chat(temperature=0, max_tokens=8)
    return c, c.enable_persistence(path)


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "chat.fuxkv"


def test_persistence_resumes_warm_and_continues_identically(llm: fucina.LLM, sidecar: Path) -> None:
    chat, resumed = _reopen(llm, sidecar)
    assert resumed == 0
    chat.send(USERS[0])
    held, history = chat.tokens, chat.history
    expected = chat.send(USERS[1])
    chat.close()

    again, resumed = _reopen(llm, sidecar)
    assert resumed > 0 and again.history[:2] == history
    # The file holds the last turn; the resumed conversation replays turn 2 from its cache.
    assert again.tokens[: len(held)] == held
    again.send_messages(history + [{"role": "user", "content": USERS[1]}])
    assert again.history[-1]["content"] == expected
    assert again.last_prefilled_tokens == 1, "everything but the last token came from the file"


def test_foreign_and_corrupted_sidecars_are_ignored_with_a_warning(
    llm: fucina.LLM, gemma_path: Path, sidecar: Path
) -> None:
    chat, _ = _reopen(llm, sidecar)
    chat.send(USERS[0])
    chat.close()
    q8 = fucina.LLM(gemma_path, n_ctx=1024, kv_cache_type="q8_0")
    with pytest.warns(RuntimeWarning, match="geometry or dtype"):
        c, resumed = _reopen(q8, sidecar)
    assert resumed == 0 and c.history == []
    sidecar.write_bytes(b"\x00" * 4096)
    with pytest.warns(RuntimeWarning, match="magic"):
        assert _reopen(llm, sidecar)[1] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _reopen(llm, sidecar)[1] == 0, "the reset file is a clean, empty sidecar"
    chat, _ = _reopen(llm, sidecar)
    with pytest.raises(InvalidArgumentError, match="already on"):
        chat.enable_persistence(sidecar)
    chat.send(USERS[0])
    with pytest.raises(InvalidArgumentError, match="before the first turn"):
        _late(llm, sidecar)


def _late(llm: fucina.LLM, path: Path) -> None:
    c = llm.chat(temperature=0, max_tokens=2)
    c.send("hi")
    c.enable_persistence(path)
