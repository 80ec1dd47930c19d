"""``POST /v1/chat/completions``: OpenAI chat completions on the scheduler, streamed or not.

The request is checked and rendered exactly as :meth:`fucina.LLM.create_chat_completion` does it
(:mod:`fucina.chat_completion`: messages, tools offered through the model's template, the call syntax
it teaches parsed back into ``tool_calls``); the generation runs on the scheduler. A stream sends a
first ``{"role": "assistant"}`` delta per choice, ``reasoning_content`` deltas for a thinking model's
reasoning (llama.cpp's ``reasoning_format``, ``"none"`` keeps it in the content), content deltas as
text becomes final (text that may start a tool call is held back), one ``tool_calls`` delta with each
call whole, a last empty delta with ``finish_reason``, an optional usage chunk
(``stream_options.include_usage``) and ``[DONE]``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import chat_completion as cc
from .common import (
    ServerState,
    cached_tokens,
    completion_budget,
    gather,
    openai_usage,
    prediction_ids,
    request_sampling,
    stop_list,
)
from .constraints import request_grammar
from .errors import ApiError, openai_error_body
from .hub import Choice, Job, Sampling
from .openai_schema import AllowedToolsChoice, ChatCompletionRequest, ChatMessage, NamedFunction, NamedToolChoice
from .streaming import EventStream, sse

__all__ = ["router", "chat_messages", "submit"]

router = APIRouter()


def chat_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """OpenAI messages as the dicts :mod:`fucina.chat_completion` checks (``developer`` is ``system``,
    the legacy ``function`` role is ``tool``, answering the legacy ``function_call`` before it, which
    becomes that assistant message's one tool call)."""
    out: list[dict[str, Any]] = []
    legacy_id: str | None = None
    for i, m in enumerate(messages):
        d = m.model_dump(exclude_none=True)
        d["role"] = {"developer": "system", "function": "tool"}.get(m.role, m.role)
        call = d.pop("function_call", None)
        if call is not None and m.role == "assistant" and not m.tool_calls:
            legacy_id = f"call_{i}"
            d["tool_calls"] = [{"id": legacy_id, "type": "function", "function": call}]
        elif m.role == "function" and m.tool_call_id is None and legacy_id is not None:
            d["tool_call_id"] = legacy_id
        out.append(d)
    return out


def _legacy_tools(body: ChatCompletionRequest) -> tuple[list[dict[str, Any]] | None, Any]:
    """``tools`` and ``tool_choice``, from the legacy ``functions`` and ``function_call`` if given."""
    if body.functions is None:
        if body.function_call is not None:
            raise ApiError(400, "function_call needs functions", param="function_call")
        tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
        return tools, body.tool_choice
    if body.tools is not None:
        raise ApiError(400, "pass tools or the legacy functions, not both", param="functions")
    if body.tool_choice is not None:
        raise ApiError(400, "pass tool_choice or the legacy function_call, not both", param="function_call")
    tools = [{"type": "function", "function": f.model_dump(exclude_none=True)} for f in body.functions]
    call = body.function_call
    choice = call if not isinstance(call, NamedFunction) else {"type": "function", "function": call.model_dump()}
    return tools, choice


def _legacy_message(message: dict[str, Any]) -> dict[str, Any]:
    """A reply's message in the legacy ``functions`` API: its first call as ``function_call``."""
    calls = message.pop("tool_calls", None)
    if calls:
        message["function_call"] = calls[0]["function"]
    return message


def _legacy_finish(finish: str | None) -> str | None:
    return "function_call" if finish == "tool_calls" else finish


def _usage(prompt_tokens: int, choices: list[Choice], predicted: bool = False) -> dict[str, Any]:
    return openai_usage(prompt_tokens, cached_tokens(choices), choices, predicted)


def _allowed(tools: list[dict[str, Any]] | None, choice: AllowedToolsChoice) -> list[dict[str, Any]]:
    """The tools an ``allowed_tools`` choice lets the model call (each named as a chat tool choice,
    ``{"type": "function", "function": {"name": ...}}``, or as the Responses API names it)."""
    offered = {t["function"]["name"]: t for t in tools or []}
    out = []
    for i, entry in enumerate(choice.allowed_tools.tools):
        fn = entry.get("function")
        name = fn.get("name") if isinstance(fn, dict) else entry.get("name")
        if not isinstance(name, str) or name not in offered:
            where = f"tool_choice.allowed_tools.tools[{i}]"
            raise ApiError(400, f"{where} names {name!r}, which is not one of the tools", param=where)
        out.append(offered[name])
    return out


def submit(st: ServerState, body: ChatCompletionRequest) -> tuple[cc._Prompt, Job]:
    """Check and render a chat request and put it on the scheduler (the chat and Responses routes)."""
    st.check_model(body.model)
    answer_format, grammar_param = request_grammar(body)
    processors = st.processors(body.model_dump())
    llm = st.llm
    msgs = cc._messages(chat_messages(body.messages))
    offered, tool_choice = _legacy_tools(body)
    tools = cc._tools(offered, None)
    if isinstance(tool_choice, AllowedToolsChoice):
        tools, tool_choice = _allowed(tools, tool_choice), tool_choice.allowed_tools.mode
    choice = cc._tool_choice(
        tool_choice.model_dump() if isinstance(tool_choice, NamedToolChoice) else tool_choice, None, tools
    )
    if body.grammar and tools and choice != "none":
        # llama.cpp's refusal: the tools' call syntax and a user grammar cannot both shape the reply.
        raise ApiError(
            400, "a custom grammar cannot be used with tools (tool_choice 'none' leaves them out)", param="grammar"
        )
    if body.top_logprobs is not None and not body.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    n_logprobs = (body.top_logprobs or 0) if body.logprobs else None
    kwargs = cc._template_kwargs(body.chat_template_kwargs, reasoning_effort=body.reasoning_effort)
    prompt = cc._render(llm, msgs, tools, choice, kwargs, body.continue_final_message)
    rendered = prompt
    if not cc._reasoning_format(body.reasoning_format or st.reasoning_format):
        prompt = prompt.without_reasoning()
    # A forced call is the whole reply: response_format shapes answers, and there is none to shape.
    parallel = False if body.functions is not None else body.parallel_tool_calls
    forced = cc._forced_calls(llm, prompt, choice, parallel)
    grammar = forced or answer_format
    if forced is not None:
        grammar_param = "tool_choice"
    prompt, grammar = prompt.constrained(llm, grammar)
    budget_tokens = next(
        (b for b in (body.reasoning_budget_tokens, body.thinking_budget_tokens) if b is not None), st.reasoning_budget
    )
    reasoning_budget = cc._reasoning_budget(llm, rendered, budget_tokens, grammar, body.reasoning_budget_message or "")
    requested = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    budget = completion_budget(st, len(prompt.ids), requested, param="messages")
    params = request_sampling(st, body)
    special = prompt.special
    settings = Sampling(
        max_tokens=budget,
        params=params,
        stop=stop_list(body.stop),
        stop_ids=llm.chat_stop_ids,
        logprobs=n_logprobs,
        special=special,
        ignore_eos=body.ignore_eos,
        processors=processors,
        grammar=grammar,
        grammar_param=grammar_param,
        reasoning_budget=reasoning_budget,
        reference=prediction_ids(st, body.prediction),
    )
    return prompt, st.hub.submit([prompt.ids], [settings], n=body.n)


@router.post("/v1/chat/completions", summary="Create a chat completion (OpenAI)")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
    st: ServerState = request.app.state.fucina
    prompt, job = submit(st, body)
    llm, special = st.llm, prompt.special
    n_logprobs = (body.top_logprobs or 0) if body.logprobs else None
    meta = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": body.model}
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        predicted = body.prediction is not None
        chunks = _stream(
            st, job, prompt, meta, n_logprobs is not None, include_usage, body.functions is not None, predicted
        )
        return EventStream(chunks, job.close)
    choices = await gather(job, request)
    if choices is None:
        return Response(status_code=499)
    out = []
    for i, c in enumerate(choices):
        reply = cc._reply(prompt, c.text)
        lp = None
        if n_logprobs is not None:
            rows = cc._LogprobRows(llm, special)
            for token, entry in c.logprobs:
                rows.add(token, entry)
            lp = rows.take() or {"content": [], "refusal": None}
        message, finish = reply.message(), reply.finish_reason(c.finish_reason)
        if body.functions is not None:
            message, finish = _legacy_message(message), _legacy_finish(finish)
        out.append({"index": i, "message": message, "logprobs": lp, "finish_reason": finish})
    usage = _usage(len(prompt.ids), choices, body.prediction is not None)
    return {**meta, "object": "chat.completion", "choices": out, "usage": usage}


async def _stream(
    st: ServerState,
    job: Job,
    prompt: Any,
    meta: dict[str, Any],
    logprobs: bool,
    include_usage: bool,
    legacy: bool,
    predicted: bool = False,
) -> AsyncIterator[bytes]:
    llm = st.llm
    n = len(job.requests)
    splitters = [cc._ReplyStream(prompt) for _ in range(n)]
    rows = [cc._LogprobRows(llm, prompt.special) if logprobs else None for _ in range(n)]
    choices = [Choice() for _ in range(n)]
    extra = {"usage": None} if include_usage else {}

    def chunk(i: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        r = rows[i]
        lp = r.take() if r is not None else None
        choice = {"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish}
        return sse({**meta, "object": "chat.completion.chunk", "choices": [choice], **extra})

    try:
        for i in range(n):
            yield chunk(i, {"role": "assistant", "content": ""})
        async for i, event in job.events():
            choices[i].add(event)
            if event[0] == "token":
                _, token, emitted, text, _, lp, _ = event
                r = rows[i]
                if r is not None and emitted and lp is not None:
                    r.add(token, lp)
                delta = cc._deltas(*splitters[i].feed(text))
                if delta or (r is not None and r.rows):
                    yield chunk(i, delta or {"content": ""})
            elif event[0] == "finished":
                think, rest, reply = splitters[i].finish()
                if think or rest:
                    yield chunk(i, cc._deltas(think, rest))
                finish = reply.finish_reason(choices[i].finish_reason)
                if reply.parsed is not None and reply.parsed.tool_calls:
                    calls = reply.parsed.tool_calls
                    if legacy:
                        yield chunk(i, {"function_call": calls[0]["function"]})
                    else:
                        yield chunk(i, {"tool_calls": [{"index": k, **call} for k, call in enumerate(calls)]})
                yield chunk(i, {}, _legacy_finish(finish) if legacy else finish)
        if include_usage:
            usage = _usage(len(prompt.ids), choices, predicted)
            yield sse({**meta, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"
    except ApiError as e:
        yield sse(openai_error_body(e.status, e.message, e.param, e.code))
        yield b"data: [DONE]\n\n"
