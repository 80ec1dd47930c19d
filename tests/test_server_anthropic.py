"""``fucina serve``'s Anthropic Messages API through the official ``anthropic`` client: messages
plain and streamed (Anthropic's exact event sequence, the same text both ways), ``system``,
``stop_sequences`` with ``stop_sequence`` reported, a ``tool_use`` / ``tool_result`` round trip on
a template with tool syntax (scripted replies), ``count_tokens``, and errors in Anthropic's shape
raising the client's own exception types."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import anthropic
import httpx
import jsonschema
import pytest

import fucina
from fucina.server import ServerConfig
from serverkit import LiveServer, Processor, anthropic_client, live, scripted

TEMPLATES = Path(__file__).resolve().parent.parent / "vendor" / "chat_templates"
N_CTX = 512
WEATHER = [
    {
        "name": "get_weather",
        "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
# Recent clients no longer expose sampling parameters; the server still takes them (extra_body).
GREEDY = {"temperature": 0}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def server(gemma_path: Path) -> Iterator[LiveServer]:
    with live(ServerConfig(model=gemma_path, parallel=2, ctx_size=N_CTX, threads=2)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: LiveServer) -> anthropic.Anthropic:
    return anthropic_client(server)


def ask(content: str) -> list[Any]:
    return [{"role": "user", "content": content}]


def test_a_message_plain_and_streamed(client: anthropic.Anthropic, server: LiveServer) -> None:
    kw: dict[str, Any] = {
        "model": server.model_id,
        "max_tokens": 10,
        "extra_body": GREEDY,
        "system": "You answer briefly.",
        "messages": ask("Name a planet."),
    }
    m = client.messages.create(**kw)
    assert m.type == "message" and m.role == "assistant" and m.model == server.model_id
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    (block,) = m.content
    assert block.type == "text" and block.text
    assert 0 < m.usage.output_tokens <= 10 and m.usage.input_tokens > 5
    with client.messages.stream(**kw) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == block.text and final.stop_reason == m.stop_reason
    assert final.usage.output_tokens == m.usage.output_tokens
    # Anthropic's usage: input_tokens are the prompt tokens not read from the cache, and the streamed
    # request (the same prompt again) read all but its last token from the cache.
    prompt_tokens = m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
    assert final.usage.input_tokens == 1 and final.usage.cache_read_input_tokens == prompt_tokens - 1
    # The system prompt reached the template.
    assert (
        client.messages.count_tokens(
            model=server.model_id, system="You answer briefly.", messages=ask("Name a planet.")
        ).input_tokens
        == prompt_tokens
    )
    assert client.messages.count_tokens(model=server.model_id, messages=ask("Name a planet.")).input_tokens < (
        prompt_tokens
    )


def test_the_stream_is_anthropics_event_sequence(server: LiveServer) -> None:
    body = {"model": server.model_id, "max_tokens": 6, "temperature": 0, "stream": True, "messages": ask("Hi")}
    events: list[tuple[str, dict[str, Any]]] = []
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body, timeout=300) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        name = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: ") :])
                assert name == data["type"]
                events.append((name, data))
    kinds = [k for k, _ in events]
    assert kinds[:3] == ["message_start", "ping", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[3:-3]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    assert events[2][1]["content_block"] == {"type": "text", "text": ""}
    assert all(d["delta"]["type"] == "text_delta" and d["index"] == 0 for k, d in events if k == "content_block_delta")
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert delta["usage"]["output_tokens"] == 6 or delta["delta"]["stop_reason"] == "end_turn"


def test_stop_sequences_are_reported(client: anthropic.Anthropic, server: LiveServer) -> None:
    kw: dict[str, Any] = {"model": server.model_id, "max_tokens": 24, "extra_body": GREEDY}
    full = client.messages.create(messages=ask("Count from one to ten in words."), **kw)
    text = full.content[0].text
    assert len(text) > 4, text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    cut = text.index(stop)
    m = client.messages.create(messages=ask("Count from one to ten in words."), stop_sequences=["@@@", stop], **kw)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.content[0].text == text[:cut]
    with client.messages.stream(messages=ask("Count from one to ten in words."), stop_sequences=[stop], **kw) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop


def test_max_tokens_beyond_the_context_stops_when_it_is_full(client: anthropic.Anthropic, server: LiveServer) -> None:
    # max_tokens is required, and clients send hosted models' sizes (LangChain's default is 4096): as
    # llama.cpp's server, the reply stops when the context is full rather than the request failing.
    m = client.messages.create(
        model=server.model_id, max_tokens=4096, messages=ask("word " * (N_CTX - 32)), extra_body=GREEDY
    )
    used = m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) + m.usage.output_tokens
    assert m.stop_reason in ("end_turn", "max_tokens") and used <= N_CTX
    assert m.stop_reason == "end_turn" or used == N_CTX


def test_claude_codes_billing_stamp_does_not_defeat_the_prefix_cache(
    client: anthropic.Anthropic, server: LiveServer
) -> None:
    # Claude Code's system prompt starts with a header whose cch stamp changes on every request.
    def ask_with(stamp: str) -> anthropic.types.Message:
        header = f"x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch={stamp};"
        system: Any = [{"type": "text", "text": header}, {"type": "text", "text": "You are a terse assistant."}]
        return client.messages.create(
            model=server.model_id, max_tokens=2, system=system, messages=ask("Name a colour."), extra_body=GREEDY
        )

    first, second = ask_with("a5145"), ask_with("9c0d2")
    prompt_tokens = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    assert second.usage.input_tokens == 1 and second.usage.cache_read_input_tokens == prompt_tokens - 1


def test_structured_outputs(client: anthropic.Anthropic, server: LiveServer) -> None:
    # messages.parse(output_format=Model) sends output_config.format; the beta spelled it output_format.
    schema = {
        "type": "object",
        "properties": {"planet": {"type": "string", "maxLength": 20}},
        "required": ["planet"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "schema": schema}
    kw: dict[str, Any] = {"model": server.model_id, "max_tokens": 48, "messages": ask("Name a planet.")}
    for extra in ({"output_config": {"format": fmt}}, {"output_format": fmt}):
        m = client.messages.create(**kw, extra_body={**GREEDY, **extra})
        assert m.stop_reason == "end_turn" and m.content[0].type == "text"
        jsonschema.validate(json.loads(m.content[0].text), schema)
    with client.messages.stream(**kw, extra_body={**GREEDY, "output_config": {"format": fmt}}) as stream:
        text = "".join(stream.text_stream)
    jsonschema.validate(json.loads(text), schema)
    with pytest.raises(anthropic.BadRequestError, match="nowhere"):
        bad = {"type": "json_schema", "schema": {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}}
        client.messages.create(**kw, extra_body={"output_config": {"format": bad}})


class Script:
    def __init__(self, llm: fucina.LLM) -> None:
        self.llm = llm
        self.reply: str | None = None
        self.seen: dict[str, Any] = {}

    def processors(self, body: Any) -> list[Processor]:
        if self.reply is None:
            return []
        force, self.seen = scripted(self.llm, self.reply)
        return [force]


@pytest.fixture(scope="module")
def tool_client(gemma_path: Path) -> Iterator[tuple[anthropic.Anthropic, str, Script]]:
    source = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text("utf-8")
    llm = fucina.LLM(gemma_path, n_ctx=N_CTX, n_threads=2, chat_template=source)
    script = Script(llm)
    with live(ServerConfig(parallel=2, ctx_size=N_CTX), llm=llm, processors=script.processors) as s:
        yield anthropic.Anthropic(base_url=s.url, api_key="x", max_retries=0, timeout=300), s.model_id, script


def test_tool_choice_any_and_tool_are_enforced(tool_client: tuple[anthropic.Anthropic, str, Script]) -> None:
    # No scripted reply: the model answers (greedy) and the grammar makes the answer one call. The city
    # is bounded so the call fits in max_tokens whichever city this CPU's last-bit numerics make the
    # model pick (sampled and unbounded, it once ran past max_tokens inside the string).
    client, model, script = tool_client
    assert script.reply is None
    city = {"type": "string", "maxLength": 24}
    schema = {"type": "object", "properties": {"city": city}, "required": ["city"]}
    tools = [{"name": "get_weather", "description": "Current weather in a city", "input_schema": schema}]
    choices: list[Any] = [
        {"type": "any", "disable_parallel_tool_use": True},
        {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    ]
    for choice in choices:
        m = client.messages.create(
            model=model,
            max_tokens=96,
            tools=cast(Any, tools),
            tool_choice=choice,
            messages=ask("Tell me a joke about cats."),
            extra_body=GREEDY,
        )
        assert m.stop_reason == "tool_use", m
        (use,) = [b for b in m.content if b.type == "tool_use"]
        assert use.name == "get_weather" and len(cast(dict[str, str], use.input)["city"]) <= 24


def test_tool_use_round_trip(tool_client: tuple[anthropic.Anthropic, str, Script]) -> None:
    client, model, script = tool_client
    script.reply = CALL
    question = ask("What is the weather in Paris?")
    m = client.messages.create(model=model, max_tokens=64, tools=WEATHER, messages=question)  # type: ignore[arg-type]
    assert m.stop_reason == "tool_use"
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Paris"} and use.id.startswith("toolu_")
    prompt = script.llm.detokenize(script.seen["prompt"], special=True)
    assert "<tools>" in prompt and '"name": "get_weather"' in prompt
    history = [
        *question,
        {"role": "assistant", "content": [b.model_dump() for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "21 degrees"}]},
    ]
    script.reply = "It is 21 degrees."
    m2 = client.messages.create(model=model, max_tokens=32, tools=WEATHER, messages=history)  # type: ignore[arg-type]
    assert m2.stop_reason == "end_turn" and m2.content[0].text == "It is 21 degrees."  # type: ignore[union-attr]
    prompt = script.llm.detokenize(script.seen["prompt"], special=True)
    assert "<tool_response>\n21 degrees\n</tool_response>" in prompt
    assert '"name": "get_weather", "arguments": {"city": "Paris"}' in prompt
    # Streamed: the call arrives as a tool_use block with its input as JSON deltas.
    script.reply = CALL
    with client.messages.stream(model=model, max_tokens=64, tools=WEATHER, messages=question) as s:  # type: ignore[arg-type]
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.input for b in final.content if b.type == "tool_use"] == [{"city": "Paris"}]
    script.reply = None


def test_history_as_clients_send_it(tool_client: tuple[anthropic.Anthropic, str, Script]) -> None:
    # Claude Code and the SDKs send back what they got (thinking blocks, signed or redacted), documents,
    # tool results as lists of blocks, cache_control everywhere and Anthropic's built-in tools.
    client, model, script = tool_client
    script.reply = "Green."
    ephemeral = {"type": "ephemeral"}
    document = {"type": "text", "media_type": "text/plain", "data": "The sky is green here."}
    messages: Any = [
        {
            "role": "user",
            "content": [
                {"type": "document", "source": document, "title": "Facts", "cache_control": ephemeral},
                {"type": "text", "text": "What colour is the sky in Paris?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Ask the tool.", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "c2VjcmV0"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "Sunny, "}, {"type": "text", "text": "green sky"}],
                    "cache_control": ephemeral,
                }
            ],
        },
    ]
    tools: Any = [*WEATHER, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
    system: Any = [{"type": "text", "text": "Be terse.", "cache_control": ephemeral}]
    m = client.messages.create(model=model, max_tokens=16, system=system, tools=tools, messages=messages)
    assert m.stop_reason == "end_turn" and m.content[0].type == "text" and m.content[0].text == "Green."
    prompt = script.llm.detokenize(script.seen["prompt"], special=True)
    assert "Be terse." in prompt and "The sky is green here." in prompt
    assert "<tool_response>\nSunny, green sky\n</tool_response>" in prompt
    assert "web_search" not in prompt and "c2VjcmV0" not in prompt
    script.reply = None


def test_consecutive_turns_combine_and_a_prefill_continues(
    tool_client: tuple[anthropic.Anthropic, str, Script],
) -> None:
    # Anthropic combines consecutive same-role turns; a last assistant turn is the prefill the reply continues.
    client, model, script = tool_client
    script.reply = " sky is green."
    messages: Any = [
        {"role": "user", "content": "Hi."},
        {"role": "user", "content": [{"type": "text", "text": "What colour is the sky?"}]},
        {"role": "assistant", "content": "The"},
        {"role": "assistant", "content": [{"type": "text", "text": " Paris"}]},
    ]
    m = client.messages.create(model=model, max_tokens=16, messages=messages)
    assert m.content[0].type == "text" and m.content[0].text == " sky is green." and m.stop_reason == "end_turn"
    prompt = script.llm.detokenize(script.seen["prompt"], special=True)
    assert prompt.endswith(
        "<|im_start|>user\nHi.\n\nWhat colour is the sky?<|im_end|>\n<|im_start|>assistant\nThe Paris"
    )
    assert client.messages.count_tokens(model=model, messages=messages).input_tokens == len(script.seen["prompt"])
    script.reply = None


def test_errors_are_anthropics(client: anthropic.Anthropic, server: LiveServer) -> None:
    model = server.model_id
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-9", max_tokens=4, messages=ask("Hi"))
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.messages.create(model=model, max_tokens=0, messages=ask("Hi"))
    with pytest.raises(anthropic.BadRequestError, match="temperature"):
        client.messages.create(model=model, max_tokens=4, extra_body={"temperature": 3}, messages=ask("Hi"))
    with pytest.raises(anthropic.BadRequestError, match="maximum context length"):
        client.messages.create(model=model, max_tokens=4, messages=ask("word " * (N_CTX + 10)))
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    with_image: Any = [{"role": "user", "content": [image]}]
    with pytest.raises(anthropic.BadRequestError, match="image"):
        client.messages.create(model=model, max_tokens=4, messages=with_image)
    odd: Any = [{"role": "user", "content": [{"type": "hologram", "text": "x"}]}]
    with pytest.raises(anthropic.BadRequestError, match=r"400 messages\[0\]\.content\[0\]: .*'hologram'"):
        client.messages.create(model=model, max_tokens=4, messages=odd)
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AAAA"}}
    with pytest.raises(anthropic.BadRequestError, match="plain-text documents"):
        client.messages.create(model=model, max_tokens=4, messages=cast(Any, [{"role": "user", "content": [pdf]}]))
    system_role: Any = [{"role": "system", "content": "x"}]
    with pytest.raises(anthropic.BadRequestError, match="role"):
        client.messages.create(model=model, max_tokens=4, messages=system_role)
    r = httpx.post(f"{server.url}/v1/messages", content=b'{"model": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
