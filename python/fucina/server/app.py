"""The ASGI app: :class:`ServerConfig`, :func:`create_app` (FastAPI, its routes, error handlers and
middleware around one model and one scheduler) and :func:`serve` (uvicorn)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from .. import _core
from .. import chat_completion as cc
from ..llm import LLM
from . import anthropic_api, metrics, openai_api, openai_chat, openai_responses
from .common import ServerState
from .errors import install_handlers
from .hub import Hub
from .middleware import ApiKey, BodyLimit

__all__ = ["ServerConfig", "create_app", "serve"]

API_KEY_ENV = "FUCINA_API_KEY"
"""Environment variable holding the API key when none is passed."""


@dataclass
class ServerConfig:
    """How to serve a model.

    Attributes:
        model: GGUF file (``None``: the embedded default model).
        model_id: the name clients pass as ``model`` (default: the file's stem).
        host, port: where to listen (loopback by default).
        parallel: requests decoded together (scheduler slots).
        ctx_size: context per slot, in tokens (a request's prompt plus completion).
        threads: forward threads (default: all cores).
        api_key: required on every route but ``/health`` when set (default: ``$FUCINA_API_KEY``).
        cors_origins: origins allowed by CORS (none: no CORS headers).
        max_queue: requests that may wait for a slot; more are answered 429.
        max_body_bytes: largest request body; larger ones are answered 413.
        max_tokens: cap on tokens per completion (``None``: the context).
        prefill_chunk: prompt tokens evaluated per scheduler step.
        prefix_cache: reuse prompt prefixes across requests.
        kv_cache_type: ``"f16"`` or ``"q8_0"``.
        chat_format, chat_template: override the model's chat template (see :class:`fucina.LLM`).
        reasoning_format: ``"auto"`` (llama.cpp's default, or ``"deepseek"``): a thinking model's
            reasoning is returned apart (OpenAI ``reasoning_content``, Anthropic ``thinking`` blocks);
            ``"none"``: left in the text. A chat request's ``reasoning_format`` overrides it.
        reasoning_budget: tokens a thinking model's reasoning block may take before its closing
            marker is forced (llama.cpp's ``--reasoning-budget``; -1: no cap, 0: close it at once). A
            request's ``reasoning_budget_tokens`` (or ``thinking_budget_tokens``, Anthropic's
            ``thinking.budget_tokens``) overrides it.
    """

    model: str | os.PathLike[str] | None = None
    model_id: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    parallel: int = 4
    ctx_size: int = 4096
    threads: int | None = None
    api_key: str | None = None
    cors_origins: Sequence[str] = field(default_factory=list)
    max_queue: int = 64
    max_body_bytes: int = 4 << 20
    max_tokens: int | None = None
    prefill_chunk: int = 512
    prefix_cache: bool = True
    kv_cache_type: str = "f16"
    chat_format: str | None = None
    chat_template: str | None = None
    reasoning_format: str = "auto"
    reasoning_budget: int = -1


ProcessorFactory = Callable[[Mapping[str, Any]], list[Callable[[list[int], Any], None]]]


def create_app(
    config: ServerConfig | None = None, *, llm: LLM | None = None, processors: ProcessorFactory | None = None
) -> FastAPI:
    """The server's ASGI app for ``config`` (on ``llm`` when given, else on ``config.model``).

    ``processors``, for applications embedding the server, maps a request body to Python logit
    processors for it (they run under the GIL on the scheduler thread; without them Python is never
    on the per-token path).
    """
    config = config or ServerConfig()
    for name in ("parallel", "ctx_size", "max_queue", "max_body_bytes", "prefill_chunk"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise _core.InvalidArgumentError(f"{name} must be a positive int, not {value!r}")
    if llm is None:
        llm = LLM(
            config.model,
            n_ctx=config.ctx_size,
            n_threads=config.threads,
            kv_cache_type=config.kv_cache_type,
            chat_format=config.chat_format,
            chat_template=config.chat_template,
        )
    _ = llm.chat_template  # a broken template fails at startup, not at the first request
    cc._reasoning_format(config.reasoning_format)
    budget = config.reasoning_budget
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < -1:
        raise _core.InvalidArgumentError(f"reasoning_budget must be -1 (no cap) or at least 0, not {budget!r}")
    scheduler = _core.Scheduler(
        llm.model,
        llm.tokenizer,
        n_slots=config.parallel,
        n_ctx=config.ctx_size,
        kv_cache_type=config.kv_cache_type,
        max_queue=config.max_queue,
        prefill_chunk=config.prefill_chunk,
        prefix_cache=config.prefix_cache,
    )
    hub = Hub(llm, scheduler)
    model_id = config.model_id or llm.path.stem
    state = ServerState(
        hub=hub,
        model_id=model_id,
        aliases=frozenset({str(llm.path), llm.path.name}),
        max_tokens_cap=config.max_tokens,
        extra_processors=processors,
        reasoning_format=config.reasoning_format,
        reasoning_budget=budget,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Serve once the weights are in their repacked layout (seconds after loading): before,
        # requests would run on the slower row-major kernels while the repacking takes the same
        # cores, as llama.cpp's server answers only once its model is loaded.
        await asyncio.to_thread(llm.model.wait_repacked)
        hub.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            hub.stop()

    app = FastAPI(
        title="fucina",
        summary="OpenAI- and Anthropic-compatible API over a local GGUF model, with continuous batching.",
        version=_core.__version__,
        lifespan=lifespan,
    )
    app.state.fucina = state
    app.state.http_counts = Counter()
    install_handlers(app)
    for module in (openai_chat, openai_responses, openai_api, anthropic_api, metrics):
        app.include_router(module.router)
    app.state.known_paths = frozenset(getattr(r, "path", "") for r in app.routes)
    # Added innermost first: CORS wraps everything (error responses carry its headers too).
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    api_key = config.api_key if config.api_key is not None else os.environ.get(API_KEY_ENV) or None
    if api_key:
        app.add_middleware(ApiKey, key=api_key)
    app.add_middleware(metrics.RequestCounter, counts=app.state.http_counts)
    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["*"],
        )
    return app


def serve(config: ServerConfig | None = None, *, log_level: str = "info") -> None:
    """Run the server until interrupted (uvicorn, one process)."""
    import uvicorn

    config = config or ServerConfig()
    app = create_app(config)
    uvicorn.run(app, host=config.host, port=config.port, log_level=log_level, timeout_graceful_shutdown=5)
