"""OpenAI's other routes: ``/v1/completions`` (streamed or not), ``/v1/models``, ``/v1/embeddings``;
and llama.cpp's server utilities ``/tokenize``, ``/detokenize`` and ``/health``.

Text completions take a prompt as a string, a list of strings, token ids or a list of token-id
lists; every prompt gets ``n`` choices (index ``prompt * n + j``). ``echo`` prepends the prompt's
text; ``logprobs=N`` reports each generated token's log-probability and its top ``N`` alternatives
in OpenAI's ``tokens`` / ``token_logprobs`` / ``top_logprobs`` / ``text_offset`` shape.
"""

from __future__ import annotations

import base64
import math
import struct
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..llm import _Logprobs
from .common import (
    ServerState,
    cached_tokens,
    completion_budget,
    drain,
    gather,
    openai_usage,
    prediction_ids,
    request_sampling,
    stop_list,
)
from .constraints import request_grammar
from .errors import ApiError, openai_error_body
from .hub import Choice, Job, Sampling, raise_event_error
from .openai_schema import CompletionRequest, DetokenizeRequest, EmbeddingRequest, TokenizeRequest
from .streaming import EventStream, sse

__all__ = ["router"]

router = APIRouter()
_MAX_INPUTS = 256
"""Most prompts (or embedding inputs) in one request."""


def _state(request: Request) -> ServerState:
    st: ServerState = request.app.state.fucina
    return st


def _token_lists(st: ServerState, value: str | list[str] | list[int] | list[list[int]], param: str) -> list[list[int]]:
    """Prompts (or inputs) as token-id lists: texts tokenized with BOS, ids checked."""
    llm = st.llm
    items: list[str | list[int]]
    if isinstance(value, str):
        items = [value]
    elif value and all(isinstance(v, int) for v in value):
        items = [[int(v) for v in value]]  # type: ignore[arg-type]
    else:
        items = list(value)  # type: ignore[arg-type]
    if len(items) > _MAX_INPUTS:
        raise ApiError(400, f"{param} has {len(items)} items; at most {_MAX_INPUTS}", param=param)
    out: list[list[int]] = []
    for i, item in enumerate(items):
        ids = llm.tokenize(item) if isinstance(item, str) else item
        if not ids:
            raise ApiError(400, f"{param}[{i}] is empty", param=param)
        bad = next((t for t in ids if not 0 <= t < llm.n_vocab), None)
        if bad is not None:
            raise ApiError(
                400, f"{param}[{i}] holds token id {bad}, outside the vocabulary of {llm.n_vocab}", param=param
            )
        out.append(ids)
    return out


class _Pieces:
    """OpenAI completion logprobs, token by token (pieces decoded as the engine's text is)."""

    def __init__(self, st: ServerState) -> None:
        self._llm = st.llm

    def entry(self, lp: _Logprobs, token: int, entry: tuple[float, list[tuple[int, float]]], offset: int) -> int:
        piece = self._llm._piece(token)
        lp.add(piece, offset, entry[0], {self._llm._piece(t): v for t, v in entry[1]})
        return len(piece)


@router.post("/v1/completions", summary="Create a text completion (OpenAI)")
async def completions(body: CompletionRequest, request: Request) -> Any:
    st = _state(request)
    st.check_model(body.model)
    if body.suffix:
        raise ApiError(400, "suffix (fill-in-the-middle) is not supported", param="suffix")
    if body.best_of is not None and body.best_of != body.n:
        raise ApiError(400, "best_of must equal n (ranking candidates is not supported)", param="best_of")
    if body.echo and body.logprobs is not None:
        raise ApiError(400, "echo with logprobs (the prompt's logprobs) is not supported", param="echo")
    prompts = _token_lists(st, body.prompt, "prompt")
    grammar, grammar_param = request_grammar(body)
    params = request_sampling(st, body)
    stops = stop_list(body.stop)
    processors = st.processors(body.model_dump())
    reference = prediction_ids(st, body.prediction)
    settings = [
        Sampling(
            max_tokens=completion_budget(st, len(p), body.max_tokens, param="prompt"),
            params=params,
            stop=stops,
            logprobs=body.logprobs,
            ignore_eos=body.ignore_eos,
            processors=processors,
            grammar=grammar,
            grammar_param=grammar_param,
            reference=reference,
        )
        for p in prompts
    ]
    texts = [st.llm.detokenize(p) if body.echo else "" for p in prompts]
    if body.max_tokens == 0:
        # Nothing to generate: the echo (or nothing), as OpenAI answers.
        return _completion_body(st, body, prompts, texts, [Choice(finish_reason="length") for _ in prompts])
    job = st.hub.submit(prompts, settings, n=body.n)
    meta = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time())}
    meta["model"] = body.model
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return EventStream(_stream(st, job, meta, body, prompts, texts, include_usage), job.close)
    choices = await gather(job, request)
    if choices is None:
        return Response(status_code=499)
    return _completion_body(st, body, prompts, texts, choices, meta)


def _usage(prompts: list[list[int]], choices: list[Choice], predicted: bool = False) -> dict[str, Any]:
    cached = cached_tokens(choices, len(prompts))
    return openai_usage(sum(len(p) for p in prompts), cached, choices, predicted)


def _completion_body(
    st: ServerState,
    body: CompletionRequest,
    prompts: list[list[int]],
    texts: list[str],
    choices: list[Choice],
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta = meta or {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time())}
    n = len(choices) // max(len(prompts), 1)
    out = []
    pieces = _Pieces(st)
    for i, c in enumerate(choices):
        echo = texts[i // n] if n else ""
        lp = None
        if body.logprobs is not None:
            lp = _Logprobs()
            offset = len(echo)
            for token, entry in c.logprobs:
                offset += pieces.entry(lp, token, entry, offset)
        out.append(
            {
                "index": i,
                "text": echo + c.text,
                "logprobs": lp.as_dict() if lp is not None else None,
                "finish_reason": c.finish_reason,
            }
        )
    usage = _usage(prompts, choices, body.prediction is not None)
    return {"model": body.model, **meta, "choices": out, "usage": usage}


async def _stream(
    st: ServerState,
    job: Job,
    meta: dict[str, Any],
    body: CompletionRequest,
    prompts: list[list[int]],
    texts: list[str],
    include_usage: bool,
) -> AsyncIterator[bytes]:
    n_choices = len(job.requests)
    n = n_choices // len(prompts)
    choices = [Choice() for _ in range(n_choices)]
    offsets = [len(texts[i // n]) for i in range(n_choices)]
    pieces = _Pieces(st)
    extra = {"usage": None} if include_usage else {}

    def chunk(i: int, text: str, lp: _Logprobs | None, finish: str | None) -> bytes:
        choice = {"index": i, "text": text, "logprobs": lp.as_dict() if lp else None, "finish_reason": finish}
        return sse({**meta, "choices": [choice], **extra})

    try:
        for i in range(n_choices):
            if texts[i // n]:
                yield chunk(i, texts[i // n], None, None)
        async for i, event in job.events():
            choices[i].add(event)
            if event[0] != "token":
                continue
            _, token, emitted, text, finish, entry, _ = event
            lp = None
            if body.logprobs is not None and emitted and entry is not None:
                lp = _Logprobs()
                pieces.entry(lp, token, entry, offsets[i])
            offsets[i] += len(text)
            if text or finish is not None or lp is not None:
                yield chunk(i, text, lp, finish)
        if include_usage:
            yield sse({**meta, "choices": [], "usage": _usage(prompts, choices, body.prediction is not None)})
        yield b"data: [DONE]\n\n"
    except ApiError as e:
        yield sse(openai_error_body(e.status, e.message, e.param, e.code))
        yield b"data: [DONE]\n\n"


@router.get("/v1/models", summary="List the served model (OpenAI)")
async def list_models(request: Request) -> dict[str, Any]:
    st = _state(request)
    return {"object": "list", "data": [_model_card(st, st.model_id)]}


@router.get("/v1/models/{model_id:path}", summary="Describe the served model (OpenAI)")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    st = _state(request)
    st.check_model(model_id)
    return _model_card(st, model_id)


def _model_card(st: ServerState, name: str) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": st.created,
        "owned_by": "fucina",
        "meta": {"n_ctx": st.n_ctx, "n_vocab": st.llm.n_vocab, "n_embd": st.llm.model.n_embd},
    }


def _shortened(vector: list[float], dimensions: int) -> list[float]:
    """OpenAI's ``dimensions``: the first ``dimensions`` components, scaled back to unit length (what
    Matryoshka-trained embedding models, Qwen3-Embedding among them, are made for)."""
    head = vector[:dimensions]
    norm = math.sqrt(sum(x * x for x in head))
    return [x / norm for x in head] if norm > 0 else head


@router.post("/v1/embeddings", summary="Create embeddings (OpenAI): pooled final hidden states")
async def embeddings(body: EmbeddingRequest, request: Request) -> Any:
    st = _state(request)
    st.check_model(body.model)
    n_embd = st.llm.model.n_embd
    if body.dimensions is not None and body.dimensions > n_embd:
        raise ApiError(400, f"dimensions must be at most {n_embd} (the model's width)", param="dimensions")
    inputs = _token_lists(st, body.input, "input")
    for i, ids in enumerate(inputs):
        if len(ids) > st.n_ctx:
            raise ApiError(
                400,
                f"input[{i}] has {len(ids)} tokens; this model's maximum context length is {st.n_ctx} tokens",
                param="input",
                code="context_length_exceeded",
            )
    job = st.hub.embed(inputs)
    vectors: list[list[float]] = [[] for _ in inputs]
    if not await drain(job, request, _fold_embedding(vectors)):
        return Response(status_code=499)
    data = []
    for i, v in enumerate(vectors):
        if body.dimensions is not None and body.dimensions < n_embd:
            v = _shortened(v, body.dimensions)
        emb: list[float] | str = v
        if body.encoding_format == "base64":
            emb = base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    total = sum(len(ids) for ids in inputs)
    return {
        "object": "list",
        "data": data,
        "model": body.model,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }


def _fold_embedding(vectors: list[list[float]]) -> Any:
    def fold(i: int, event: tuple[Any, ...]) -> None:
        if event[0] == "embedding":
            vectors[i] = list(event[1])
        elif event[0] == "error":
            raise_event_error(event)

    return fold


@router.post("/tokenize", summary="Tokenize text (llama.cpp server)")
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    st = _state(request)
    ids = st.llm.tokenize(body.content, add_special=body.add_special, parse_special=body.parse_special)
    if not body.with_pieces:
        return {"tokens": ids}
    tok = st.llm.tokenizer
    return {"tokens": [{"id": t, "piece": tok.token_to_piece(t).decode("utf-8", "replace")} for t in ids]}


@router.post("/detokenize", summary="Detokenize token ids (llama.cpp server)")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
    st = _state(request)
    n_vocab = st.llm.n_vocab
    bad = next((t for t in body.tokens if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise ApiError(400, f"tokens holds {bad}, outside the vocabulary of {n_vocab}", param="tokens")
    return {"content": st.llm.detokenize(body.tokens)}


@router.get("/health", summary="Liveness (no API key needed)")
async def health(request: Request) -> dict[str, Any]:
    m = _state(request).hub.scheduler.metrics()
    return {"status": "ok", "slots_idle": int(m["slots_total"] - m["slots_busy"]), "slots_busy": int(m["slots_busy"])}
