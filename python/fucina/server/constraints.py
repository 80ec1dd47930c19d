"""Structured-output constraints for a request: the seam where grammar-constrained decoding plugs in.

``response_format`` (OpenAI) asks for JSON output, optionally matching a schema. Enforcing it needs a
grammar-constrained logit processor on the request (a ``fucina-grammar`` constraint: the scheduler
runs a request's processors on each of its rows). Until that lands, ``json_object`` and
``json_schema`` are refused with a 400 rather than silently ignored, so a client never mistakes
unconstrained text for validated JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import ApiError
from .openai_schema import ResponseFormat

__all__ = ["Processor", "response_format_processors"]

Processor = Callable[[list[int], Any], None]


def response_format_processors(fmt: ResponseFormat | None) -> list[Processor]:
    """The logit processors that enforce ``fmt`` (none for plain text).

    # grammar seam: build the grammar (JSON, or the JSON schema in ``fmt.json_schema.schema_`` /
    # ``fmt.schema_``) and return its constraint here once fucina's ``Grammar`` is available.
    """
    if fmt is None or fmt.type == "text":
        return []
    if fmt.type == "json_schema" and fmt.json_schema is None:
        raise ApiError(
            400, "response_format of type 'json_schema' needs a 'json_schema' object", param="response_format"
        )
    raise ApiError(
        400,
        f"response_format type {fmt.type!r} needs grammar-constrained decoding, which this server does not "
        "have yet; ask for JSON in the prompt and use response_format type 'text'",
        param="response_format",
        code="unsupported_response_format",
    )
