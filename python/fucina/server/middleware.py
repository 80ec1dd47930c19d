"""Pure-ASGI middleware (no ``BaseHTTPMiddleware``: streaming and disconnects pass straight through).

* :class:`ApiKey`: with a key configured, every route but ``/health`` needs it, as ``Authorization:
  Bearer KEY`` (OpenAI's clients) or ``x-api-key: KEY`` (Anthropic's), compared in constant time.
* :class:`BodyLimit`: a request body over the limit is a 413 before any of it is parsed (a declared
  ``Content-Length`` is refused at once; a chunked body as soon as it passes the limit).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response

__all__ = ["ApiKey", "BodyLimit", "OPEN_PATHS"]

OPEN_PATHS = frozenset({"/health"})
"""Routes that never need the API key."""


async def _send_error(scope: Scope, receive: Receive, send: Send, status: int, message: str, code: str) -> None:
    response = error_response(scope.get("path", ""), status, message, code=code)
    await response(scope, receive, send)


def _header(scope: Scope, name: bytes) -> bytes | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", [])
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


class ApiKey:
    """Require ``key`` on every HTTP route but :data:`OPEN_PATHS` (and CORS preflights)."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self._key = key.encode()

    def _authorized(self, scope: Scope) -> bool:
        given = _header(scope, b"x-api-key")
        if given is None:
            auth = _header(scope, b"authorization") or b""
            scheme, _, token = auth.partition(b" ")
            given = token.strip() if scheme.lower() == b"bearer" else b""
        return hmac.compare_digest(given, self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS or scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            await _send_error(
                scope,
                receive,
                send,
                401,
                "Invalid API key (send it as Authorization: Bearer KEY or x-api-key)",
                "invalid_api_key",
            )
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with a 413."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        too_big = f"the request body is over the server's limit of {self.limit} bytes"
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await _send_error(scope, receive, send, 400, "bad Content-Length header", "invalid_request")
                return
            if size > self.limit:
                await _send_error(scope, receive, send, 413, too_big, "request_too_large")
                return
        # Read the whole body here (bounded), then hand it on: a chunked body over the limit is refused
        # before the app parses any of it.
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.limit:
                await _send_error(scope, receive, send, 413, too_big, "request_too_large")
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
