"""Structured-output constraints for a request as a :class:`fucina.Grammar`: ``response_format``,
llama.cpp's server's own ``json_schema`` (a JSON Schema) and ``grammar`` (GBNF) fields, or vLLM's
``guided_json`` / ``guided_regex`` / ``guided_choice`` / ``guided_grammar`` and ``structured_outputs``
(what clients written for a vLLM server send in ``extra_body``).

``json_object`` (optionally with a ``schema``) and ``json_schema`` compile to a grammar the
scheduler enforces on the request's rows (masks computed ahead, forced tokens committed without
sampling); a malformed schema or grammar is a 400 naming the problem. Keywords llguidance does not
implement are not enforced (a warning in the server log), unless the request says ``"strict":
true``, which makes them a 400 naming the keyword. At most one of these fields may be given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..grammar import Grammar, GrammarError
from .errors import ApiError
from .openai_schema import ChatCompletionRequest, CompletionRequest, ResponseFormat

__all__ = ["request_grammar", "response_format_grammar"]


def request_grammar(body: ChatCompletionRequest | CompletionRequest) -> tuple[Grammar | None, str]:
    """The grammar a request's constraint field asks for (``None`` for none) and the field it came from:
    ``response_format``, llama.cpp's ``json_schema`` / ``grammar``, vLLM's ``guided_json`` /
    ``guided_regex`` / ``guided_choice`` / ``guided_grammar`` or ``structured_outputs``. More than one
    is a 400, as llama.cpp refuses ``json_schema`` with ``grammar``: each constrains the whole reply."""
    fmt = body.response_format if body.response_format is not None and body.response_format.type != "text" else None
    given: list[tuple[str, Callable[[], Grammar]]] = []
    if fmt is not None:
        given.append(("response_format", lambda: response_format_grammar(fmt) or Grammar.json_object()))
    if body.json_schema is not None:
        schema = body.json_schema
        given.append(("json_schema", lambda: Grammar.json_schema(schema) if schema else Grammar.json_object()))
    if body.grammar:
        given.append(("grammar", lambda: Grammar.from_gbnf(body.grammar or "")))
    given += _vllm(body)
    if len(given) > 1:
        names = [name for name, _ in given]
        raise ApiError(
            400, f"give one of {' / '.join(names)}, not {len(names)}: each constrains the whole reply", param=names[-1]
        )
    if not given:
        return None, "response_format"
    name, build = given[0]
    try:
        return build(), name
    except GrammarError as e:
        if name == "response_format":
            raise ApiError(400, str(e), param=name, code="invalid_response_format") from None
        raise ApiError(400, f"{name}: {e}", param=name) from None


def _vllm(body: ChatCompletionRequest | CompletionRequest) -> list[tuple[str, Callable[[], Grammar]]]:
    """vLLM's constraint fields that the request sets, each with the grammar it asks for."""
    out: list[tuple[str, Callable[[], Grammar]]] = []
    so = body.structured_outputs
    fields: list[tuple[str, Any, Callable[[Any], Grammar]]] = [
        ("guided_json", body.guided_json, _json),
        ("guided_regex", body.guided_regex, Grammar.regex),
        ("guided_choice", body.guided_choice, _choice),
        ("guided_grammar", body.guided_grammar, _grammar),
    ]
    if so is not None:
        inner: list[tuple[str, Any, Callable[[Any], Grammar]]] = [
            ("structured_outputs.json", so.json_, _json),
            ("structured_outputs.regex", so.regex, Grammar.regex),
            ("structured_outputs.choice", so.choice, _choice),
            ("structured_outputs.grammar", so.grammar, _grammar),
            ("structured_outputs.json_object", so.json_object or None, lambda _: Grammar.json_object()),
        ]
        if not any(v is not None for _, v, _ in inner):
            message = "structured_outputs sets none of json, regex, choice, grammar, json_object"
            raise ApiError(400, message, param="structured_outputs")
        fields += inner
    for name, value, build in fields:
        if value is not None:
            out.append((name, functools.partial(build, value)))
    return out


def _json(schema: dict[str, Any] | str) -> Grammar:
    return Grammar.json_schema(schema) if schema not in ({}, "") else Grammar.json_object()


def _choice(choices: list[str]) -> Grammar:
    """Exactly one of ``choices``: a regex alternation of the literal strings, every character that is
    not an ASCII letter or digit written as ``\\x{...}`` so that none is read as regex syntax."""

    def literal(s: str) -> str:
        return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}" for c in s)

    return Grammar.regex("(?:" + "|".join(literal(c) for c in choices) + ")")


def _grammar(text: str) -> Grammar:
    """vLLM's ``guided_grammar``: GBNF (``root ::= ...``, llama.cpp's and xgrammar's form) or Lark
    (``start: ...``, outlines' form)."""
    return Grammar.from_gbnf(text) if "::=" in text else Grammar.lark(text)


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
