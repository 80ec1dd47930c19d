"""`fucina chat` in a real terminal (tmux): two typed turns with streamed replies, an exit,
a warm `--resume` that continues the same conversation, Ctrl-C stopping a reply without leaving,
and /save. The replies are checked against the Python API's conversation with the same settings."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import fucina

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (scripts/test installs it)")

TIMEOUT = 60.0


class Terminal:
    """A tmux session on a private server socket, driven with send-keys and read with capture-pane."""

    def __init__(self, cwd: Path) -> None:
        self.socket = f"fucina-test-{uuid.uuid4().hex[:8]}"
        self.name = "chat"
        self._tmux("new-session", "-d", "-s", self.name, "-x", "160", "-y", "50", "-c", str(cwd), "bash --norc")
        self._tmux("set-option", "-t", self.name, "history-limit", "5000")

    def _tmux(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True)
        return out.stdout

    def type(self, text: str, enter: bool = True) -> None:
        self._tmux("send-keys", "-t", self.name, "-l", text)
        if enter:
            self._tmux("send-keys", "-t", self.name, "Enter")

    def key(self, key: str) -> None:
        self._tmux("send-keys", "-t", self.name, key)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-S", "-5000", "-t", self.name)

    def wait(self, what: str, pred: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            screen = self.screen()
            if pred(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; the terminal shows:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def prompts(screen: str) -> int:
    return sum(1 for line in screen.splitlines() if line.startswith("> "))


def prompts_at_least(n: int) -> Callable[[str], bool]:
    return lambda screen: prompts(screen) >= n


@pytest.fixture
def term(tmp_path: Path) -> Iterator[Terminal]:
    t = Terminal(tmp_path)
    yield t
    t.close()


def chat_command(*args: str) -> str:
    env = f"PYTHONPATH={shlex.quote(os.pathsep.join(sys.path))}"
    return " ".join([env, shlex.quote(sys.executable), "-m", "fucina", "chat", "--temp", "0", *args]) + "; echo EXIT=$?"


def test_chat_two_turns_resume_stop_and_save(term: Terminal, tmp_path: Path, gemma_path: Path) -> None:
    users = ["Hello, who are you?", "What is the capital of France?", "Thanks!"]
    llm = fucina.LLM(gemma_path)
    expected = llm.chat(temperature=0, max_tokens=8)
    replies = [expected.send(u) for u in users]

    saved = tmp_path / "talk.fuxkv"
    term.type(chat_command("-n", "8", "--resume", str(saved)))
    term.wait("the first prompt", lambda s: prompts(s) >= 1 and "new conversation" in s)
    for i, user in enumerate(users[:2]):
        term.type(user)
        screen = term.wait(f"reply {i}", prompts_at_least(i + 2))
        first_line = next(line for line in replies[i].splitlines() if line.strip())
        assert first_line.strip() in screen, f"reply {i} was not streamed to the terminal"
    term.type("/save snapshot.fuxkv")
    term.wait("the save", lambda s: "saved to snapshot.fuxkv" in s)
    term.type("/exit")
    term.wait("a clean exit", lambda s: "EXIT=0" in s)
    on_disk = json.loads((tmp_path / "talk.fuxkv.json").read_text())["messages"]
    assert on_disk == expected.history[:4]

    term.type("clear")
    term.type(chat_command("-n", "8", "--resume", str(saved)))
    term.wait("the resumed prompt", lambda s: "resumed" in s and "2 turns" in s and prompts(s) >= 1)
    term.type(users[2])
    term.wait("the third reply", lambda s: prompts(s) >= 2)
    term.key("C-d")
    term.wait("exit on Ctrl-D", lambda s: s.count("EXIT=0") >= 1)
    on_disk = json.loads((tmp_path / "talk.fuxkv.json").read_text())["messages"]
    assert on_disk == expected.history, "the resumed conversation continued exactly as an uninterrupted one"

    term.type("clear")
    term.type(chat_command("-n", "2000", "--resume", str(tmp_path / "snapshot.fuxkv")))
    term.wait("the snapshot's prompt", lambda s: "resumed" in s and "2 turns" in s and prompts(s) >= 1)
    term.type("Tell me a very long story.")
    time.sleep(1.5)
    term.key("C-c")
    term.wait("the stopped reply and a new prompt", lambda s: "[stopped]" in s and prompts(s) >= 2)
    term.type("/exit")
    term.wait("a clean exit", lambda s: "EXIT=0" in s)
    snap = json.loads((tmp_path / "snapshot.fuxkv.json").read_text())["messages"]
    assert snap[:4] == expected.history[:4] and len(snap) == 6
