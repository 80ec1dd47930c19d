"""Streaming responses and client disconnects.

:class:`EventStream` sends Server-Sent Events while listening for the client going away, whatever
ASGI version the server speaks: a disconnect cancels the stream at once and runs ``on_close``
(which cancels the scheduled requests, so their slots are free at the scheduler's next step).
:func:`until_disconnected` does the same listening for a non-streaming request that is still
generating.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["EventStream", "sse", "until_disconnected"]

log = logging.getLogger("fucina.server")


def sse(data: Any, event: str | None = None) -> bytes:
    """One Server-Sent Event: ``data`` as JSON (or as is, for a str), with an optional ``event:`` line."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {payload}\n\n".encode()


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnected(request: Request) -> None:
    """Return when the client of ``request`` (whose body was read) disconnects."""
    await _wait_disconnect(request.receive)


class EventStream(Response):
    """A ``text/event-stream`` response of ``chunks``, cancelled when the client disconnects;
    ``on_close`` runs once the stream ends either way."""

    media_type = "text/event-stream"

    def __init__(self, chunks: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        self.chunks = chunks
        self.on_close = on_close
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _send_all(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.ensure_future(self._send_all(send))
        listening = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            await asyncio.wait({streaming, listening}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (streaming, listening):
                task.cancel()
            for task in (streaming, listening):
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                except OSError:  # the client went away mid-send
                    pass
                except Exception:
                    log.exception("the event stream failed")
            aclose = getattr(self.chunks, "aclose", None)
            if aclose is not None:
                await aclose()
            self.on_close()
