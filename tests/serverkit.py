"""Live servers for the server tests: :class:`LiveServer` runs ``fucina.server``'s app on uvicorn in
a thread of the test process (so tests can hand it Python logit processors), :class:`ServerProcess`
runs ``fucina serve`` as a child process (for memory and disconnect tests, where the server must be a
process of its own). Both listen on a free loopback port. Also the tool the chat tests offer
(:data:`WEATHER`), a Hermes-syntax call of it (:data:`CALL`), :func:`scripted` replies and DeepSeek
templates that write the offered tools into the prompt (:func:`deepseek_listing_tools`)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anthropic
import httpx
import numpy as np
import numpy.typing as npt
import openai
import uvicorn

import fucina
from fucina.server import ServerConfig, create_app

Processor = Callable[[list[int], npt.NDArray[np.float32]], None]

WEATHER: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TEMPLATES = Path(__file__).resolve().parent.parent / "vendor" / "chat_templates"


def deepseek_listing_tools(name: str) -> str:
    """The vendored DeepSeek template ``name`` writing the offered tools into the prompt too (its own leave
    that to the system message), so that a forced call takes the template's call syntax."""
    source = (TEMPLATES / f"{name}.jinja").read_text("utf-8")
    tools = "{% if tools %}{{ tools | tojson }}{% endif %}"
    out, n = re.subn(r"\{\{\s*ns\.system_prompt\s*\}\}", lambda m: m.group(0) + tools, source, count=1)
    if n != 1:
        raise ValueError(f"{name}: no system prompt to write the tools after")
    return out


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_healthy(url: str, timeout: float, alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("the server exited during startup")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"no healthy server at {url} after {timeout} s")


class LiveServer:
    """``create_app(config, llm=..., processors=...)`` served by uvicorn on a thread."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        llm: fucina.LLM | None = None,
        processors: Callable[[Mapping[str, Any]], list[Processor]] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(config, llm=llm, processors=processors)
        uv = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(uv)
        self._thread = threading.Thread(target=self._server.run, name="live-server", daemon=True)
        self._thread.start()
        _wait_healthy(self.url, 60, self._thread.is_alive)

    @property
    def model_id(self) -> str:
        model_id: str = self.app.state.fucina.model_id
        return model_id

    def metrics(self) -> dict[str, float]:
        return parse_metrics(httpx.get(f"{self.url}/metrics", timeout=10).text)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


class ServerProcess:
    """``python -m fucina serve ARGS`` as a child process."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "fucina", "serve", "--port", str(self.port), "--log-level", "warning", *args]
        self.proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})})
        _wait_healthy(self.url, 120, lambda: self.proc.poll() is None)

    def metrics(self) -> dict[str, float]:
        return parse_metrics(httpx.get(f"{self.url}/metrics", timeout=10).text)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def parse_metrics(text: str) -> dict[str, float]:
    """Unlabelled ``fucina_*`` samples of a Prometheus exposition, by name without the prefix."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("fucina_") and "{" not in line:
            name, value = line.split()
            out[name.removeprefix("fucina_")] = float(value)
    return out


def scripted(llm: fucina.LLM, reply: str) -> tuple[Processor, dict[str, Any]]:
    """A logit processor forcing ``reply`` token by token, then end-of-sequence; it records the prompt
    it saw (token ids) under ``"prompt"``."""
    ids = llm.tokenize(reply, add_special=False, parse_special=True)
    eos = llm.tokenizer.eos_id
    assert eos is not None
    seen: dict[str, Any] = {}

    def force(tokens: list[int], logits: npt.NDArray[np.float32]) -> None:
        seen.setdefault("prompt", list(tokens))
        step = len(tokens) - len(seen["prompt"])
        logits[:] = -np.inf
        logits[ids[step] if step < len(ids) else eos] = 0.0

    return force, seen


@contextlib.contextmanager
def live(config: ServerConfig, **kwargs: Any) -> Iterator[LiveServer]:
    server = LiveServer(config, **kwargs)
    try:
        yield server
    finally:
        server.stop()


def openai_client(server: LiveServer) -> openai.OpenAI:
    """The official OpenAI client on ``server`` (no retries: a failure is the test's to see)."""
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def anthropic_client(server: LiveServer) -> anthropic.Anthropic:
    """The official Anthropic client on ``server``."""
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
