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
import enum
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, cast

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.sandbox
import jinja2.utils

from ._core import FucinaError

__all__ = [
    "BuiltinTemplate",
    "ChatFormat",
    "ChatTemplate",
    "ChatTemplateError",
    "EmptyMessages",
    "SystemMidConversation",
    "TrailingAssistantMessage",
    "render_chat_template",
    "select_chat_template",
]

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


def _typed_content(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, str):
        return message
    return {**message, "content": [{"type": "text", "text": content}]}


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

    __slots__ = ("_template", "_typed", "bos_token", "eos_token", "source")

    def __init__(self, template: str, *, bos_token: str = "", eos_token: str = "") -> None:
        if not isinstance(template, str):
            raise TypeError(f"template must be a str, not {type(template).__name__}")
        for name, token in (("bos_token", bos_token), ("eos_token", eos_token)):
            if not isinstance(token, str):
                raise TypeError(f"{name} must be a str, not {type(token).__name__}")
        self.source = template
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._typed: bool | None = None
        try:
            self._template = _environment().from_string(template)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"chat template syntax error on line {e.lineno}: {e.message}") from e

    def __repr__(self) -> str:
        return f"ChatTemplate(<{len(self.source)} chars>, bos_token={self.bos_token!r}, eos_token={self.eos_token!r})"

    @property
    def typed_content(self) -> bool:
        """Whether the template renders a message's content only when it is a list of typed parts
        (``[{"type": "text", "text": ...}]``, as vision models' templates iterate it) and drops a plain
        string: such templates get string contents as one text part (llama.cpp's
        ``requires_typed_content``). Probed once, on the first render."""
        if self._typed is None:
            self._typed = not self._shows("x", typed=False) and self._shows(
                [{"type": "text", "text": "x"}], typed=False
            )
        return self._typed

    def _shows(self, content: Any, *, typed: bool) -> bool:
        needle = "fucinacontentprobe"
        if isinstance(content, list):
            content = [{**part, "text": needle} for part in content]
        else:
            content = needle
        context = self._context([{"role": "user", "content": content}], None, None, True, {}, typed=typed)
        blocks: list[str] = []
        try:
            self._run(context, blocks)
        except Exception:  # an untrusted template failing in any way means "does not show it"
            return False
        return needle in "".join(blocks)

    def _context(
        self,
        messages: Any,
        tools: Any,
        documents: Any,
        add_generation_prompt: bool,
        kwargs: dict[str, Any],
        *,
        typed: bool = True,
    ) -> dict[str, Any]:
        prepared = _prepare_messages(messages)
        if typed and self.typed_content:
            prepared = [_typed_content(m) for m in prepared]
        return {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **_plain(kwargs),
            "messages": prepared,
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
        # A Python error inside the template (RecursionError: a macro that calls itself without end, which
        # transformers lets through as is) is the template's failure too.
        except (TypeError, ValueError, LookupError, AttributeError, ArithmeticError, RecursionError) as e:
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


# ---------------------------------------------------------------------------------------------
# Built-in chat formats (spec §13.8.1): the four turn formats rendered without Jinja
#
# The Jinja path above renders whatever template a model ships; the built-in formats are the
# small fixed scaffolds a runtime drives turn by turn (render_turn) or from a full message
# history (render_messages), sniffed from a GGUF's tokenizer.chat_template.


_ROLES = ("system", "user", "assistant")


class ChatFormat(enum.Enum):
    """The chat turn formats fucina renders natively (:class:`BuiltinTemplate`)."""

    CHATML = "chatml"
    """``<|im_start|>role\\n…<|im_end|>\\n`` (Qwen, SmolLM, Hermes, …), with Qwen3's ``<think>`` handling."""
    LLAMA3 = "llama3"
    """``<|start_header_id|>role<|end_header_id|>\\n\\n…<|eot_id|>`` (Llama 3.x)."""
    GEMMA = "gemma"
    """``<start_of_turn>user\\n…<end_of_turn>\\n`` (Gemma 1–3; no system role)."""
    GEMMA4 = "gemma4"
    """``<|turn>role\\n…<turn|>\\n`` (Gemma 4), with its ``<|think|>`` switch and thought channel."""


class SystemMidConversation(ChatTemplateError):
    """A system message after the first non-system message, in a format (Gemma 1–3, Gemma 4) whose
    only system slot is at the start of the conversation."""


class EmptyMessages(ChatTemplateError):
    """:meth:`BuiltinTemplate.render_messages` was given no messages."""


class TrailingAssistantMessage(ChatTemplateError):
    """The history ends with an assistant message: rendering ends with the assistant-turn opener, so it
    would open a second assistant turn after that message instead of continuing it."""


# Detection order matters: the first marker found wins (spec §13.8.1).
_DETECT_MARKERS: tuple[tuple[str, ChatFormat], ...] = (
    ("<|im_start|>", ChatFormat.CHATML),
    ("<|start_header_id|>", ChatFormat.LLAMA3),
    ("<|turn>", ChatFormat.GEMMA4),
    ("<start_of_turn>", ChatFormat.GEMMA),
)

_STOP_MARKERS: dict[ChatFormat, str] = {
    ChatFormat.CHATML: "<|im_end|>",
    ChatFormat.LLAMA3: "<|eot_id|>",
    ChatFormat.GEMMA: "<end_of_turn>",
    ChatFormat.GEMMA4: "<turn|>",
}

# The BOS text each model's own template starts with ({{ bos_token }}); ChatML templates emit none.
_DEFAULT_BOS: dict[ChatFormat, str] = {
    ChatFormat.CHATML: "",
    ChatFormat.LLAMA3: "<|begin_of_text|>",
    ChatFormat.GEMMA: "<bos>",
    ChatFormat.GEMMA4: "<bos>",
}

# The reasoning block a format's assistant turns open with, stripped from replayed history.
_REASONING_BLOCKS: dict[ChatFormat, tuple[str, str]] = {
    ChatFormat.CHATML: ("<think>", "</think>"),
    ChatFormat.GEMMA4: ("<|channel>thought", "<channel|>"),
}

_CHATML_THINK_OFF = "<think>\n\n</think>\n\n"
_GEMMA4_THINK_ON = "<|think|>\n"
_GEMMA4_THINK_OFF = "<|channel>thought\n<channel|>"
_BLOCK_WHITESPACE = " \t\r\n"


def _strip_reasoning(content: str, open_marker: str, close_marker: str) -> str:
    """``content`` without a LEADING ``open_marker…close_marker`` block (and the whitespace around it);
    content that does not start with a complete block is returned unchanged."""
    body = content.lstrip(_BLOCK_WHITESPACE)
    if not body.startswith(open_marker):
        return content
    end = body.find(close_marker, len(open_marker))
    if end < 0:
        return content
    return body[end + len(close_marker) :].lstrip(_BLOCK_WHITESPACE)


def _check_messages(messages: Any) -> list[tuple[str, str]]:
    """``messages`` as ``(role, content)`` pairs, or the error naming the first bad message."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of message dicts, not {type(messages).__name__}")
    if len(messages) == 0:
        raise EmptyMessages("messages is empty: a chat render needs at least one message")
    checked: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content', not {type(message).__name__}")
        for key in ("role", "content"):
            if key not in message:
                raise ValueError(f"messages[{i}] has no {key!r}")
        role, content = message["role"], message["content"]
        if not isinstance(role, str):
            raise TypeError(f"messages[{i}]['role'] must be a str, not {type(role).__name__}")
        if role not in _ROLES:
            raise ValueError(f"messages[{i}]['role'] must be 'system', 'user' or 'assistant', not {role!r}")
        if not isinstance(content, str):
            raise TypeError(f"messages[{i}]['content'] must be a str, not {type(content).__name__}")
        checked.append((role, content))
    if checked[-1][0] == "assistant":
        raise TrailingAssistantMessage(
            f"messages[{len(checked) - 1}] (the last message) is an assistant message: the render ends with "
            "the assistant-turn opener, so it would open a second assistant turn after it instead of "
            "continuing it"
        )
    return checked


@dataclasses.dataclass(frozen=True)
class BuiltinTemplate:
    """One of the built-in chat formats (spec §13.8.1), rendered in plain Python.

    ``bos_token`` is the text the conversation starts with; it defaults to what the format's
    model templates emit (``<|begin_of_text|>`` for Llama 3, ``<bos>`` for Gemma 1–3 and 4, nothing
    for ChatML). Pass ``bos_token=""`` when the tokenizer adds BOS itself.

    Message contents are inserted verbatim, so a stateless :meth:`render_messages` reproduces the
    bytes an incrementally driven conversation fed (the only edits are the ones the spec names: the
    reasoning block stripped from replayed assistant turns, and Gemma 4's system prompt trimmed).

    Rendered forms (``S`` system, ``U`` user, ``A`` an earlier assistant reply):

    * ``chatml``: ``<|im_start|>system\\nS<|im_end|>\\n<|im_start|>user\\nU<|im_end|>\\n<|im_start|>assistant\\n``,
      plus ``<think>\\n\\n</think>\\n\\n`` with ``think_off``. Every message is its own block, in any order.
    * ``llama3``: ``<|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n\\nS<|eot_id|>``
      ``<|start_header_id|>user<|end_header_id|>\\n\\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n``.
      Every message is its own block, in any order.
    * ``gemma``: ``<bos><start_of_turn>user\\nS\\n\\nU<end_of_turn>\\n<start_of_turn>model\\n`` (no system role:
      the system prompt is folded into the first user turn, as Gemma 3's template does).
    * ``gemma4``: ``<bos><|turn>system\\nS<turn|>\\n<|turn>user\\nU<turn|>\\n``
      ``<|turn>model\\n<|channel>thought\\n<channel|>`` with ``think_off``
      (the template's default: a primed-empty thought channel; no system turn without ``S``). With
      thinking on, the system turn starts with ``<|think|>\\n`` (and is written even without ``S``) and
      the opener is a plain ``<|turn>model\\n``.

    ``think_off`` has no effect on ``llama3`` and ``gemma``.

    Where the model authors' own templates differ (checked in tests/test_chat_formats.py):

    * Llama 3.1 / 3.2 always open with a system block holding a ``Cutting Knowledge Date`` / ``Today Date``
      preamble; the built-in ``llama3`` format is the plain header scaffold (a system block only for a
      system prompt), as the spec gives it. Put the preamble in the system prompt to get their bytes.
    * Llama 3 and Gemma templates ``trim`` every content (Gemma 4 strips reasoning anywhere in a reply,
      then trims); the built-in formats keep contents verbatim (Gemma 4's system prompt is trimmed).
    * Gemma 2's template refuses a system message; Gemma 3's folds only ``messages[0]``. The built-in
      ``gemma`` format folds every leading system message, each followed by ``"\\n\\n"``, and refuses
      (``ChatTemplateError``) a history with no user message to fold them into, which Gemma 3 would drop.
    * Gemma 4's template takes only ``messages[0]`` as the system prompt; the built-in ``gemma4`` format
      merges every leading system message (trimmed, joined by ``"\\n\\n"``) into the one system turn.
    * Qwen3 strips everything up to the last ``</think>`` of a replayed reply; the built-in ``chatml``
      format strips a leading ``<think>…</think>`` block only.

    >>> t = BuiltinTemplate.detect("{{ '<|im_start|>' + message.role }}")
    >>> t.format, t.stop_marker
    (<ChatFormat.CHATML: 'chatml'>, '<|im_end|>')
    >>> t.render_turn("Hi", system="Be terse.", first=True)
    '<|im_start|>system\\nBe terse.<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
    """

    format: ChatFormat
    bos_token: str | None = None

    def __post_init__(self) -> None:
        fmt: Any = self.format
        if not isinstance(fmt, ChatFormat):
            try:
                fmt = ChatFormat(fmt)
            except ValueError:
                names = ", ".join(repr(f.value) for f in ChatFormat)
                raise ValueError(f"format must be a ChatFormat or one of {names}, not {fmt!r}") from None
            object.__setattr__(self, "format", fmt)
        if self.bos_token is None:
            object.__setattr__(self, "bos_token", _DEFAULT_BOS[fmt])
        elif not isinstance(self.bos_token, str):
            raise TypeError(f"bos_token must be a str or None, not {type(self.bos_token).__name__}")

    @classmethod
    def detect(cls, chat_template: str | None, *, bos_token: str | None = None) -> BuiltinTemplate | None:
        """The built-in format a GGUF ``tokenizer.chat_template`` uses, sniffed from its markers
        (``<|im_start|>`` → ChatML, ``<|start_header_id|>`` → Llama 3, ``<|turn>`` → Gemma 4,
        ``<start_of_turn>`` → Gemma, first match wins); ``None`` for no template or an unknown one."""
        if chat_template is None:
            return None
        if not isinstance(chat_template, str):
            raise TypeError(f"chat_template must be a str or None, not {type(chat_template).__name__}")
        for marker, fmt in _DETECT_MARKERS:
            if marker in chat_template:
                return cls(fmt, bos_token=bos_token)
        return None

    @property
    def stop_marker(self) -> str:
        """The token text that ends an assistant turn (the generation stop marker)."""
        return _STOP_MARKERS[self.format]

    # -- the format's pieces ------------------------------------------------------------------

    @property
    def _bos(self) -> str:
        return "" if self.bos_token is None else self.bos_token

    def _open(self, role: str) -> str:
        fmt = self.format
        if fmt is ChatFormat.CHATML:
            return f"<|im_start|>{role}\n"
        if fmt is ChatFormat.LLAMA3:
            return f"<|start_header_id|>{role}<|end_header_id|>\n\n"
        model_role = "model" if role == "assistant" else role
        if fmt is ChatFormat.GEMMA:
            return f"<start_of_turn>{model_role}\n"
        return f"<|turn>{model_role}\n"

    def _close(self) -> str:
        return {
            ChatFormat.CHATML: "<|im_end|>\n",
            ChatFormat.LLAMA3: "<|eot_id|>",
            ChatFormat.GEMMA: "<end_of_turn>\n",
            ChatFormat.GEMMA4: "<turn|>\n",
        }[self.format]

    def _block(self, role: str, content: str) -> str:
        return self._open(role) + content + self._close()

    def _assistant_opener(self, think_off: bool) -> str:
        opener = self._open("assistant")
        if think_off and self.format is ChatFormat.CHATML:
            opener += _CHATML_THINK_OFF
        elif think_off and self.format is ChatFormat.GEMMA4:
            opener += _GEMMA4_THINK_OFF
        return opener

    def _start(self, system: str | None, think_off: bool) -> str:
        """The conversation start: BOS and, except for Gemma 1–3 (folded into the first user turn), the
        system block."""
        out = self._bos
        if self.format is ChatFormat.GEMMA4:
            if system is not None or not think_off:
                body = ("" if think_off else _GEMMA4_THINK_ON) + ("" if system is None else system.strip())
                out += self._block("system", body)
        elif self.format is not ChatFormat.GEMMA and system is not None:
            out += self._block("system", system)
        return out

    def _replayed(self, role: str, content: str) -> str:
        """A history message's content as rendered: assistant replies lose their leading reasoning block."""
        block = _REASONING_BLOCKS.get(self.format)
        if role == "assistant" and block is not None:
            return _strip_reasoning(content, *block)
        return content

    # -- rendering ------------------------------------------------------------------------------

    def render_turn(self, user: str, *, system: str | None = None, first: bool, think_off: bool = False) -> str:
        """The text to feed for one user turn, ending with the assistant-turn opener.

        ``first`` starts the conversation (BOS and the ``system`` prompt, which later turns ignore);
        otherwise the text first closes the previous assistant turn (generation stopped at the stop
        marker without feeding it). ``think_off`` suppresses reasoning on ChatML (an empty ``<think>``
        block) and Gemma 4 (a primed-empty thought channel; with thinking on, the first turn's system
        block carries ``<|think|>``).
        """
        if not isinstance(user, str):
            raise TypeError(f"user must be a str, not {type(user).__name__}")
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system must be a str or None, not {type(system).__name__}")
        if first:
            out = self._start(system, think_off)
            if self.format is ChatFormat.GEMMA and system is not None:
                user = system + "\n\n" + user
        else:
            out = self._close()
        return out + self._block("user", user) + self._assistant_opener(think_off)

    def render_messages(self, messages: Sequence[Mapping[str, Any]], *, think_off: bool = False) -> str:
        """A full message history (``{"role": "system" | "user" | "assistant", "content": str}`` dicts,
        other keys ignored) rendered for a fresh conversation, ending with the assistant-turn opener.

        ChatML and Llama 3 render every message as its own block, in any order. Gemma 1–3 and Gemma 4
        have one system slot at the conversation start: leading system messages merge into it (Gemma
        1–3: folded into the first user turn) and a later one raises :class:`SystemMidConversation`.
        Replayed assistant replies have their leading reasoning block stripped (ChatML
        ``<think>…</think>``, Gemma 4 ``<|channel>thought…<channel|>``). A one-turn history renders
        exactly as :meth:`render_turn` with ``first=True``.

        Raises :class:`EmptyMessages` for an empty list, :class:`TrailingAssistantMessage` when the last
        message is an assistant's, :class:`ChatTemplateError` for a Gemma 1–3 history of system messages only,
        ``TypeError`` / ``ValueError`` (naming the index) for a malformed message.
        """
        checked = _check_messages(messages)
        if self.format in (ChatFormat.CHATML, ChatFormat.LLAMA3):
            body = "".join(self._block(role, self._replayed(role, content)) for role, content in checked)
            return self._bos + body + self._assistant_opener(think_off)

        leading = 0
        while leading < len(checked) and checked[leading][0] == "system":
            leading += 1
        systems = [content for _, content in checked[:leading]]
        if self.format is ChatFormat.GEMMA4:
            out = self._start("\n\n".join(s.strip() for s in systems) if systems else None, think_off)
            fold = ""
        else:
            out = self._start(None, think_off)
            fold = "".join(s + "\n\n" for s in systems)
        for i, (role, content) in enumerate(checked[leading:], start=leading):
            if role == "system":
                raise SystemMidConversation(
                    f"messages[{i}] is a system message after the start of the conversation: the "
                    f"{self.format.value} format has a single system slot, at the start"
                )
            if role == "user" and fold:
                content, fold = fold + content, ""
            out += self._block(role, self._replayed(role, content))
        if fold:
            raise ChatTemplateError(
                "the gemma format folds the system prompt into the first user turn, and no user message follows "
                "the system messages"
            )
        return out + self._assistant_opener(think_off)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        enable_thinking: bool = True,
        **kwargs: Any,
    ) -> str:
        """:class:`ChatTemplate`'s signature over :meth:`render_messages`, so either kind of template
        renders a model's chat. ``enable_thinking=False`` is ``think_off``; without
        ``add_generation_prompt`` the assistant-turn opener is left off. The built-in formats have no
        tool or document syntax: ``tools`` / ``documents`` raise :class:`ChatTemplateError` (give the
        model a Jinja template that has one, ``LLM(chat_template=...)``); other keywords are ignored,
        as a Jinja template ignores variables it does not read."""
        for name, value in (("tools", tools), ("documents", documents)):
            if value:
                raise ChatTemplateError(
                    f"the built-in {self.format.value} chat format has no syntax for {name}; load the model "
                    "with a chat template that supports them (LLM(path, chat_template=...))"
                )
        text = self.render_messages(messages, think_off=not enable_thinking)
        if not add_generation_prompt:
            text = text[: len(text) - len(self._assistant_opener(not enable_thinking))]
        return text


def select_chat_template(
    gguf_template: str | None,
    *,
    bos_token: str,
    eos_token: str,
    has_token: Callable[[str], bool],
    chat_format: str | ChatFormat | None = None,
    chat_template: str | None = None,
) -> ChatTemplate | BuiltinTemplate:
    """The template a model's chats render with, in this order: an explicit ``chat_format`` (a built-in
    format's name), an explicit Jinja ``chat_template``, the GGUF's own ``tokenizer.chat_template``, and
    for a GGUF without one the built-in format whose turn markers the vocabulary holds
    (``has_token(text)``), ChatML when none matches (llama.cpp's server default)."""
    if chat_format is not None and chat_template is not None:
        raise ValueError("give chat_format or chat_template, not both")
    if chat_format is not None:
        # BuiltinTemplate converts a name itself, with an error listing the formats.
        return BuiltinTemplate(cast(ChatFormat, chat_format))
    source = chat_template if chat_template is not None else gguf_template
    if source is not None:
        return ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)
    for marker, fmt in _DETECT_MARKERS:
        if has_token(marker):
            return BuiltinTemplate(fmt, bos_token=bos_token if _DEFAULT_BOS[fmt] else "")
    return BuiltinTemplate(ChatFormat.CHATML)
