"""Anthropic's Messages API: ``POST /v1/messages`` (streamed or not) and
``POST /v1/messages/count_tokens``.

Messages are turned into the OpenAI shape :mod:`fucina.chat_completion` renders: ``system`` becomes
a system message, ``tool_use`` blocks an assistant's ``tool_calls``, ``tool_result`` blocks ``tool``
messages; tools are offered through the model's template and calls parsed back into ``tool_use``
blocks. A final assistant message is a prefill: the reply continues it. ``stop_reason`` is
``end_turn``, ``max_tokens``, ``stop_sequence`` (with the matched ``stop_sequence``) or ``tool_use``.
A stream sends Anthropic's events in order: ``message_start``, ``ping``, per content block
``content_block_start`` / ``content_block_delta``... / ``content_block_stop``, then ``message_delta``
and ``message_stop``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import chat_completion as cc
from ..grammar import Grammar
from ..tool_calls import ParsedReply
from .anthropic_schema import AnthropicToolChoice, CountTokensRequest, MessagesRequest
from .common import ServerState, completion_budget, gather, sampling_params, stop_list
from .errors import ApiError
from .hub import Choice, Job, Sampling
from .streaming import EventStream, sse

__all__ = ["router"]

router = APIRouter()


def _messages(body: CountTokensRequest | MessagesRequest) -> tuple[list[dict[str, Any]], str]:
    """The conversation as OpenAI messages, and the trailing assistant prefill ("" if none)."""
    out: list[dict[str, Any]] = []
    if body.system:
        system = body.system if isinstance(body.system, str) else "".join(b.text for b in body.system)
        out.append({"role": "system", "content": system})
    names: dict[str, str] = {}
    for i, m in enumerate(body.messages):
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(m.content):
            where = f"messages[{i}].content[{j}]"
            if block.type == "text":
                texts.append(block.text)
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
                content = block.content
                result = content if isinstance(content, str) else "".join(t.text for t in content or [])
                tool_msg = {"role": "tool", "tool_call_id": block.tool_use_id, "content": result}
                if block.tool_use_id in names:
                    tool_msg["name"] = names[block.tool_use_id]
                out.append(tool_msg)
        if m.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif texts:
            out.append({"role": "user", "content": "".join(texts)})
    prefill = ""
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
        prefill = str(last["content"])
        out.pop()
    if not any(m["role"] != "system" for m in out):
        raise ApiError(400, "messages must hold at least one user message", param="messages")
    return out, prefill


def _tools(body: CountTokensRequest | MessagesRequest) -> list[dict[str, Any]] | None:
    if not body.tools:
        return None
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema},
        }
        for t in body.tools
    ]


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


def _prompt(st: ServerState, body: CountTokensRequest | MessagesRequest) -> tuple[cc._Prompt, Grammar | None]:
    """The rendered prompt and the grammar that enforces ``tool_choice`` ``any`` / ``tool`` (none after
    an assistant prefill, which already fixes how the reply starts)."""
    msgs, prefill = _messages(body)
    tools = cc._tools(_tools(body), None)
    choice = cc._tool_choice(_tool_choice(body.tool_choice), None, tools)
    # Anthropic's thinking switch is the template's enable_thinking (Qwen3, Gemma 4, ...).
    thinking = None if body.thinking is None else body.thinking.type != "disabled"
    prompt = cc._render(st.llm, cc._messages(msgs), tools, choice, cc._template_kwargs(None, thinking=thinking))
    if not cc._reasoning_format(st.reasoning_format):
        prompt = prompt.without_reasoning()
    if prefill:
        # The prefill fixes how the reply starts: no reasoning block is looked for after it.
        extra = st.llm.tokenize(prefill, add_special=False)
        return cc._Prompt(prompt.ids + extra, prompt.tools, prompt.format), None
    single = body.tool_choice is not None and body.tool_choice.disable_parallel_tool_use
    grammar = cc._forced_calls(st.llm, prompt, choice, False if single else None)
    return prompt.constrained(grammar), grammar


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
    return {
        "input_tokens": prompt_tokens,
        "output_tokens": choice.completion_tokens,
        "cache_read_input_tokens": choice.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


@router.post("/v1/messages", summary="Create a message (Anthropic)")
async def messages(body: MessagesRequest, request: Request) -> Any:
    st: ServerState = request.app.state.fucina
    st.check_model(body.model)
    prompt, grammar = _prompt(st, body)
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

    start: dict[str, Any] = {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": len(prompt.ids), "output_tokens": 0},
    }
    try:
        yield sse({"type": "message_start", "message": start}, "message_start")
        yield sse({"type": "ping"}, "ping")
        parsed = None
        async for _, event in job.events():
            choice.add(event)
            if event[0] == "token":
                for b in deltas(*splitter.feed(event[3])):
                    yield b
            elif event[0] == "finished":
                think, rest, reply = splitter.finish()
                parsed = reply.parsed
                for b in deltas(think, rest):
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
        usage = {"output_tokens": choice.completion_tokens}
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
