"""Crash safety of conversation persistence: a subprocess chatting with persistence on is killed
(SIGKILL) at random points after its first turn, 20 times; every reopen resumes warm with a
committed prefix of what the uninterrupted run held, and then continues exactly as the
uninterrupted run did (batch-invariant numerics make "exactly" bitwise)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fucina

USERS = ["Name a colour.", "And a fruit?", "Now a city in Italy.", "One more animal?"]
MAX_TOKENS = 6
TRIALS = 20

CHILD = f"""
import sys, fucina
llm = fucina.LLM(sys.argv[2], n_ctx=512, batch_invariant=True)
chat = llm.chat(temperature=0, max_tokens={MAX_TOKENS})
chat.enable_persistence(sys.argv[1])
users = {USERS!r}
start = sum(1 for m in chat.history if m["role"] == "user")
for i in range(start, len(users)):
    chat.send(users[i])
    print("turn", i, flush=True)
print("done", flush=True)
"""


def _chat(llm: fucina.LLM, path: Path | None = None) -> tuple[fucina.Conversation, int]:
    chat = llm.chat(temperature=0, max_tokens=MAX_TOKENS)
    return chat, (chat.enable_persistence(path) if path is not None else 0)


def _continue(chat: fucina.Conversation) -> None:
    start = sum(1 for m in chat.history if m["role"] == "user")
    for user in USERS[start:]:
        chat.send(user)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is POSIX")
def test_sigkill_mid_append_always_resumes_a_committed_prefix(gemma_path: Path, tmp_path: Path) -> None:
    llm = fucina.LLM(gemma_path, n_ctx=512, batch_invariant=True)
    reference, _ = _chat(llm)
    states: list[list[int]] = []
    t0 = time.perf_counter()
    for user in USERS:
        reference.send(user)
        states.append(reference.tokens)
    turn_time = (time.perf_counter() - t0) / len(USERS)
    expected = reference.history

    rng = random.Random(1234)
    warm = []
    for trial in range(TRIALS):
        path = tmp_path / f"trial{trial}.fuxkv"
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(gemma_path)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "error"},
        )
        assert child.stdout is not None
        # Anywhere in the rest of its run (inside a forward, an append, a count update): after
        # a turn drawn at random has been committed, within about one more turn's time. Waiting
        # for the child's own report keeps the points spread however slow the child runs
        # (it loads and repacks the model while the parent's copy is warm).
        after = rng.randrange(len(USERS) - 1)
        for i in range(after + 1):
            line = child.stdout.readline()
            assert line.startswith(f"turn {i}"), f"trial {trial}: child said {line!r}"
        time.sleep(rng.uniform(0.0, turn_time))
        child.send_signal(signal.SIGKILL)
        child.communicate()

        resumed, n = _chat(llm, path)
        assert n > 0, f"trial {trial}: the first turn was committed, the reopen must be warm"
        tokens = resumed.tokens
        assert len(tokens) == n
        assert any(state[:n] == tokens for state in states), f"trial {trial}: not a committed prefix"
        history = resumed.history
        assert history == expected[: len(history)], f"trial {trial}: messages are not a prefix"
        _continue(resumed)
        assert resumed.history == expected, f"trial {trial}: the resumed run diverged"
        resumed.close()
        warm.append(n)
    # The kills landed at different points of the run (not all after the last turn).
    assert len(set(warm)) >= 3, warm
