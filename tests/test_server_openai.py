"""``fucina serve`` through the official ``openai`` client: chat and text completions (plain and
streamed, the same text both ways), stop sequences, seed reproducibility under concurrent load,
logprobs, cached prompt tokens, a tool-call round trip on a template with tool syntax (Qwen 2.5's,
on Gemma's weights with scripted replies), embeddings, models, tokenize, API keys, and error cases
raising the client's own exception types."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

import fucina
import fucina.cli
from conftest import load_llamacpp_golden
from fucina.server import ServerConfig
from serverkit import CALL, WEATHER, LiveServer, Processor, deepseek_listing_tools, live, openai_client, scripted

TEMPLATES = Path(__file__).resolve().parent.parent / "vendor" / "chat_templates"
N_CTX = 512
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class City(BaseModel):
    name: str = Field(max_length=24)
    country: str = Field(max_length=24)


class Trip(BaseModel):
    """A trip: pydantic writes the nested model as "$defs" and a "$ref" to it."""

    cities: list[City] = Field(min_length=1, max_length=1)


@pytest.fixture(scope="module")
def server(gemma_path: Path) -> Iterator[LiveServer]:
    with live(ServerConfig(model=gemma_path, parallel=4, ctx_size=N_CTX, threads=2)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: LiveServer) -> openai.OpenAI:
    return openai_client(server)


class Script:
    """The reply the tool server's next request is forced to give (and the prompt it saw)."""

    def __init__(self, llm: fucina.LLM) -> None:
        self.llm = llm
        self.reply: str | None = None
        self.seen: dict[str, Any] = {}

    def processors(self, body: Any) -> list[Processor]:
        if self.reply is None:
            return []
        force, self.seen = scripted(self.llm, self.reply)
        return [force]

    def prompt_text(self) -> str:
        return self.llm.detokenize(self.seen["prompt"], special=True)


@pytest.fixture(scope="module")
def tool_server(gemma_path: Path) -> Iterator[tuple[LiveServer, Script]]:
    source = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text("utf-8")
    llm = fucina.LLM(gemma_path, n_ctx=N_CTX, n_threads=2, chat_template=source)
    script = Script(llm)
    with live(ServerConfig(parallel=2, ctx_size=N_CTX), llm=llm, processors=script.processors) as s:
        yield s, script


def chat(client: openai.OpenAI, model: str, content: str, **kw: Any) -> Any:
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}], **kw)


def test_models_are_listed(client: openai.OpenAI, server: LiveServer) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == [server.model_id]
    assert client.models.retrieve(server.model_id).id == server.model_id
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_chat_plain_and_streamed_give_the_same_text(client: openai.OpenAI, server: LiveServer) -> None:
    r = chat(client, server.model_id, "Name three colours.", max_tokens=12, temperature=0)
    choice = r.choices[0]
    assert r.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length") and choice.message.content
    assert 0 < r.usage.completion_tokens <= 12 and r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    stream = chat(
        client,
        server.model_id,
        "Name three colours.",
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [choice.finish_reason]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.completion_tokens == r.usage.completion_tokens
    # The same prompt again: all of it but its last token comes from the prefix cache.
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1


def test_predicted_outputs_change_no_token_and_are_drafted(client: openai.OpenAI, server: LiveServer) -> None:
    """OpenAI's Predicted Outputs (``prediction``): the prediction becomes a reference the speculative
    drafts quote, so the reply is the same with any prediction or none; the usage block counts the
    accepted and rejected draft tokens."""
    model = server.model_id
    ask = "Describe the river Thames in one sentence."
    plain = chat(client, model, ask, max_tokens=40, temperature=0)
    text = plain.choices[0].message.content
    assert text and plain.usage.completion_tokens_details is None
    exact = chat(client, model, ask, max_tokens=40, temperature=0, prediction={"type": "content", "content": text})
    assert exact.choices[0].message.content == text
    details = exact.usage.completion_tokens_details
    assert details is not None and details.accepted_prediction_tokens is not None
    assert details.rejected_prediction_tokens is not None and details.rejected_prediction_tokens >= 0
    # The reply is the prediction itself: most tokens come from accepted drafts.
    assert details.accepted_prediction_tokens >= exact.usage.completion_tokens // 2
    # A wrong prediction (as text parts) costs nothing in correctness; streamed, its usage comes last.
    parts = [{"type": "text", "text": "Pasta wants "}, {"type": "text", "text": "salt."}]
    wrong = {"type": "content", "content": parts}
    stream = chat(
        client,
        model,
        ask,
        max_tokens=40,
        temperature=0,
        prediction=wrong,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.rejected_prediction_tokens is not None
    # Text completions take it too (a field the SDK leaves to extra_body there).
    done = client.completions.create(model=model, prompt="The river Thames", max_tokens=24, temperature=0)
    again = client.completions.create(
        model=model,
        prompt="The river Thames",
        max_tokens=24,
        temperature=0,
        extra_body={"prediction": {"type": "content", "content": done.choices[0].text}},
    )
    assert again.choices[0].text == done.choices[0].text
    assert again.usage is not None and again.usage.completion_tokens_details is not None
    with pytest.raises(openai.BadRequestError, match="prediction"):
        chat(client, model, ask, max_tokens=2, prediction=cast(Any, {"type": "file", "content": "x"}))


def test_text_completions_plain_streamed_and_with_logprobs(client: openai.OpenAI, server: LiveServer) -> None:
    kw: dict[str, Any] = {"model": server.model_id, "prompt": "The capital of France is", "max_tokens": 8}
    r = client.completions.create(temperature=0, logprobs=2, **kw)
    choice = r.choices[0]
    assert r.object == "text_completion" and choice.text
    lp = choice.logprobs
    assert lp is not None and len(lp.tokens or []) == r.usage.completion_tokens
    assert all(len(t) == 2 for t in lp.top_logprobs or [])
    assert all(v is not None and v <= 0 for v in lp.token_logprobs or [])
    assert "".join(lp.tokens or []) == choice.text
    streamed = "".join(c.choices[0].text for c in client.completions.create(temperature=0, stream=True, **kw))
    assert streamed == choice.text
    echo = client.completions.create(temperature=0, echo=True, **kw)
    assert echo.choices[0].text == "The capital of France is" + choice.text
    # A batch of prompts, two choices each (index prompt * n + j).
    batch = client.completions.create(
        model=server.model_id, prompt=["One, two,", "Red, green,"], max_tokens=3, n=2, temperature=0
    )
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert batch.choices[0].text == batch.choices[1].text
    # Again: each prompt, counted once in prompt_tokens, has its cached prefix counted once too
    # (all of it but its last token), however many choices share it.
    again = client.completions.create(
        model=server.model_id, prompt=["One, two,", "Red, green,"], max_tokens=3, n=2, temperature=0
    )
    usage = again.usage
    assert usage is not None and usage.prompt_tokens_details is not None and batch.usage is not None
    assert usage.prompt_tokens == batch.usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 2


def test_stop_sequences_end_the_text_before_them(client: openai.OpenAI, server: LiveServer) -> None:
    prompt = "Write a list of fruits: apple, banana,"
    full = client.completions.create(model=server.model_id, prompt=prompt, max_tokens=24, temperature=0)
    text = full.choices[0].text
    words = [w for w in text.split() if len(w) >= 3]
    assert len(words) >= 2, text
    stop = words[1]
    cut = text.index(stop)
    r = client.completions.create(model=server.model_id, prompt=prompt, max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].text == text[:cut] and r.choices[0].finish_reason == "stop"
    c = chat(client, server.model_id, "Count from one to ten in words.", max_tokens=24, temperature=0)
    reply = c.choices[0].message.content or ""
    if len(reply) > 4:
        stop = reply[len(reply) // 2 : len(reply) // 2 + 2]
        cut = reply.index(stop)
        s = chat(client, server.model_id, "Count from one to ten in words.", max_tokens=24, temperature=0, stop=stop)
        assert s.choices[0].message.content == reply[:cut] and s.choices[0].finish_reason == "stop"


def test_a_seed_reproduces_a_sampled_completion_whatever_else_runs(client: openai.OpenAI, server: LiveServer) -> None:
    kw: dict[str, Any] = {"max_tokens": 10, "temperature": 1.0, "top_p": 1.0, "seed": 1234, "n": 2}
    first = chat(client, server.model_id, "Tell me a story.", **kw)
    texts = [c.message.content for c in first.choices]

    def other(i: int) -> str:
        r = client.completions.create(model=server.model_id, prompt=f"Noise {i}:", max_tokens=10, temperature=1)
        return r.choices[0].text

    with ThreadPoolExecutor(4) as pool:
        noise = [pool.submit(other, i) for i in range(3)]
        again = pool.submit(lambda: chat(client, server.model_id, "Tell me a story.", **kw))
        assert [c.message.content for c in again.result().choices] == texts
        for f in noise:
            f.result()
    outcomes = {
        chat(client, server.model_id, "Tell me a story.", **{**kw, "n": 1, "seed": s}).choices[0].message.content
        for s in (1, 2, 3)
    }
    assert len(outcomes) > 1


def test_mirostat_from_llama_cpp_clients(client: openai.OpenAI, server: LiveServer) -> None:
    kw: dict[str, Any] = {"max_tokens": 12, "temperature": 0.8, "seed": 5}
    mirostat = {"mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2}
    a = chat(client, server.model_id, "Tell me a story.", extra_body=mirostat, **kw).choices[0].message.content
    b = chat(client, server.model_id, "Tell me a story.", extra_body=mirostat, **kw).choices[0].message.content
    assert a and a == b
    with pytest.raises(openai.BadRequestError) as bad:
        chat(client, server.model_id, "Hi", extra_body={"mirostat": 3}, **kw)
    assert bad.value.param == "mirostat"


def test_chat_logprobs(client: openai.OpenAI, server: LiveServer) -> None:
    r = chat(client, server.model_id, "Hello!", max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert math.isclose(entry.top_logprobs[0].logprob, entry.logprob, rel_tol=1e-5, abs_tol=1e-6)


def test_tool_call_round_trip(tool_server: tuple[LiveServer, Script]) -> None:
    server, script = tool_server
    client = openai_client(server)
    script.reply = CALL
    r = client.chat.completions.create(model=server.model_id, messages=ASK, tools=WEATHER, max_tokens=64)  # type: ignore[arg-type]
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert "<tools>" in script.prompt_text() and '"name": "get_weather"' in script.prompt_text()
    # The result goes back as a tool message; the template renders it for the model.
    history: list[Any] = [
        *ASK,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'},
    ]
    script.reply = "It is 21 degrees in Paris."
    r2 = client.chat.completions.create(model=server.model_id, messages=history, tools=WEATHER, max_tokens=32)  # type: ignore[arg-type]
    assert r2.choices[0].message.content == "It is 21 degrees in Paris."
    assert r2.choices[0].finish_reason == "stop"
    assert '<tool_response>\n{"temperature": 21}\n</tool_response>' in script.prompt_text()
    # Streamed: the call arrives whole in one tool_calls delta.
    script.reply = CALL
    stream: Any = client.chat.completions.create(
        model=server.model_id,
        messages=ASK,  # type: ignore[arg-type]
        tools=WEATHER,  # type: ignore[arg-type]
        max_tokens=64,
        stream=True,
    )
    chunks = list(stream)
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [d.function.name for d in deltas if d.function] == ["get_weather"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    script.reply = None


def test_legacy_functions_round_trip(tool_server: tuple[LiveServer, Script]) -> None:
    """OpenAI's deprecated ``functions`` / ``function_call`` (what older clients and LangChain's
    ``bind_functions`` send): offered as tools, the call back as ``message.function_call``, the result
    as a ``function`` message."""
    server, script = tool_server
    client = openai_client(server)
    functions: Any = [WEATHER[0]["function"]]
    ask: Any = ASK
    script.reply = CALL
    r = client.chat.completions.create(model=server.model_id, messages=ask, functions=functions, max_tokens=64)
    choice = r.choices[0]
    assert choice.finish_reason == "function_call" and not choice.message.tool_calls
    call = choice.message.function_call
    assert call is not None and call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert '"name": "get_weather"' in script.prompt_text()
    history: list[Any] = [
        *ASK,
        {"role": "assistant", "content": None, "function_call": call.model_dump()},
        {"role": "function", "name": "get_weather", "content": '{"temperature": 21}'},
    ]
    script.reply = "It is 21 degrees in Paris."
    r2 = client.chat.completions.create(model=server.model_id, messages=history, functions=functions, max_tokens=32)
    assert r2.choices[0].message.content == "It is 21 degrees in Paris." and r2.choices[0].finish_reason == "stop"
    prompt = script.prompt_text()
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert '<tool_response>\n{"temperature": 21}\n</tool_response>' in prompt
    script.reply = CALL
    stream: Any = client.chat.completions.create(
        model=server.model_id,
        messages=ask,
        functions=functions,
        max_tokens=64,
        stream=True,
    )
    chunks = list(stream)
    calls = [c.choices[0].delta.function_call for c in chunks if c.choices[0].delta.function_call]
    assert [(f.name, json.loads(f.arguments or "")) for f in calls] == [("get_weather", {"city": "Paris"})]
    assert chunks[-1].choices[0].finish_reason == "function_call"
    script.reply = None
    # A named function_call forces that call, one call at most; mixing the two APIs is a 400.
    forced = client.chat.completions.create(
        model=server.model_id,
        messages=[{"role": "user", "content": "Tell me a joke."}],
        functions=functions,
        function_call={"name": "get_weather"},
        max_tokens=64,
        temperature=0,
    )
    assert forced.choices[0].finish_reason == "function_call"
    assert forced.choices[0].message.function_call is not None
    assert forced.choices[0].message.function_call.name == "get_weather"
    with pytest.raises(openai.BadRequestError) as both:
        client.chat.completions.create(
            model=server.model_id, messages=ask, functions=functions, tools=cast(Any, WEATHER)
        )
    assert both.value.param == "functions"
    with pytest.raises(openai.BadRequestError) as alone:
        client.chat.completions.create(model=server.model_id, messages=ask, function_call="auto")
    assert alone.value.param == "function_call"


def test_tool_choice_required_and_named_are_enforced(tool_server: tuple[LiveServer, Script]) -> None:
    # No scripted reply: the model itself answers, and the grammar makes the answer a call.
    server, script = tool_server
    assert script.reply is None
    client = openai_client(server)
    joke = [{"role": "user", "content": "Tell me a joke about cats."}]
    tools = [*WEATHER, {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    only_time = {"type": "function", "function": {"name": "get_time"}}
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [only_time]}}
    choices: list[Any] = ["required", only_time, allowed]
    for choice in choices:
        r = client.chat.completions.create(
            model=server.model_id,
            messages=cast(Any, joke),
            tools=cast(Any, tools),
            tool_choice=choice,
            parallel_tool_calls=False,
            max_tokens=96,
            temperature=0,
        )
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        (call,) = c.message.tool_calls or []
        assert call.type == "function"
        assert call.function.name in ({"get_weather", "get_time"} if choice == "required" else {"get_time"})
        assert isinstance(json.loads(call.function.arguments), dict)
    unknown = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "name": "x"}]}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=server.model_id, messages=cast(Any, joke), tools=cast(Any, tools), tool_choice=cast(Any, unknown)
        )
    assert e.value.param == "tool_choice.allowed_tools.tools[0]"


def test_a_grammar_that_cannot_go_on_is_a_400(tool_server: tuple[LiveServer, Script]) -> None:
    # Where the forced call's grammar picks between the tools' names, the scripted processor writes text
    # instead, so the grammar has nothing left to follow: the request ends with a 400 naming it (it was
    # a 500).
    server, script = tool_server
    script.reply = "Sorry, no tools today."
    tools = [*WEATHER, {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    try:
        with pytest.raises(openai.BadRequestError, match="grammar constraint failed"):
            chat(
                openai_client(server),
                server.model_id,
                "What is the weather in Paris?",
                tools=tools,
                tool_choice="required",
                max_tokens=32,
                temperature=0,
            )
    finally:
        script.reply = None


def test_forced_calls_with_deepseek_markers_written_as_text(gemma_path: Path) -> None:
    # DeepSeek V3.1's call markers are text on Gemma's vocabulary, and the "▁" in them is SentencePiece's
    # space escape: the forced call failed on its first marker ("grammar constraint failed", a 500).
    source = deepseek_listing_tools("deepseek-ai-DeepSeek-V3.1")
    with live(ServerConfig(model=gemma_path, parallel=2, ctx_size=N_CTX, chat_template=source)) as server:
        client = openai_client(server)
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            r = chat(
                client,
                server.model_id,
                "What is the weather in Paris?",
                tools=WEATHER,
                tool_choice=cast(Any, choice),
                parallel_tool_calls=False,
                # The markers are text here, each "▁" three byte tokens: one call is ~64 tokens.
                max_tokens=256,
                temperature=0,
            )
            c = r.choices[0]
            assert c.finish_reason == "tool_calls", c
            (call,) = c.message.tool_calls or []
            assert call.function.name == "get_weather"
            assert set(json.loads(call.function.arguments)) == {"city"}


def test_forced_calls_of_pydantic_tools_with_nested_models(client: openai.OpenAI, server: LiveServer) -> None:
    # openai.pydantic_function_tool (as instructor and LangChain) writes nested models as "$defs" and
    # "$ref"s; the forced call embeds the schema in the call's, where the refs must still resolve. With a
    # response_format too (instructor's tool modes send both), the forced call is the reply.
    tool: Any = openai.pydantic_function_tool(Trip)
    assert "$defs" in tool["function"]["parameters"]
    city_format = {"type": "json_schema", "json_schema": {"name": "City", "schema": City.model_json_schema()}}
    for kw in (
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "function": {"name": "Trip"}}, "response_format": city_format},
    ):
        r = chat(client, server.model_id, "Plan a trip to Paris.", tools=[tool], max_tokens=80, temperature=0, **kw)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        (call,) = c.message.tool_calls or []
        assert call.function.name == "Trip"
        assert len(Trip.model_validate_json(call.function.arguments).cities) == 1


def test_embeddings(client: openai.OpenAI, server: LiveServer) -> None:
    r = client.embeddings.create(model=server.model_id, input=["The cat sat.", "Quarks and gluons."])
    assert [d.index for d in r.data] == [0, 1]
    for d in r.data:
        assert len(d.embedding) == 640
        assert math.isclose(math.sqrt(sum(v * v for v in d.embedding)), 1.0, rel_tol=1e-4)
    again = client.embeddings.create(model=server.model_id, input="The cat sat.", encoding_format="float")
    assert again.data[0].embedding == pytest.approx(r.data[0].embedding, abs=1e-6)
    assert r.usage.prompt_tokens > 4
    # llama.cpp's mean pooling (tools/gen_embedding_goldens.py), scaled to unit length.
    golden = load_llamacpp_golden("model", "embeddings.json")["cases"][1]
    ours = client.embeddings.create(model=server.model_id, input=golden["text"]).data[0].embedding
    norm = math.sqrt(sum(v * v for v in golden["embedding"]))
    assert ours == pytest.approx([v / norm for v in golden["embedding"]], abs=1e-6)
    # OpenAI's shortening: the first components, back at unit length.
    short = client.embeddings.create(model=server.model_id, input=golden["text"], dimensions=64).data[0].embedding
    head = [v / norm for v in golden["embedding"][:64]]
    head_norm = math.sqrt(sum(v * v for v in head))
    assert short == pytest.approx([v / head_norm for v in head], abs=1e-6) and len(short) == 64
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        client.embeddings.create(model=server.model_id, input="x", dimensions=641)


def test_tokenize_detokenize_health_and_metrics(client: openai.OpenAI, server: LiveServer) -> None:
    # Two completions of one prompt, so the metrics have requests and a prefix-cache hit to count
    # whichever tests ran before this one.
    for _ in range(2):
        chat(client, server.model_id, "Hello there", max_tokens=2)
    ids = httpx.post(f"{server.url}/tokenize", json={"content": "Hello world"}).json()["tokens"]
    assert ids and all(isinstance(t, int) for t in ids)
    text = httpx.post(f"{server.url}/detokenize", json={"tokens": ids}).json()["content"]
    assert text == "Hello world"
    pieces = httpx.post(f"{server.url}/tokenize", json={"content": "Hi", "with_pieces": True}).json()["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hi"
    assert httpx.post(f"{server.url}/detokenize", json={"tokens": [-1]}).status_code == 400
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    m = server.metrics()
    assert m["slots_total"] == 4 and m["requests_completed_total"] > 0
    assert 0 < m["prefix_cache_hit_rate"] <= 1
    assert m["generated_tokens_total"] > 0 and m["generated_tokens_per_second"] > 0


def test_bad_requests_raise_the_clients_own_errors(client: openai.OpenAI, server: LiveServer) -> None:
    model = server.model_id
    with pytest.raises(openai.NotFoundError) as e:
        chat(client, "no-such-model", "Hi", max_tokens=2)
    assert e.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="temperature"):
        chat(client, model, "Hi", max_tokens=2, temperature=5)
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        chat(client, model, "Hi", max_tokens=2, top_logprobs=50, logprobs=True)
    with pytest.raises(openai.BadRequestError, match="n"):
        chat(client, model, "Hi", max_tokens=2, n=0)
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        chat(client, model, "Hi", max_tokens=2, logit_bias={"999999999": 1})
    with pytest.raises(openai.BadRequestError, match="stop"):
        chat(client, model, "Hi", max_tokens=2, stop=[""])
    # A value no member of a union takes names the field, not pydantic's union member ("stop.str").
    with pytest.raises(openai.BadRequestError) as not_a_stop:
        chat(client, model, "Hi", max_tokens=2, stop=cast(Any, 5))
    assert not_a_stop.value.param == "stop"
    wizard: Any = [{"role": "wizard", "content": "x"}]
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\].role"):
        client.chat.completions.create(model=model, messages=wizard)
    with pytest.raises(openai.BadRequestError) as too_long:
        chat(client, model, "word " * (N_CTX + 10), max_tokens=2)
    assert too_long.value.code == "context_length_exceeded"
    assert f"maximum context length is {N_CTX}" in too_long.value.message
    unique = {"name": "x", "schema": {"type": "array", "uniqueItems": True}}
    # "strict": true refuses what cannot be enforced; without it the rest is enforced.
    with pytest.raises(openai.BadRequestError, match="uniqueItems") as bad_schema:
        chat(
            client,
            model,
            "Hi",
            max_tokens=2,
            response_format={"type": "json_schema", "json_schema": {**unique, "strict": True}},
        )
    assert bad_schema.value.param == "response_format"
    lenient = chat(client, model, "Hi", max_tokens=2, response_format={"type": "json_schema", "json_schema": unique})
    assert (lenient.choices[0].message.content or "").startswith("[")
    with pytest.raises(openai.BadRequestError, match="prompt"):
        client.completions.create(model=model, prompt=[[2, 99_999_999]], max_tokens=2)


def test_null_means_the_default_for_optional_fields(server: LiveServer) -> None:
    """Clients built on other SDKs send ``null`` for what they leave unset (``"n": null``,
    ``"stream": null``): OpenAI reads it as the default, and so does the server; a required field
    stays required."""
    model, url = server.model_id, f"{server.url}/v1/chat/completions"
    base = {"model": model, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4}
    nulls = {
        "temperature": 0,
        "n": None,
        "stream": None,
        "stream_options": None,
        "ignore_eos": None,
        "stop": None,
        "seed": None,
        "logprobs": None,
        "tools": None,
        "tool_choice": None,
        "response_format": None,
    }
    plain = httpx.post(url, json={**base, "temperature": 0}, timeout=120)
    with_nulls = httpx.post(url, json={**base, **nulls}, timeout=120)
    assert plain.status_code == with_nulls.status_code == 200, with_nulls.text
    assert len(with_nulls.json()["choices"]) == 1
    assert with_nulls.json()["choices"][0]["message"] == plain.json()["choices"][0]["message"]
    streamed = httpx.post(url, json={**base, "stream": True, "stream_options": {"include_usage": None}}, timeout=120)
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    text = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": model, "prompt": "Hi", "max_tokens": 2, "echo": None, "n": None},
        timeout=120,
    )
    assert text.status_code == 200, text.text
    vectors = httpx.post(f"{server.url}/v1/embeddings", json={"model": model, "input": "Hi", "encoding_format": None})
    assert vectors.status_code == 200 and isinstance(vectors.json()["data"][0]["embedding"], list)
    for required in ("model", "messages"):
        missing = httpx.post(url, json={**base, required: None})
        assert missing.status_code == 400 and missing.json()["error"]["param"] == required


def test_max_tokens_beyond_the_context_stop_when_it_is_full(client: openai.OpenAI, server: LiveServer) -> None:
    # As llama.cpp's server: clients sized for hosted models ask for more than a local context holds.
    r = chat(client, server.model_id, "word " * (N_CTX - 32), max_tokens=4 * N_CTX, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens + r.usage.completion_tokens == N_CTX
    text = client.completions.create(
        model=server.model_id, prompt=[2] + [1234] * (N_CTX - 6), max_tokens=4096, extra_body={"ignore_eos": True}
    )
    assert text.choices[0].finish_reason == "length"
    assert text.usage is not None and text.usage.completion_tokens == 5


def test_a_json_schema_response_validates(client: openai.OpenAI, server: LiveServer) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 24},
            "population": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"enum": ["big", "old", "coastal"]}, "maxItems": 2},
        },
        "required": ["city", "population", "tags"],
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}}
    for seed in (1, 2):
        r = chat(
            client,
            server.model_id,
            "Describe a city as JSON.",
            max_tokens=120,
            temperature=0.7,
            seed=seed,
            response_format=fmt,
        )
        assert r.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(r.choices[0].message.content or ""), schema)
    r = chat(client, server.model_id, "A JSON object, please.", max_tokens=60, response_format={"type": "json_object"})
    text = r.choices[0].message.content or ""
    assert text.startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_llama_cpp_grammar_and_json_schema_fields(client: openai.OpenAI, server: LiveServer) -> None:
    """llama.cpp's server's own ``grammar`` (GBNF) and ``json_schema`` fields, on chat and text completions,
    and ``response_format`` on text completions too (as vLLM takes it)."""
    yes_no = {"grammar": 'root ::= "yes" | "no"'}
    r = chat(client, server.model_id, "Is the sky blue?", max_tokens=5, extra_body=yes_no)
    assert r.choices[0].message.content in ("yes", "no") and r.choices[0].finish_reason == "stop"
    c = client.completions.create(
        model=server.model_id,
        prompt="Is the sky blue? Answer:",
        max_tokens=5,
        extra_body={"grammar": 'root ::= " yes" | " no"'},
    )
    assert c.choices[0].text in (" yes", " no") and c.choices[0].finish_reason == "stop"
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    for extra in (
        {"json_schema": schema},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}},
    ):
        c = client.completions.create(
            model=server.model_id, prompt="A number as JSON:", max_tokens=30, extra_body=extra
        )
        assert c.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(c.choices[0].text), schema)
    r = chat(client, server.model_id, "A number as JSON.", max_tokens=30, extra_body={"json_schema": schema})
    jsonschema.validate(json.loads(r.choices[0].message.content or ""), schema)
    r = chat(client, server.model_id, "Any object.", max_tokens=30, temperature=0, extra_body={"json_schema": {}})
    assert isinstance(json.loads(r.choices[0].message.content or ""), dict)
    # Errors name the field: two constraints at once, a bad grammar, a bad schema, a grammar with tools.
    bad: list[tuple[dict[str, Any], str]] = [
        ({**yes_no, "json_schema": schema}, "grammar"),
        ({"grammar": 'root ::= "a'}, "grammar"),
        ({"json_schema": {"type": "strin"}}, "json_schema"),
        ({**yes_no, "tools": WEATHER}, "grammar"),
    ]
    for extra, param in bad:
        with pytest.raises(openai.BadRequestError) as e:
            chat(client, server.model_id, "Hi", max_tokens=2, extra_body=extra)
        assert e.value.param == param, extra


def test_vllm_structured_output_fields(client: openai.OpenAI, server: LiveServer) -> None:
    """What clients written for a vLLM server send in ``extra_body``: ``guided_choice``, ``guided_regex``,
    ``guided_json`` (an object or its JSON text), ``guided_grammar`` (GBNF or Lark) and the newer
    ``structured_outputs``; each constrains the whole reply, and errors name the field."""
    model = server.model_id
    choices = ["sunny, warm", "rain (heavy)", "snow!"]
    extra: dict[str, Any]
    for extra in ({"guided_choice": choices}, {"structured_outputs": {"choice": choices}}):
        r = chat(client, model, "Tomorrow's weather?", max_tokens=8, temperature=0.9, seed=3, extra_body=extra)
        assert r.choices[0].message.content in choices and r.choices[0].finish_reason == "stop"
    phone = r"\d{3}-\d{4}"
    for extra in ({"guided_regex": phone}, {"structured_outputs": {"regex": phone}}):
        c = client.completions.create(model=model, prompt="Call me at", max_tokens=12, extra_body=extra)
        assert re.fullmatch(phone, c.choices[0].text), c.choices[0].text
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    for extra in (
        {"guided_json": schema},
        {"guided_json": json.dumps(schema)},
        {"structured_outputs": {"json": schema}},
    ):
        r = chat(client, model, "A number as JSON.", max_tokens=30, extra_body=extra)
        jsonschema.validate(json.loads(r.choices[0].message.content or ""), schema)
    for grammar in ('root ::= "left" | "right"', 'start: "left" | "right"'):
        r = chat(client, model, "Which way?", max_tokens=4, extra_body={"guided_grammar": grammar})
        assert r.choices[0].message.content in ("left", "right")
    bad: list[tuple[dict[str, Any], str]] = [
        ({"guided_choice": choices, "guided_regex": phone}, "guided_choice"),
        ({"guided_json": schema, "response_format": {"type": "json_object"}}, "guided_json"),
        ({"guided_choice": []}, "guided_choice"),
        ({"guided_json": "{not json"}, "guided_json"),
        ({"guided_regex": "(unclosed"}, "guided_regex"),
        ({"structured_outputs": {}}, "structured_outputs"),
        ({"structured_outputs": {"regex": phone, "choice": choices}}, "structured_outputs.choice"),
    ]
    for extra, param in bad:
        with pytest.raises(openai.BadRequestError) as e:
            chat(client, model, "Hi", max_tokens=2, extra_body=extra)
        assert e.value.param == param, (extra, e.value.param)


def test_an_api_key_guards_every_route_but_health(gemma_path: Path) -> None:
    with live(ServerConfig(model=gemma_path, parallel=1, ctx_size=128, api_key="s3cret")) as s:
        bad = openai.OpenAI(base_url=f"{s.url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        assert httpx.get(f"{s.url}/metrics").status_code == 401
        assert httpx.get(f"{s.url}/health").status_code == 200
        good = openai.OpenAI(base_url=f"{s.url}/v1", api_key="s3cret", max_retries=0)
        assert good.models.list().data[0].id == s.model_id
        assert httpx.get(f"{s.url}/v1/models", headers={"x-api-key": "s3cret"}).status_code == 200


def test_a_full_queue_is_a_429_and_the_server_recovers(gemma_path: Path) -> None:
    with live(ServerConfig(model=gemma_path, parallel=1, ctx_size=256, max_queue=1)) as s:
        client = openai_client(s)
        body = {"model": s.model_id, "prompt": "Go:", "max_tokens": 200, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{s.url}/v1/completions", json=body, timeout=300) as running:
            lines = running.iter_lines()  # kept: dropping the iterator would hang up
            while not next(lines).startswith("data: "):
                pass
            # The only slot is busy; a second request waits in the one-place queue...
            with httpx.stream("POST", f"{s.url}/v1/completions", json=body, timeout=300):
                deadline = time.monotonic() + 60
                while s.metrics()["queue_depth"] < 1:
                    assert time.monotonic() < deadline, s.metrics()
                # ...and a third is refused, with OpenAI's rate-limit error.
                with pytest.raises(openai.RateLimitError) as e:
                    client.completions.create(model=s.model_id, prompt="Hi", max_tokens=2)
                assert e.value.code == "queue_full"
        assert s.metrics()["requests_rejected_total"] == 1
        # Both hung up: once the server has seen it, their slot and queue place are free again.
        deadline = time.monotonic() + 60
        while (m := s.metrics())["queue_depth"] or m["slots_busy"]:
            assert time.monotonic() < deadline, m
        r = client.completions.create(model=s.model_id, prompt="Hi", max_tokens=2)
        assert r.choices[0].finish_reason in ("stop", "length")


def test_serve_rejects_bad_settings_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert fucina.cli.main(["serve", "--parallel", "0"]) == 1
    assert "parallel must be a positive int" in capsys.readouterr().err
    assert fucina.cli.main(["serve", "--ctx-size", "-5"]) == 1
    assert "ctx_size" in capsys.readouterr().err
