"""Constrained decoding: :class:`Grammar` restricts generated text to a JSON Schema, a
regular expression or a Lark grammar (compiled by llguidance against the model's
vocabulary, masks computed while the forward runs).

>>> g = Grammar.json_schema({"type": "object", "properties": {"n": {"type": "integer"}}})
>>> g.kind
'json_schema'
>>> Grammar.regex(r"[0-9]{4}").source
'[0-9]{4}'

Pass one as ``grammar=`` to :meth:`fucina.LLM.generate` / ``stream`` /
``create_completion`` or :meth:`fucina.Conversation.send`; ``response_format`` in
``create_chat_completion`` builds one. Tokens the grammar leaves no choice in are
committed without sampling (fast-forward), and speculative drafts are cut to what the
grammar accepts, so the output is exactly that of plain constrained decoding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from . import _core
from ._core import ArgumentTypeError, GrammarError, GrammarWarning

__all__ = ["Grammar", "GrammarError", "GrammarWarning", "gbnf_to_lark"]


def _schema_text(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, bool):
        return json.dumps(schema)
    if isinstance(schema, Mapping):
        try:
            return json.dumps(schema)
        except (TypeError, ValueError) as e:
            raise GrammarError(f"invalid JSON Schema: not JSON-serialisable ({e})") from None
    as_model = schema if isinstance(schema, type) else type(schema)
    to_schema = getattr(as_model, "model_json_schema", None)
    if callable(to_schema):
        return json.dumps(to_schema())
    raise ArgumentTypeError(f"schema must be a dict, JSON text or a pydantic model, not {type(schema).__name__}")


def _strict(text: str) -> str:
    """Schema text whose ``x-guidance`` asks llguidance to refuse what it does not implement."""
    try:
        value = json.loads(text)
    except ValueError:
        return text  # the compiler names the JSON error
    if not isinstance(value, dict):
        return text
    options = value.get("x-guidance")
    value["x-guidance"] = {**(options if isinstance(options, dict) else {}), "lenient": False}
    return json.dumps(value)


class Grammar:
    """A constraint on generated text. Build one with :meth:`json_schema`,
    :meth:`json_object`, :meth:`regex`, :meth:`lark` or :meth:`from_gbnf`; errors
    (:class:`fucina.GrammarError`, a ``ValueError``) name what is wrong, and a grammar
    is checked against the model before generation starts."""

    __slots__ = ("_core",)

    def __init__(self, core: _core.Grammar) -> None:
        if not isinstance(core, _core.Grammar):
            raise ArgumentTypeError("use Grammar.json_schema / .regex / .lark / .from_gbnf to build a Grammar")
        self._core = core

    @classmethod
    def json_schema(cls, schema: Any, *, strict: bool = False) -> Grammar:
        """Output must be JSON valid against ``schema``: a dict, JSON text, or a pydantic
        model class (or instance). Written compactly (``", "`` and ``": "`` separators).
        Read as llama.cpp reads schemas: an object listing ``properties`` without
        ``additionalProperties`` allows no other keys (``oneOf`` / ``allOf`` branches may
        add theirs), a schema without ``type`` using one type's keywords is that type,
        numbers have at most 16 integral and 10 fractional digits, ``oneOf`` is read as
        ``anyOf``. ECMA-262 patterns, ``$ref``s with characters a URI may not hold and
        OpenAPI formats (``int32``, ``byte``, pydantic's ``uuid4``) are read as they were
        meant. Keywords, formats and patterns llguidance does not implement
        (``uniqueItems``, ``if``/``then``, ``not``, look-around, which is dropped from its
        regex, an unknown ``format``, a ``$ref`` to another document, never fetched) are
        not enforced: compiling such a schema warns with a :class:`fucina.GrammarWarning`
        naming them. ``strict=True``
        refuses them instead (:class:`fucina.GrammarError` at generation start), as OpenAI's
        ``"strict": true`` structured outputs do."""
        if not isinstance(strict, bool):
            raise ArgumentTypeError(f"strict must be a bool, not {type(strict).__name__}")
        text = _schema_text(schema)
        if strict:
            text = _strict(text)
        return cls(_core.Grammar.json_schema(text))

    @classmethod
    def json_object(cls) -> Grammar:
        """Output must be a JSON object (OpenAI's ``{"type": "json_object"}``)."""
        return cls(_core.Grammar.json_object())

    @classmethod
    def regex(cls, pattern: str) -> Grammar:
        """The whole output must match ``pattern`` (Rust ``regex`` syntax)."""
        if not isinstance(pattern, str):
            raise ArgumentTypeError(f"pattern must be a str, not {type(pattern).__name__}")
        return cls(_core.Grammar.regex(pattern))

    @classmethod
    def lark(cls, text: str) -> Grammar:
        """A grammar in llguidance's Lark-like syntax (``start: ...``; terminals as
        ``"literal"`` or ``/regex/``; ``%json {...}`` embeds a JSON Schema)."""
        if not isinstance(text, str):
            raise ArgumentTypeError(f"grammar text must be a str, not {type(text).__name__}")
        return cls(_core.Grammar.lark(text))

    @classmethod
    def from_gbnf(cls, text: str) -> Grammar:
        """A llama.cpp GBNF grammar (``root ::= ...``), converted to Lark."""
        return cls.lark(gbnf_to_lark(text))

    def after(self, prefix: str) -> Grammar:
        """This grammar for output that continues ``prefix``, text already written before the
        generation starts (an assistant prefill): ``prefix`` + output must match. The prefix is
        consumed when a generation starts; one the grammar cannot begin with raises
        :class:`fucina.GrammarError` then, naming it.

        >>> Grammar.json_schema({"type": "object"}).after('{"name": ').prefix
        '{"name": '
        """
        if not isinstance(prefix, str):
            raise ArgumentTypeError(f"prefix must be a str, not {type(prefix).__name__}")
        return Grammar(self._core.after(prefix))

    @property
    def prefix(self) -> str:
        """The text the output continues (empty unless built with :meth:`after`)."""
        return self._core.prefix

    @property
    def kind(self) -> str:
        """``"json_schema"``, ``"json_object"``, ``"regex"`` or ``"lark"``."""
        return self._core.kind

    @property
    def source(self) -> str:
        """The schema (JSON text), pattern or grammar text."""
        return self._core.source

    def __repr__(self) -> str:
        return repr(self._core)


def as_core(grammar: Any) -> _core.Grammar | None:
    """The engine's grammar object for a ``grammar=`` argument (``None`` passes through)."""
    if grammar is None:
        return None
    if isinstance(grammar, Grammar):
        return grammar._core
    if isinstance(grammar, _core.Grammar):
        return grammar
    raise ArgumentTypeError(f"grammar must be a fucina.Grammar, not {type(grammar).__name__}")


# --- GBNF -> Lark -----------------------------------------------------------------

_GBNF_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t]+)
  | (?P<nl>\r?\n)
  | (?P<comment>\#[^\n]*)
  | (?P<define>::=)
  | (?P<name>[A-Za-z0-9_-]+)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<cls>\[(?:[^\]\\]|\\.)*\])
  | (?P<rep>\{\s*\d*\s*(?:,\s*\d*\s*)?\})
  | (?P<op>[()|*+?.])
    """,
    re.VERBOSE,
)

_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "/": "/", "^": "^"}


def _unescape(body: str, where: str) -> list[tuple[str, bool]]:
    """GBNF escapes decoded: ``(char, was_escaped)`` pairs."""
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append((c, False))
            i += 1
            continue
        if i + 1 >= len(body):
            raise GrammarError(f"invalid GBNF grammar: dangling backslash in {where}")
        e = body[i + 1]
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width is not None:
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise GrammarError(f"invalid GBNF grammar: bad \\{e} escape in {where}")
            out.append((chr(int(digits, 16)), True))
            i += 2 + width
        elif e in _ESCAPES:
            out.append((_ESCAPES[e], True))
            i += 2
        else:
            raise GrammarError(f"invalid GBNF grammar: unknown escape \\{e} in {where}")
    return out


def _regex_char(c: str) -> str:
    if c.isalnum() or c == " " or c == "_":
        return c
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{{{ord(c):x}}}"
    return "\\" + c if c in "\\/[]^-.$|?*+(){}&~" else c


def _char_class(tok: str) -> str:
    body = tok[1:-1]
    negate = body.startswith("^")
    if negate:
        body = body[1:]
    items = _unescape(body, tok)
    parts = []
    for c, escaped in items:
        parts.append("-" if (c == "-" and not escaped) else _regex_char(c))
    return "/[" + ("^" if negate else "") + "".join(parts) + "]/"


def _fill_empty_alternatives(parts: list[str]) -> list[str]:
    """GBNF allows an empty alternative (``ws ::= | " "``); Lark spells it ``""``."""
    out: list[str] = []
    for k, p in enumerate(parts):
        if p == "|" and (not out or out[-1] in ("|", "(")):
            out.append('""')
        out.append(p)
        if p == "|" and (k + 1 == len(parts) or parts[k + 1].startswith(")")):
            out.append('""')
    return out


def gbnf_to_lark(text: str) -> str:
    """Convert a llama.cpp GBNF grammar to llguidance's Lark syntax (``root`` becomes
    ``start``; rule names are lower-cased with ``-`` as ``_``). Raises
    :class:`fucina.GrammarError` naming what could not be read."""
    if not isinstance(text, str):
        raise ArgumentTypeError(f"grammar text must be a str, not {type(text).__name__}")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _GBNF_TOKEN.match(text, pos)
        if m is None:
            line = text.count("\n", 0, pos) + 1
            raise GrammarError(f"invalid GBNF grammar: cannot read {text[pos : pos + 20]!r} (line {line})")
        kind = m.lastgroup or ""
        if kind not in ("ws", "comment"):
            tokens.append((kind, m.group()))
        pos = m.end()
    # A rule starts wherever a name is followed by ``::=``.
    rules: list[tuple[str, list[tuple[str, str]]]] = []
    i = 0
    while i < len(tokens):
        kind, val = tokens[i]
        if kind == "name" and i + 1 < len(tokens) and tokens[i + 1][0] == "define":
            rules.append((val, []))
            i += 2
            continue
        if kind != "nl":
            if not rules:
                raise GrammarError(f"invalid GBNF grammar: {val!r} before the first rule (expected 'name ::= ...')")
            rules[-1][1].append((kind, val))
        i += 1
    if not rules:
        raise GrammarError("invalid GBNF grammar: no rules (expected 'root ::= ...')")
    names: dict[str, str] = {}
    for name, _ in rules:
        if name in names:
            raise GrammarError(f"invalid GBNF grammar: rule {name!r} is defined twice")
        names[name] = "start" if name == "root" else "r_" + name.lower().replace("-", "_")
    if "root" not in names:
        raise GrammarError("invalid GBNF grammar: no 'root' rule")
    lines = []
    for name, body in rules:
        if not body:
            raise GrammarError(f"invalid GBNF grammar: rule {name!r} is empty")
        parts = []
        for kind, val in body:
            if kind == "name":
                if val not in names:
                    raise GrammarError(f"invalid GBNF grammar: rule {name!r} refers to undefined rule {val!r}")
                parts.append(names[val])
            elif kind == "string":
                decoded = "".join(c for c, _ in _unescape(val[1:-1], val))
                parts.append(json.dumps(decoded) if decoded else '""')
            elif kind == "cls":
                parts.append(_char_class(val))
            elif kind == "op" and val == ".":
                parts.append("/(?s:.)/")
            elif kind == "rep":
                parts[-1:] = [parts[-1] + val.replace(" ", "")] if parts else []
                if not parts:
                    raise GrammarError(f"invalid GBNF grammar: repetition {val} with nothing before it in {name!r}")
            elif kind in ("op",) and val in "*+?":
                if not parts:
                    raise GrammarError(f"invalid GBNF grammar: {val!r} with nothing before it in {name!r}")
                parts[-1] += val
            else:
                parts.append(val)
        lines.append(f"{names[name]}: {' '.join(_fill_empty_alternatives(parts))}")
    return "\n".join(lines) + "\n"
