"""``POST /v1/responses``: OpenAI's Responses API over the chat pipeline, as llama.cpp's server offers it.

The request's ``instructions`` and ``input`` (a string, or items: messages, ``function_call`` and
``function_call_output`` items, and ``reasoning`` items, the ``reasoning_content`` of the assistant turn
they open) become chat messages; ``tools`` (function tools; built-in ones are
skipped), ``tool_choice``, ``text.format`` (JSON / JSON Schema answers) and ``max_output_tokens`` map to
their chat fields, and the request runs exactly as ``/v1/chat/completions`` runs it
(:func:`fucina.server.openai_chat.submit`). The answer is a ``response`` object whose ``output`` holds
a ``reasoning`` item (a thinking model's reasoning), a ``message`` item with the ``output_text`` and one
``function_call`` item per call. The server keeps no state: ``previous_response_id`` is a 400 (send the
history in ``input``), and ``store`` is ignored.

A stream sends the Responses events in OpenAI's order, each with its ``sequence_number``:
``response.created``, ``response.in_progress``, per output item ``response.output_item.added``, its
content part (``response.content_part.added``), the text deltas (``response.reasoning_text.delta`` /
``response.output_text.delta``, or ``response.function_call_arguments.delta``), their ``.done`` events,
``response.output_item.done``, and last ``response.completed`` with the whole response (its ``status``
``incomplete`` when ``max_output_tokens`` cut it short, as llama.cpp's server reports it).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from .. import chat_completion as cc
from .common import ServerState, gather
from .errors import ApiError
from .hub import Choice, Job
from .openai_chat import submit
from .openai_schema import ChatCompletionRequest, ResponsesAllowedTools, ResponsesRequest
from .streaming import EventStream, sse

__all__ = ["router"]

router = APIRouter()

_SAMPLING = (
    "temperature",
    "top_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "top_k",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "repeat_last_n",
    "ignore_eos",
)


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _text(where: str, content: Any, kinds: tuple[str, ...]) -> str:
    """A message item's text: a string, or its text parts (``kinds``) joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a string or a list of content parts", param=where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_image", "input_file", "input_audio"):
            raise ApiError(400, f"{where}.content[{j}]: {kind} is not supported by this model", param=where)
        if kind not in kinds or not isinstance(part.get("text"), str):
            names = " or ".join(kinds)
            raise ApiError(400, f"{where}.content[{j}] must be a {names} part with a text", param=where)
        texts.append(part["text"])
    return "".join(texts)


def _reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's text: its ``reasoning_text`` parts, else its summary's (encrypted content is
    not ours to read)."""
    for key, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = item.get(key)
        if isinstance(parts, list):
            text = "".join(
                p["text"]
                for p in parts
                if isinstance(p, dict) and p.get("type") == kind and isinstance(p.get("text"), str)
            )
            if text:
                return text
    return ""


def _messages(body: ResponsesRequest) -> list[dict[str, Any]]:
    """``instructions`` and ``input`` as chat messages (calls merged into the assistant turn they end)."""
    out: list[dict[str, Any]] = []
    if body.instructions:
        out.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        return [*out, {"role": "user", "content": body.input}]
    names: dict[str, str] = {}

    def assistant() -> dict[str, Any]:
        if not out or out[-1]["role"] != "assistant":
            out.append({"role": "assistant", "content": ""})
        return out[-1]

    for i, item in enumerate(body.input):
        where = f"input[{i}]"
        kind, role = item.get("type"), item.get("role")
        if role in ("user", "system", "developer") and kind in (None, "message"):
            text = _text(where, item.get("content"), ("input_text", "output_text", "text"))
            out.append({"role": "system" if role == "developer" else role, "content": text})
        elif role == "assistant" and kind in (None, "message"):
            text = _text(where, item.get("content"), ("output_text", "input_text", "text", "refusal"))
            msg = assistant()
            msg["content"] += text
        elif kind == "function_call":
            call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
            if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
                raise ApiError(400, f"{where}: a function_call needs call_id, name and arguments strings", param=where)
            names[call_id] = name
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            assistant().setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise ApiError(400, f"{where}: a function_call_output needs a call_id string", param=where)
            result = output if isinstance(output, str) else _text(where, output, ("input_text", "output_text"))
            tool: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": result}
            if call_id in names:
                tool["name"] = names[call_id]
            out.append(tool)
        elif kind == "reasoning":
            # The reasoning of the assistant turn it opens: templates that keep the reasoning of the turn
            # in progress (Qwen3's, ...) render it; the rest drop it.
            text = _reasoning_text(item)
            if text:
                msg = assistant()
                msg["reasoning_content"] = msg.get("reasoning_content", "") + text
        else:
            raise ApiError(
                400,
                f"{where}: not an input item this server knows (a message, function_call, function_call_output "
                "or reasoning item)",
                param=where,
            )
    return out


def _chat_body(body: ResponsesRequest) -> ChatCompletionRequest:
    if body.previous_response_id is not None:
        raise ApiError(
            400,
            "previous_response_id is not supported: this server stores no responses, send the history in input",
            param="previous_response_id",
        )
    if body.n != 1:
        raise ApiError(400, "n must be 1 for the Responses API", param="n")
    chat: dict[str, Any] = {"model": body.model, "messages": _messages(body)}
    chat.update({k: getattr(body, k) for k in _SAMPLING if getattr(body, k) is not None})
    if body.max_output_tokens is not None:
        chat["max_tokens"] = body.max_output_tokens
    tools = [t for t in body.tools or [] if t.type == "function"]
    for i, t in enumerate(tools):
        if t.name is None:
            raise ApiError(400, f"tools[{i}]: a function tool needs a name", param=f"tools[{i}].name")
    if tools:
        chat["tools"] = [
            {"type": "function", "function": t.model_dump(exclude_none=True, exclude={"type"})} for t in tools
        ]
    choice = body.tool_choice
    if isinstance(choice, ResponsesAllowedTools):
        allowed = {"mode": choice.mode, "tools": choice.tools}
        chat["tool_choice"] = {"type": "allowed_tools", "allowed_tools": allowed}
    elif choice is not None and (tools or isinstance(choice, str)):
        chat["tool_choice"] = (
            choice if isinstance(choice, str) else {"type": "function", "function": {"name": choice.name}}
        )
    if body.parallel_tool_calls is not None:
        chat["parallel_tool_calls"] = body.parallel_tool_calls
    fmt = body.text.format if body.text is not None else None
    if fmt is not None and fmt.type != "text":
        spec: dict[str, Any] = {"type": fmt.type}
        if fmt.type == "json_schema":
            spec["json_schema"] = {"name": fmt.name or "response", "schema": fmt.schema_, "strict": fmt.strict}
        chat["response_format"] = spec
    for key in ("chat_template_kwargs", "reasoning_format"):
        if getattr(body, key) is not None:
            chat[key] = getattr(body, key)
    if body.reasoning is not None and body.reasoning.effort is not None:
        chat["reasoning_effort"] = body.reasoning.effort
    try:
        return ChatCompletionRequest.model_validate(chat)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise ApiError(400, f"{field}: {err['msg']}", param=field) from None


class _Items:
    """The response's output items (ids fixed when an item is made, as a stream opens it)."""

    @staticmethod
    def reasoning(text: str = "") -> dict[str, Any]:
        part = {"type": "reasoning_text", "text": text}
        return {"id": _id("rs"), "type": "reasoning", "summary": [], "content": [part], "status": "completed"}

    @staticmethod
    def message(text: str = "") -> dict[str, Any]:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        return {"id": _id("msg"), "type": "message", "role": "assistant", "status": "completed", "content": [part]}

    @staticmethod
    def call(call: dict[str, Any]) -> dict[str, Any]:
        fn = call["function"]
        return {
            "id": _id("fc"),
            "type": "function_call",
            "status": "completed",
            "call_id": call["id"],
            "name": fn["name"],
            "arguments": fn["arguments"],
        }


def _outputs(reply: cc._Reply) -> list[dict[str, Any]]:
    items = _Items()
    out = []
    if reply.reasoning:
        out.append(items.reasoning(reply.reasoning))
    parsed = reply.parsed
    text = (parsed.content or "") if parsed is not None and parsed.tool_calls else reply.text
    if text or (not out and not (parsed and parsed.tool_calls)):
        out.append(items.message(text))
    out += [items.call(c) for c in parsed.tool_calls] if parsed is not None else []
    return out


def _response(
    body: ResponsesRequest,
    resp_id: str,
    created: int,
    output: list[dict[str, Any]],
    choice: Choice | None,
    n_prompt: int,
) -> dict[str, Any]:
    incomplete = choice is not None and choice.finish_reason == "length"
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    response: dict[str, Any] = {
        "id": resp_id,
        "object": "response",
        "created_at": created,
        "status": "in_progress" if choice is None else "incomplete" if incomplete else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "model": body.model,
        "output": output,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": None,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "store": False,
        "temperature": body.temperature,
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
        "tool_choice": body.tool_choice.model_dump()
        if not isinstance(body.tool_choice, str | None)
        else (body.tool_choice or "auto"),
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or [] if t.type == "function"],
        "top_p": body.top_p,
        "truncation": "disabled",
        "metadata": body.metadata or {},
        "usage": None,
    }
    if choice is not None:
        response["usage"] = {
            "input_tokens": n_prompt,
            "input_tokens_details": {"cached_tokens": choice.cached_tokens},
            "output_tokens": choice.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": n_prompt + choice.completion_tokens,
        }
    return response


@router.post("/v1/responses", summary="Create a model response (OpenAI Responses API)")
async def responses(body: ResponsesRequest, request: Request) -> Any:
    st: ServerState = request.app.state.fucina
    prompt, job = submit(st, _chat_body(body))
    resp_id, created = _id("resp"), int(time.time())
    if body.stream:
        return EventStream(_stream(job, prompt, body, resp_id, created), job.close)
    choices = await gather(job, request)
    if choices is None:
        return Response(status_code=499)
    (c,) = choices
    return _response(body, resp_id, created, _outputs(cc._reply(prompt, c.text)), c, len(prompt.ids))


async def _stream(
    job: Job, prompt: cc._Prompt, body: ResponsesRequest, resp_id: str, created: int
) -> AsyncIterator[bytes]:
    seq = 0
    done: list[dict[str, Any]] = []
    items = _Items()
    current: dict[str, Any] | None = None  # the reasoning or message item being streamed

    def event(kind: str, **data: Any) -> bytes:
        nonlocal seq
        seq += 1
        return sse({"type": kind, "sequence_number": seq - 1, **data}, kind)

    def open_item(item: dict[str, Any]) -> list[bytes]:
        nonlocal current
        current = item
        index = len(done)
        part = {**item["content"][0]}
        added = {**item, "status": "in_progress", "content": []}
        return [
            event("response.output_item.added", output_index=index, item=added),
            event("response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part),
        ]

    def close_item() -> list[bytes]:
        nonlocal current
        if current is None:
            return []
        item, current = current, None
        index, part = len(done), item["content"][0]
        kind = "reasoning_text" if item["type"] == "reasoning" else "output_text"
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        done.append(item)
        return [
            event(f"response.{kind}.done", **ids, text=part["text"], **extra),
            event("response.content_part.done", **ids, part=part),
            event("response.output_item.done", output_index=index, item=item),
        ]

    def delta(kind: str, text: str) -> list[bytes]:
        out = []
        if current is None or current["type"] != kind:
            out += close_item()
            out += open_item(items.reasoning() if kind == "reasoning" else items.message())
        assert current is not None
        current["content"][0]["text"] += text
        name = "reasoning_text" if kind == "reasoning" else "output_text"
        extra: dict[str, Any] = {"logprobs": []} if kind == "message" else {}
        ids = {"item_id": current["id"], "output_index": len(done), "content_index": 0}
        out.append(event(f"response.{name}.delta", **ids, delta=text, **extra))
        return out

    def deltas(think: str, text: str) -> list[bytes]:
        return (delta("reasoning", think) if think else []) + (delta("message", text) if text else [])

    splitter = cc._ReplyStream(prompt)
    choice = Choice()
    try:
        start = _response(body, resp_id, created, [], None, len(prompt.ids))
        yield event("response.created", response=start)
        yield event("response.in_progress", response=start)
        reply = None
        async for _, ev in job.events():
            choice.add(ev)
            if ev[0] == "token":
                for b in deltas(*splitter.feed(ev[3])):
                    yield b
            elif ev[0] == "finished":
                think, rest, reply = splitter.finish()
                for b in deltas(think, rest):
                    yield b
        for b in close_item():
            yield b
        calls = reply.parsed.tool_calls if reply is not None and reply.parsed is not None else []
        if not done and not calls:
            for b in open_item(items.message()) + close_item():
                yield b
        for call in calls:
            item, index = _Items.call(call), len(done)
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            ids = {"item_id": item["id"], "output_index": index}
            yield event("response.function_call_arguments.delta", **ids, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **ids, name=item["name"], arguments=item["arguments"])
            yield event("response.output_item.done", output_index=index, item=item)
            done.append(item)
        yield event("response.completed", response=_response(body, resp_id, created, done, choice, len(prompt.ids)))
    except ApiError as e:
        yield event("error", code=e.code or "invalid_request_error", message=e.message, param=e.param)
