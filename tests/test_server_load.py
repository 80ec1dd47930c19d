"""``fucina serve`` as its own process under load: streaming clients that disconnect mid-stream free
their slots within one scheduler step (seen in ``/metrics``) while the others keep streaming, and a
soak of 500 mixed requests (plain, streamed, disconnecting, invalid) answers every valid request and
leaves the server's memory where it started."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]
import pytest

from serverkit import ServerProcess

SOAK_REQUESTS = 500
# RSS the soak may leave behind: allocator high-water marks and caches (Python's and the KV pool's
# are preallocated), far below what leaking per-request buffers would cost over 500 requests.
RSS_SLACK = 64 << 20


@pytest.fixture(scope="module")
def server(gemma_path: Path) -> Iterator[ServerProcess]:
    s = ServerProcess(
        [str(gemma_path), "--parallel", "10", "--ctx-size", "256", "--threads", "2", "--max-queue", "256"]
    )
    try:
        yield s
    finally:
        s.stop()


def _model(server: ServerProcess) -> str:
    model_id: str = httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"]
    return model_id


def test_disconnected_streams_free_their_slots_within_a_step(server: ServerProcess) -> None:
    model = _model(server)
    before = server.metrics()
    long = {"model": model, "max_tokens": 200, "ignore_eos": True, "stream": True, "temperature": 0}
    keep = {**long, "max_tokens": 40}
    kept: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def keeper(i: int) -> None:
        try:
            body = {**keep, "prompt": f"Keeper {i} says:"}
            with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=600) as r:
                for line in r.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        kept[i].append(json.loads(line[6:])["choices"][0]["finish_reason"] or "")
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    keepers = [threading.Thread(target=keeper, args=(i,)) for i in range(2)]
    for t in keepers:
        t.start()
    # Eight clients that read a few chunks, then hang up.
    clients = [httpx.Client(timeout=600) for _ in range(8)]
    streams = []
    for i, c in enumerate(clients):
        cm = c.stream("POST", f"{server.url}/v1/completions", json={**long, "prompt": f"Leaver {i} says:"})
        r = cm.__enter__()
        lines = r.iter_lines()
        got = 0
        while got < 3:
            if next(lines).startswith("data: "):
                got += 1
        streams.append((cm, lines))
    busy = server.metrics()["slots_busy"]
    assert busy >= 8, busy
    for (cm, _), c in zip(streams, clients, strict=True):
        cm.__exit__(None, None, None)
        c.close()
    deadline = time.monotonic() + 60
    while True:
        m = server.metrics()
        if m["requests_cancelled_total"] - before["requests_cancelled_total"] >= 8:
            break
        assert time.monotonic() < deadline, m
        time.sleep(0.02)
    # Every cancellation freed its slot at the first step boundary after it.
    assert m["cancel_steps_max"] <= 1, m
    assert m["slots_busy"] <= 2
    for t in keepers:
        t.join(timeout=600)
    assert not errors, errors
    # The others streamed on, to their full length.
    for finishes in kept:
        assert len(finishes) == 40 and finishes[-1] == "length", finishes
    m = server.metrics()
    assert m["slots_busy"] == 0 and m["queue_depth"] == 0


def _rss(server: ServerProcess) -> int:
    rss: int = psutil.Process(server.proc.pid).memory_info().rss
    return rss


async def _one(http: httpx.AsyncClient, model: str, i: int, rng: random.Random) -> tuple[str, int | None]:
    """One request of the soak: ``(kind, status)``; ``status`` None for a client that hung up."""
    kind = ("chat", "chat", "chat", "completion", "stream", "stream", "hangup", "abandon", "bad", "broken")[i % 10]
    topic = rng.choice(["the sea", "a cat", "mountains", "bread", "a robot", "winter"])
    chat = {"model": model, "messages": [{"role": "user", "content": f"Say something about {topic}."}]}
    if kind == "chat":
        r = await http.post("/v1/chat/completions", json={**chat, "max_tokens": 4})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["role"] == "assistant"
        return kind, r.status_code
    if kind == "completion":
        r = await http.post("/v1/completions", json={"model": model, "prompt": f"On {topic}:", "max_tokens": 4})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 4, r.text
        return kind, r.status_code
    if kind == "stream":
        body = {**chat, "max_tokens": 4, "stream": True}
        async with http.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
        assert r.status_code == 200 and lines[-1] == "data: [DONE]", lines
        return kind, r.status_code
    if kind == "hangup":
        body = {**chat, "max_tokens": 64, "ignore_eos": True, "stream": True}
        async with http.stream("POST", "/v1/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    break
        return kind, None
    if kind == "abandon":
        # A plain request whose client gives up while it is generating.
        task = asyncio.ensure_future(http.post("/v1/chat/completions", json={**chat, "max_tokens": 64}))
        await asyncio.sleep(rng.uniform(0.05, 0.3))
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return kind, None
        return kind, task.result().status_code
    if kind == "bad":
        r = await http.post("/v1/chat/completions", json={**chat, "temperature": -1})
        assert r.status_code == 400, r.text
        return kind, r.status_code
    r = await http.post(
        "/v1/chat/completions", content=b'{"model": "x", "messages": [', headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    return kind, r.status_code


async def _soak(server: ServerProcess, model: str, n: int, concurrency: int) -> Counter[tuple[str, int | None]]:
    rng = random.Random(15)
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency * 2)
    async with httpx.AsyncClient(base_url=server.url, timeout=600, limits=limits) as http:

        async def run(i: int) -> tuple[str, int | None]:
            async with gate:
                return await _one(http, model, i, rng)

        results = await asyncio.gather(*(run(i) for i in range(n)))
    return Counter(results)


def test_soak_of_mixed_requests_answers_every_valid_one_and_keeps_memory(server: ServerProcess) -> None:
    model = _model(server)
    asyncio.run(_soak(server, model, 40, 12))  # warm-up: allocator pools, every code path once
    baseline = _rss(server)
    outcomes = asyncio.run(_soak(server, model, SOAK_REQUESTS, 12))
    assert sum(outcomes.values()) == SOAK_REQUESTS
    answered = {k: n for (k, status), n in outcomes.items() if status == 200}
    assert answered.get("chat", 0) == 150 and answered.get("completion", 0) == 50 and answered.get("stream") == 100
    assert outcomes[("bad", 400)] == 50 and outcomes[("broken", 400)] == 50
    assert all(status is None or status < 500 for (_, status) in outcomes)
    deadline = time.monotonic() + 60
    while (m := server.metrics())["slots_busy"] or m["queue_depth"]:
        assert time.monotonic() < deadline, m
        time.sleep(0.05)
    assert m["requests_failed_total"] == 0
    grown = _rss(server) - baseline
    print(f"soak: {dict(outcomes)}; RSS {baseline / 2**20:.1f} MiB -> {(baseline + grown) / 2**20:.1f} MiB")
    assert grown < RSS_SLACK, f"RSS grew by {grown / 2**20:.1f} MiB over the soak"
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


def test_serves_once_the_weights_are_repacked(gemma_path: Path) -> None:
    """The app starts answering only after the background repacking is done (requests before it
    would run on the slower kernels while the repacking takes the same cores)."""
    from fastapi.testclient import TestClient

    from fucina import LLM
    from fucina.server import ServerConfig, create_app

    llm = LLM(gemma_path, n_ctx=256, n_threads=2)
    app = create_app(ServerConfig(parallel=1, ctx_size=256, threads=2), llm=llm)
    with TestClient(app) as client:
        done = llm.model.repacked_bytes
        assert client.get("/health").status_code == 200
        llm.model.wait_repacked()
        assert done > 0 and llm.model.repacked_bytes == done
