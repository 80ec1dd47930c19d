"""Structured-output constraints for a request: ``response_format`` as a :class:`fucina.Grammar`.

``json_object`` (optionally with a ``schema``) and ``json_schema`` compile to a grammar the
scheduler enforces on the request's rows (masks computed ahead, forced tokens committed without
sampling); a malformed schema is a 400 naming the problem. Keywords llguidance does not implement
are not enforced (a warning in the server log), unless the request says ``"strict": true``, which
makes them a 400 naming the keyword.
"""

from __future__ import annotations

from ..grammar import Grammar, GrammarError
from .errors import ApiError
from .openai_schema import ResponseFormat

__all__ = ["response_format_grammar"]


def response_format_grammar(fmt: ResponseFormat | None) -> Grammar | None:
    """The grammar that enforces ``fmt`` (``None`` for plain text)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise ApiError(
                400, "response_format of type 'json_schema' needs a 'json_schema' object", param="response_format"
            )
        schema, strict = fmt.json_schema.schema_, fmt.json_schema.strict is True
    else:
        schema, strict = fmt.schema_, False
    try:
        return Grammar.json_schema(schema, strict=strict) if schema is not None else Grammar.json_object()
    except GrammarError as e:
        raise ApiError(400, str(e), param="response_format", code="invalid_response_format") from None
