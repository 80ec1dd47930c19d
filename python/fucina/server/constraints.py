"""Structured-output constraints for a request as a :class:`fucina.Grammar`: ``response_format``, or
llama.cpp's server's own ``json_schema`` (a JSON Schema) and ``grammar`` (GBNF) fields.

``json_object`` (optionally with a ``schema``) and ``json_schema`` compile to a grammar the
scheduler enforces on the request's rows (masks computed ahead, forced tokens committed without
sampling); a malformed schema or grammar is a 400 naming the problem. Keywords llguidance does not
implement are not enforced (a warning in the server log), unless the request says ``"strict":
true``, which makes them a 400 naming the keyword. At most one of the three may be given.
"""

from __future__ import annotations

from ..grammar import Grammar, GrammarError
from .errors import ApiError
from .openai_schema import ChatCompletionRequest, CompletionRequest, ResponseFormat

__all__ = ["request_grammar", "response_format_grammar"]


def request_grammar(body: ChatCompletionRequest | CompletionRequest) -> tuple[Grammar | None, str]:
    """The grammar a request's ``response_format``, ``json_schema`` or ``grammar`` asks for (``None``
    for none) and the field it came from; more than one of them is a 400, as llama.cpp refuses
    ``json_schema`` with ``grammar``."""
    fmt = body.response_format if body.response_format is not None and body.response_format.type != "text" else None
    given = [name for name, v in (("response_format", fmt), ("json_schema", body.json_schema)) if v is not None]
    if body.grammar:
        given.append("grammar")
    if len(given) > 1:
        raise ApiError(
            400, f"give one of {' / '.join(given)}, not {len(given)}: each constrains the whole reply", param=given[-1]
        )
    if body.grammar:
        try:
            return Grammar.from_gbnf(body.grammar), "grammar"
        except GrammarError as e:
            raise ApiError(400, f"grammar: {e}", param="grammar") from None
    if body.json_schema is not None:
        try:
            g = Grammar.json_schema(body.json_schema) if body.json_schema else Grammar.json_object()
            return g, "json_schema"
        except GrammarError as e:
            raise ApiError(400, f"json_schema: {e}", param="json_schema") from None
    return response_format_grammar(fmt), "response_format"


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
