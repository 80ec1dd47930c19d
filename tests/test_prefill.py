"""Assistant prefill: a chat whose last message is the assistant's is continued, as llama.cpp's server
reads it (``continue_final_message``) and as Anthropic's API documents it. The prompt is the history
before that message rendered with the generation prompt, then the message's text (after its reasoning,
in the template's block); the reply holds only what the model adds; a call the prefill opens is parsed
whole; a JSON ``response_format`` continues the prefill (:meth:`fucina.Grammar.after`). Checked on the
default model (greedy against ``LLM.generate`` on the same tokens), behind Qwen3's thinking template
with scripted replies, and through the official ``openai`` and ``anthropic`` clients."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

import fucina
from fucina.server import ServerConfig
from serverkit import WEATHER, LiveServer, anthropic_client, live, openai_client, scripted

TEMPLATES = Path(__file__).resolve().parent.parent / "vendor" / "chat_templates"
ASK = [{"role": "user", "content": "Describe a cat as JSON."}]
PREFILL = '{"name": "'
CAT = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def llm(gemma_path: Path) -> fucina.LLM:
    return fucina.LLM(gemma_path, n_ctx=1024, n_threads=2)


@pytest.fixture(scope="module")
def qwen3(gemma_path: Path) -> fucina.LLM:
    """Gemma's weights behind Qwen3's thinking template (replies are scripted)."""
    source = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text("utf-8")
    return fucina.LLM(gemma_path, n_ctx=1024, n_threads=2, chat_template=source)


def _prompt_ids(llm: fucina.LLM, history: list[dict[str, Any]], written: str) -> list[int]:
    text = llm.chat_template.render(history, add_generation_prompt=True)
    ids = llm.tokenize(text, add_special=False, parse_special=True)
    return ids + llm.tokenize(written, add_special=False, parse_special=True)


def _server_greedy(llm: fucina.LLM, ids: list[int], n: int) -> str:
    """What the server's greedy decoding writes after ``ids``: its numerics are pinned (every
    row, prompt rows included, bitwise as if evaluated alone), so the reference is a pinned
    session, not ``LLM.generate`` (llama.cpp's batch-size-dependent prompt kernels)."""
    s = fucina.Session(llm.model, n_ctx=len(ids) + n)
    s.pinned = True
    out = [s.eval_argmax(ids)]
    while len(out) < n and not llm.tokenizer.is_eog(out[-1]):
        out.append(s.eval_argmax([out[-1]]))
    if llm.tokenizer.is_eog(out[-1]):
        out.pop()
    return llm.detokenize(out)


def _streamed(chunks: Iterator[dict[str, Any]], key: str = "content") -> str:
    return "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks)


def test_the_reply_continues_the_prefill(llm: fucina.LLM) -> None:
    msgs = [*ASK, {"role": "assistant", "content": PREFILL}]
    r = llm.create_chat_completion(msgs, temperature=0, max_tokens=24)
    ids = _prompt_ids(llm, ASK, PREFILL)
    # Greedy on the same tokens: the prompt is the history's generation prompt and the prefill.
    assert r["choices"][0]["message"] == {
        "role": "assistant",
        "content": llm.generate(ids, max_tokens=24, temperature=0),
    }
    assert r["usage"]["prompt_tokens"] == len(ids)
    assert not r["choices"][0]["message"]["content"].startswith(PREFILL)
    stream = llm.create_chat_completion(msgs, temperature=0, max_tokens=24, stream=True)
    assert _streamed(stream) == r["choices"][0]["message"]["content"]


def test_a_json_response_format_continues_the_prefill(llm: fucina.LLM) -> None:
    msgs = [*ASK, {"role": "assistant", "content": PREFILL}]
    fmt = {"type": "json_schema", "json_schema": {"name": "cat", "schema": CAT}}
    r = llm.create_chat_completion(msgs, temperature=0, max_tokens=48, response_format=fmt)
    assert r["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(PREFILL + r["choices"][0]["message"]["content"]), CAT)
    with pytest.raises(fucina.GrammarError, match="'Sure' |\"Sure\""):
        llm.create_chat_completion(
            [*ASK, {"role": "assistant", "content": "Sure"}], max_tokens=4, response_format={"type": "json_object"}
        )


def test_grammar_after_is_a_grammar_whose_output_continues_the_text(llm: fucina.LLM) -> None:
    g = fucina.Grammar.regex("[0-9]{3}-[0-9]{4}")
    assert g.prefix == "" and g.after("55").after("5-").prefix == "555-"
    assert ".after('555-')" in repr(g.after("555-")).replace('"', "'")
    ids = llm.tokenize("Phone: 555-", add_special=True)
    out = llm.generate(ids, max_tokens=8, temperature=0, grammar=g.after("555-"))
    assert len(out) == 4 and out.isdigit()
    with pytest.raises(fucina.GrammarError, match="does not match the grammar"):
        llm.generate(ids, max_tokens=4, grammar=g.after("55a"))
    with pytest.raises(TypeError):
        g.after(5)  # type: ignore[arg-type]


def test_continue_final_message_switches_and_checks(llm: fucina.LLM) -> None:
    msgs = [*ASK, {"role": "assistant", "content": PREFILL}]
    # False: rendered as the template does; the built-in Gemma format has no turn after an assistant's.
    with pytest.raises(fucina.TrailingAssistantMessage):
        llm.create_chat_completion(msgs, max_tokens=2, continue_final_message=False)
    with pytest.raises(fucina.InvalidArgumentError, match="needs an assistant message last"):
        llm.create_chat_completion(ASK, max_tokens=2, continue_final_message=True)
    with pytest.raises(fucina.InvalidArgumentError, match="both assistant messages"):
        llm.create_chat_completion([*msgs, {"role": "assistant", "content": "x"}], max_tokens=2)
    with pytest.raises(fucina.InvalidArgumentError, match="user message before it"):
        llm.create_chat_completion([{"role": "assistant", "content": "x"}], max_tokens=2)
    with pytest.raises(fucina.ArgumentTypeError, match="continue_final_message"):
        llm.create_chat_completion(msgs, max_tokens=2, continue_final_message="yes")  # type: ignore[arg-type]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    with pytest.raises(fucina.InvalidArgumentError, match="tool calls"):
        llm.create_chat_completion(
            [*ASK, {"role": "assistant", "content": "", "tool_calls": [call]}],
            tools=WEATHER,
            max_tokens=2,
            continue_final_message=True,
        )


@pytest.mark.parametrize(
    ("prefill", "reply", "written", "message"),
    [
        # Content: written after the generation prompt; the reply is only what follows.
        ({"content": "The answer"}, " is no.", "The answer", {"content": " is no."}),
        # Reasoning only: the block stays open and the model goes on reasoning (llama.cpp's continuation).
        (
            {"content": "", "reasoning_content": "91 = 7 * 13"},
            ", so not prime.\n</think>\n\nNo.",
            "<think>91 = 7 * 13",
            {"content": "No.", "reasoning_content": ", so not prime."},
        ),
        # Reasoning and content: the block is closed and the answer continued.
        (
            {"content": "No", "reasoning_content": "7 * 13"},
            ", it is not.",
            "<think>7 * 13</think>No",
            {"content": ", it is not."},
        ),
    ],
)
def test_a_thinking_template_continues_content_or_reasoning(
    qwen3: fucina.LLM, prefill: dict[str, Any], reply: str, written: str, message: dict[str, Any]
) -> None:
    ask = [{"role": "user", "content": "Is 91 prime?"}]
    msgs = [*ask, {"role": "assistant", **prefill}]
    force, seen = scripted(qwen3, reply)
    r = qwen3.create_chat_completion(msgs, max_tokens=64, logits_processor=force)
    assert seen["prompt"] == _prompt_ids(qwen3, ask, written)
    assert r["choices"][0]["message"] == {"role": "assistant", **message}
    force, _ = scripted(qwen3, reply)
    chunks = list(qwen3.create_chat_completion(msgs, max_tokens=64, logits_processor=force, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content") or "" for d in deltas) == message["content"]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == message.get("reasoning_content", "")


@pytest.mark.parametrize(
    ("prefill", "rest"),
    [
        ('<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n</tool_call>'),
        ("Let me check. ", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    ],
)
def test_a_call_the_prefill_opens_or_precedes_is_parsed_whole(qwen3: fucina.LLM, prefill: str, rest: str) -> None:
    msgs = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": prefill}]
    for stream in (False, True):
        force, _ = scripted(qwen3, rest)
        out = qwen3.create_chat_completion(msgs, tools=WEATHER, max_tokens=64, logits_processor=force, stream=stream)
        if stream:
            deltas = [c["choices"][0]["delta"] for c in out]
            assert _streamed(iter([{"choices": [{"delta": d}]} for d in deltas])) == ""
            calls = [c for d in deltas for c in d.get("tool_calls", [])]
            finish = "tool_calls"
        else:
            message = out["choices"][0]["message"]
            assert message["content"] is None
            calls, finish = message["tool_calls"], out["choices"][0]["finish_reason"]
        assert finish == "tool_calls" and len(calls) == 1
        assert calls[0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


@pytest.fixture(scope="module")
def server(llm: fucina.LLM) -> Iterator[LiveServer]:
    with live(ServerConfig(parallel=2, ctx_size=1024), llm=llm) as s:
        yield s


def test_the_openai_client_gets_the_continuation(server: LiveServer, llm: fucina.LLM) -> None:
    client = openai_client(server)
    msgs: Any = [*ASK, {"role": "assistant", "content": PREFILL}]
    kw: dict[str, Any] = {"model": server.model_id, "messages": msgs, "max_tokens": 24, "temperature": 0}
    want = _server_greedy(llm, _prompt_ids(llm, ASK, PREFILL), 24)
    assert client.chat.completions.create(**kw).choices[0].message.content == want
    streamed = "".join(
        c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw) if c.choices
    )
    assert streamed == want
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "cat", "schema": CAT}}
    r = client.chat.completions.create(**{**kw, "max_tokens": 48}, response_format=fmt)
    jsonschema.validate(json.loads(PREFILL + (r.choices[0].message.content or "")), CAT)
    with pytest.raises(openai.BadRequestError, match="assistant"):
        client.chat.completions.create(extra_body={"continue_final_message": False}, **kw)


def test_the_anthropic_client_gets_the_continuation(server: LiveServer, llm: fucina.LLM) -> None:
    client = anthropic_client(server)
    msgs: Any = [*ASK, {"role": "assistant", "content": PREFILL}]
    # This client version has no temperature argument: the server's field is set through the body.
    greedy: Any = {"temperature": 0}
    m = client.messages.create(model=server.model_id, messages=msgs, max_tokens=24, extra_body=greedy)
    want = _server_greedy(llm, _prompt_ids(llm, ASK, PREFILL), 24)
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == want  # type: ignore[union-attr]
    schema: Any = {"type": "json_schema", "schema": CAT}
    m = client.messages.create(
        model=server.model_id, messages=msgs, max_tokens=48, extra_body={**greedy, "output_config": {"format": schema}}
    )
    jsonschema.validate(json.loads(PREFILL + m.content[0].text), CAT)  # type: ignore[union-attr]
