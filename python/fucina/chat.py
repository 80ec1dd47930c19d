"""Chat templates: a model's own Jinja ``tokenizer.chat_template``, rendered as transformers renders it.

The rendering follows transformers' ``tokenizer.apply_chat_template(..., tokenize=False)``:
jinja2's ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks``,
the ``loopcontrols`` extension (``{% break %}`` / ``{% continue %}``), the ``{% generation %}``
block tag, a ``tojson`` filter that does not escape HTML and writes non-ASCII text as is
(``ensure_ascii=False``, with ``indent`` / ``separators`` / ``sort_keys``), and the globals
``raise_exception``, ``strftime_now``, a restricted ``dict`` and a ``namespace`` that refuses
underscore-prefixed names. Messages are prepared as transformers prepares them: keys whose
value is ``None`` are dropped, a message's reasoning is also passed as ``reasoning_content``
and ``thinking``, and everything the template sees is rebuilt out of plain JSON types.

>>> import fucina
>>> t = fucina.ChatTemplate(
...     "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\\n{% endfor %}"
...     "{% if add_generation_prompt %}<|assistant|>{% endif %}"
... )
>>> t.render([{"role": "user", "content": "Hi"}])
'<|user|>Hi\\n<|assistant|>'
>>> fucina.render_chat_template("{{ raise_exception('no system role') }}", [{"role": "user", "content": "x"}])
Traceback (most recent call last):
fucina.chat.ChatTemplateError: no system role
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.sandbox
import jinja2.utils

from ._core import FucinaError

__all__ = ["ChatTemplate", "ChatTemplateError", "render_chat_template"]

# jinja2 releases before 3.1.6 have known sandbox escapes; chat templates inside model files are untrusted code.
_MIN_JINJA2 = (3, 1, 6)

# The names a message's reasoning arrives under; the first is the one chat templates read.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(FucinaError, ValueError):
    """A chat template that does not compile, or that fails while rendering.

    A template's own ``raise_exception(message)`` surfaces as this error with exactly ``message``;
    any other failure inside the template (an undefined value used, a sandbox violation, a type
    error) keeps the original exception as ``__cause__``.
    """


def _now() -> datetime.datetime:
    """The clock behind the templates' ``strftime_now`` (local time, as transformers uses)."""
    return datetime.datetime.now()


# ---------------------------------------------------------------------------------------------
# The environment's filters and globals


def _raise_exception(message: object) -> None:
    raise jinja2.TemplateError(str(message))


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML; chat templates want the JSON as is.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return _now().strftime(fmt)


class _TemplateDict:
    """The ``dict`` global: builds plain dicts, and exposes nothing else of the ``dict`` type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, keys: Any, value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(keys, value)


def _check_namespace_name(name: object) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(
            f"chat templates cannot store underscore-prefixed attributes on a namespace, got {name!r}"
        )


class _TemplateNamespace(jinja2.utils.Namespace):
    """Jinja's ``namespace`` that refuses names starting with an underscore (no reaching into internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - jinja's signature trick, so namespace(self=1) works
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _check_namespace_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_namespace_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)


# The generation spans being recorded by the current render, if any: (blocks rendered so far, spans).
_SPANS: ContextVar[tuple[list[str], list[tuple[int, int]]] | None] = ContextVar("fucina_chat_spans", default=None)


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: marks the text the assistant generated.

    It renders its body unchanged; while :meth:`ChatTemplate.render_with_generation_spans` runs,
    it also records where the body lies in the output (character offsets).
    """

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation", []), [], [], body).set_lineno(lineno)

    def _generation(self, caller: Callable[[], str]) -> str:
        text = caller()
        recording = _SPANS.get()
        if recording is not None:
            blocks, spans = recording
            start = sum(len(b) for b in blocks)
            spans.append((start, start + len(text)))
        return text


def _jinja2_version() -> tuple[int, ...]:
    parts: list[int] = []
    for piece in jinja2.__version__.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@lru_cache(maxsize=1)
def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    if _jinja2_version() < _MIN_JINJA2:
        raise ImportError(
            f"fucina's chat templates need jinja2>=3.1.6 (older releases have sandbox escapes), "
            f"found {jinja2.__version__}"
        )
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


# ---------------------------------------------------------------------------------------------
# What the template sees


def _plain(value: Any) -> Any:
    """Rebuild ``value`` out of plain JSON types (str, int, float, bool, None, dict, list, tuple).

    Subclasses of the scalar types are reduced to the base type (they can carry methods the sandbox
    does not know about), numpy scalars become Python scalars, dataclasses and pydantic models become
    dicts, and any other object becomes an inert ``"<TypeName>"`` placeholder, as in transformers.
    """
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    item = getattr(type(value), "item", None)
    if item is not None and type(value).__module__ == "numpy":
        return _plain(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _plain(dump())
    return f"<{type(value).__name__}>"


def _as_mapping(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, Mapping):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        dumped = dump()
        if isinstance(dumped, Mapping):
            return dumped
    return None


def _prepare_messages(messages: Any) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of message dicts, not {type(messages).__name__}")
    if len(messages) == 0:
        raise ValueError("messages is empty: a chat template needs at least one message")
    prepared: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        mapping = _as_mapping(message)
        if mapping is None:
            raise TypeError(f"messages[{i}] must be a dict with a 'role', not {type(message).__name__}")
        if "role" not in mapping:
            raise ValueError(f"messages[{i}] has no 'role'")
        if not isinstance(mapping["role"], str):
            raise TypeError(f"messages[{i}]['role'] must be a str, not {type(mapping['role']).__name__}")
        # Keys set to None are dropped (OpenAI-style content=None, tool_calls=None): templates handle a
        # missing key, while many would render a literal "None" or fail on the value.
        msg: dict[str, Any] = _plain({k: v for k, v in mapping.items() if v is not None})
        reasoning = next((msg[k] for k in _REASONING_FIELDS if msg.get(k) is not None), None)
        if reasoning is not None:
            msg = {"thinking": reasoning, **msg, "reasoning_content": reasoning}
        prepared.append(msg)
    return prepared


def _prepare_dicts(name: str, values: Any) -> list[Any] | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a list of dicts, not {type(values).__name__}")
    out: list[Any] = []
    for i, value in enumerate(values):
        mapping = _as_mapping(value)
        if mapping is None:
            hint = " (pass tools as JSON schemas)" if name == "tools" and callable(value) else ""
            raise TypeError(f"{name}[{i}] must be a dict, not {type(value).__name__}{hint}")
        out.append(_plain(mapping))
    return out


# ---------------------------------------------------------------------------------------------
# The public API


class ChatTemplate:
    """A chat template compiled once, rendered many times.

    ``bos_token`` / ``eos_token`` are the strings the template sees under those names (transformers
    passes the tokenizer's special tokens; a GGUF's template wants the text of its BOS/EOS tokens).
    """

    __slots__ = ("_template", "bos_token", "eos_token", "source")

    def __init__(self, template: str, *, bos_token: str = "", eos_token: str = "") -> None:
        if not isinstance(template, str):
            raise TypeError(f"template must be a str, not {type(template).__name__}")
        for name, token in (("bos_token", bos_token), ("eos_token", eos_token)):
            if not isinstance(token, str):
                raise TypeError(f"{name} must be a str, not {type(token).__name__}")
        self.source = template
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _environment().from_string(template)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"chat template syntax error on line {e.lineno}: {e.message}") from e

    def __repr__(self) -> str:
        return f"ChatTemplate(<{len(self.source)} chars>, bos_token={self.bos_token!r}, eos_token={self.eos_token!r})"

    def _context(
        self,
        messages: Any,
        tools: Any,
        documents: Any,
        add_generation_prompt: bool,
        kwargs: dict[str, Any],
    ) -> dict[str, Any]:
        return {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **_plain(kwargs),
            "messages": _prepare_messages(messages),
            "tools": _prepare_dicts("tools", tools),
            "documents": _prepare_dicts("documents", documents),
            "add_generation_prompt": bool(add_generation_prompt),
        }

    def _run(self, context: dict[str, Any], blocks: list[str]) -> None:
        try:
            for block in self._template.generate(context):
                blocks.append(block)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(str(e.message if e.message is not None else e)) from e
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError, OverflowError) as e:
            raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from e

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        """Render ``messages`` (OpenAI-style dicts with a ``role``) into the model's prompt text.

        ``tools`` are JSON schemas (``{"type": "function", "function": {...}}``), ``documents`` dicts
        (usually ``title`` / ``text``); extra keyword arguments (``enable_thinking=False``,
        ``date_string=...``) are passed to the template as variables.
        """
        context = self._context(messages, tools, documents, add_generation_prompt, kwargs)
        blocks: list[str] = []
        self._run(context, blocks)
        return "".join(blocks)

    def render_with_generation_spans(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> tuple[str, list[tuple[int, int]]]:
        """Like :meth:`render`, also returning the ``(start, end)`` character offsets of every
        ``{% generation %}`` block (the assistant's text, for training masks); empty if the template has none."""
        context = self._context(messages, tools, documents, add_generation_prompt, kwargs)
        blocks: list[str] = []
        spans: list[tuple[int, int]] = []
        with _recording(blocks, spans):
            self._run(context, blocks)
        return "".join(blocks), spans


@contextmanager
def _recording(blocks: list[str], spans: list[tuple[int, int]]) -> Iterator[None]:
    token = _SPANS.set((blocks, spans))
    try:
        yield
    finally:
        _SPANS.reset(token)


@lru_cache(maxsize=32)
def _compiled(template: str, bos_token: str, eos_token: str) -> ChatTemplate:
    return ChatTemplate(template, bos_token=bos_token, eos_token=eos_token)


def render_chat_template(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    **kwargs: Any,
) -> str:
    """Render a chat template once (compiled templates are cached); see :class:`ChatTemplate`."""
    if not isinstance(template, str):
        raise TypeError(f"template must be a str, not {type(template).__name__}")
    return _compiled(template, bos_token, eos_token).render(
        messages, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt, **kwargs
    )
