"""Forced tool calls (``tool_choice="required"`` / a named function): the grammar of each call syntax
accepts exactly the calls :func:`fucina.tool_calls.parse_tool_calls` reads back, and generation under
it always ends in a call."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fucina
from fucina import _core
from fucina.tool_calls import ToolCallFormat, detect_tool_call_format, parse_tool_calls
from fucina.tool_grammar import tool_call_grammar
from serverkit import deepseek_listing_tools

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
ADD: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
TOOLS = [WEATHER, ADD]

DS_BEGIN, DS_CALL, DS_SEP = "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>"
DS_CALL_END, DS_END = "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"
DSML = "｜DSML｜"
NS = "]<]minimax[>["
HY = ":opensource"

# Per format: (template source hint, a reply calling get_weather(city="Paris") then add(a=2, b=3)
# (only add(a=2, b=3) where the format writes one call), a reply breaking the schema or the syntax).
W = '{"city": "Paris"}'
A = '{"a": 2, "b": 3}'
CASES: dict[str, tuple[ToolCallFormat, str, str, str]] = {
    "hermes": (
        ToolCallFormat.HERMES,
        "",
        f'<tool_call>\n{{"name": "get_weather", "arguments": {W}}}\n</tool_call>\n'
        f'<tool_call>\n{{"name": "add", "arguments": {A}}}\n</tool_call>',
        '<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n</tool_call>',
    ),
    "hermes-thinking": (
        ToolCallFormat.HERMES,
        "{{ '<think>' }}",
        f'<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{{"name": "get_weather", "arguments": {W}}}'
        f'\n</tool_call>\n<tool_call>\n{{"name": "add", "arguments": {A}}}\n</tool_call>',
        '<think>\nhm\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
    ),
    "qwen3_coder": (
        ToolCallFormat.QWEN3_CODER,
        "",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n</function>\n"
        "</tool_call>",
        "<tool_call>\n<function=add>\n<parameter=c>\n2\n</parameter>\n</function>\n</tool_call>",
    ),
    "llama3": (
        ToolCallFormat.LLAMA3,
        "",
        f'{{"name": "add", "parameters": {A}}}',
        '{"name": "add", "parameters": {"a": 2, "b": "3"}}',
    ),
    "mistral": (
        ToolCallFormat.MISTRAL,
        "",
        f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {W}}}, {{"name": "add", "arguments": {A}}}]',
        '[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3, "c": 4}}]',
    ),
    "mistral-args": (
        ToolCallFormat.MISTRAL,
        "{{ '[TOOL_CALLS]' + name + '[ARGS]' }}",
        f"[TOOL_CALLS]get_weather[ARGS]{W}[TOOL_CALLS]add[ARGS]{A}",
        '[TOOL_CALLS]add[ARGS]{"a": 2}',
    ),
    "granite": (
        ToolCallFormat.GRANITE,
        "",
        f'<|tool_call|>[{{"name": "get_weather", "arguments": {W}}}, {{"name": "add", "arguments": {A}}}]',
        '<|tool_call|>[{"name": "get_weather", "arguments": {"town": "Paris"}}]',
    ),
    "command_r": (
        ToolCallFormat.COMMAND_R,
        "",
        f'<|START_ACTION|>[{{"tool_name": "get_weather", "parameters": {W}}}, '
        f'{{"tool_name": "add", "parameters": {A}}}]<|END_ACTION|>',
        '<|START_ACTION|>[{"tool_name": "add", "parameters": {"a": 2.5, "b": 3}}]<|END_ACTION|>',
    ),
    "deepseek_r1": (
        ToolCallFormat.DEEPSEEK_R1,
        "",
        f"{DS_BEGIN}{DS_CALL}function{DS_SEP}get_weather\n```json\n{W}\n```{DS_CALL_END}"
        f"{DS_CALL}function{DS_SEP}add\n```json\n{A}\n```{DS_CALL_END}{DS_END}",
        f'{DS_BEGIN}{DS_CALL}function{DS_SEP}add\n```json\n{{"b": 3}}\n```{DS_CALL_END}{DS_END}',
    ),
    "gemma4": (
        ToolCallFormat.GEMMA4,
        "",
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|><|tool_call>call:add{a:2,b:3}<tool_call|>',
        '<|tool_call>call:get_time{zone:<|"|>UTC<|"|>}<tool_call|>',
    ),
    "deepseek_v3": (
        ToolCallFormat.DEEPSEEK_V3,
        "",
        f"{DS_BEGIN}{DS_CALL}get_weather{DS_SEP}{W}{DS_CALL_END}{DS_CALL}add{DS_SEP}{A}{DS_CALL_END}{DS_END}",
        f'{DS_BEGIN}{DS_CALL}add{DS_SEP}{{"a": "2", "b": 3}}{DS_CALL_END}{DS_END}',
    ),
    "glm4": (
        ToolCallFormat.GLM4,
        "",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n"
        "<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>2</arg_value>\n<arg_key>b</arg_key>\n<arg_value>3</arg_value>\n"
        "</tool_call>",
        "<tool_call>add\n<arg_key>c</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
    ),
    "kimi_k2": (
        ToolCallFormat.KIMI_K2,
        "",
        f"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{W}"
        f"<|tool_call_end|><|tool_call_begin|>functions.add:1<|tool_call_argument_begin|>{A}<|tool_call_end|>"
        "<|tool_calls_section_end|>",
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>{"a": 2}'
        "<|tool_call_end|><|tool_calls_section_end|>",
    ),
    "minimax_m2": (
        ToolCallFormat.MINIMAX_M2,
        "",
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n'
        '<invoke name="add">\n<parameter name="a">2</parameter>\n<parameter name="b">3</parameter>\n</invoke>\n'
        "</minimax:tool_call>",
        '<minimax:tool_call>\n<invoke name="get_time">\n</invoke>\n</minimax:tool_call>',
    ),
    "deepseek_dsml": (
        ToolCallFormat.DEEPSEEK_DSML,
        "",
        f'<{DSML}function_calls>\n<{DSML}invoke name="get_weather">\n<{DSML}parameter name="city" string="true">Paris'
        f'</{DSML}parameter>\n</{DSML}invoke>\n<{DSML}invoke name="add">\n<{DSML}parameter name="a" string="false">2'
        f'</{DSML}parameter>\n<{DSML}parameter name="b" string="false">3</{DSML}parameter>\n</{DSML}invoke>\n'
        f"</{DSML}function_calls>",
        f'<{DSML}function_calls>\n<{DSML}invoke name="add">\n<{DSML}parameter name="a" string="true">2'
        f"</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}function_calls>",
    ),
    "minicpm": (
        ToolCallFormat.MINICPM,
        "",
        '<function name="get_weather"><param name="city">Paris</param></function>'
        '<function name="add"><param name="a">2</param><param name="b">3</param></function>',
        '<function name="add"><param name="z">2</param></function>',
    ),
    "solar_open": (
        ToolCallFormat.SOLAR_OPEN,
        "",
        f"<|tool_calls|><|tool_call:begin|>c1<|tool_call:name|>get_weather<|tool_call:args|>{W}<|tool_call:end|>"
        f"<|tool_call:begin|>c2<|tool_call:name|>add<|tool_call:args|>{A}<|tool_call:end|><|calls|>",
        '<|tool_calls|><|tool_call:begin|>c1<|tool_call:name|>add<|tool_call:args|>{"a": 2}<|tool_call:end|><|calls|>',
    ),
    "apertus": (
        ToolCallFormat.APERTUS,
        "",
        f'<|tools_prefix|>[{{"get_weather": {W}}}, {{"add": {A}}}]<|tools_suffix|>',
        '<|tools_prefix|>[{"add": {"a": 2, "b": 3}, "get_weather": {"city": "Paris"}}]<|tools_suffix|>',
    ),
    "gigachat": (
        ToolCallFormat.GIGACHAT,
        "",
        f'<|function_call|>{{"name": "get_weather", "arguments": {W}}}'
        f'<|function_call|>{{"name": "add", "arguments": {A}}}',
        '<|function_call|>{"name": "add", "arguments": {"a": 2, "b": 3, "c": 1}}',
    ),
    "lfm2": (
        ToolCallFormat.LFM2,
        "",
        '<|tool_call_start|>[get_weather(city="Paris"), add(a=2, b=3)]<|tool_call_end|>',
        '<|tool_call_start|>[add(a="2", b=3)]<|tool_call_end|>',
    ),
    "seed_oss": (
        ToolCallFormat.SEED_OSS,
        "",
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>\n"
        "<seed:tool_call>\n<function=add>\n<parameter=a>2</parameter>\n<parameter=b>3</parameter>\n</function>\n"
        "</seed:tool_call>",
        "<seed:tool_call>\n<function=add>\n<parameter=z>2</parameter>\n</function>\n</seed:tool_call>",
    ),
    "nemotron": (
        ToolCallFormat.NEMOTRON,
        "",
        f'<TOOLCALL>[{{"name": "get_weather", "arguments": {W}}}, {{"name": "add", "arguments": {A}}}]</TOOLCALL>',
        '<TOOLCALL>[{"name": "add", "arguments": {"a": 2, "b": null}}]</TOOLCALL>',
    ),
    "tool_calls_tag": (
        ToolCallFormat.TOOL_CALLS_TAG,
        "",
        f'<tool_calls>[{{"name": "get_weather", "arguments": {W}}}, {{"name": "add", "arguments": {A}}}]</tool_calls>',
        '<tool_calls>[{"name": "add"}]</tool_calls>',
    ),
    "gpt_oss": (
        ToolCallFormat.GPT_OSS,
        "",
        f"<|channel|>commentary to=functions.add <|constrain|>json<|message|>{A}<|call|>",
        '<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 2, "b": true}<|call|>',
    ),
    "minimax_m3": (
        ToolCallFormat.MINIMAX_M3,
        "",
        f'{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<city>Paris{NS}</city>{NS}</invoke>\n'
        f'{NS}<invoke name="add">{NS}<a>2{NS}</a>{NS}<b>3{NS}</b>{NS}</invoke>\n{NS}</tool_call>',
        f'{NS}<tool_call>\n{NS}<invoke name="add">{NS}<c>2{NS}</c>{NS}</invoke>\n{NS}</tool_call>',
    ),
    "kimi_k3": (
        ToolCallFormat.KIMI_K3,
        "",
        '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" '
        'type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool="add" index="2"<|sep|>'
        '<|open|>argument key="a" type="number"<|sep|>2<|close|>argument<|sep|><|open|>argument key="b" '
        'type="number"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>',
        '<|open|>tools<|sep|><|open|>call tool="add" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>'
        "two<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
    ),
    "hy3": (
        ToolCallFormat.HY3,
        "",
        f"<tool_calls{HY}>\n<tool_call{HY}>get_weather<tool_sep{HY}>\n<arg_key{HY}>city</arg_key{HY}>\n"
        f"<arg_value{HY}>Paris</arg_value{HY}>\n</tool_call{HY}>\n<tool_call{HY}>add<tool_sep{HY}>\n"
        f"<arg_key{HY}>a</arg_key{HY}>\n<arg_value{HY}>2</arg_value{HY}>\n<arg_key{HY}>b</arg_key{HY}>\n"
        f"<arg_value{HY}>3</arg_value{HY}>\n</tool_call{HY}>\n</tool_calls{HY}>",
        f"<tool_calls{HY}>\n<tool_call{HY}>add<tool_sep{HY}>\n<arg_key{HY}>c</arg_key{HY}>\n"
        f"<arg_value{HY}>2</arg_value{HY}>\n</tool_call{HY}>\n</tool_calls{HY}>",
    ),
    "muse_glimmer": (
        ToolCallFormat.MUSE_GLIMMER,
        "",
        ' to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n'
        '<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>'
        '<|start|>assistant to=add<|message|><atem:function_calls>\n<atem:invoke name="add">\n'
        '<atem:parameter name="a">2</atem:parameter>\n<atem:parameter name="b">3</atem:parameter>\n'
        "</atem:invoke>\n</atem:function_calls>",
        ' to=add<|message|><atem:function_calls>\n<atem:invoke name="add">\n'
        '<atem:parameter name="a">2.5</atem:parameter>\n</atem:invoke>\n</atem:function_calls>',
    ),
    "functionary_v3_2": (
        ToolCallFormat.FUNCTIONARY_V3_2,
        "",
        f"get_weather\n{W}>>>add\n{A}",
        'add\n{"a": 2}',
    ),
    "firefunction_v2": (
        ToolCallFormat.FIREFUNCTION_V2,
        "",
        f' functools[{{"name": "get_weather", "arguments": {W}}}, {{"name": "add", "arguments": {A}}}]',
        ' functools[{"name": "add", "arguments": {"a": 2, "b": 3, "c": 4}}]',
    ),
    "command_r_plus": (
        ToolCallFormat.COMMAND_R_PLUS,
        "",
        f'Action:\n```json\n[{{"tool_name": "get_weather", "parameters": {W}}}, '
        f'{{"tool_name": "add", "parameters": {A}}}]\n```',
        'Action:\n```json\n[{"tool_name": "add", "parameters": {"a": 2}}]\n```',
    ),
    "gigachat_v3": (
        ToolCallFormat.GIGACHAT,
        "{{ '<|role_sep|>' }}{{ '<|message_sep|>' }}",
        f'<|message_sep|>\n\nfunction call<|role_sep|>\n{{"name": "add", "arguments": {A}}}',
        '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "add", "arguments": {"a": 2, "b": 3, "c": 1}}',
    ),
    "generic": (
        ToolCallFormat.GENERIC,
        "",
        f'{{"name": "add", "arguments": {A}}}',
        '{"name": "add", "arguments": {"a": 2, "b": 3}, "id": 1}',
    ),
}


# Formats that write one call.
ONE_CALL = {"llama3", "generic", "gpt_oss", "gigachat_v3"}


@pytest.fixture(scope="module")
def qwen_tok(qwen_header_path: Path) -> fucina.Tokenizer:
    return fucina.Tokenizer.from_gguf(qwen_header_path)


def _text_only(marker: str) -> str | None:
    return None


def _accepts(tok: fucina.Tokenizer, grammar: fucina.Grammar, text: str) -> bool:
    matcher = _core.GrammarCompiler(tok).compile(grammar._core)
    ids = tok.encode(text, add_special=False)
    if matcher.valid_prefix_len(ids) != len(ids):
        return False
    matcher.consume(ids)
    return matcher.accepting


def test_no_reasoning_block_once_the_prompt_closed_it(qwen_tok: fucina.Tokenizer) -> None:
    # A thinking template whose generation prompt closed the block (thinking off) gets the calls alone,
    # as llama.cpp's grammars; otherwise a leading <think> block may precede them.
    call = f'<tool_call>\n{{"name": "get_weather", "arguments": {W}}}\n</tool_call>'
    source = "{{ '<think>' }}"
    for reasoning in (True, False):
        g = tool_call_grammar(ToolCallFormat.HERMES, TOOLS, _text_only, template_source=source, reasoning=reasoning)
        assert _accepts(qwen_tok, g, call)
        assert _accepts(qwen_tok, g, "<think>\nhm\n</think>\n\n" + call) is reasoning


@pytest.mark.parametrize("case", sorted(CASES))
def test_grammar_accepts_exactly_parseable_calls(qwen_tok: fucina.Tokenizer, case: str) -> None:
    fmt, source, two_calls, bad = CASES[case]
    grammar = tool_call_grammar(fmt, TOOLS, _text_only, template_source=source)
    one = tool_call_grammar(fmt, TOOLS, _text_only, parallel=False, template_source=source)
    assert _accepts(qwen_tok, grammar, two_calls), case
    parsed = parse_tool_calls(two_calls, fmt, tools=TOOLS)
    names = [c["function"]["name"] for c in parsed.tool_calls]
    if case in ONE_CALL:
        assert names == ["add"], case
        assert _accepts(qwen_tok, one, two_calls), case
    else:
        assert names == ["get_weather", "add"], case
        assert not _accepts(qwen_tok, one, two_calls), f"{case}: two calls where one is allowed"
    assert json.loads(parsed.tool_calls[-1]["function"]["arguments"]) == {"a": 2, "b": 3}
    assert not _accepts(qwen_tok, grammar, bad), f"{case}: accepted {bad!r}"
    assert not _accepts(qwen_tok, grammar, "I cannot call a tool for that."), case


def test_named_function_grammar_allows_only_that_tool(qwen_tok: fucina.Tokenizer) -> None:
    grammar = tool_call_grammar(ToolCallFormat.HERMES, [ADD], _text_only, parallel=False)
    assert _accepts(qwen_tok, grammar, f'<tool_call>\n{{"name": "add", "arguments": {A}}}\n</tool_call>')
    assert not _accepts(qwen_tok, grammar, f'<tool_call>\n{{"name": "get_weather", "arguments": {W}}}\n</tool_call>')


def test_control_token_markers_are_named_by_id(gemma_path: Path) -> None:
    # Gemma 3's <start_of_turn> is a control token: text cannot spell it, the grammar names its id.
    tok = fucina.Tokenizer.from_gguf(gemma_path)
    (sot,) = tok.encode("<start_of_turn>", add_special=False, parse_special=True)
    special: Callable[[str], str | None] = lambda m: f"<[{sot}]>" if m == "<|tool_call|>" else None  # noqa: E731
    grammar = tool_call_grammar(ToolCallFormat.GRANITE, TOOLS, special)
    matcher = _core.GrammarCompiler(tok).compile(grammar._core)
    body = tok.encode(f'[{{"name": "add", "arguments": {A}}}]', add_special=False)
    assert matcher.valid_prefix_len([sot, *body]) == len(body) + 1
    assert matcher.valid_prefix_len(tok.encode("<|tool_call|>", add_special=False)) == 0


def test_a_tool_without_parameters_takes_an_object(qwen_tok: fucina.Tokenizer) -> None:
    bare = {"type": "function", "function": {"name": "now"}}
    grammar = tool_call_grammar(ToolCallFormat.HERMES, [bare], _text_only)
    assert _accepts(qwen_tok, grammar, '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>')
    with pytest.raises(ValueError, match="at least one tool"):
        tool_call_grammar(ToolCallFormat.HERMES, [], _text_only)


# Schemas as pydantic writes them: nested models under "$defs", recursive ones as a root "$ref".
TRIP: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "trip",
        "parameters": {
            "$defs": {"City": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
            "type": "object",
            "properties": {"cities": {"type": "array", "items": {"$ref": "#/$defs/City"}}},
            "required": ["cities"],
        },
    },
}
KIDS = {"type": "array", "items": {"$ref": "#/$defs/Node"}}
NODE = {"type": "object", "properties": {"label": {"type": "string"}, "kids": KIDS}, "required": ["label"]}
TREE: dict[str, Any] = {
    "type": "function",
    "function": {"name": "tree", "parameters": {"$ref": "#/$defs/Node", "$defs": {"Node": NODE}}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_schemas_with_refs_compile_in_every_syntax(qwen_tok: fucina.Tokenizer, case: str) -> None:
    # A call's schema embeds the tool's: its "#/..." pointers must still find what they point at.
    fmt, source, _, _ = CASES[case]
    grammar = tool_call_grammar(fmt, [TRIP, TREE, ADD], _text_only, template_source=source)
    _core.GrammarCompiler(qwen_tok).compile(grammar._core)


def test_refs_resolve_against_the_tools_own_schema(qwen_tok: fucina.Tokenizer) -> None:
    hermes = tool_call_grammar(ToolCallFormat.HERMES, [TRIP, TREE], _text_only)
    call = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
    assert _accepts(qwen_tok, hermes, call % ("trip", '{"cities": [{"name": "Paris"}]}'))
    assert not _accepts(qwen_tok, hermes, call % ("trip", '{"cities": [{"town": "Paris"}]}'))
    assert _accepts(qwen_tok, hermes, call % ("tree", '{"label": "a", "kids": [{"label": "b", "kids": []}]}'))
    assert not _accepts(qwen_tok, hermes, call % ("tree", '{"label": "a", "kids": [{"name": "b"}]}'))
    # LFM2 checks each keyword argument against its property's schema alone.
    lfm2 = tool_call_grammar(ToolCallFormat.LFM2, [TRIP], _text_only)
    assert _accepts(qwen_tok, lfm2, '<|tool_call_start|>[trip(cities=[{"name": "Paris"}])]<|tool_call_end|>')
    assert not _accepts(qwen_tok, lfm2, '<|tool_call_start|>[trip(cities=[{"town": "Paris"}])]<|tool_call_end|>')


@pytest.fixture(scope="module")
def llm(gemma_path: Path) -> fucina.LLM:
    return fucina.LLM(gemma_path, n_ctx=2048)


def _reply(llm: fucina.LLM, **kw: Any) -> Any:
    msgs = [{"role": "user", "content": "Tell me a joke about cats."}]
    return llm.create_chat_completion(msgs, tools=TOOLS, max_tokens=96, **kw)


@pytest.mark.parametrize("seed", [0, 1])
def test_required_always_calls_a_tool(llm: fucina.LLM, seed: int) -> None:
    # Unforced, this prompt gets a joke (the model has no reason to call); forced, a valid call.
    free = _reply(llm, tool_choice="auto", temperature=0)["choices"][0]
    assert free["finish_reason"] != "tool_calls"
    r = _reply(llm, tool_choice="required", temperature=0.8, seed=seed)["choices"][0]
    assert r["finish_reason"] == "tool_calls", r
    for call in r["message"]["tool_calls"]:
        name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
        schema = next(t for t in TOOLS if t["function"]["name"] == name)["function"]["parameters"]
        assert set(schema["required"]) <= set(args) <= set(schema["properties"])


def test_named_tool_choice_calls_that_tool_once(llm: fucina.LLM) -> None:
    choice = {"type": "function", "function": {"name": "add"}}
    # A response_format too shapes answers only: the forced call is the reply.
    for fmt in (None, {"type": "json_object"}):
        r = _reply(llm, tool_choice=choice, temperature=0, response_format=fmt)["choices"][0]
        assert r["finish_reason"] == "tool_calls", fmt
        (call,) = r["message"]["tool_calls"]
        assert call["function"]["name"] == "add"
        assert set(json.loads(call["function"]["arguments"])) == {"a", "b"}


def test_forced_calls_take_tools_written_for_validators(llm: fucina.LLM) -> None:
    # Tool schemas as MCP servers and OpenAPI documents write them: keywords llguidance does not
    # implement, look-around, a reference to another document. Unforced, llama.cpp ignores them;
    # forced, the call is still made and what can be enforced is.
    tag = {
        "type": "function",
        "function": {
            "name": "tag_items",
            "description": "Tag items",
            "parameters": {
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "uniqueItems": True},
                    "site": {"$ref": "https://example.com/schemas/site.json"},
                    "slug": {"type": "string", "pattern": "^(?!-)[a-z-]{1,8}$"},
                    "count": {"type": "integer", "format": "int32"},
                },
                "required": ["tags", "slug", "count"],
            },
        },
    }
    msgs = [{"role": "user", "content": "Tag apples and pears."}]
    r = llm.create_chat_completion(msgs, tools=[tag], tool_choice="required", max_tokens=80, temperature=0)
    (call,) = r["choices"][0]["message"]["tool_calls"]
    args = json.loads(call["function"]["arguments"])
    assert set(args) >= {"tags", "slug", "count"} and set(args) <= {"tags", "site", "slug", "count"}
    assert all(isinstance(x, str) and len(x) <= 12 for x in args["tags"])
    assert re.fullmatch("[a-z-]{1,8}", args["slug"]) and -(2**31) <= args["count"] < 2**31


def test_required_streams_the_call(llm: fucina.LLM) -> None:
    chunks = list(_reply(llm, tool_choice="required", temperature=0, stream=True, parallel_tool_calls=False))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls and calls[0]["function"]["name"] in {"get_weather", "add"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    with pytest.raises(fucina.ArgumentTypeError, match="parallel_tool_calls"):
        _reply(llm, tool_choice="required", parallel_tool_calls="no")


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("deepseek-ai-DeepSeek-V3.1", ToolCallFormat.DEEPSEEK_V3),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolCallFormat.DEEPSEEK_R1),
    ],
)
def test_forced_call_with_markers_written_as_text(gemma_path: Path, name: str, fmt: ToolCallFormat) -> None:
    # On Gemma's vocabulary DeepSeek's markers are text, and their "▁" is SentencePiece's space escape:
    # the tokenizer reads it as a space, so the forced "<｜tool▁calls▁begin｜>" came back as "tool",
    # "▁calls" (bytes " calls"), the only token the grammar's mask then allowed, and the grammar rejected
    # it when it was committed ("grammar constraint failed", a 500 from the server).
    source = deepseek_listing_tools(name)
    assert detect_tool_call_format(source) is fmt
    llm = fucina.LLM(gemma_path, n_ctx=1024, chat_template=source)
    msgs = [{"role": "user", "content": "Add 2 and 3."}]
    choice = {"type": "function", "function": {"name": "add"}}
    for speculation in (True, False):
        r = llm.create_chat_completion(
            msgs, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=96, speculation=speculation
        )["choices"][0]
        assert r["finish_reason"] == "tool_calls", (speculation, r)
        (call,) = r["message"]["tool_calls"]
        assert call["function"]["name"] == "add"
        assert set(json.loads(call["function"]["arguments"])) == {"a", "b"}
