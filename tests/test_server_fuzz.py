"""The server never answers 5xx and never crashes on what a client can send: a property-based fuzz
from its own OpenAPI schema (schemathesis: requests that fit the schema and requests that break it,
on every operation, at least 2,000 in all), and hand-made malformed bodies (truncated JSON, huge
numbers, NaN, wrong types, deep nesting, 10 MB strings, bad encodings) that must all be 4xx."""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from fucina.server import ServerConfig
from serverkit import LiveServer, live

# Examples per operation and generation mode (routes without parameters give one, and nothing
# to break): about 2,300 requests in all.
EXAMPLES = 145
MIN_REQUESTS = 2000
MAX_BODY = 1 << 20


@pytest.fixture(scope="module")
def server(gemma_path: Path) -> Iterator[LiveServer]:
    config = ServerConfig(model=gemma_path, parallel=4, ctx_size=192, threads=2, max_tokens=2, max_body_bytes=MAX_BODY)
    with live(config) as s:
        yield s


def served_schema(spec: dict[str, Any], model_id: str) -> dict[str, Any]:
    """``spec`` with every ``model`` field pinned to the served model, so that requests fitting the
    schema reach generation instead of stopping at a 404 for a random model name."""
    spec = copy.deepcopy(spec)
    for component in spec["components"]["schemas"].values():
        if "model" in component.get("properties", {}):
            component["properties"]["model"] = {"type": "string", "enum": [model_id]}
    return spec


def test_schema_fuzz_finds_no_server_error(server: LiveServer) -> None:
    spec = server.app.openapi()
    schemas: dict[Any, Any] = {
        GenerationMode.POSITIVE: schemathesis.openapi.from_dict(served_schema(spec, server.model_id)),
        GenerationMode.NEGATIVE: schemathesis.openapi.from_dict(spec),
    }
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    session = requests.Session()
    for mode, schema in schemas.items():
        operations = [r.ok() for r in schema.get_all_operations() if isinstance(r, Ok)]
        assert len(operations) >= 11
        for op in operations:

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=op.as_strategy(generation_mode=mode))
            def run(case: Any) -> None:
                response = case.call(base_url=server.url, session=session, timeout=120)
                statuses[response.status_code] += 1
                if response.status_code >= 500:
                    failures.append(f"{case.method} {case.path} -> {response.status_code}: {response.text[:300]}")

            try:
                run()
            except Unsatisfiable:
                # Nothing in the schema to break (a route without parameters or body).
                assert mode is GenerationMode.NEGATIVE, op.label
    total = sum(statuses.values())
    assert not failures, failures[:5]
    print(f"schemathesis sent {total} requests: {dict(sorted(statuses.items()))}")
    assert total >= MIN_REQUESTS, statuses
    # Both sides were exercised: accepted requests and refused ones.
    assert sum(n for s, n in statuses.items() if s < 300) > 100, statuses
    assert sum(n for s, n in statuses.items() if 400 <= s < 500) > 100, statuses
    assert httpx.get(f"{server.url}/health").status_code == 200
    m = server.metrics()
    assert m["slots_busy"] == 0 and m["queue_depth"] == 0


CHAT = "/v1/chat/completions"


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, **extra}


def malformed(model: str) -> list[tuple[str, bytes | str, str]]:
    """(route, body, what it breaks)."""
    good = json.dumps(_chat(model))
    return [
        (CHAT, good[: len(good) // 2], "truncated JSON"),
        (CHAT, b"", "empty body"),
        (CHAT, b"\xff\xfe\x00garbage", "not UTF-8"),
        (CHAT, "[1, 2, 3]", "an array, not an object"),
        (CHAT, '"just a string"', "a string, not an object"),
        (CHAT, "null", "null"),
        (CHAT, json.dumps(_chat(model, max_tokens=10**400)), "a huge integer"),
        (CHAT, good.replace('"max_tokens": 2', '"max_tokens": 1e400'), "a float overflowing to inf"),
        (CHAT, good.replace('"max_tokens": 2', '"temperature": NaN'), "NaN"),
        (CHAT, good.replace('"max_tokens": 2', '"temperature": -Infinity'), "-Infinity"),
        (CHAT, json.dumps(_chat(model, seed=2**70)), "a seed beyond 64 bits"),
        (CHAT, json.dumps(_chat(model, n=10**12)), "n out of range"),
        (CHAT, json.dumps(_chat(model, messages="Hi")), "messages as a string"),
        (CHAT, json.dumps(_chat(model, messages=[{"role": "user", "content": 42}])), "content as a number"),
        (CHAT, json.dumps(_chat(model, messages=[])), "no messages"),
        (CHAT, json.dumps(_chat(model, stop=123)), "stop as a number"),
        (CHAT, json.dumps(_chat(model, logit_bias={"abc": 1})), "a logit_bias key that is not a token"),
        (CHAT, json.dumps(_chat(model, tools="all")), "tools as a string"),
        (CHAT, json.dumps(_chat(model, tool_choice={"type": "function", "function": {"name": "x"}})), "a named tool"),
        (CHAT, json.dumps(_chat(model, max_tokens="many")), "max_tokens as a word"),
        (CHAT, json.dumps(_chat(model, stream="yes please")), "stream as a sentence"),
        (CHAT, "[" * 100_000 + "]" * 100_000, "100,000 levels of nesting"),
        (CHAT, '{"model": "' + model + '", "messages": ' + "[" * 5000 + "]" * 5000 + "}", "nested messages"),
        (CHAT, json.dumps(_chat(model, messages=[{"role": "user", "content": "x" * (10 << 20)}])), "a 10 MB string"),
        (CHAT, json.dumps({"model": "x" * (10 << 20), "messages": []}), "a 10 MB model name"),
        ("/v1/completions", json.dumps({"model": model, "prompt": [], "max_tokens": 2}), "an empty prompt list"),
        ("/v1/completions", json.dumps({"model": model, "prompt": [-5], "max_tokens": 2}), "a negative token id"),
        ("/v1/completions", json.dumps({"model": model, "prompt": "Hi", "logprobs": 99}), "logprobs out of range"),
        ("/v1/embeddings", json.dumps({"model": model, "input": [[]]}), "an empty input"),
        ("/v1/embeddings", json.dumps({"model": model, "input": {"a": 1}}), "input as an object"),
        ("/tokenize", json.dumps({"content": 5}), "content as a number"),
        ("/detokenize", json.dumps({"tokens": [2**40]}), "a token id beyond 32 bits"),
        ("/detokenize", json.dumps({"tokens": "abc"}), "tokens as a string"),
        ("/v1/messages", json.dumps({"model": model, "max_tokens": -1, "messages": []}), "negative max_tokens"),
        (
            "/v1/messages",
            json.dumps({"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "x"}]}]}),
            "an unknown content block",
        ),
        ("/v1/messages/count_tokens", "{", "truncated JSON"),
        (CHAT, good.replace('"Hi"', '"Hi \\ud800"'), "an unpaired surrogate escape"),
        (CHAT, json.dumps(_chat(model, prediction={"type": "content", "content": "\udc00"})), "a lone low surrogate"),
        (CHAT, json.dumps(_chat(model, prediction={"type": "file", "content": "x"})), "a prediction of no known type"),
        ("/v1/completions", json.dumps({"model": model, "prompt": "a\ud83d", "max_tokens": 2}), "half an emoji"),
        ("/v1/embeddings", json.dumps({"model": model, "input": ["ok", "\ud800"]}), "a surrogate in an input"),
        ("/tokenize", json.dumps({"content": "\udfff"}), "a surrogate to tokenize"),
        (
            "/v1/messages",
            json.dumps({"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "\ud800"}]}),
            "a surrogate in an Anthropic message",
        ),
        ("/v1/responses", json.dumps({"model": model, "input": "\ud800"}), "a surrogate in a Responses input"),
        ("/v1/responses", '{"model": "' + model + '", "input": [', "truncated JSON"),
        ("/v1/responses", json.dumps({"model": model, "input": 5}), "input as a number"),
        ("/v1/responses", json.dumps({"model": model, "input": [{"type": "function_call"}]}), "a call without fields"),
        ("/v1/responses", json.dumps({"model": model, "input": [[1, 2]]}), "an item that is a list"),
        (
            "/v1/responses",
            json.dumps({"model": model, "input": "Hi", "tools": [{"type": "function"}]}),
            "a nameless tool",
        ),
        (
            "/v1/responses",
            json.dumps({"model": model, "input": "Hi", "max_output_tokens": 2**40}),
            "huge max_output_tokens",
        ),
    ]


def test_malformed_bodies_are_4xx(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url, timeout=120) as http:
        for route, body, what in malformed(server.model_id):
            r = http.post(route, content=body, headers={"content-type": "application/json"})
            assert 400 <= r.status_code < 500, f"{what}: {r.status_code} {r.text[:300]}"
            err = r.json()
            assert "error" in err, f"{what}: {err}"
            if route.startswith("/v1/messages"):
                assert err["type"] == "error" and err["error"]["type"], what
            else:
                assert err["error"]["message"], what
        # The 10 MB bodies are refused before parsing, as too large; a bad field is named.
        big = json.dumps(_chat(server.model_id, messages=[{"role": "user", "content": "x" * (10 << 20)}]))
        assert http.post(CHAT, content=big, headers={"content-type": "application/json"}).status_code == 413
        r = http.post(CHAT, json=_chat(server.model_id, temperature=9))
        assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
        # Text that is not Unicode (a JSON surrogate escape with no partner) names its field; a pair is
        # one character and is served.
        lone = json.dumps(_chat(server.model_id, messages=[{"role": "user", "content": "Hi \ud83d"}]))
        r = http.post(CHAT, content=lone, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content", r.text
        pair = json.dumps(_chat(server.model_id, messages=[{"role": "user", "content": "Hi \ud83d\ude00"}]))
        assert http.post(CHAT, content=pair, headers={"content-type": "application/json"}).status_code == 200
        # A chunked body over the limit is cut off too.
        chunks = (b"x" * 65536 for _ in range(MAX_BODY // 65536 + 2))
        r = http.post(CHAT, content=chunks, headers={"content-type": "application/json"})
        assert r.status_code == 413
        # Wrong method, unknown route: 4xx too.
        assert http.get(CHAT).status_code == 405
        assert http.post("/v1/nothing", json={}).status_code == 404
        # And the server still serves.
        ok = http.post(CHAT, json=_chat(server.model_id))
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["role"] == "assistant"
