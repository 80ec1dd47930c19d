"""``fucina serve``: an OpenAI- and Anthropic-compatible HTTP server over one GGUF model.

Routes: OpenAI's ``/v1/chat/completions``, ``/v1/responses``, ``/v1/completions``, ``/v1/models``,
``/v1/embeddings``; Anthropic's ``/v1/messages`` and ``/v1/messages/count_tokens``; llama.cpp's
``/tokenize``, ``/detokenize`` and ``/health``; Prometheus ``/metrics``; the OpenAPI schema at
``/openapi.json``.

Requests run on fucina's continuous-batching scheduler (``fucina._core.Scheduler``, in Rust on its own
thread, GIL released): every live request decodes in one batched forward per step, prompts prefill in
chunks between decode steps, prompt prefixes are reused across requests, a client that disconnects
frees its slot at the next step, and a full queue is a 429. Python parses, validates and streams.

>>> from fucina.server import ServerConfig, serve
>>> serve(ServerConfig(parallel=8, ctx_size=4096))   # doctest: +SKIP

Needs the ``server`` extra: ``pip install 'fucina[server]'``.
"""

from __future__ import annotations

from .app import API_KEY_ENV, ServerConfig, create_app, serve

__all__ = ["API_KEY_ENV", "ServerConfig", "create_app", "serve"]
