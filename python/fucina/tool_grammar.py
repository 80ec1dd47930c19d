"""Grammars that force a tool call: ``tool_choice="required"`` or a named function, enforced.

:func:`tool_call_grammar` writes, for the call syntax a chat template teaches
(:class:`fucina.tool_calls.ToolCallFormat`), an llguidance Lark grammar whose only sentences are
calls of the offered tools in that syntax, with each call's arguments valid against the tool's
``parameters`` JSON Schema (read as :meth:`fucina.Grammar.json_schema` reads schemas: an object
listing ``properties`` allows no other keys). What :func:`fucina.tool_calls.parse_tool_calls` then
reads back is a call, every time.

Per format (``N`` a tool's name, ``A`` its arguments as compact JSON):

* ``hermes``: ``<tool_call>\\n{"name": N, "arguments": A}\\n</tool_call>``, calls separated by ``\\n``;
* ``qwen3_coder``: ``<tool_call>\\n<function=N>\\n<parameter=K>\\nV\\n</parameter>\\n...</function>\\n</tool_call>``
  with the tool's parameter names (values are free text, as the format writes them; the same for
  ``glm4``, ``minimax_m2`` and ``seed_oss``);
* ``llama3``: one ``{"name": N, "parameters": A}``;
* ``mistral``: ``[TOOL_CALLS][{"name": N, "arguments": A}, ...]``, or ``[TOOL_CALLS]N[ARGS]A`` per call
  for templates that write ``[ARGS]`` (Mistral Small 3.2, Ministral);
* ``granite``: ``<|tool_call|>[{"name": N, "arguments": A}, ...]``;
* ``command_r``: ``<|START_ACTION|>[{"tool_name": N, "parameters": A}, ...]<|END_ACTION|>``;
* ``deepseek_r1``: the calls block of ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>N`` and a fenced JSON ``A``;
* ``gemma4``: ``<|tool_call>call:N{...}<tool_call|>`` (the name enforced; the arguments free text);
* ``deepseek_v3``: the calls block of ``<｜tool▁call▁begin｜>N<｜tool▁sep｜>A<｜tool▁call▁end｜>``;
* ``glm4``: ``<tool_call>N\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n...</tool_call>``;
* ``kimi_k2``: ``<|tool_calls_section_begin|><|tool_call_begin|>functions.N:I<|tool_call_argument_begin|>A...``;
* ``minimax_m2``: ``<minimax:tool_call>\\n<invoke name="N">\\n<parameter name="K">V</parameter>\\n...``;
* ``deepseek_dsml``: ``<｜DSML｜function_calls>\\n<｜DSML｜invoke name="N">\\n<｜DSML｜parameter name="K"
  string="true|false">V</｜DSML｜parameter>\\n...`` (``tool_calls`` for V4's templates);
* ``seed_oss``: ``<seed:tool_call>\\n<function=N>\\n<parameter=K>V</parameter>\\n...</seed:tool_call>``;
* ``nemotron`` / ``tool_calls_tag``: ``<TOOLCALL>`` / ``<tool_calls>`` around a JSON list of calls;
* ``minicpm``: ``<function name="N"><param name="K">V</param>...</function>`` per call;
* ``solar_open``: ``<|tool_calls|>`` then ``<|tool_call:begin|>ID<|tool_call:name|>N<|tool_call:args|>A``
  ``<|tool_call:end|>`` per call, then ``<|calls|>``;
* ``apertus``: ``<|tools_prefix|>[{N: A}, ...]<|tools_suffix|>``;
* ``gigachat``: ``<|function_call|>{"name": N, "arguments": A}`` per call; for GigaChat 3's templates (no
  ``<|function_call|>``) one ``<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name": N, "arguments": A}``;
* ``minimax_m3``: ``NS<tool_call>\\n`` around ``NS<invoke name="N">NS<K>V NS</K>...NS</invoke>\\n`` (``NS`` =
  ``]<]minimax[>[``); a string-typed value is free text without ``]<``, any other the property's JSON (the
  same split for ``kimi_k3``, ``hy3`` and ``muse_glimmer``);
* ``kimi_k3``: ``<|open|>tools<|sep|>`` around ``<|open|>call tool="N" index="I"<|sep|>`` and
  ``<|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>`` ... ``<|close|>call<|sep|>``;
* ``hy3``: ``<tool_calls:S>\\n`` around ``<tool_call:S>N<tool_sep:S>\\n<arg_key:S>K</arg_key:S>\\n<arg_value:S>V``
  ``</arg_value:S>\\n...</tool_call:S>\\n`` (``S`` the template's suffix, ``:opensource``);
* ``muse_glimmer``: `` to=N<|message|><atem:function_calls>\\n<atem:invoke name="N">\\n<atem:parameter name="K">V``
  ``</atem:parameter>\\n...</atem:invoke>\\n</atem:function_calls>``, calls separated by ``<|eom|><|start|>assistant``;
* ``functionary_v3_2``: ``N\\n`` and ``A`` (after the generation prompt's ``>>>``), calls separated by ``>>>``;
* ``firefunction_v2``: `` functools[{"name": N, "arguments": A}, ...]``;
* ``command_r_plus``: ``Action:\\n`` then ``[{"tool_name": N, "parameters": A}, ...]`` in a ``json`` fence;
* ``lfm2``: ``<|tool_call_start|>[N(K=V, ...), ...]<|tool_call_end|>`` with JSON values;
* ``gpt_oss``: one ``<|channel|>commentary to=functions.N <|constrain|>json<|message|>A<|call|>``;
* ``generic`` (templates with no call syntax): one JSON ``{"name": N, "arguments": A}``.

Markers that are control tokens (``[TOOL_CALLS]``, ``<|tool_call|>``) are named by token id, the rest
written as text. Where the template thinks first (it writes ``<think>``), an optional
``<think>…</think>`` block may precede the calls. ``parallel=False`` allows exactly one call.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import _core
from .grammar import Grammar
from .tool_calls import (
    _DS_CALL_BEGIN,
    _DS_CALL_END,
    _DS_CALLS_BEGIN,
    _DS_CALLS_END,
    _DS_SEP,
    _DSML,
    _MM3,
    ToolCallFormat,
    _string_typed,
)

__all__ = ["tool_call_grammar"]


def _lit(text: str) -> str:
    """A Lark string literal of ``text``."""
    return json.dumps(text, ensure_ascii=False)


_DEFS_MARK = "x-fucina-defs"
"""Where :func:`_parameters` leaves a tool's schema for :func:`_schema` to hoist into the root ``$defs``."""


def _hoist_defs(value: Any, defs: dict[str, Any]) -> Any:
    """``value`` without its :data:`_DEFS_MARK` entries, which are gathered into ``defs``."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if k == _DEFS_MARK and isinstance(v, Mapping):
                defs.update({name: _hoist_defs(d, defs) for name, d in v.items()})
            else:
                out[k] = _hoist_defs(v, defs)
        return out
    if isinstance(value, list):
        return [_hoist_defs(v, defs) for v in value]
    return value


def _schema(value: Any) -> str:
    """``value`` (a JSON Schema) as :meth:`Grammar.json_schema` compiles it, read leniently (a
    tool's ``uniqueItems``, look-around, a ``$ref`` to another document are not enforced, as
    llama.cpp's converter ignores them, rather than failing the call), for ``%json``; the tool
    schemas it embeds that refer to their own parts are placed in its root ``$defs``."""
    defs: dict[str, Any] = {}
    value = _hoist_defs(value, defs)
    if defs and isinstance(value, dict):
        own = value.get("$defs")
        value["$defs"] = {**(own if isinstance(own, Mapping) else {}), **defs}
    return _core.Grammar.compiled_json_schema(json.dumps(value), lenient=True)


def _has_local_ref(value: Any) -> bool:
    if isinstance(value, Mapping):
        ref = value.get("$ref")
        return (isinstance(ref, str) and ref.startswith("#")) or any(_has_local_ref(v) for v in value.values())
    return isinstance(value, list) and any(_has_local_ref(v) for v in value)


def _rebase(value: Any, base: str) -> Any:
    """``value`` with its local ``$ref`` pointers (``#``, ``#/$defs/X``) made relative to ``base``."""
    if isinstance(value, Mapping):
        out = {k: _rebase(v, base) for k, v in value.items()}
        ref = value.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            out["$ref"] = base + ref[1:]
        return out
    if isinstance(value, list):
        return [_rebase(v, base) for v in value]
    return value


def _parameters(tool: Mapping[str, Any]) -> Any:
    """A tool's argument schema. One that refers to its own parts (``#/$defs/X``, as pydantic writes
    nested models) is embedded in a call's schema, where such pointers would resolve against the call;
    its pointers are rebased onto a copy of it that :func:`_schema` puts in the root's ``$defs``."""
    params = tool["function"].get("parameters")
    if not isinstance(params, Mapping) or not params:
        return {"type": "object"}
    if not _has_local_ref(params):
        return params
    text = json.dumps(params, sort_keys=True, ensure_ascii=False)
    name = "fucina_tool_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    rebased = _rebase(params, f"#/$defs/{name}")
    return {**rebased, _DEFS_MARK: {name: rebased}}


def _call_schema(tool: Mapping[str, Any], name_key: str, args_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name_key: {"const": tool["function"]["name"]}, args_key: _parameters(tool)},
        "required": [name_key, args_key],
        "additionalProperties": False,
    }


def _any_call(tools: Sequence[Mapping[str, Any]], name_key: str, args_key: str) -> dict[str, Any]:
    calls = [_call_schema(t, name_key, args_key) for t in tools]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def _json_list(tools: Sequence[Mapping[str, Any]], name_key: str, args_key: str, parallel: bool) -> str:
    array: dict[str, Any] = {"type": "array", "items": _any_call(tools, name_key, args_key), "minItems": 1}
    if not parallel:
        array["maxItems"] = 1
    return f"%json {_schema(array)}"


def _regex_char(c: str) -> str:
    return re.escape(c).replace("/", "\\/")


def _until(name: str, delim: str) -> str:
    """Rules for ``name``: any text not containing ``delim`` (whose first character occurs nowhere else
    in it). llguidance's lexer is greedy, so the text is a run of lexemes that can never swallow the
    delimiter: runs without its first character, and each proper prefix of it, alone or followed by a
    character that breaks it."""
    c0 = delim[0]
    if c0 in delim[1:]:
        raise ValueError(f"delimiter {delim!r} repeats its first character")
    term = name.upper()
    alts = []
    for j in range(1, len(delim)):
        prefix = "".join(_regex_char(c) for c in delim[:j])
        alts += [f"{prefix}[^{_regex_char(delim[j])}{_regex_char(c0)}]", prefix]
    return "\n".join(
        [
            f"{name}: ({term}_RUN | {term}_PART)*",
            f"{term}_RUN: /[^{_regex_char(c0)}]+/",
            f"{term}_PART: /{'|'.join(alts)}/",
        ]
    )


def _repeat(call: str, sep: str, parallel: bool) -> str:
    if not parallel:
        return call
    return f"{call} ({_lit(sep)} {call})*" if sep else f"{call}+"


def _keys(tool: Mapping[str, Any]) -> list[str]:
    props = _parameters(tool).get("properties")
    return [str(k) for k in props] if isinstance(props, Mapping) else []


def _keyed_calls(
    tools: Sequence[Mapping[str, Any]],
    parallel: bool,
    head: Callable[[str], str],
    key: Callable[[str], str],
    value_end: str,
    tail: str,
    sep: str = "\n",
) -> str:
    """Calls whose arguments are ``key(K) VALUE value_end`` pieces (values free text up to
    ``value_end``), one rule per tool so that each call names only that tool's parameters."""
    rules = [
        f"start: reasoning? {_repeat('call', sep, parallel)}",
        _until("value", value_end.strip()),
        "call: " + " | ".join(f"call{i}" for i in range(len(tools))),
    ]
    for i, tool in enumerate(tools):
        keys = _keys(tool)
        if keys:
            rules.append(f"call{i}: {head(tool['function']['name'])} param{i}* {tail}")
            alts = " | ".join(key(k) for k in keys)
            rules.append(f"param{i}: ({alts}) value {_lit(value_end)}")
        else:
            rules.append(f"call{i}: {head(tool['function']['name'])} {tail}")
    return "\n".join(rules)


def _qwen3_coder(tools: Sequence[Mapping[str, Any]], parallel: bool, wrapper: str = "tool_call") -> str:
    nl = chr(10)
    return _keyed_calls(
        tools,
        parallel,
        lambda name: _lit(f"<{wrapper}>{nl}<function={name}>{nl}"),
        lambda k: _lit(f"<parameter={k}>"),
        "</parameter>" + nl,
        _lit(f"</function>{nl}</{wrapper}>"),
    )


def _dsml(tools: Sequence[Mapping[str, Any]], parallel: bool, mark: Callable[[str], str], template_source: str) -> str:
    """DeepSeek V3.2 / V4: ``<｜DSML｜function_calls>`` (V4: ``tool_calls``) around invokes whose
    parameters carry ``string="true"`` for string-typed values and ``"false"`` (JSON) for the rest."""
    nl = chr(10)
    wrapper = (
        "tool_calls"
        if ("'tool_calls" in template_source or f"{_DSML}tool_calls" in template_source)
        else ("function_calls")
    )
    dsml = mark(_DSML)
    text_marker = dsml == _lit(_DSML)

    def tag(name: str, *, close: bool = False) -> str:
        opener = "</" if close else "<"
        # Written as text, a tag is one literal (the lexer then prefers it to a value's "<" run).
        return _lit(opener + _DSML + name) if text_marker else f"{_lit(opener)} {dsml} {_lit(name)}"

    rules = [
        f"start: reasoning? {tag(wrapper + '>' + nl)} {'call+' if parallel else 'call'} "
        f"{tag(wrapper + '>', close=True)}",
        "call: " + " | ".join(f"call{i}" for i in range(len(tools))),
        # Values run to the closing tag (written as text) or, when ｜DSML｜ is a control token, to any "<".
        _until("value", f"</{_DSML}parameter>") if text_marker else "value: /[^<]*/",
    ]
    for i, tool in enumerate(tools):
        name = tool["function"]["name"]
        props = _parameters(tool).get("properties")
        props = props if isinstance(props, Mapping) else {}
        head = tag(f'invoke name="{name}">{nl}')
        end = f"{tag('invoke>', close=True)} {_lit(nl)}"
        if props:
            alts = []
            for k, spec in props.items():
                string = isinstance(spec, Mapping) and spec.get("type") == "string"
                alts.append(tag(f'parameter name="{k}" string="{"true" if string else "false"}">'))
            rules.append(f"call{i}: {head} param{i}* {end}")
            rules.append(f"param{i}: ({' | '.join(alts)}) value {tag('parameter>', close=True)} {_lit(nl)}")
        else:
            rules.append(f"call{i}: {head} {end}")
    return "\n".join(rules)


def _typed_calls(
    tools: Sequence[Mapping[str, Any]],
    head: Callable[[Mapping[str, Any]], str],
    arg: Callable[[str, Any, str], str],
    tail: str,
    text_value: str,
) -> list[str]:
    """``call`` and one rule per tool: ``head(tool)``, its arguments in any order, ``tail``. An argument is
    ``arg(key, schema, value)``: ``value`` is the ``text_value`` rule (free text) for a string-typed property
    and the property's JSON for the rest, as the parsers read them back."""
    rules = ["call: " + " | ".join(f"call{i}" for i in range(len(tools)))]
    for i, tool in enumerate(tools):
        params = _parameters(tool)
        props = params.get("properties")
        props = props if isinstance(props, Mapping) else {}
        # Each value is a schema of its own: it carries the tool's hoisted definitions along.
        defs = {_DEFS_MARK: params[_DEFS_MARK]} if _DEFS_MARK in params else {}
        if not props:
            rules.append(f"call{i}: {head(tool)} {tail}")
            continue
        alts = []
        for k, v in props.items():
            value = (
                text_value if _string_typed(v) else f"%json {_schema({**v, **defs} if isinstance(v, Mapping) else {})}"
            )
            alts.append(arg(str(k), v, value))
        rules += [f"call{i}: {head(tool)} arg{i}* {tail}", f"arg{i}: " + " | ".join(alts)]
    return rules


def _attr(value: str) -> str:
    """An attribute value escaped as Kimi K3's template escapes it."""
    return value.replace("&", "&amp;").replace('"', "&quot;")


_QUOTE = chr(34)


def _q(text: str) -> str:
    """``text`` between double quotes (an attribute value)."""
    return _QUOTE + text + _QUOTE


def _name(tool: Mapping[str, Any]) -> str:
    name: str = tool["function"]["name"]
    return name


# The type attribute Kimi K3's template writes for a value of each JSON Schema type.
_K3_TYPES = {
    "integer": "number",
    "number": "number",
    "boolean": "boolean",
    "null": "null",
    "string": "string",
    "object": "object",
    "array": "array",
}


def _hy3_suffix(template_source: str) -> str:
    """Hunyuan 3's tag suffix (``:opensource``), as its template writes or builds its tags."""
    m = re.search(r"<tool_calls(:[A-Za-z0-9_\-]+)>", template_source)
    if m is None:
        m = re.search(r"""HYTK\s*=\s*['"]([^'"]*)['"]""", template_source)
    return m.group(1) if m is not None else ":opensource"


def tool_call_grammar(
    fmt: ToolCallFormat,
    tools: Sequence[Mapping[str, Any]],
    special: Callable[[str], str | None],
    *,
    parallel: bool = True,
    template_source: str = "",
    reasoning: bool = True,
) -> Grammar:
    """A grammar whose sentences are calls of ``tools`` (OpenAI tool dicts, at least one) in ``fmt``'s
    syntax. ``special(marker)`` gives the Lark reference of a marker that is a control token
    (``"<[id]>"``) or ``None`` for one written as text. ``template_source`` (the chat template's
    Jinja source) picks Mistral's call form and, when it writes ``<think>``, allows a leading
    ``<think>…</think>`` block, unless ``reasoning`` is false (the generation prompt closed the
    block already: thinking is off, and llama.cpp's grammars then allow none)."""
    thinks = reasoning and "<think>" in template_source
    if not tools:
        raise ValueError("a tool-call grammar needs at least one tool")

    def mark(marker: str) -> str:
        return special(marker) or _lit(marker)

    nl = chr(10)

    rules: list[str]
    if fmt is ToolCallFormat.HERMES:
        call = f"{_lit('<tool_call>' + chr(10))} %json {_schema(_any_call(tools, 'name', 'arguments'))} "
        call += _lit("\n</tool_call>")
        rules = [f"start: reasoning? {_repeat('call', chr(10), parallel)}", f"call: {call}"]
    elif fmt is ToolCallFormat.QWEN3_CODER:
        rules = [_qwen3_coder(tools, parallel)]
    elif fmt is ToolCallFormat.SEED_OSS:
        rules = [_qwen3_coder(tools, parallel, "seed:tool_call")]
    elif fmt is ToolCallFormat.GLM4:
        nl = chr(10)
        rules = [
            _keyed_calls(
                tools,
                parallel,
                lambda name: f"{mark('<tool_call>')} {_lit(name + nl)}",
                lambda k: f"{mark('<arg_key>')} {_lit(k)} {mark('</arg_key>')} {_lit(nl)} {mark('<arg_value>')}",
                "</arg_value>" + nl,
                mark("</tool_call>"),
            )
        ]
    elif fmt is ToolCallFormat.MINIMAX_M2:
        nl = chr(10)
        body = _keyed_calls(
            tools,
            parallel,
            lambda name: _lit(f'<invoke name="{name}">{nl}'),
            lambda k: _lit(f'<parameter name="{k}">'),
            "</parameter>" + nl,
            _lit("</invoke>" + nl),
            sep="",
        )
        # The invokes sit in one <minimax:tool_call> block.
        body = body.replace("start: reasoning? ", "calls: ", 1)
        rules = [
            f"start: reasoning? {mark('<minimax:tool_call>')} {_lit(nl)} calls {mark('</minimax:tool_call>')}",
            body,
        ]
    elif fmt is ToolCallFormat.DEEPSEEK_DSML:
        rules = [_dsml(tools, parallel, mark, template_source)]
    elif fmt is ToolCallFormat.KIMI_K2:
        alts = " | ".join(
            f"{_lit('functions.' + t['function']['name'] + ':')} /[0-9]+/ {mark('<|tool_call_argument_begin|>')} "
            f"%json {_schema(_parameters(t))}"
            for t in tools
        )
        rules = [
            f"start: {mark('<|tool_calls_section_begin|>')} {_repeat('call', '', parallel)} "
            f"{mark('<|tool_calls_section_end|>')}",
            f"call: {mark('<|tool_call_begin|>')} ({alts}) {mark('<|tool_call_end|>')}",
        ]
    elif fmt in (ToolCallFormat.NEMOTRON, ToolCallFormat.TOOL_CALLS_TAG):
        tag = "TOOLCALL" if fmt is ToolCallFormat.NEMOTRON else "tool_calls"
        body = _json_list(tools, "name", "arguments", parallel)
        rules = [f"start: reasoning? {mark(f'<{tag}>')} {body} {mark(f'</{tag}>')}"]
    elif fmt is ToolCallFormat.MINICPM:
        rules = [
            _keyed_calls(
                tools,
                parallel,
                lambda name: _lit(f'<function name="{name}">'),
                lambda k: _lit(f'<param name="{k}">'),
                "</param>",
                _lit("</function>"),
                sep="",
            )
        ]
    elif fmt is ToolCallFormat.SOLAR_OPEN:
        alts = " | ".join(
            f"{_lit(t['function']['name'])} {mark('<|tool_call:args|>')} %json {_schema(_parameters(t))}" for t in tools
        )
        call = f"{mark('<|tool_call:begin|>')} /[A-Za-z0-9_]{{1,40}}/ {mark('<|tool_call:name|>')} ({alts}) "
        call += mark("<|tool_call:end|>")
        rules = [
            f"start: {mark('<|tool_calls|>')} {_repeat('call', '', parallel)} {mark('<|calls|>')}",
            f"call: {call}",
        ]
    elif fmt is ToolCallFormat.APERTUS:
        items = [
            {
                "type": "object",
                "properties": {t["function"]["name"]: _parameters(t)},
                "required": [t["function"]["name"]],
                "additionalProperties": False,
            }
            for t in tools
        ]
        array: dict[str, Any] = {"type": "array", "items": items[0] if len(items) == 1 else {"anyOf": items}}
        array["minItems"] = 1
        if not parallel:
            array["maxItems"] = 1
        rules = [f"start: {mark('<|tools_prefix|>')} %json {_schema(array)} {mark('<|tools_suffix|>')}"]
    elif fmt is ToolCallFormat.MINIMAX_M3:
        # Every tag behind the namespace token; values run to the next "]<" (their close tag's start).
        ns = mark(_MM3)
        rules = [
            f"start: {ns} {_lit('<tool_call>' + nl)} {'call+' if parallel else 'call'} {ns} {_lit('</tool_call>')}",
            _until("value", "]<"),
            *_typed_calls(
                tools,
                lambda t: f"{ns} {_lit('<invoke name=' + _q(_name(t)) + '>')}",
                lambda k, v, value: f"{ns} {_lit('<' + k + '>')} {value} {ns} {_lit('</' + k + '>')}",
                f"{ns} {_lit('</invoke>' + nl)}",
                "value",
            ),
        ]
    elif fmt is ToolCallFormat.KIMI_K3:
        o, c, sep = mark("<|open|>"), mark("<|close|>"), mark("<|sep|>")

        def k3_arg(k: str, v: Any, value: str) -> str:
            kind = v.get("type") if isinstance(v, Mapping) else None
            written = _K3_TYPES.get(kind) if isinstance(kind, str) else None
            kind_rule = _lit(written) if written else "/[a-z]+/"
            head = f"{o} {_lit('argument key=' + _q(_attr(k)) + ' type=' + _QUOTE)} {kind_rule} {_lit(_QUOTE)} {sep}"
            return f"{head} {value} {c} {_lit('argument')} {sep}"

        rules = [
            f"start: {o} {_lit('tools')} {sep} {'call+' if parallel else 'call'} {c} {_lit('tools')} {sep}",
            _until("value", "<|close|>"),
            *_typed_calls(
                tools,
                lambda t: (
                    f"{o} {_lit('call tool=' + _q(_attr(_name(t))) + ' index=' + _QUOTE)} /[0-9]+/ {_lit(_QUOTE)} {sep}"
                ),
                k3_arg,
                f"{c} {_lit('call')} {sep}",
                "value",
            ),
        ]
    elif fmt is ToolCallFormat.HY3:
        sfx = _hy3_suffix(template_source)

        def hy_tag(name: str) -> str:
            return mark(f"<{name}{sfx}>")

        rules = [
            f"start: {hy_tag('tool_calls')} {_lit(nl)} {'call+' if parallel else 'call'} {hy_tag('/tool_calls')}",
            _until("value", f"</arg_value{sfx}>"),
            *_typed_calls(
                tools,
                lambda t: f"{hy_tag('tool_call')} {_lit(_name(t))} {hy_tag('tool_sep')} {_lit(nl)}",
                lambda k, v, value: (
                    f"{hy_tag('arg_key')} {_lit(k)} {hy_tag('/arg_key')} {_lit(nl)} {hy_tag('arg_value')} "
                    f"{value} {hy_tag('/arg_value')} {_lit(nl)}"
                ),
                f"{hy_tag('/tool_call')} {_lit(nl)}",
                "value",
            ),
        ]
    elif fmt is ToolCallFormat.MUSE_GLIMMER:
        # A message to each tool; the generation prompt ends with <|start|>assistant, the next call's
        # message starts after <|eom|>.
        nxt = f"{mark('<|eom|>')} {mark('<|start|>')} {_lit('assistant')}"
        rules = [
            f"start: call ({nxt} call)*" if parallel else "start: call",
            _until("value", "</atem:parameter>"),
            *_typed_calls(
                tools,
                lambda t: (
                    f"{_lit(' to=' + _name(t))} {mark('<|message|>')} {mark('<atem:function_calls>')} "
                    f"{_lit(nl)} {mark('<atem:invoke')} {_lit(' name=' + _q(_name(t)) + '>' + nl)}"
                ),
                lambda k, v, value: (
                    f"{mark('<atem:parameter')} {_lit(' name=' + _q(k) + '>')} {value} "
                    f"{mark('</atem:parameter>')} {_lit(nl)}"
                ),
                f"{mark('</atem:invoke>')} {_lit(nl)} {mark('</atem:function_calls>')}",
                "value",
            ),
        ]
    elif fmt is ToolCallFormat.FUNCTIONARY_V3_2:
        # The generation prompt ends with ">>>": the first call's recipient comes at once.
        alts = " | ".join(f"{_lit(_name(t) + nl)} %json {_schema(_parameters(t))}" for t in tools)
        rules = [f"start: call ({mark('>>>')} call)*" if parallel else "start: call", f"call: {alts}"]
    elif fmt is ToolCallFormat.FIREFUNCTION_V2:
        rules = [f"start: {_lit(' functools')} {_json_list(tools, 'name', 'arguments', parallel)}"]
    elif fmt is ToolCallFormat.COMMAND_R_PLUS:
        body = _json_list(tools, "tool_name", "parameters", parallel)
        rules = [f"start: {_lit('Action:' + nl + '```json' + nl)} {body} {_lit(nl + '```')}"]
    elif (
        fmt is ToolCallFormat.GIGACHAT
        and "<|role_sep|>" in template_source
        and "<|function_call|>" not in template_source
    ):
        # GigaChat 3: one `function call` message after the reply's.
        head = f"{mark('<|message_sep|>')} {_lit(nl + nl + 'function call')} {mark('<|role_sep|>')} {_lit(nl)}"
        rules = [f"start: {head} %json {_schema(_any_call(tools, 'name', 'arguments'))}"]
    elif fmt is ToolCallFormat.GIGACHAT:
        call = f"{mark('<|function_call|>')} %json {_schema(_any_call(tools, 'name', 'arguments'))}"
        rules = [f"start: {_repeat('call', '', parallel)}", f"call: {call}"]
    elif fmt is ToolCallFormat.LFM2:
        # Python calls with keyword arguments whose values are JSON (valid Python once the parser reads
        # true / false / null), each checked against its property's schema.
        rules = [
            f"start: {mark('<|tool_call_start|>')} {_lit('[')} "
            f"{'call (' + _lit(', ') + ' call)*' if parallel else 'call'} {_lit(']')} {mark('<|tool_call_end|>')}",
            "call: " + " | ".join(f"call{i}" for i in range(len(tools))),
        ]
        for i, tool in enumerate(tools):
            params = _parameters(tool)
            props = params.get("properties")
            props = props if isinstance(props, Mapping) else {}
            head = _lit(tool["function"]["name"] + "(")
            # Each value is a schema of its own: it carries the tool's hoisted definitions along.
            defs = {_DEFS_MARK: params[_DEFS_MARK]} if _DEFS_MARK in params else {}
            if props:
                alts = " | ".join(
                    f"{_lit(str(k) + '=')} %json {_schema({**v, **defs} if isinstance(v, Mapping) else {})}"
                    for k, v in props.items()
                )
                rules += [f"call{i}: {head} (arg{i} ({_lit(', ')} arg{i})*)? {_lit(')')}", f"arg{i}: {alts}"]
            else:
                rules.append(f"call{i}: {head} {_lit(')')}")
    elif fmt is ToolCallFormat.GPT_OSS:
        # One commentary message to the function; <|call|> ends the turn (and generation).
        alts = " | ".join(
            f"{_lit('functions.' + t['function']['name'])} {_lit(' ')} {mark('<|constrain|>')} {_lit('json')} "
            f"{mark('<|message|>')} %json {_schema(_parameters(t))}"
            for t in tools
        )
        rules = [f"start: {mark('<|channel|>')} {_lit('commentary to=')} ({alts}) {mark('<|call|>')}"]
    elif fmt is ToolCallFormat.LLAMA3:
        rules = [f"start: reasoning? %json {_schema(_any_call(tools, 'name', 'parameters'))}"]
    elif fmt is ToolCallFormat.MISTRAL and "[ARGS]" in template_source:
        alts = " | ".join(
            f"{_lit(t['function']['name'])} {mark('[ARGS]')} %json {_schema(_parameters(t))}" for t in tools
        )
        rules = [f"start: {_repeat('call', '', parallel)}", f"call: {mark('[TOOL_CALLS]')} ({alts})"]
    elif fmt is ToolCallFormat.MISTRAL:
        rules = [f"start: {mark('[TOOL_CALLS]')} {_json_list(tools, 'name', 'arguments', parallel)}"]
    elif fmt is ToolCallFormat.GRANITE:
        rules = [f"start: {mark('<|tool_call|>')} {_json_list(tools, 'name', 'arguments', parallel)}"]
    elif fmt is ToolCallFormat.COMMAND_R:
        body = _json_list(tools, "tool_name", "parameters", parallel)
        rules = [f"start: reasoning? {mark('<|START_ACTION|>')} {body} {mark('<|END_ACTION|>')}"]
    elif fmt is ToolCallFormat.DEEPSEEK_V3:
        alts = " | ".join(
            f"{_lit(t['function']['name'])} {mark(_DS_SEP)} %json {_schema(_parameters(t))}" for t in tools
        )
        call = f"{mark(_DS_CALL_BEGIN)} ({alts}) {mark(_DS_CALL_END)}"
        rules = [
            f"start: reasoning? {mark(_DS_CALLS_BEGIN)} {_repeat('call', '', parallel)} {mark(_DS_CALLS_END)}",
            f"call: {call}",
        ]
    elif fmt is ToolCallFormat.DEEPSEEK_R1:
        alts = " | ".join(
            f"{_lit(t['function']['name'] + chr(10) + '```json' + chr(10))} %json {_schema(_parameters(t))}"
            for t in tools
        )
        call = f"{mark(_DS_CALL_BEGIN)} {_lit('function')} {mark(_DS_SEP)} ({alts}) {_lit(chr(10) + '```')} "
        call += mark(_DS_CALL_END)
        rules = [
            f"start: reasoning? {mark(_DS_CALLS_BEGIN)} {_repeat('call', '', parallel)} {mark(_DS_CALLS_END)}",
            f"call: {call}",
        ]
    elif fmt is ToolCallFormat.GEMMA4:
        quote = mark('<|"|>')
        names = " | ".join(_lit(t["function"]["name"]) for t in tools)
        rules = [
            f"start: {_repeat('call', '', parallel)}",
            f"call: {mark('<|tool_call>')} {_lit('call:')} ({names}) {_lit('{')} chunk* {mark('<tool_call|>')}",
            f"chunk: TEXT | {quote}",
            "TEXT: /[^<]+/",
        ]
    else:
        rules = [f"start: %json {_schema(_any_call(tools, 'name', 'arguments'))}"]
    text = "\n".join(rules)
    if "start: reasoning? " in text:
        if thinks:
            text += '\nreasoning: "<think>" think "</think>" /[ \\t\\n]+/?\n' + _until("think", "</think>")
        else:
            text = text.replace("start: reasoning? ", "start: ", 1)
    return Grammar.lark(text)
