"""``fucina serve``'s OpenAI Responses API (``/v1/responses``) through the official ``openai`` client:
plain and streamed (the client's own stream accumulator rebuilds the same response), instructions
and item lists, ``max_output_tokens`` reported as incomplete, a JSON Schema answer, a function-call
round trip (``function_call`` / ``function_call_output`` items), a thinking model's ``reasoning``
item, and errors raising the client's own exception types."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import fucina
from fucina.server import ServerConfig
from serverkit import CALL, LiveServer, Processor, live, openai_client, scripted

TEMPLATES = Path(__file__).resolve().parent.parent / "vendor" / "chat_templates"
N_CTX = 512
TOOLS: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {"type": "web_search"},  # a built-in tool: skipped, not an error
]


@pytest.fixture(scope="module")
def server(gemma_path: Path) -> Iterator[LiveServer]:
    with live(ServerConfig(model=gemma_path, parallel=2, ctx_size=N_CTX, threads=2)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: LiveServer) -> openai.OpenAI:
    return openai_client(server)


def test_a_response_plain_and_streamed(client: openai.OpenAI, server: LiveServer) -> None:
    kw: dict[str, Any] = {
        "model": server.model_id,
        "instructions": "You answer briefly.",
        "input": "Name a planet.",
        "max_output_tokens": 12,
        "temperature": 0,
    }
    r = client.responses.create(**kw)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == server.model_id
    assert r.status in ("completed", "incomplete") and r.output_text
    (item,) = r.output
    assert item.type == "message" and item.role == "assistant" and item.id.startswith("msg_")
    assert r.usage is not None and 0 < r.usage.output_tokens <= 12 and r.usage.input_tokens > 5
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    with client.responses.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    assert final.output_text == r.output_text and final.status == r.status
    assert final.usage is not None and final.usage.output_tokens == r.usage.output_tokens


def test_items_instructions_and_incomplete(client: openai.OpenAI, server: LiveServer) -> None:
    items: Any = [
        {"role": "developer", "content": "Reply in English."},
        {"role": "user", "content": [{"type": "input_text", "text": "Say hi."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi!"}]},
        {"role": "user", "content": "Now count from one to twenty in words."},
    ]
    r = client.responses.create(model=server.model_id, input=items, max_output_tokens=3, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage is not None and r.usage.output_tokens == 3


def test_json_schema_answer(client: openai.OpenAI, server: LiveServer) -> None:
    schema = {
        "type": "object",
        "properties": {"planet": {"type": "string", "maxLength": 20}},
        "required": ["planet"],
        "additionalProperties": False,
    }
    r = client.responses.create(
        model=server.model_id,
        input="Name a planet as JSON.",
        max_output_tokens=48,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "planet", "schema": schema, "strict": True}},
    )
    answer = json.loads(r.output_text)
    assert set(answer) == {"planet"} and isinstance(answer["planet"], str)


def test_a_forced_function_call_wins_over_the_text_format(client: openai.OpenAI, server: LiveServer) -> None:
    # instructor's RESPONSES_TOOLS mode sends both: the reply is the call, not a JSON answer. The call is
    # forced by naming the tool, or by allowing only it.
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 24}},
        "required": ["city"],
        "additionalProperties": False,
    }
    tool: Any = {"type": "function", "name": "get_weather", "parameters": schema, "strict": True}
    other: Any = {"type": "function", "name": "get_time", "parameters": {"type": "object"}}
    named: Any = {"type": "function", "name": "get_weather"}
    allowed: Any = {"type": "allowed_tools", "mode": "required", "tools": [named]}
    for choice in (named, allowed):
        r = client.responses.create(
            model=server.model_id,
            input="What is the weather in Paris?",
            tools=[other, tool],
            tool_choice=choice,
            parallel_tool_calls=False,
            text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
            max_output_tokens=48,
            temperature=0,
        )
        (call,) = r.output
        assert call.type == "function_call" and call.name == "get_weather"
        assert set(json.loads(call.arguments)) == {"city"}


def test_errors_are_the_clients_own(client: openai.OpenAI, server: LiveServer) -> None:
    model = server.model_id
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="gpt-9", input="Hi")
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model=model, input="Hi", previous_response_id="resp_123")
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.responses.create(model=model, input="Hi", temperature=3)
    with pytest.raises(openai.BadRequestError, match=r"input\[0\]"):
        mystery: Any = [{"type": "mystery"}]
        client.responses.create(model=model, input=mystery)
    with pytest.raises(openai.BadRequestError, match="not supported"):
        image: Any = [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]
        client.responses.create(model=model, input=image)
    with pytest.raises(openai.BadRequestError, match=str(N_CTX)):
        client.responses.create(model=model, input="word " * (N_CTX + 10), max_output_tokens=4)


@pytest.fixture(scope="module")
def scripted_server(gemma_path: Path) -> Iterator[tuple[LiveServer, fucina.LLM, dict[str, Any]]]:
    """Gemma's weights behind Qwen3's template (tool syntax and <think>); each request is forced to give
    ``script["reply"]``, and the prompt it saw lands in ``script["seen"]``."""
    llm = fucina.LLM(
        gemma_path, n_ctx=N_CTX, n_threads=2, chat_template=(TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    )
    script: dict[str, Any] = {"reply": "", "seen": {}}

    def processors(body: Any) -> list[Processor]:
        force, script["seen"] = scripted(llm, script["reply"])
        return [force]

    with live(ServerConfig(parallel=2, ctx_size=N_CTX), llm=llm, processors=processors) as s:
        yield s, llm, script


def test_function_call_round_trip(scripted_server: tuple[LiveServer, fucina.LLM, dict[str, Any]]) -> None:
    server, llm, script = scripted_server
    client = openai_client(server)
    question: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    script["reply"] = CALL
    r = client.responses.create(model=server.model_id, input=question, tools=TOOLS, max_output_tokens=64)
    (call,) = r.output
    assert call.type == "function_call" and call.name == "get_weather" and (call.id or "").startswith("fc_")
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    assert r.output_text == "" and [t.type for t in r.tools] == ["function"]
    prompt = llm.detokenize(script["seen"]["prompt"], special=True)
    assert "<tools>" in prompt and '"name": "get_weather"' in prompt and "web_search" not in prompt
    history = [
        *question,
        call.model_dump(),
        {"type": "function_call_output", "call_id": call.call_id, "output": "21 C"},
    ]
    script["reply"] = "It is 21 degrees."
    r2 = client.responses.create(model=server.model_id, input=history, tools=TOOLS, max_output_tokens=32)
    assert r2.output_text == "It is 21 degrees." and r2.status == "completed"
    prompt = llm.detokenize(script["seen"]["prompt"], special=True)
    assert "<tool_response>\n21 C\n</tool_response>" in prompt
    assert '"name": "get_weather", "arguments": {"city": "Paris"}' in prompt
    # Streamed: the call arrives as a function_call item with its arguments as one delta.
    script["reply"] = CALL
    with client.responses.stream(model=server.model_id, input=question, tools=TOOLS, max_output_tokens=64) as s:
        args = "".join(e.delta for e in s if e.type == "response.function_call_arguments.delta")
        final = s.get_final_response()
    assert json.loads(args) == {"city": "Paris"}
    assert [(o.type, getattr(o, "name", None)) for o in final.output] == [("function_call", "get_weather")]


def test_reasoning_item(scripted_server: tuple[LiveServer, fucina.LLM, dict[str, Any]]) -> None:
    server, _, script = scripted_server
    client = openai_client(server)
    script["reply"] = "<think>\n91 = 7 * 13.\n</think>\n\nNo, 91 is not prime."
    kw: dict[str, Any] = {"model": server.model_id, "input": "Is 91 prime?", "max_output_tokens": 64}
    r = client.responses.create(**kw)
    reasoning, message = r.output
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert [c.text for c in reasoning.content] == ["91 = 7 * 13."]
    assert message.type == "message" and r.output_text == "No, 91 is not prime."
    with client.responses.stream(**kw) as s:
        events = list(s)
        final = s.get_final_response()
    thought = "".join(getattr(e, "delta", "") for e in events if e.type == "response.reasoning_text.delta")
    assert thought == "91 = 7 * 13." and final.output_text == "No, 91 is not prime."
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert [getattr(e, "output_index", None) for e in events if e.type == "response.output_item.added"] == [0, 1]


def test_reasoning_sent_back_reaches_the_template(
    scripted_server: tuple[LiveServer, fucina.LLM, dict[str, Any]],
) -> None:
    # Clients send a tool-calling turn's reasoning back (pydantic-ai, ...): chat's reasoning_content
    # (llama.cpp's field) and the Responses API's reasoning items. Qwen3's template keeps the reasoning
    # of the turn in progress, so the prompt holds what the model wrote.
    server, llm, script = scripted_server
    client = openai_client(server)
    script["reply"] = "It is noon."
    call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
    messages: Any = [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": None, "reasoning_content": "Ask the clock.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    r = client.chat.completions.create(model=server.model_id, messages=messages, max_tokens=16)
    assert r.choices[0].message.content == "It is noon."
    thought = "<think>\nAsk the clock.\n</think>\n\n<tool_call>"
    assert thought in llm.detokenize(script["seen"]["prompt"], special=True)
    items: Any = [
        {"role": "user", "content": "What time is it?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Ask the clock."}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "12:00"},
    ]
    r2 = client.responses.create(model=server.model_id, input=items, max_output_tokens=16)
    assert r2.output_text == "It is noon."
    assert thought in llm.detokenize(script["seen"]["prompt"], special=True)
