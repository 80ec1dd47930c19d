"""Tool calls in a model's reply: each family's call syntax, parsed back into OpenAI ``tool_calls``.

A model asked to use tools answers in the syntax its chat template taught it. The format is picked
from the template's source by the markers it writes (:func:`detect_tool_call_format`), with
:attr:`ToolCallFormat.GENERIC` as the fallback for templates that have no call syntax (Gemma 1–3,
fucina's built-in formats), and the reply is split into plain content and calls
(:func:`parse_tool_calls`). A call that does not parse (truncated JSON, an unknown shape) stays in the
content as text: parsing never raises on model output.

>>> from fucina.tool_calls import ToolCallFormat, parse_tool_calls
>>> reply = parse_tool_calls(
...     'Let me check.\\n<tool_call>\\n{"name": "get_weather", "arguments": {"city": "Paris"}}\\n</tool_call>',
...     ToolCallFormat.HERMES,
... )
>>> reply.content, reply.tool_calls[0]["function"]
('Let me check.', {'name': 'get_weather', 'arguments': '{"city": "Paris"}'})

Formats (what the model writes):

* ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call
  (Qwen 2.5 / Qwen 3, Hermes 2–3, and most ChatML tool templates).
* ``qwen3_coder``: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>``.
* ``llama3``: the whole reply a JSON ``{"name": ..., "parameters": {...}}`` (several separated by ``;``),
  or after ``<|python_tag|>`` a JSON call or a built-in tool call ``brave_search.call(query="...")``, or
  ``<function=NAME>{...}</function>`` (Llama 3.1's custom tools, functionary).
* ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}]`` (Mistral 7B v0.3, Nemo) and
  ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` / ``[TOOL_CALLS]NAME[ARGS]{...}`` (Mistral Small 3.2, Ministral).
  Call ids are 9 alphanumeric characters, as these templates require.
* ``granite``: ``<|tool_call|>[{"name": ..., "arguments": {...}}]``.
* ``command_r``: ``<|START_ACTION|>[{"tool_name": ..., "parameters": {...}}]<|END_ACTION|>``.
* ``command_r_plus``: ``Action:`` then a fenced ```` ```json ```` list of ``{"tool_name": ..., "parameters": ...}``
  (Command R+).
* ``deepseek_r1``: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` then a fenced JSON block.
* ``deepseek_v3``: ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`` (DeepSeek V3.1).
* ``gemma4``: ``<|tool_call>call:NAME{key:<|"|>text<|"|>,n:3}<tool_call|>``.
* ``glm4``: ``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>`` (GLM 4.5-4.7,
  Ling, Laguna); values typed by the tool's schema.
* ``kimi_k2``: ``<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{...}<|tool_call_end|>``
  in a ``<|tool_calls_section_begin|>`` block; the call id is ``functions.NAME:INDEX``.
* ``minimax_m2``: ``<minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter></invoke>``.
* ``deepseek_dsml``: ``<｜DSML｜function_calls>`` (V3.2; ``tool_calls`` for V4) around
  ``<｜DSML｜invoke name="NAME"><｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>``.
* ``seed_oss``: Qwen3-Coder's ``<function=NAME><parameter=KEY>`` body in ``<seed:tool_call>``.
* ``nemotron``: ``<TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>`` (Nemotron Nano v2).
* ``tool_calls_tag``: ``<tool_calls>`` a JSON list or one JSON call per line ``</tool_calls>`` (Apriel,
  MiniMax M1).
* ``lfm2``: ``<|tool_call_start|>[NAME(key='value', n=3), ...]<|tool_call_end|>`` (Liquid's LFM2), Python
  calls whose values may also be JSON (``true``, ``null``).
* ``minicpm``: ``<function name="NAME"><param name="KEY">VALUE</param></function>`` (MiniCPM 5).
* ``solar_open``: ``<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}``
  ``<|tool_call:end|>...<|calls|>`` (Upstage Solar Open).
* ``apertus``: ``<|tools_prefix|>[{"NAME": {...}}, ...]<|tools_suffix|>`` (Swiss AI Apertus).
* ``gigachat``: ``<|function_call|>{"name": ..., "arguments": {...}}`` (GigaChat 3.1), or after the reply's
  ``<|message_sep|>`` a ``function call<|role_sep|>`` message of that JSON (GigaChat 3).
* ``minimax_m3``: ``NS<tool_call>`` around ``NS<invoke name="NAME">NS<KEY>VALUE NS</KEY>...NS</invoke>``, every tag
  behind the namespace token ``NS`` = ``]<]minimax[>[``; objects and lists are elements too (``NS<item>``).
* ``kimi_k3``: ``<|open|>tools<|sep|>`` around ``<|open|>call tool="NAME" index="1"<|sep|>`` calls of
  ``<|open|>argument key="KEY" type="TYPE"<|sep|>VALUE<|close|>argument<|sep|>`` (``<|close|>call<|sep|>``).
* ``hy3``: Hunyuan 3's ``<tool_calls:S>`` around ``<tool_call:S>NAME<tool_sep:S>`` and GLM-style
  ``<arg_key:S>KEY</arg_key:S><arg_value:S>VALUE</arg_value:S>`` pairs, ``S`` the template's tag suffix
  (``:opensource``).
* ``muse_glimmer``: a message ``to=NAME<|message|><atem:function_calls>`` around
  ``<atem:invoke name="NAME"><atem:parameter name="KEY">VALUE</atem:parameter></atem:invoke>``.
* ``functionary_v3_2``: messages ``>>>RECIPIENT\\n``: ``all`` for content, a function's name then its JSON
  arguments for a call (the reply's first message has no ``>>>``: the generation prompt wrote it).
* ``firefunction_v2``: `` functools[{"name": ..., "arguments": {...}}, ...]``.
* ``gpt_oss``: a harmony commentary message to ``functions.NAME``: ``<|channel|>commentary
  to=functions.NAME <|constrain|>json<|message|>{...}<|call|>``.
* ``generic``: Gemma-style ```` ```tool_code ```` blocks of Python calls ``get_weather(city="Paris")``, a
  leading Python list of calls ``[f(a=1), g(b=2)]``, a leading JSON call ``{"name": ..., "arguments": ...}``
  (or a list of them, or ``{"tool_call": {...}}``), a leading ```` ```json ```` block of one, or
  ``<tool_call>`` blocks. Leading JSON and Python forms only count as calls when they name one of the
  request's tools.

Values written as text (the XML-like formats) are read as JSON unless the tool's schema types them
``string``. Special tokens (``<|python_tag|>``, ``[TOOL_CALLS]``) must be in the text: decode the reply
with special tokens rendered (``create_chat_completion`` does when tools are active).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import json
import re
import secrets
import string
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "ParsedReply",
    "ToolCallFormat",
    "ToolCallStream",
    "detect_tool_call_format",
    "parse_tool_calls",
]


class ToolCallFormat(enum.Enum):
    """The tool-call syntaxes fucina parses (see the module docs for each one's shape)."""

    HERMES = "hermes"
    QWEN3_CODER = "qwen3_coder"
    LLAMA3 = "llama3"
    MISTRAL = "mistral"
    GRANITE = "granite"
    COMMAND_R = "command_r"
    DEEPSEEK_R1 = "deepseek_r1"
    DEEPSEEK_V3 = "deepseek_v3"
    GEMMA4 = "gemma4"
    GLM4 = "glm4"
    KIMI_K2 = "kimi_k2"
    MINIMAX_M2 = "minimax_m2"
    DEEPSEEK_DSML = "deepseek_dsml"
    SEED_OSS = "seed_oss"
    NEMOTRON = "nemotron"
    TOOL_CALLS_TAG = "tool_calls_tag"
    GPT_OSS = "gpt_oss"
    LFM2 = "lfm2"
    MINICPM = "minicpm"
    SOLAR_OPEN = "solar_open"
    APERTUS = "apertus"
    GIGACHAT = "gigachat"
    MINIMAX_M3 = "minimax_m3"
    KIMI_K3 = "kimi_k3"
    HY3 = "hy3"
    MUSE_GLIMMER = "muse_glimmer"
    FUNCTIONARY_V3_2 = "functionary_v3_2"
    FIREFUNCTION_V2 = "firefunction_v2"
    COMMAND_R_PLUS = "command_r_plus"
    GENERIC = "generic"


# DeepSeek's markers use full-width bars and U+2581 (the SentencePiece space).
_DS_CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
_DS_CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
_DS_SEP = "<\uff5ctool\u2581sep\uff5c>"
_DS_CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
_DS_CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
# DeepSeek V3.2 / V4 prefix their call tags with this token: <｜DSML｜invoke name="...">.
_DSML = "\uff5cDSML\uff5c"
# MiniMax M3 puts this namespace token before each of its call tags: ]<]minimax[>[<invoke name="...">.
_MM3 = "]<]minimax[>["

# Template markers, checked in order: the first whose every string is in the source wins. Gemma 4 and
# Qwen3-Coder come before the plain <tool_call> families whose markers their templates also contain.
_DETECT: tuple[tuple[tuple[str, ...], ToolCallFormat], ...] = (
    (("<|tool_call>", "<tool_call|>"), ToolCallFormat.GEMMA4),
    # MiniMax M3 writes <tool_call> and <invoke name=...>, each tag behind its namespace token.
    ((_MM3, "<invoke name="), ToolCallFormat.MINIMAX_M3),
    (("<|open|>", "<|close|>", "<|end_of_msg|>"), ToolCallFormat.KIMI_K3),
    # Hunyuan 3 builds its tags with a suffix: '<tool_sep{}>'.format(':opensource').
    (("<tool_sep", "<arg_key"), ToolCallFormat.HY3),
    (("<atem:function_calls>",), ToolCallFormat.MUSE_GLIMMER),
    ((">>>all",), ToolCallFormat.FUNCTIONARY_V3_2),
    (("functools[",), ToolCallFormat.FIREFUNCTION_V2),
    (("[TOOL_CALLS]",), ToolCallFormat.MISTRAL),
    (("<seed:tool_call>",), ToolCallFormat.SEED_OSS),
    (("<minimax:tool_call>", "<invoke name="), ToolCallFormat.MINIMAX_M2),
    ((_DSML, "invoke name="), ToolCallFormat.DEEPSEEK_DSML),
    (("<tool_call>", "<arg_key>"), ToolCallFormat.GLM4),
    (("<function name=", "<param name="), ToolCallFormat.MINICPM),
    (("<|tool_call:begin|>",), ToolCallFormat.SOLAR_OPEN),
    (("<|tools_prefix|>",), ToolCallFormat.APERTUS),
    (("<|function_call|>",), ToolCallFormat.GIGACHAT),
    # GigaChat 3 (before 3.1's <|function_call|>): a "function call" message after the reply.
    (("<|role_sep|>", "<|message_sep|>"), ToolCallFormat.GIGACHAT),
    (("<tool_call>", "<function="), ToolCallFormat.QWEN3_CODER),
    (("<tool_calls>",), ToolCallFormat.TOOL_CALLS_TAG),
    (("<tool_call>",), ToolCallFormat.HERMES),
    (("<TOOLCALL>",), ToolCallFormat.NEMOTRON),
    (("<|tool_call_begin|>",), ToolCallFormat.KIMI_K2),
    (("<|tool_call_start|>",), ToolCallFormat.LFM2),
    (("<|tool_list_start|>",), ToolCallFormat.LFM2),
    # LFM2.5's templates list the tools as plain text and write no call syntax (calls are in the content).
    (("List of tools: [",), ToolCallFormat.LFM2),
    (("<|tool_call|>",), ToolCallFormat.GRANITE),
    (("<|START_ACTION|>",), ToolCallFormat.COMMAND_R),
    (("Action:", "```json", '"tool_name"'), ToolCallFormat.COMMAND_R_PLUS),
    ((_DS_CALL_BEGIN, "```json"), ToolCallFormat.DEEPSEEK_R1),
    ((_DS_CALL_BEGIN,), ToolCallFormat.DEEPSEEK_V3),
    (("<|channel|>", "<|call|>"), ToolCallFormat.GPT_OSS),
    (("<|python_tag|>",), ToolCallFormat.LLAMA3),
    (("<|start_header_id|>", '"parameters"'), ToolCallFormat.LLAMA3),
)


def detect_tool_call_format(template: str | None) -> ToolCallFormat:
    """The call syntax a chat template's source teaches, from the markers it writes; ``GENERIC`` for
    ``None`` or a template with no call syntax."""
    if template is None:
        return ToolCallFormat.GENERIC
    if not isinstance(template, str):
        raise TypeError(f"template must be a str or None, not {type(template).__name__}")
    for markers, fmt in _DETECT:
        if all(m in template for m in markers):
            return fmt
    return ToolCallFormat.GENERIC


@dataclasses.dataclass(frozen=True)
class ParsedReply:
    """A reply split into content and calls.

    ``text`` is the reply with the calls cut out (the whitespace around each call dropped, the pieces
    joined by newlines; the reply unchanged when it has no call). ``tool_calls`` are OpenAI tool calls:
    ``{"id", "type": "function", "function": {"name", "arguments": <JSON object as a string>}}``.
    """

    text: str
    tool_calls: list[dict[str, Any]]

    @property
    def content(self) -> str | None:
        """OpenAI's ``message.content``: ``None`` for a reply that is only calls."""
        if self.tool_calls and not self.text.strip():
            return None
        return self.text


# ---------------------------------------------------------------------------------------------
# Values

_ALNUM = string.ascii_letters + string.digits
# Function names as OpenAI allows them, plus the dots of dotted names (Llama's `brave_search.call`).
_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,256}")
# Model output is untrusted: a call nested deeper than this is malformed, not a reason to recurse.
_MAX_DEPTH = 64


def _call_id(fmt: ToolCallFormat) -> str:
    if fmt is ToolCallFormat.MISTRAL:
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _json_at(text: str, pos: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``text[pos]`` (after whitespace) and the index after it."""
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    try:
        return _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError):
        return None


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


class _Tools:
    """The request's tools: names (to accept bare JSON / Python calls) and parameter schemas."""

    def __init__(self, tools: Sequence[Mapping[str, Any]] | None) -> None:
        self.given = tools is not None
        self.params: dict[str, list[str]] = {}
        self.types: dict[str, dict[str, Any]] = {}
        self.schemas: dict[str, Mapping[str, Any]] = {}
        for tool in tools or ():
            fn = tool.get("function") if isinstance(tool, Mapping) else None
            fn = fn if isinstance(fn, Mapping) else tool
            name = fn.get("name") if isinstance(fn, Mapping) else None
            if not isinstance(name, str):
                continue
            schema = fn.get("parameters") if isinstance(fn, Mapping) else None
            props = schema.get("properties") if isinstance(schema, Mapping) else None
            props = props if isinstance(props, Mapping) else {}
            self.schemas[name] = schema if isinstance(schema, Mapping) else {}
            self.params[name] = [str(k) for k in props]
            self.types[name] = {str(k): v.get("type") for k, v in props.items() if isinstance(v, Mapping)}

    def prop(self, name: str, key: str) -> Any:
        """The schema of tool ``name``'s parameter ``key`` (``None`` if unknown)."""
        props = self.schemas.get(name, {}).get("properties")
        return props.get(key) if isinstance(props, Mapping) else None

    def known(self, name: str) -> bool:
        return not self.given or name in self.params

    def lenient(self) -> _Tools:
        """The same schemas, accepting any function name (after an explicit call marker)."""
        out = _Tools(None)
        out.params, out.types, out.schemas = self.params, self.types, self.schemas
        return out


def _make_call(fmt: ToolCallFormat, name: Any, args: Any, call_id: Any = None) -> dict[str, Any] | None:
    """An OpenAI tool call, or ``None`` when ``name`` / ``args`` are not a function name and an object."""
    if not isinstance(name, str) or not _NAME.fullmatch(name.strip()):
        return None
    if args is None:
        args = {}
    if isinstance(args, str):
        parsed = _json_at(args, 0)
        if parsed is None or args[parsed[1] :].strip():
            return None
        args = parsed[0]
    if not isinstance(args, dict):
        return None
    try:
        arguments = json.dumps(args, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    ident = call_id if isinstance(call_id, str) and call_id and len(call_id) <= 64 else _call_id(fmt)
    return {"id": ident, "type": "function", "function": {"name": name.strip(), "arguments": arguments}}


def _json_call(fmt: ToolCallFormat, obj: Any, tools: _Tools, *, nested: bool = True) -> dict[str, Any] | None:
    """A call from a JSON object ``{"name", "arguments" | "parameters", "id"?}`` (or, with ``nested``,
    the generic ``{"tool_call": {...}}``)."""
    if not isinstance(obj, dict):
        return None
    if nested and "name" not in obj and isinstance(obj.get("tool_call"), dict):
        return _json_call(fmt, obj["tool_call"], tools, nested=False)
    name = obj.get("name", obj.get("tool_name"))
    if "function" in obj and isinstance(obj["function"], dict) and name is None:
        return _json_call(fmt, obj["function"], tools, nested=False)
    if not isinstance(name, str) or not tools.known(name.strip()):
        return None
    args = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    return _make_call(fmt, name, args, obj.get("id"))


# ---------------------------------------------------------------------------------------------
# Python calls (Gemma's tool_code, pythonic lists, Llama's built-in tools)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        if base is None:
            return None
        # Llama 3.1's built-in tools are written `brave_search.call(query=...)`.
        return base if node.attr == "call" else f"{base}.{node.attr}"
    return None


class _JsonNames(ast.NodeTransformer):
    """JSON's ``true`` / ``false`` / ``null`` read as Python's constants (models mix the two)."""

    VALUES: dict[str, Any] = {"true": True, "false": False, "null": None}

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.VALUES:
            return ast.copy_location(ast.Constant(self.VALUES[node.id]), node)
        return node


def _literal(node: ast.expr) -> Any:
    return ast.literal_eval(_JsonNames().visit(node))


def _python_call(fmt: ToolCallFormat, node: ast.expr, tools: _Tools) -> dict[str, Any] | None:
    if not isinstance(node, ast.Call):
        return None
    name = _dotted(node.func)
    if name is None or not tools.known(name):
        return None
    args: dict[str, Any] = {}
    params = tools.params.get(name, [])
    if len(node.args) > len(params):
        return None
    for key, value in zip(params, node.args, strict=False):
        args[key] = _literal(value)
    for kw in node.keywords:
        if kw.arg is None:
            return None
        args[kw.arg] = _literal(kw.value)
    return _make_call(fmt, name, args)


def _python_calls(fmt: ToolCallFormat, source: str, tools: _Tools) -> list[dict[str, Any]] | None:
    """Calls from Python source: call statements, or one list / tuple of calls; ``None`` if it is not that."""
    try:
        with warnings.catch_warnings():
            # Invalid escapes in model-written strings are a SyntaxWarning, not the caller's concern.
            warnings.simplefilter("ignore")
            tree = ast.parse(source.strip(), mode="exec")
        nodes: list[ast.expr] = []
        for stmt in tree.body:
            if not isinstance(stmt, ast.Expr):
                return None
            value = stmt.value
            nodes.extend(value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value])
        calls = [_python_call(fmt, n, tools) for n in nodes]
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, OverflowError):
        return None
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


# ---------------------------------------------------------------------------------------------
# Per-format call parsers: each takes (text, index of its marker) and returns (calls, end) or None.

_Span = tuple[list[dict[str, Any]], int]
_MarkerParser = Callable[[ToolCallFormat, str, int, _Tools], "_Span | None"]


def _open_suffix(text: str, marker: str, start: int = 0) -> int:
    """Length of the longest suffix of ``text[start:]`` that is a proper prefix of ``marker`` (a marker that
    more text may complete, or that generation stopped inside)."""
    for n in range(min(len(marker) - 1, len(text) - start), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def _block(text: str, start: int, close: str) -> tuple[str, int]:
    """The body from ``start`` to ``close`` (or to the end, less a closing marker cut short: generation
    may stop before or inside it) and the end."""
    end = text.find(close, start)
    if end < 0:
        return text[start : len(text) - _open_suffix(text, close, start)], len(text)
    return text[start:end], end + len(close)


def _hermes(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    body, end = _block(text, pos + len("<tool_call>"), "</tool_call>")
    body = body.strip()
    if body.startswith("<function="):
        return _qwen3_coder_body(fmt, body, tools, end)
    parsed = _json_at(body, 0)
    obj: Any
    if parsed is not None and not body[parsed[1] :].strip():
        obj = parsed[0]
    else:
        # Hermes 2 Pro writes Python dict literals ({'name': ..., 'arguments': {...}}).
        try:
            obj = ast.literal_eval(body)
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
            return None
    call = _json_call(fmt, obj, _Tools(None))
    return ([call], end) if call is not None else None


def _schema_value(raw: str, kind: Any) -> Any:
    if kind == "string":
        return raw
    parsed = _json_at(raw, 0)
    if parsed is not None and not raw[parsed[1] :].strip():
        return parsed[0]
    return raw


def _qwen3_coder_body(fmt: ToolCallFormat, body: str, tools: _Tools, end: int) -> _Span | None:
    if not body.startswith("<function="):
        return None
    close = body.find(">")
    if close < 0:
        return None
    name = body[len("<function=") : close].strip()
    types = tools.types.get(name, {})
    args: dict[str, Any] = {}
    pos = close + 1
    while True:
        start = body.find("<parameter=", pos)
        if start < 0:
            break
        key_end = body.find(">", start)
        if key_end < 0:
            return None
        key = body[start + len("<parameter=") : key_end].strip()
        stop = body.find("</parameter>", key_end)
        nxt = body.find("<parameter=", key_end)
        value_end = stop if stop >= 0 and (nxt < 0 or stop < nxt) else (nxt if nxt >= 0 else len(body))
        raw = body[key_end + 1 : value_end]
        raw = raw.removeprefix("\n").removesuffix("\n")
        args[key] = _schema_value(raw, types.get(key))
        pos = value_end
    call = _make_call(fmt, name, args)
    return ([call], end) if call is not None else None


def _qwen3_coder(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    if text.startswith("<tool_call>", pos):
        body, end = _block(text, pos + len("<tool_call>"), "</tool_call>")
        return _qwen3_coder_body(fmt, body.strip(), tools, end)
    # Some models skip the opening <tool_call> and start at <function=.
    body, end = _block(text, pos, "</function>")
    return _qwen3_coder_body(fmt, body, tools, _after(text, end, "</tool_call>"))


def _json_list(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    parsed = _json_at(text, pos)
    if parsed is None:
        return None
    value, end = parsed
    items = value if isinstance(value, list) else [value]
    calls = [_json_call(fmt, item, tools) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None], end


def _mistral(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    pos += len("[TOOL_CALLS]")
    body = _skip_ws(text, pos)
    if text.startswith("[", body) or text.startswith("{", body):
        return _json_list(fmt, text, body, _Tools(None))
    # Mistral Small 3.2 / Ministral: NAME[CALL_ID]ID[ARGS]{...}
    args_at = text.find("[ARGS]", pos)
    if args_at < 0:
        return None
    head = text[pos:args_at]
    call_id = None
    if "[CALL_ID]" in head:
        head, call_id = head.split("[CALL_ID]", 1)
        call_id = call_id.strip()
    parsed = _json_at(text, args_at + len("[ARGS]"))
    if parsed is None:
        return None
    call = _make_call(fmt, head, parsed[0], call_id)
    return ([call], parsed[1]) if call is not None else None


def _after(text: str, end: int, close: str) -> int:
    """Past ``close`` where it follows ``end`` (after whitespace), or past a start of it that ends the text
    (generation stopped inside it); else ``end``."""
    at = _skip_ws(text, end)
    if text.startswith(close, at) or (at < len(text) and close.startswith(text[at:])):
        return min(at + len(close), len(text))
    return end


def _granite(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    return _json_list(fmt, text, pos + len("<|tool_call|>"), _Tools(None))


def _command_r(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    span = _json_list(fmt, text, pos + len("<|START_ACTION|>"), _Tools(None))
    if span is None:
        return None
    return span[0], _after(text, span[1], "<|END_ACTION|>")


def _deepseek_r1(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    if text.startswith(_DS_CALLS_BEGIN, pos):
        pos += len(_DS_CALLS_BEGIN)
    calls: list[dict[str, Any]] = []
    while True:
        at = _skip_ws(text, pos)
        if not text.startswith(_DS_CALL_BEGIN, at):
            break
        sep = text.find(_DS_SEP, at)
        if sep < 0:
            return None
        head = text[at + len(_DS_CALL_BEGIN) : sep].strip()
        if head == "function":
            # R1: function<｜tool▁sep｜>NAME, then the arguments in a fenced JSON block.
            newline = text.find("\n", sep)
            if newline < 0:
                return None
            name, start = text[sep + len(_DS_SEP) : newline], newline + 1
        else:
            # V3.1: NAME<｜tool▁sep｜> and the arguments' JSON.
            name, start = head, sep + len(_DS_SEP)
        body, end = _block(text, start, _DS_CALL_END)
        body = body.strip().removeprefix("```json").removeprefix("```").removesuffix("```")
        call = _make_call(fmt, name, body.strip())
        if call is None:
            return None
        calls.append(call)
        pos = end
    if not calls:
        return None
    return calls, _after(text, pos, _DS_CALLS_END)


def _glm4(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    body, end = _block(text, pos + len("<tool_call>"), "</tool_call>")
    if body.lstrip().startswith("{"):
        return _hermes(fmt, text, pos, tools)
    first = body.find("<arg_key>")
    name = (body if first < 0 else body[:first]).strip()
    types = tools.types.get(name, {})
    args: dict[str, Any] = {}
    for m in _GLM_ARG.finditer(body):
        key = m.group(1).strip()
        args[key] = _schema_value(m.group(2), types.get(key))
    call = _make_call(fmt, name, args)
    return ([call], end) if call is not None else None


_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)(?:</arg_value>|$)", re.DOTALL)
_KIMI_CALL = re.compile(
    r"<\|tool_call_begin\|>\s*(?:functions\.)?([^:<\s]+)(?::(\d+))?\s*<\|tool_call_argument_begin\|>"
)


def _kimi_k2(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    if text.startswith("<|tool_calls_section_begin|>", pos):
        pos += len("<|tool_calls_section_begin|>")
    calls: list[dict[str, Any]] = []
    while True:
        m = _KIMI_CALL.match(text, _skip_ws(text, pos))
        if m is None:
            break
        parsed = _json_at(text, m.end())
        if parsed is None:
            return None
        # Kimi's call ids are functions.NAME:INDEX (its template writes results against them).
        call_id = f"functions.{m.group(1)}:{m.group(2)}" if m.group(2) is not None else None
        call = _make_call(fmt, m.group(1), parsed[0], call_id)
        if call is None:
            return None
        calls.append(call)
        pos = _after(text, parsed[1], "<|tool_call_end|>")
    if not calls:
        return None
    return calls, _after(text, pos, "<|tool_calls_section_end|>")


def _invokes(
    fmt: ToolCallFormat, body: str, tools: _Tools, ns: str, call_tag: str = "invoke", param_tag: str = "parameter"
) -> list[dict[str, Any]] | None:
    """``<{ns}invoke name="N"><{ns}parameter name="K" [string="true|false"]>V</{ns}parameter></{ns}invoke>``
    calls (MiniMax M2 without a prefix, DeepSeek V3.2 / V4 with ``｜DSML｜``; MiniCPM's ``function`` /
    ``param`` tags): values typed by the ``string`` attribute when there is one (``false``: JSON), else
    by the tool's schema."""
    ns = re.escape(ns)
    invoke = re.compile(rf'<{ns}{call_tag} name="([^"]*)">(.*?)(?:</{ns}{call_tag}>|$)', re.DOTALL)
    param = re.compile(
        rf'<{ns}{param_tag} name="([^"]*)"(?:\s+string="(true|false)")?>(.*?)(?:</{ns}{param_tag}>|$)', re.DOTALL
    )
    calls: list[dict[str, Any]] = []
    for inv in invoke.finditer(body):
        name = inv.group(1).strip()
        types = tools.types.get(name, {})
        args = {}
        for m in param.finditer(inv.group(2)):
            raw = m.group(3).strip("\n")
            kind = {"true": "string", "false": None}.get(m.group(2) or "", types.get(m.group(1)))
            args[m.group(1)] = _schema_value(raw, kind)
        call = _make_call(fmt, name, args)
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _minimax_m2(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    body, end = _block(text, pos + len("<minimax:tool_call>"), "</minimax:tool_call>")
    calls = _invokes(fmt, body, tools, "")
    return (calls, end) if calls else None


def _minicpm(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # One <function name="N"><param name="K">V</param>...</function> element per call.
    body, end = _block(text, pos, "</function>")
    calls = _invokes(fmt, body + "</function>", tools, "", "function", "param")
    return (calls, end) if calls else None


_SOLAR_CALL = re.compile(r"<\|tool_call:begin\|>([^<]*)<\|tool_call:name\|>([^<]*)<\|tool_call:args\|>")


def _solar_open(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # <|tool_calls|> then per call <|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}<|tool_call:end|>.
    if text.startswith("<|tool_calls|>", pos):
        pos += len("<|tool_calls|>")
    calls: list[dict[str, Any]] = []
    while (m := _SOLAR_CALL.match(text, _skip_ws(text, pos))) is not None:
        parsed = _json_at(text, m.end())
        call = None if parsed is None else _make_call(fmt, m.group(2), parsed[0], m.group(1).strip() or None)
        if parsed is None or call is None:
            return None
        calls.append(call)
        pos = _after(text, parsed[1], "<|tool_call:end|>")
    return (calls, _after(text, pos, "<|calls|>")) if calls else None


def _apertus(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # <|tools_prefix|>[{"NAME": {...arguments}}, ...]<|tools_suffix|>
    parsed = _json_at(text, pos + len("<|tools_prefix|>"))
    if parsed is None:
        return None
    items = parsed[0] if isinstance(parsed[0], list) else [parsed[0]]
    calls = []
    for item in items:
        call = _make_call(fmt, *next(iter(item.items()))) if isinstance(item, dict) and len(item) == 1 else None
        if call is None:
            return None
        calls.append(call)
    return (calls, _after(text, parsed[1], "<|tools_suffix|>")) if calls else None


def _deepseek_dsml(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # <｜DSML｜function_calls> (V3.2) or <｜DSML｜tool_calls> (V4) around the invokes.
    for wrapper in ("function_calls", "tool_calls"):
        opener = f"<{_DSML}{wrapper}>"
        if text.startswith(opener, pos):
            body, end = _block(text, pos + len(opener), f"</{_DSML}{wrapper}>")
            calls = _invokes(fmt, body, tools, _DSML)
            return (calls, end) if calls else None
    return None


def _seed_oss(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    body, end = _block(text, pos + len("<seed:tool_call>"), "</seed:tool_call>")
    return _qwen3_coder_body(fmt, body.strip(), tools, end)


def _wrapped_json(open_marker: str, close_marker: str) -> _MarkerParser:
    """Calls as JSON (one object, a list, or objects one after another) between two markers."""

    def parse(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
        span = _leading_json(fmt, text, pos + len(open_marker), _Tools(None))
        return None if span is None else (span[0], _after(text, span[1], close_marker))

    return parse


def _lfm2(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # A Python list of calls between the markers: [get_weather(city='Paris'), get_time()].
    body, end = _block(text, pos + len("<|tool_call_start|>"), "<|tool_call_end|>")
    calls = _python_calls(fmt, body, tools.lenient())
    return (calls, end) if calls else None


_HARMONY_RECIPIENT = re.compile(r"to=functions\.([A-Za-z0-9_.\-]+)")


def _gpt_oss(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # A call is a commentary message to functions.NAME: `<|start|>assistant<|channel|>commentary
    # to=functions.NAME <|constrain|>json<|message|>{...}<|call|>` (or the recipient before the channel).
    message = text.find("<|message|>", pos)
    if message < 0:
        return None
    m = _HARMONY_RECIPIENT.search(text, pos, message)
    if m is None:
        return None
    parsed = _json_at(text, message + len("<|message|>"))
    if parsed is None:
        return None
    call = _make_call(fmt, m.group(1), parsed[0])
    return ([call], _after(text, parsed[1], "<|call|>")) if call is not None else None


def _string_typed(schema: Any) -> bool:
    """Whether a property's schema allows only text (then a value is read as written, never as JSON)."""
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    return kind == "string" or (isinstance(kind, list) and "string" in kind and "object" not in kind)


def _typed(raw: str, schema: Any) -> Any:
    """A value written as text: as is for a string-typed property, else its JSON value where it is JSON
    (an empty element being an empty object or list where the schema says so)."""
    if _string_typed(schema):
        return raw
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if not raw.strip() and kind in ("object", "array"):
        return {} if kind == "object" else []
    return _schema_value(raw, None)


def _child_schema(schema: Any, tag: str) -> Any:
    if not isinstance(schema, Mapping):
        return None
    if tag == "item" and isinstance(schema.get("items"), Mapping):
        return schema["items"]
    props = schema.get("properties")
    return props.get(tag) if isinstance(props, Mapping) else None


_MM3_TAG = re.compile(r"<([^\s<>/\"]{1,256})>")


def _mm3_children(text: str, pos: int, close: str, schema: Any, depth: int) -> tuple[Any, int]:
    """MiniMax M3's elements ``NS<key>value NS</key>`` up to ``close``: an object, or a list when they are
    ``NS<item>`` elements (or the schema says array). Generation may stop before ``close``."""
    if depth > _MAX_DEPTH:
        raise ValueError("nested too deeply")
    items: list[tuple[str, Any]] = []
    while True:
        at = _skip_ws(text, pos)
        if close.startswith(text[at : at + len(close)]):  # the close tag, or the end (part of it) of the text
            pos = min(at + len(close), len(text))
            break
        m = _MM3_TAG.match(text, at + len(_MM3)) if text.startswith(_MM3, at) else None
        if m is None:
            raise ValueError("expected an element")
        tag = m.group(1)
        value, pos = _mm3_value(text, m.end(), tag, _child_schema(schema, tag), depth + 1)
        items.append((tag, value))
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if kind == "array" or (kind != "object" and items and all(tag == "item" for tag, _ in items)):
        return [value for _, value in items], pos
    return dict(items), pos


def _mm3_value(text: str, pos: int, tag: str, schema: Any, depth: int) -> tuple[Any, int]:
    close = f"{_MM3}</{tag}>"
    at = _skip_ws(text, pos)
    if text.startswith(_MM3 + "<", at) and not text.startswith(_MM3 + "</", at) and not _string_typed(schema):
        return _mm3_children(text, at, close, schema, depth)
    raw, end = _block(text, pos, close)
    return _typed(raw, schema), end


_MM3_INVOKE = re.compile(re.escape(_MM3) + r'<invoke name="([^"]*)">')


def _minimax_m3(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # NS<tool_call> then NS<invoke name="N"> per call, each argument an element NS<KEY>VALUE NS</KEY> whose
    # object and list values are elements too (NS<item> for list items); NS</invoke>, NS</tool_call>.
    pos += len(_MM3 + "<tool_call>")
    close = _MM3 + "</tool_call>"
    calls: list[dict[str, Any]] = []
    while True:
        at = _skip_ws(text, pos)
        m = _MM3_INVOKE.match(text, at)
        if m is None:
            break
        name = m.group(1).strip()
        try:
            args, pos = _mm3_children(text, m.end(), _MM3 + "</invoke>", tools.schemas.get(name), 0)
        except (ValueError, RecursionError):
            return None
        call = _make_call(fmt, name, args)
        if call is None:
            return None
        calls.append(call)
    return (calls, _after(text, pos, close)) if calls else None


_K3_ATTR = re.compile(r'\s+([A-Za-z_][A-Za-z0-9_.:\-]*)="([^"]*)"')


def _k3_open(text: str, pos: int, tag: str) -> tuple[dict[str, str], int] | None:
    """Kimi K3's ``<|open|>TAG key="value"...<|sep|>``: its attributes (unescaped) and the index after it."""
    opener = "<|open|>" + tag
    if not text.startswith(opener, pos):
        return None
    pos += len(opener)
    attrs: dict[str, str] = {}
    while (m := _K3_ATTR.match(text, pos)) is not None:
        attrs[m.group(1)] = m.group(2).replace("&quot;", '"').replace("&amp;", "&")
        pos = m.end()
    return (attrs, pos + len("<|sep|>")) if text.startswith("<|sep|>", pos) else None


def _kimi_k3(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # <|open|>tools<|sep|>, per call <|open|>call tool="N" index="I"<|sep|> then its arguments
    # <|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|> (or one <|open|>json ...<|sep|>{...}
    # <|close|>json<|sep|>) and <|close|>call<|sep|>; <|close|>tools<|sep|>. Values are JSON unless the
    # tool's schema (or, without one, the type attribute) says string.
    pos += len("<|open|>tools<|sep|>")
    calls: list[dict[str, Any]] = []
    while (head := _k3_open(text, _skip_ws(text, pos), "call")) is not None:
        attrs, pos = head
        name = attrs.get("tool", "")
        args: dict[str, Any] = {}
        while True:
            at = _skip_ws(text, pos)
            if "<|close|>call<|sep|>".startswith(text[at : at + len("<|close|>call<|sep|>")]):
                pos = min(at + len("<|close|>call<|sep|>"), len(text))
                break
            if (arg := _k3_open(text, at, "argument")) is not None:
                key = arg[0].get("key", "")
                raw, pos = _block(text, arg[1], "<|close|>argument<|sep|>")
                # Without the tool's schema, the type the model wrote says whether the value is text.
                schema = tools.prop(name, key)
                schema = schema if isinstance(schema, Mapping) else {"type": arg[0].get("type")}
                args[key] = _typed(raw, schema)
            elif (block := _k3_open(text, at, "json")) is not None:
                raw, pos = _block(text, block[1], "<|close|>json<|sep|>")
                parsed = _json_at(raw, 0)
                if parsed is None or not isinstance(parsed[0], dict) or raw[parsed[1] :].strip():
                    return None
                args.update(parsed[0])
            else:
                return None
        call = _make_call(fmt, name, args)
        if call is None:
            return None
        calls.append(call)
    if not calls:
        return None
    pos = _after(text, pos, "<|close|>tools<|sep|>")
    pos = _after(text, pos, "<|close|>message<|sep|>")
    return calls, _after(text, pos, "<|end_of_msg|>")


_HY3_TAG = re.compile(r"<tool_calls?(:[A-Za-z0-9_\-]+)?>")


def _hy3(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # Hunyuan 3: <tool_calls:S> then per call <tool_call:S>NAME<tool_sep:S> and <arg_key:S>K</arg_key:S>
    # <arg_value:S>V</arg_value:S> pairs, </tool_call:S>; </tool_calls:S>. S is the template's tag suffix
    # (":opensource"); the pairs are GLM 4.5's, values typed by the tool's schema.
    m = _HY3_TAG.match(text, pos)
    if m is None:
        return None
    sfx = m.group(1) or ""
    wrapped = text.startswith("<tool_calls", pos)
    pos = m.end() if wrapped else pos
    opener, sep, closer = f"<tool_call{sfx}>", f"<tool_sep{sfx}>", f"</tool_call{sfx}>"
    pair = re.compile(
        rf"\s*<arg_key{re.escape(sfx)}>(.*?)</arg_key{re.escape(sfx)}>\s*<arg_value{re.escape(sfx)}>(.*?)"
        rf"(?:</arg_value{re.escape(sfx)}>|$)",
        re.DOTALL,
    )
    calls: list[dict[str, Any]] = []
    while text.startswith(opener, at := _skip_ws(text, pos)):
        body, pos = _block(text, at + len(opener), closer)
        cut = body.find(sep)
        name, rest = (body[:cut], body[cut + len(sep) :]) if cut >= 0 else (body, "")
        if cut < 0 and (first := body.find(f"<arg_key{sfx}>")) >= 0:
            name, rest = body[:first], body[first:]
        args: dict[str, Any] = {}
        at = 0
        while (kv := pair.match(rest, at)) is not None:
            key = kv.group(1).strip()
            args[key] = _typed(kv.group(2), tools.prop(name.strip(), key))
            at = kv.end()
        if rest[at:].strip():
            return None
        call = _make_call(fmt, name, args)
        if call is None:
            return None
        calls.append(call)
    if not calls:
        return None
    return calls, (_after(text, pos, f"</tool_calls{sfx}>") if wrapped else pos)


_MUSE_HEAD = re.compile(r"(?:<\|start\|>assistant)?\s*to=([^\s<]{1,256})\s*<\|message\|>\s*")


def _muse_glimmer(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # A message to the tool: ` to=NAME<|message|><atem:function_calls>\n<atem:invoke name="NAME">\n
    # <atem:parameter name="K">V</atem:parameter>\n</atem:invoke>\n</atem:function_calls>`, ended by <|eom|>
    # (another message follows: the next call) or <|eot|>. Call markup without its message header is
    # text (an answer quoting it), as in llama.cpp.
    head = _MUSE_HEAD.match(text, pos)
    if head is None or not text.startswith("<atem:function_calls>", start := head.end()):
        return None
    body, end = _block(text, start + len("<atem:function_calls>"), "</atem:function_calls>")
    calls = _invokes(fmt, body, tools, "atem:")
    if not calls:
        return None
    for closer in ("<|eom|>", "<|eot|>"):
        if text.startswith(closer, end):
            return calls, end + len(closer)
    return calls, end


_RECIPIENT = re.compile(r"([A-Za-z0-9_.\-]{1,256})\n")


def _functionary_call(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    """A functionary v3.2 message ``NAME\\n{...}`` at ``pos`` (``all`` is the recipient of plain content)."""
    m = _RECIPIENT.match(text, pos)
    if m is None or m.group(1) == "all" or not tools.known(m.group(1)):
        return None
    parsed = _json_at(text, m.end())
    call = None if parsed is None else _make_call(fmt, m.group(1), parsed[0])
    return None if call is None or parsed is None else ([call], parsed[1])


def _functionary_v3_2(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # Each message starts with >>>RECIPIENT: >>>all for content, >>>NAME then the JSON arguments for a call
    # (the generation prompt ends with ">>>", so the reply's first message has no marker).
    return _functionary_call(fmt, text, pos + len(">>>"), _Tools(None))


def _leading_functionary(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # Without the request's tools a leading word and a JSON object are not known to be a call.
    return _functionary_call(fmt, text, pos, tools) if tools.given else None


def _firefunction(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # FireFunction v2: ` functools[{"name": ..., "arguments": {...}}, ...]`, no closing marker.
    return _json_list(fmt, text, pos + len("functools"), _Tools(None))


def _command_r_plus(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # Command R+: `Action:` then a fenced JSON list of {"tool_name": ..., "parameters": {...}}.
    at = _skip_ws(text, pos + len("Action:"))
    fenced = text.startswith("```", at)
    if fenced:
        newline = text.find("\n", at)
        if newline < 0 or text[at + 3 : newline].strip() not in ("json", ""):
            return None
        at = newline + 1
    if not text.startswith("[", _skip_ws(text, at)):
        return None
    span = _json_list(fmt, text, at, _Tools(None))
    if span is None:
        return None
    return span[0], (_after(text, span[1], "```") if fenced else span[1])


def _gigachat_v3(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # GigaChat 3: the reply's message ends with <|message_sep|>, then a `function call` message
    # `function call<|role_sep|>\n{"name": ..., "arguments": {...}}`.
    at = pos
    if text.startswith("<|message_sep|>", at):
        at = _skip_ws(text, at + len("<|message_sep|>"))
    if not text.startswith("function call<|role_sep|>", at):
        return None
    return _leading_json(fmt, text, at + len("function call<|role_sep|>"), _Tools(None))


class _GemmaArgs:
    """Gemma 4's argument syntax: ``{key:value,...}``, strings between ``<|"|>`` quotes, bare
    numbers / booleans, nested objects and lists."""

    QUOTE = '<|"|>'

    def __init__(self, text: str) -> None:
        self.text = text

    def value(self, pos: int, depth: int) -> tuple[Any, int]:
        if depth > _MAX_DEPTH:
            raise ValueError("nested too deeply")
        t = self.text
        if t.startswith(self.QUOTE, pos):
            end = t.find(self.QUOTE, pos + len(self.QUOTE))
            if end < 0:
                raise ValueError("unterminated string")
            return t[pos + len(self.QUOTE) : end], end + len(self.QUOTE)
        if t.startswith("{", pos):
            return self.mapping(pos, depth + 1)
        if t.startswith("[", pos):
            items: list[Any] = []
            pos += 1
            while not t.startswith("]", pos):
                item, pos = self.value(pos, depth + 1)
                items.append(item)
                if t.startswith(",", pos):
                    pos += 1
                elif not t.startswith("]", pos):
                    raise ValueError("expected , or ]")
            return items, pos + 1
        end = pos
        while end < len(t) and t[end] not in ",}]":
            end += 1
        raw = t[pos:end].strip()
        scalars: dict[str, Any] = {"true": True, "false": False, "null": None}
        if raw in scalars:
            return scalars[raw], end
        parsed = _json_at(raw, 0)
        if raw and parsed is not None and parsed[1] == len(raw) and isinstance(parsed[0], (int, float)):
            return parsed[0], end
        return raw, end

    def mapping(self, pos: int, depth: int) -> tuple[dict[str, Any], int]:
        t = self.text
        out: dict[str, Any] = {}
        pos += 1
        while not t.startswith("}", pos):
            if pos >= len(t):
                raise ValueError("unterminated object")
            colon = t.find(":", pos)
            if colon < 0:
                raise ValueError("expected key:")
            key = t[pos:colon].strip().removeprefix(self.QUOTE).removesuffix(self.QUOTE)
            out[key], pos = self.value(colon + 1, depth)
            if t.startswith(",", pos):
                pos += 1
            elif not t.startswith("}", pos):
                raise ValueError("expected , or }")
        return out, pos + 1


def _gemma4(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    start = pos + len("<|tool_call>")
    if not text.startswith("call:", start):
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    name = text[start + len("call:") : brace]
    try:
        args, end = _GemmaArgs(text).mapping(brace, 0)
    except ValueError:
        return None
    call = _make_call(fmt, name, args)
    return ([call], _after(text, end, "<tool_call|>")) if call is not None else None


def _tool_code(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    newline = text.find("\n", pos)
    if newline < 0:
        return None
    body, end = _block(text, newline + 1, "```")
    calls = _python_calls(fmt, body, tools.lenient())
    return (calls, end) if calls else None


def _python_tag(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    start = pos + len("<|python_tag|>")
    # The call runs to the end of the reply (Llama 3.1 ends it with <|eom_id|>, an end-of-generation token).
    body = text[start:]
    span = _leading_json(fmt, body, 0, _Tools(None), separators=";")
    if span is not None and not body[span[1] :].strip():
        return span[0], len(text)
    calls = _python_calls(fmt, body, _Tools(None))
    return (calls, len(text)) if calls else None


_FUNCTION_TAG = re.compile(r"<function=([A-Za-z0-9_.\-]+)>")


def _function_tag(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    # Llama 3.1's custom-tool form (and functionary's): <function=NAME>{...}</function>.
    m = _FUNCTION_TAG.match(text, pos)
    if m is None:
        return None
    parsed = _json_at(text, m.end())
    if parsed is None:
        return None
    call = _make_call(fmt, m.group(1), parsed[0])
    return ([call], _after(text, parsed[1], "</function>")) if call is not None else None


def _leading_json(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools, *, separators: str = "") -> _Span | None:
    """JSON calls at ``pos``: one object, a list of them, or several objects separated by whitespace or
    one of ``separators``."""
    span = _json_list(fmt, text, pos, tools)
    if span is None:
        return None
    calls, end = span
    while True:
        at = _skip_ws(text, end)
        if at < len(text) and text[at] in separators:
            at = _skip_ws(text, at + 1)
        more = _json_list(fmt, text, at, tools) if text.startswith("{", at) else None
        if more is None:
            return calls, end
        calls, end = calls + more[0], more[1]


def _leading_generic(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    if text.startswith("```", pos):
        newline = text.find("\n", pos)
        if newline < 0:
            return None
        lang = text[pos + 3 : newline].strip()
        body, end = _block(text, newline + 1, "```")
        if lang == "json":
            span = _leading_json(fmt, body, 0, tools)
            return (span[0], end) if span is not None and not body[span[1] :].strip() else None
        if lang in ("python", "tool_code"):
            calls = _python_calls(fmt, body, tools)
            return (calls, end) if calls else None
        return None
    span = _leading_json(fmt, text, pos, tools)
    if span is not None or not tools.given:
        return span
    # A Python call or list of calls naming a tool: the rest of the reply, or its first line.
    calls = _python_calls(fmt, text[pos:], tools)
    if calls:
        return calls, len(text)
    line_end = text.find("\n", pos)
    line_end = len(text) if line_end < 0 else line_end
    calls = _python_calls(fmt, text[pos:line_end], tools)
    return (calls, line_end) if calls else None


def _leading_llama3(fmt: ToolCallFormat, text: str, pos: int, tools: _Tools) -> _Span | None:
    return _leading_json(fmt, text, pos, tools, separators=";")


@dataclasses.dataclass(frozen=True)
class _Spec:
    markers: tuple[tuple[str, _MarkerParser], ...]
    # Call forms that can only open the reply: the openers (for streaming) and the parser.
    leading: tuple[str, ...] = ()
    parse_leading: Callable[[ToolCallFormat, str, int, _Tools], _Span | None] | None = None
    # The openers of a leading call naming one of the request's tools (for streaming).
    leading_named: Callable[[str], tuple[str, ...]] | None = None


_SPECS: dict[ToolCallFormat, _Spec] = {
    ToolCallFormat.HERMES: _Spec((("<tool_call>", _hermes),)),
    ToolCallFormat.QWEN3_CODER: _Spec((("<tool_call>", _qwen3_coder), ("<function=", _qwen3_coder))),
    ToolCallFormat.LLAMA3: _Spec(
        (("<|python_tag|>", _python_tag), ("<function=", _function_tag)), ("{", "["), _leading_llama3
    ),
    ToolCallFormat.MISTRAL: _Spec((("[TOOL_CALLS]", _mistral),)),
    ToolCallFormat.GRANITE: _Spec((("<|tool_call|>", _granite),)),
    ToolCallFormat.COMMAND_R: _Spec((("<|START_ACTION|>", _command_r),)),
    ToolCallFormat.DEEPSEEK_R1: _Spec(((_DS_CALLS_BEGIN, _deepseek_r1), (_DS_CALL_BEGIN, _deepseek_r1))),
    ToolCallFormat.DEEPSEEK_V3: _Spec(((_DS_CALLS_BEGIN, _deepseek_r1), (_DS_CALL_BEGIN, _deepseek_r1))),
    ToolCallFormat.GEMMA4: _Spec((("<|tool_call>", _gemma4),)),
    ToolCallFormat.GLM4: _Spec((("<tool_call>", _glm4),)),
    ToolCallFormat.KIMI_K2: _Spec((("<|tool_calls_section_begin|>", _kimi_k2), ("<|tool_call_begin|>", _kimi_k2))),
    ToolCallFormat.MINIMAX_M2: _Spec((("<minimax:tool_call>", _minimax_m2),)),
    ToolCallFormat.DEEPSEEK_DSML: _Spec(
        ((f"<{_DSML}function_calls>", _deepseek_dsml), (f"<{_DSML}tool_calls>", _deepseek_dsml))
    ),
    ToolCallFormat.SEED_OSS: _Spec((("<seed:tool_call>", _seed_oss),)),
    ToolCallFormat.NEMOTRON: _Spec((("<TOOLCALL>", _wrapped_json("<TOOLCALL>", "</TOOLCALL>")),)),
    ToolCallFormat.TOOL_CALLS_TAG: _Spec(
        (("<tool_calls>", _wrapped_json("<tool_calls>", "</tool_calls>")), ("<tool_call>", _hermes))
    ),
    ToolCallFormat.LFM2: _Spec((("<|tool_call_start|>", _lfm2),)),
    ToolCallFormat.MINICPM: _Spec((('<function name="', _minicpm),)),
    ToolCallFormat.SOLAR_OPEN: _Spec((("<|tool_calls|>", _solar_open), ("<|tool_call:begin|>", _solar_open))),
    ToolCallFormat.APERTUS: _Spec((("<|tools_prefix|>", _apertus),)),
    ToolCallFormat.GIGACHAT: _Spec(
        (
            ("<|function_call|>", _wrapped_json("<|function_call|>", "<|message_sep|>")),
            ("<|message_sep|>", _gigachat_v3),
            ("function call<|role_sep|>", _gigachat_v3),
        )
    ),
    ToolCallFormat.MINIMAX_M3: _Spec(((_MM3 + "<tool_call>", _minimax_m3),)),
    ToolCallFormat.KIMI_K3: _Spec((("<|open|>tools<|sep|>", _kimi_k3),)),
    ToolCallFormat.HY3: _Spec((("<tool_calls", _hy3), ("<tool_call", _hy3))),
    ToolCallFormat.MUSE_GLIMMER: _Spec((("<|start|>assistant to=", _muse_glimmer), (" to=", _muse_glimmer))),
    ToolCallFormat.FUNCTIONARY_V3_2: _Spec(
        ((">>>", _functionary_v3_2),), parse_leading=_leading_functionary, leading_named=lambda name: (f"{name}\n",)
    ),
    ToolCallFormat.FIREFUNCTION_V2: _Spec((("functools[", _firefunction),)),
    ToolCallFormat.COMMAND_R_PLUS: _Spec((("Action:", _command_r_plus),)),
    ToolCallFormat.GPT_OSS: _Spec(
        (("<|start|>assistant", _gpt_oss), ("<|channel|>commentary", _gpt_oss), ("to=functions.", _gpt_oss))
    ),
    ToolCallFormat.GENERIC: _Spec(
        (("<tool_call>", _hermes), ("```tool_code", _tool_code)),
        ("{", "[", "```json", "```python", "```tool_code"),
        _leading_generic,
        leading_named=lambda name: (f"{name}(", f"[{name}(", f"({name}("),
    ),
}


def _format(value: ToolCallFormat | str) -> ToolCallFormat:
    if isinstance(value, ToolCallFormat):
        return value
    try:
        return ToolCallFormat(value)
    except ValueError:
        names = ", ".join(repr(f.value) for f in ToolCallFormat)
        raise ValueError(f"tool-call format must be one of {names}, not {value!r}") from None


def _find_spans(fmt: ToolCallFormat, text: str, tools: _Tools) -> list[tuple[int, int, list[dict[str, Any]]]]:
    spec = _SPECS[fmt]
    spans: list[tuple[int, int, list[dict[str, Any]]]] = []
    pos = 0
    lead = _skip_ws(text, 0)
    if spec.parse_leading is not None and lead < len(text):
        span = spec.parse_leading(fmt, text, lead, tools)
        if span is not None:
            spans.append((0, span[1], span[0]))
            pos = span[1]
    # The next occurrence of each marker, found again only once the scan has passed it.
    nxt = [text.find(m, pos) for m, _ in spec.markers]
    while pos < len(text):
        for i, (m, _) in enumerate(spec.markers):
            if 0 <= nxt[i] < pos:
                nxt[i] = text.find(m, pos)
        hits = [(at, i) for i, at in enumerate(nxt) if at >= 0]
        if not hits:
            break
        at, i = min(hits)
        span = spec.markers[i][1](fmt, text, at, tools)
        if span is None or span[1] <= at:
            pos = at + 1
            continue
        spans.append((at, span[1], span[0]))
        pos = span[1]
    return spans


def parse_tool_calls(
    text: str,
    format: ToolCallFormat | str = ToolCallFormat.GENERIC,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> ParsedReply:
    """Split a model's reply into content and OpenAI tool calls, in ``format``'s syntax.

    ``tools`` (the request's OpenAI tool schemas) lets the bare JSON / Python forms accept only the
    named functions and maps positional Python arguments to parameter names. Malformed calls stay in
    the content; this never raises on any ``text``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    fmt = _format(format)
    spans = _find_spans(fmt, text, _Tools(tools))
    if not spans:
        return ParsedReply(text, [])
    pieces: list[str] = []
    calls: list[dict[str, Any]] = []
    prev = 0
    for i, (start, end, found) in enumerate(spans):
        piece = text[prev:start]
        pieces.append(piece.rstrip() if i == 0 else piece.strip())
        calls.extend(found)
        prev = end
    pieces.append(text[prev:].strip())
    return ParsedReply("\n".join(p for p in pieces if p), calls)


class ToolCallStream:
    """Streams a reply's content while holding back what may be a tool call.

    :meth:`feed` takes each new piece of text and returns the content that can be shown now: text before
    the first call marker, minus a trailing piece that could be the start of a marker and trailing
    whitespace (which would be dropped if a call follows). A reply that opens with a form that can only be
    a call at the start (a JSON object for Llama 3, a fenced block or a tool's name for ``generic``) is held
    whole. :meth:`finish` parses the full text and returns the rest of the content and the calls; the
    content fed out plus the rest is exactly :attr:`ParsedReply.text`.
    """

    def __init__(self, format: ToolCallFormat | str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.format = _format(format)
        self._tools = tools
        spec = _SPECS[self.format]
        self._markers = [m for m, _ in spec.markers]
        self._longest = max(len(m) for m in self._markers)
        leading = list(spec.leading)
        if spec.leading_named is not None:
            for name in _Tools(tools).params:
                leading += spec.leading_named(name)
        self._leading = leading
        self._text = ""
        self._sent = 0
        self._checked = 0
        self._holding = False

    @property
    def text(self) -> str:
        """Everything fed so far."""
        return self._text

    def feed(self, piece: str) -> str:
        """Add ``piece``; return the content that is now safe to emit (possibly ``""``)."""
        self._text += piece
        if self._holding:
            return ""
        t = self._text
        if self._sent == 0:
            head = t.lstrip()
            if not head:
                return ""
            for opener in self._leading:
                if head.startswith(opener):
                    self._holding = True
                    return ""
                if opener.startswith(head):
                    return ""
        start = max(self._sent, self._checked)
        hits = [at for at in (t.find(m, start) for m in self._markers) if at >= 0]
        if hits:
            self._holding = True
            end = min(hits)
        else:
            # No marker starts before the last (longest - 1) characters, which more text may complete.
            self._checked = max(0, len(t) - self._longest + 1)
            end = len(t) - self._partial_marker(t)
        while end > self._sent and t[end - 1].isspace():
            end -= 1
        out = t[self._sent : end]
        self._sent = max(self._sent, end)
        return out

    def _partial_marker(self, t: str) -> int:
        """Length of the longest suffix of ``t`` that is a proper prefix of a marker."""
        return max(_open_suffix(t, m) for m in self._markers)

    def finish(self) -> tuple[str, ParsedReply]:
        """The content not yet emitted and the parsed reply."""
        parsed = parse_tool_calls(self._text, self.format, tools=self._tools)
        sent = self._text[: self._sent]
        rest = parsed.text[len(sent) :] if parsed.text.startswith(sent) else ""
        return rest, parsed
