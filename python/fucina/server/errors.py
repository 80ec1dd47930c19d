"""Errors as the clients expect them: OpenAI's body (``{"error": {"message", "type", "param",
"code"}}``) on every route but Anthropic's, whose body is ``{"type": "error", "error": {"type",
"message"}}``.

Handlers turn every failure a request can cause into a 4xx naming the field: pydantic validation
errors, unparsable JSON, fucina's own ``InvalidArgumentError`` / ``ArgumentTypeError`` (raised by the
request checks shared with :meth:`fucina.LLM.create_chat_completion`) and chat-template errors. Only
the server's own faults are 5xx.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from .. import _core
from ..chat import ChatTemplateError

__all__ = ["ApiError", "install_handlers", "error_response", "is_anthropic_path"]

log = logging.getLogger("fucina.server")

# Anthropic's error type per status code (https://docs.anthropic.com/en/api/errors).
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
# OpenAI's error type per status code.
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


class ApiError(Exception):
    """A request that cannot be served: its HTTP status, a message, and the field at fault."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def is_anthropic_path(path: str) -> bool:
    """Whether ``path`` is one of Anthropic's routes (answered with Anthropic's error body)."""
    return path.startswith("/v1/messages")


def error_response(
    path: str, status: int, message: str, param: str | None = None, code: str | None = None
) -> JSONResponse:
    """The error body the route's API defines."""
    if is_anthropic_path(path):
        kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


def openai_error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object, for errors that happen mid-stream."""
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


_TYPE_LABELS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "any"})


def _is_label(part: str) -> bool:
    """Whether a pydantic location part names a union member (``str``, ``list[dict[str,any]]``,
    ``NamedToolChoice``, ``literal['a','b']``) rather than a field."""
    return part in _TYPE_LABELS or "[" in part or part[:1].isupper() or part.startswith("function-")


def _loc(loc: Sequence[int | str]) -> str:
    """A pydantic location as a field path (``messages[0].content[1].text``): union members' labels
    and tagged unions' tags left out."""
    out = ""
    tag_next = False  # the next name is a tagged union's tag, after the item index when in a list
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        if _is_label(part):
            tag_next = "tagged-union[" in part
            continue
        if tag_next:
            tag_next = False
            continue
        out += f".{part}" if out else part
    return out


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    # A value no member of a union takes fails once per member; the deepest failure is the one that
    # names what is wrong (a content list's bad block, not "Input should be a valid string").
    first = max(errors, key=lambda e: len(e.get("loc", ())))
    loc = [p for p in first.get("loc", ()) if p != "body"]
    kind = first.get("type", "")
    if kind == "json_invalid":
        return f"the body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}", None
    if kind == "missing" and not loc:
        return "the request needs a JSON body", None
    field = _loc(loc) or None
    msg = str(first.get("msg", "invalid value"))
    more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return (f"{field}: {msg}{more}" if field else f"{msg}{more}"), field


def install_handlers(app: FastAPI) -> None:
    """Register the handlers that shape every error the app raises."""

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(request.url.path, exc.status, exc.message, exc.param, exc.code)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, field = _validation_message(exc)
        return error_response(request.url.path, 400, message, field)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 400 and detail == "There was an error parsing the body":
            detail = "the body could not be parsed (malformed or too deeply nested JSON)"
        return error_response(request.url.path, exc.status_code, detail)

    @app.exception_handler(ChatTemplateError)
    async def _template(request: Request, exc: ChatTemplateError) -> JSONResponse:
        return error_response(request.url.path, 400, f"the chat template failed on these messages: {exc}", "messages")

    @app.exception_handler(_core.InvalidArgumentError)
    async def _invalid(request: Request, exc: _core.InvalidArgumentError) -> JSONResponse:
        return error_response(request.url.path, 400, str(exc))

    @app.exception_handler(_core.ArgumentTypeError)
    async def _type(request: Request, exc: _core.ArgumentTypeError) -> JSONResponse:
        return error_response(request.url.path, 400, str(exc))

    @app.exception_handler(_core.QueueFullError)
    async def _busy(request: Request, exc: _core.QueueFullError) -> JSONResponse:
        return error_response(request.url.path, 429, str(exc), code="queue_full")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return error_response(request.url.path, 500, f"internal error: {type(exc).__name__}")
