"""Anthropic's Messages API: ``POST /v1/messages`` (streamed or not) and
``POST /v1/messages/count_tokens``.

Messages are turned into the OpenAI shape :mod:`fucina.chat_completion` renders: ``system`` becomes
a system message, ``tool_use`` blocks an assistant's ``tool_calls``, ``tool_result`` blocks ``tool``
messages, ``thinking`` blocks the assistant's ``reasoning_content`` and plain-text ``document`` blocks
text; the client's own tools are offered through the model's template (Anthropic's built-in tools are
skipped) and calls parsed back into ``tool_use`` blocks. A final assistant message is a prefill: the
reply continues it. Structured outputs (``output_config.format``) are enforced by a JSON Schema
grammar. ``usage.input_tokens`` counts the prompt tokens not read from the cache
(``cache_read_input_tokens``). ``stop_reason`` is ``end_turn``, ``max_tokens``, ``stop_sequence``
(with the matched ``stop_sequence``) or ``tool_use``. A stream sends Anthropic's events in order:
``message_start`` (once the request started), ``ping``, per content block
``content_block_start`` / ``content_block_delta``... / ``content_block_stop``, then ``message_delta``
and ``message_stop``.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import chat_completion as cc
from ..grammar import Grammar, GrammarError
from ..tool_calls import ParsedReply
from .anthropic_schema import (
    AnthropicToolChoice,
    CountTokensRequest,
    DocumentBlock,
    ImageBlock,
    MessagesRequest,
    TextBlock,
)
from .common import ServerState, completion_budget, gather, sampling_params, stop_list
from .errors import ApiError
from .hub import Choice, Job, Sampling
from .streaming import EventStream, sse

__all__ = ["router"]

router = APIRouter()


_BILLING_HEADER = re.compile(r"^(x-anthropic-billing-header:[^\n]*?\bcch=)[^;\s]{5};")


def _stable_billing_header(text: str) -> str:
    """Claude Code starts its system prompt with ``x-anthropic-billing-header: ...; cch=a5145;``, a
    stamp that changes on every request: left as is, no request could reuse an earlier one's prompt
    past it. It is written ``cch=fffff;``, as llama.cpp's server writes it."""
    return _BILLING_HEADER.sub(r"\1fffff;", text, count=1)


def _document_text(where: str, block: DocumentBlock) -> str:
    """A document block's text: a plain-text source, or a content source's text blocks."""
    source = block.source
    kind = source.get("type")
    if kind == "text" and isinstance(source.get("data"), str):
        return str(source["data"])
    if kind == "content":
        content = source.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
            return "".join(str(b.get("text", "")) for b in content)
    raise ApiError(
        400, f"{where}: only plain-text documents are supported by this model, not {kind!r} sources", param=where
    )


def _result_text(where: str, content: str | list[TextBlock | ImageBlock | DocumentBlock] | None) -> str:
    """A ``tool_result``'s content as text."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for k, block in enumerate(content):
        if block.type == "image":
            raise ApiError(400, f"{where}.content[{k}]: image input is not supported by this model", param=where)
        texts.append(block.text if block.type == "text" else _document_text(f"{where}.content[{k}]", block))
    return "".join(texts)


def _messages(body: CountTokensRequest | MessagesRequest) -> list[dict[str, Any]]:
    """The conversation as OpenAI messages (a trailing assistant message is the prefill the reply
    continues, as :func:`fucina.chat_completion._render` reads it). An assistant's ``thinking`` blocks
    become its ``reasoning_content`` (templates that keep reasoning in the history render it);
    ``redacted_thinking`` blocks are dropped."""
    out: list[dict[str, Any]] = []
    if body.system:
        blocks = [body.system] if isinstance(body.system, str) else [b.text for b in body.system]
        out.append({"role": "system", "content": "".join(_stable_billing_header(t) for t in blocks)})
    names: dict[str, str] = {}
    for i, m in enumerate(body.messages):
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(m.content):
            where = f"messages[{i}].content[{j}]"
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "document":
                texts.append(_document_text(where, block))
            elif block.type == "thinking":
                reasoning.append(block.thinking)
            elif block.type == "redacted_thinking":
                continue
            elif block.type == "image":
                raise ApiError(400, f"{where}: image input is not supported by this model", param=where)
            elif block.type == "tool_use":
                if m.role != "assistant":
                    raise ApiError(400, f"{where}: tool_use blocks belong in assistant messages", param=where)
                names[block.id] = block.name
                calls.append(
                    {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": block.input}}
                )
            else:
                if m.role != "user":
                    raise ApiError(400, f"{where}: tool_result blocks belong in user messages", param=where)
                result = _result_text(where, block.content)
                tool_msg = {"role": "tool", "tool_call_id": block.tool_use_id, "content": result}
                if block.tool_use_id in names:
                    tool_msg["name"] = names[block.tool_use_id]
                out.append(tool_msg)
        if m.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            if reasoning:
                msg["reasoning_content"] = "".join(reasoning)
            out.append(msg)
        elif texts:
            out.append({"role": "user", "content": "".join(texts)})
    if not any(m["role"] == "user" or m["role"] == "tool" for m in out):
        raise ApiError(400, "messages must hold at least one user message", param="messages")
    return _combined(out)


def _combined(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive user (or assistant) messages as one turn, as Anthropic's API combines them: user
    texts joined by a blank line, an assistant's texts, calls and reasoning concatenated (templates that require
    alternating roles render the conversation, and a prefill after an assistant message continues it)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        prev = out[-1] if out else None
        if prev is None or prev["role"] != m["role"] or m["role"] not in ("user", "assistant"):
            out.append(dict(m))
            continue
        if prev.get("tool_calls") and m["content"]:
            out.append(dict(m))  # text after calls: the template writes them in that order only as two turns
            continue
        sep = "\n\n" if m["role"] == "user" else ""  # separate questions; one reply's text, continued
        prev["content"] = sep.join(t for t in (prev["content"], m["content"]) if t)
        if m.get("tool_calls"):
            prev["tool_calls"] = [*prev.get("tool_calls", []), *m["tool_calls"]]
        if m.get("reasoning_content"):
            prev["reasoning_content"] = prev.get("reasoning_content", "") + m["reasoning_content"]
    return out


def _tools(body: CountTokensRequest | MessagesRequest) -> list[dict[str, Any]] | None:
    """The client's own tools in OpenAI's shape (Anthropic's built-in tools are skipped: their schemas
    are Claude's, and nothing here runs them)."""
    tools = []
    for i, t in enumerate(body.tools or []):
        if t.type not in (None, "custom"):
            continue
        if t.input_schema is None:
            raise ApiError(400, f"tools[{i}].input_schema: Field required", param=f"tools[{i}].input_schema")
        fn = {"name": t.name, "description": t.description or "", "parameters": t.input_schema}
        tools.append({"type": "function", "function": fn})
    return tools or None


def _tool_choice(choice: AnthropicToolChoice | None) -> str | dict[str, Any] | None:
    if choice is None or choice.type == "auto":
        return None
    if choice.type == "any":
        return "required"
    if choice.type == "none":
        return "none"
    if choice.name is None:
        raise ApiError(400, "tool_choice of type 'tool' needs a name", param="tool_choice.name")
    return {"type": "function", "function": {"name": choice.name}}


def _output_grammar(body: CountTokensRequest | MessagesRequest) -> Grammar | None:
    """The grammar of a structured-output request (``output_config.format``, or the beta's
    ``output_format``): JSON valid against its schema."""
    if not isinstance(body, MessagesRequest):
        return None
    config = body.output_config
    fmt = config.format if config is not None and config.format is not None else body.output_format
    if fmt is None:
        return None
    try:
        return Grammar.json_schema(fmt.schema_)
    except GrammarError as e:
        param = "output_config.format" if body.output_format is None else "output_format"
        raise ApiError(400, f"{param}: {e}", param=param) from None


def _prompt(
    st: ServerState, body: CountTokensRequest | MessagesRequest
) -> tuple[cc._Prompt, Grammar | None, cc._ReasoningBudget | None]:
    """The rendered prompt, the grammar of its reply (the calls ``tool_choice`` ``any`` / ``tool``
    force, else the structured output asked for; after an assistant prefill, the grammar continues it)
    and its reasoning budget (``thinking.budget_tokens``, else the server's; none after a prefill)."""
    msgs = _messages(body)
    tools = cc._tools(_tools(body), None)
    choice = cc._tool_choice(_tool_choice(body.tool_choice), None, tools)
    # Anthropic's thinking switch is the template's enable_thinking (Qwen3, Gemma 4, ...).
    thinking = None if body.thinking is None else body.thinking.type != "disabled"
    prompt = cc._render(st.llm, cc._messages(msgs), tools, choice, cc._template_kwargs(None, thinking=thinking))
    rendered = prompt
    if not cc._reasoning_format(st.reasoning_format):
        prompt = prompt.without_reasoning()
    single = body.tool_choice is not None and body.tool_choice.disable_parallel_tool_use
    grammar = cc._forced_calls(st.llm, prompt, choice, False if single else None)
    if grammar is None:
        grammar = _output_grammar(body)
    asked = body.thinking.budget_tokens if body.thinking is not None and body.thinking.type == "enabled" else None
    budget = cc._reasoning_budget(st.llm, rendered, st.reasoning_budget if asked is None else asked, grammar)
    prompt, grammar = prompt.constrained(st.llm, grammar)
    return prompt, grammar, budget


def _stop_reason(choice: Choice, parsed: ParsedReply | None, stops: list[str]) -> tuple[str, str | None]:
    if parsed is not None and parsed.tool_calls:
        return "tool_use", None
    if choice.finish_reason == "length":
        return "max_tokens", None
    if choice.stop_index is not None:
        return "stop_sequence", stops[choice.stop_index]
    return "end_turn", None


def _tool_blocks(parsed: ParsedReply | None) -> list[dict[str, Any]]:
    blocks = []
    for call in parsed.tool_calls if parsed is not None else []:
        fn = call["function"]
        try:
            args = json.loads(fn["arguments"])
        except ValueError:
            args = {}
        blocks.append({"type": "tool_use", "id": f"toolu_{secrets.token_hex(12)}", "name": fn["name"], "input": args})
    return blocks


def _usage(prompt_tokens: int, choice: Choice) -> dict[str, Any]:
    """Anthropic's usage: ``input_tokens`` counts the prompt tokens not read from the cache (clients
    add ``cache_read_input_tokens`` to get the whole prompt, as llama.cpp's server reports it too)."""
    return {
        "input_tokens": prompt_tokens - choice.cached_tokens,
        "output_tokens": choice.completion_tokens,
        "cache_read_input_tokens": choice.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


@router.post("/v1/messages", summary="Create a message (Anthropic)")
async def messages(body: MessagesRequest, request: Request) -> Any:
    st: ServerState = request.app.state.fucina
    st.check_model(body.model)
    prompt, grammar, reasoning_budget = _prompt(st, body)
    budget = completion_budget(st, len(prompt.ids), body.max_tokens, param="messages")
    stops = stop_list(body.stop_sequences, "stop_sequences")
    params = sampling_params(st, temperature=body.temperature, top_p=body.top_p, top_k=body.top_k)
    settings = Sampling(
        max_tokens=budget,
        params=params,
        stop=stops,
        stop_ids=st.llm.chat_stop_ids,
        special=prompt.special,
        processors=st.processors(body.model_dump()),
        grammar=grammar,
        reasoning_budget=reasoning_budget,
    )
    job = st.hub.submit([prompt.ids], [settings])
    msg_id = f"msg_{secrets.token_hex(12)}"
    if body.stream:
        return EventStream(_stream(job, prompt, msg_id, body.model, stops), job.close)
    choices = await gather(job, request)
    if choices is None:
        return Response(status_code=499)
    c = choices[0]
    reply = cc._reply(prompt, c.text)
    parsed = reply.parsed
    text = parsed.text if parsed is not None else reply.text
    content: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        # As llama.cpp's server: an empty signature (a local model signs nothing).
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": ""})
    if text or (parsed is None and not content):
        content.append({"type": "text", "text": text})
    content += _tool_blocks(parsed)
    reason, sequence = _stop_reason(c, parsed, stops)
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": body.model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": _usage(len(prompt.ids), c),
    }


async def _stream(job: Job, prompt: cc._Prompt, msg_id: str, model: str, stops: list[str]) -> AsyncIterator[bytes]:
    choice = Choice()
    splitter = cc._ReplyStream(prompt)
    index = 0
    open_block: str | None = None  # "thinking" or "text" while one is open

    def close_block() -> list[bytes]:
        nonlocal index, open_block
        out = []
        if open_block == "thinking":
            # Anthropic closes a thinking block with its signature (empty: nothing signs it here).
            sig = {"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": ""}}
            out.append(sse(sig, "content_block_delta"))
        if open_block is not None:
            out.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
            index += 1
        open_block = None
        return out

    def block_delta(kind: str, text: str) -> list[bytes]:
        nonlocal open_block
        out = []
        if open_block != kind:
            out += close_block()
            open_block = kind
            empty: dict[str, Any] = {"type": "text", "text": ""}
            if kind == "thinking":
                empty = {"type": "thinking", "thinking": "", "signature": ""}
            start = {"type": "content_block_start", "index": index, "content_block": empty}
            out.append(sse(start, "content_block_start"))
        body = (
            {"type": "thinking_delta", "thinking": text} if kind == "thinking" else {"type": "text_delta", "text": text}
        )
        out.append(sse({"type": "content_block_delta", "index": index, "delta": body}, "content_block_delta"))
        return out

    def deltas(think: str, text: str) -> list[bytes]:
        return (block_delta("thinking", think) if think else []) + (block_delta("text", text) if text else [])

    opened = False

    def open_message() -> list[bytes]:
        # Sent once the request started, when the prompt's cached tokens are known.
        nonlocal opened
        opened = True
        start: dict[str, Any] = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(len(prompt.ids), choice),
        }
        return [sse({"type": "message_start", "message": start}, "message_start"), sse({"type": "ping"}, "ping")]

    try:
        parsed = None
        async for _, event in job.events():
            choice.add(event)
            if not opened:
                for b in open_message():
                    yield b
            if event[0] == "token":
                for b in deltas(*splitter.feed(event[3])):
                    yield b
            elif event[0] == "finished":
                think, rest, reply = splitter.finish()
                parsed = reply.parsed
                for b in deltas(think, rest):
                    yield b
        if not opened:
            for b in open_message():
                yield b
        for b in close_block():
            yield b
        for block in _tool_blocks(parsed):
            args = block.pop("input")
            block["input"] = {}
            yield sse({"type": "content_block_start", "index": index, "content_block": block}, "content_block_start")
            delta = {"type": "input_json_delta", "partial_json": json.dumps(args, ensure_ascii=False)}
            yield sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
            yield sse({"type": "content_block_stop", "index": index}, "content_block_stop")
            index += 1
        reason, sequence = _stop_reason(choice, parsed, stops)
        final: dict[str, Any] = {"stop_reason": reason, "stop_sequence": sequence}
        usage = _usage(len(prompt.ids), choice)
        yield sse({"type": "message_delta", "delta": final, "usage": usage}, "message_delta")
        yield sse({"type": "message_stop"}, "message_stop")
    except ApiError as e:
        kind = "invalid_request_error" if e.status < 500 else "api_error"
        yield sse({"type": "error", "error": {"type": kind, "message": e.message}}, "error")


@router.post("/v1/messages/count_tokens", summary="Count a message's input tokens (Anthropic)")
async def count_tokens(body: CountTokensRequest, request: Request) -> dict[str, Any]:
    st: ServerState = request.app.state.fucina
    st.check_model(body.model)
    return {"input_tokens": len(_prompt(st, body)[0].ids)}
