"""LLM.create_chat_completion on the real Gemma 3 270M: every documented return shape (plain, streamed,
with logprobs, with tools), the request checks, and tool-call round trips on a template with tool
syntax (Qwen 2.5's) and on the built-in Gemma format (tools described in the prompt)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fucina
from fucina.chat_completion import _messages, _render, _tool_code, _tools
from fucina.tool_calls import ToolCallFormat, detect_tool_call_format, parse_tool_calls
from serverkit import CALL, WEATHER, scripted

TEMPLATES = Path(__file__).resolve().parent.parent / "vendor" / "chat_templates"
USER = [{"role": "user", "content": "Name a colour."}]
COMPLETION_KEYS = {"id", "object", "created", "model", "choices", "usage"}
CHOICE_KEYS = {"index", "message", "logprobs", "finish_reason"}
CHUNK_KEYS = {"id", "object", "created", "model", "choices"}
CHUNK_CHOICE_KEYS = {"index", "delta", "logprobs", "finish_reason"}


@pytest.fixture(scope="module")
def llm(gemma_path: Path) -> fucina.LLM:
    return fucina.LLM(gemma_path, n_ctx=1024, n_threads=2)


@pytest.fixture(scope="module")
def qwen(gemma_path: Path) -> fucina.LLM:
    """Gemma's weights behind Qwen 2.5's tool-calling template (the replies are scripted)."""
    source = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text("utf-8")
    return fucina.LLM(gemma_path, n_ctx=1024, n_threads=2, chat_template=source)


def prompt_text(llm: fucina.LLM, seen: dict[str, Any]) -> str:
    return llm.detokenize(seen["prompt"], special=True)


# ---------------------------------------------------------------------------------------------
# Shapes


def test_completion_shape(llm: fucina.LLM) -> None:
    r = llm.create_chat_completion(USER, max_tokens=6, seed=3)
    assert set(r) == COMPLETION_KEYS
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    assert r["model"] == str(llm.path) and isinstance(r["created"], int)
    (choice,) = r["choices"]
    assert set(choice) == CHOICE_KEYS and choice["index"] == 0
    assert choice["message"] == {"role": "assistant", "content": choice["message"]["content"]}
    assert isinstance(choice["message"]["content"], str) and choice["logprobs"] is None
    assert choice["finish_reason"] in ("stop", "length")
    usage = r["usage"]
    assert usage["prompt_tokens"] == len(llm.apply_chat_template(USER))
    assert 0 < usage["completion_tokens"] <= 6
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert llm.create_chat_completion(USER, max_tokens=1, model="my-model")["model"] == "my-model"


def test_the_prompt_cache_reuses_a_growing_history(llm: fucina.LLM) -> None:
    first = llm.create_chat_completion(USER, max_tokens=4, temperature=0)
    history = [*USER, first["choices"][0]["message"], {"role": "user", "content": "And then?"}]
    second = llm.create_chat_completion(history, max_tokens=4, temperature=0)
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"]
    uncached = llm.create_chat_completion(history, max_tokens=4, temperature=0, cache_prompt=False)
    assert uncached["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert uncached["choices"][0]["message"] == second["choices"][0]["message"]
    # A request made while another streams on the cache gets a sequence of its own.
    stream = llm.create_chat_completion(history, max_tokens=4, temperature=0, stream=True)
    next(stream)
    meanwhile = llm.create_chat_completion(history, max_tokens=2, temperature=0)
    assert meanwhile["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in stream)


def test_stream_shape_and_same_text_as_plain(llm: fucina.LLM) -> None:
    plain = llm.create_chat_completion(USER, max_tokens=10, seed=11)
    chunks = list(llm.create_chat_completion(USER, max_tokens=10, seed=11, stream=True))
    for c in chunks:
        assert set(c) == CHUNK_KEYS and c["object"] == "chat.completion.chunk"
        assert set(c["choices"][0]) == CHUNK_CHOICE_KEYS
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    middle = [c["choices"][0] for c in chunks[1:-1]]
    assert all(set(m["delta"]) == {"content"} and m["finish_reason"] is None for m in middle)
    assert "".join(m["delta"]["content"] for m in middle) == plain["choices"][0]["message"]["content"]


def test_logprobs_shape(llm: fucina.LLM) -> None:
    r = llm.create_chat_completion(USER, max_tokens=5, temperature=0.0, logprobs=True, top_logprobs=3)
    lp = r["choices"][0]["logprobs"]
    assert set(lp) == {"content", "refusal"} and lp["refusal"] is None
    assert len(lp["content"]) == r["usage"]["completion_tokens"]
    for entry in lp["content"]:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert bytes(entry["bytes"]).decode("utf-8", "ignore") == entry["token"] and entry["logprob"] <= 0
        assert len(entry["top_logprobs"]) == 3
        assert all(set(t) == {"token", "logprob", "bytes"} for t in entry["top_logprobs"])
        values = [t["logprob"] for t in entry["top_logprobs"]]
        assert values == sorted(values, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert entry["top_logprobs"][0]["token"] == entry["token"]
        assert entry["top_logprobs"][0]["logprob"] == pytest.approx(entry["logprob"])
    assert "".join(e["token"] for e in lp["content"]) == r["choices"][0]["message"]["content"]
    # logprobs=True alone: no alternatives. Off by default, and top_logprobs alone does nothing
    # (as in llama-cpp-python).
    bare = llm.create_chat_completion(USER, max_tokens=2, logprobs=True)["choices"][0]["logprobs"]
    assert all(e["top_logprobs"] == [] for e in bare["content"])
    assert llm.create_chat_completion(USER, max_tokens=2, top_logprobs=2)["choices"][0]["logprobs"] is None


def test_stream_logprobs(llm: fucina.LLM) -> None:
    chunks = list(llm.create_chat_completion(USER, max_tokens=6, seed=5, stream=True, logprobs=True, top_logprobs=1))
    entries = [e for c in chunks if c["choices"][0]["logprobs"] for e in c["choices"][0]["logprobs"]["content"]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert 0 < len(entries) <= 6 and "".join(e["token"] for e in entries) == text


def test_messages_are_prepared(llm: fucina.LLM) -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "Name a "}, {"type": "text", "text": "colour."}]}]
    a = llm.create_chat_completion(parts, max_tokens=1)["usage"]["prompt_tokens"]
    assert a == llm.create_chat_completion(USER, max_tokens=1)["usage"]["prompt_tokens"]
    # None content renders as empty (OpenAI allows it for system / assistant messages).
    history: list[dict[str, Any]] = [
        {"role": "system", "content": None},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Name a colour."},
    ]
    assert llm.create_chat_completion(history, max_tokens=1)["choices"][0]["finish_reason"] in ("stop", "length")


def test_response_format_is_accepted(llm: fucina.LLM) -> None:
    for fmt in (
        {"type": "text"},
        {"type": "json_object"},
        {"type": "json_object", "schema": {"type": "object"}},
        {"type": "json_schema", "json_schema": {"name": "colour", "schema": {"type": "object"}}},
    ):
        assert llm.create_chat_completion(USER, max_tokens=1, response_format=fmt)["object"] == "chat.completion"


def test_bad_requests_are_named(llm: fucina.LLM) -> None:
    untyped: Any = llm
    bad: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"messages": "hi"}, fucina.ArgumentTypeError, "messages must be a list"),
        ({"messages": []}, fucina.InvalidArgumentError, "messages is empty"),
        ({"messages": ["hi"]}, fucina.ArgumentTypeError, r"messages\[0\]"),
        ({"messages": [{"content": "x"}]}, fucina.ArgumentTypeError, r"messages\[0\]\['role'\]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            fucina.InvalidArgumentError,
            r"messages\[0\]\['content'\]\[0\].*image_url",
        ),
        ({"messages": [{"role": "user", "content": 5}]}, fucina.ArgumentTypeError, r"messages\[0\]\['content'\]"),
        (
            {"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
            fucina.InvalidArgumentError,
            "role is 'user'",
        ),
        (
            {
                "messages": [
                    *USER,
                    {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]},
                ]
            },
            fucina.InvalidArgumentError,
            r"messages\[1\]\['tool_calls'\]\[0\]\['function'\]\['arguments'\] is not valid JSON",
        ),
        ({"tools": [{"type": "function"}]}, fucina.InvalidArgumentError, r"tools\[0\] has no 'function'"),
        ({"tools": [{"type": "retrieval", "function": {}}]}, fucina.InvalidArgumentError, r"tools\[0\]\['type'\]"),
        ({"tools": WEATHER, "tool_choice": "sometimes"}, fucina.InvalidArgumentError, "tool_choice"),
        (
            {"tools": WEATHER, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            fucina.InvalidArgumentError,
            "'nope', which is not one of the tools",
        ),
        ({"tool_choice": "required"}, fucina.InvalidArgumentError, "needs tools"),
        ({"tools": WEATHER, "functions": []}, fucina.InvalidArgumentError, "not both"),
        ({"response_format": {"type": "xml"}}, fucina.InvalidArgumentError, r"response_format\['type'\]"),
        ({"response_format": {"type": "json_schema"}}, fucina.InvalidArgumentError, "json_schema"),
        ({"response_format": "json"}, fucina.ArgumentTypeError, "response_format must be a dict"),
        ({"logprobs": True, "top_logprobs": 21}, fucina.InvalidArgumentError, "top_logprobs"),
        ({"logprobs": "yes"}, fucina.ArgumentTypeError, "logprobs"),
        ({"temperature": -1.0}, fucina.InvalidArgumentError, "temperature"),
        ({"max_tokens": -3}, fucina.InvalidArgumentError, "max_tokens"),
        ({"stop": [""]}, fucina.InvalidArgumentError, "stop"),
        ({"messages": [{"role": "narrator", "content": "x"}]}, fucina.InvalidArgumentError, "'system', 'user'"),
    ]
    for kwargs, error, match in bad:
        request = {"messages": USER, "max_tokens": 1, **kwargs}
        with pytest.raises(error, match=match):
            untyped.create_chat_completion(**request)
            pytest.fail(f"no error for {kwargs}")
    # The built-in Gemma format has one system slot: a template's own refusal is a ChatTemplateError.
    late_system = [*USER, {"role": "assistant", "content": "Red."}, {"role": "system", "content": "Be terse."}]
    with pytest.raises(fucina.ChatTemplateError, match="system"):
        llm.create_chat_completion(late_system, max_tokens=1)


# ---------------------------------------------------------------------------------------------
# Tool calls on a template with tool syntax


ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_tool_call_round_trip(qwen: fucina.LLM) -> None:
    force, seen = scripted(qwen, CALL)
    r = qwen.create_chat_completion(ASK, tools=WEATHER, max_tokens=64, logits_processor=force)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant" and message["content"] is None
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    # The tools were rendered by Qwen's template, and the reply was parsed from the raw text.
    first_prompt = prompt_text(qwen, seen)
    assert "<tools>" in first_prompt and '"name": "get_weather"' in first_prompt
    assert r["usage"]["prompt_tokens"] == len(qwen.apply_chat_template(ASK, tools=WEATHER))

    # Feed the call back with its result and ask again.
    history = [*ASK, message, {"role": "tool", "tool_call_id": call["id"], "content": '{"temperature": 21}'}]
    rendered = qwen.apply_chat_template(history, tools=WEATHER, tokenize=False)
    assert isinstance(rendered, str)
    assert '<|im_start|>user\n<tool_response>\n{"temperature": 21}\n</tool_response><|im_end|>\n' in rendered
    assert rendered.endswith("<|im_start|>assistant\n")

    force2, seen2 = scripted(qwen, "It is 21 degrees in Paris.")
    r2 = qwen.create_chat_completion(history, tools=WEATHER, max_tokens=32, logits_processor=force2)
    assert r2["choices"][0]["finish_reason"] == "stop"
    assert r2["choices"][0]["message"] == {"role": "assistant", "content": "It is 21 degrees in Paris."}
    second_prompt = prompt_text(qwen, seen2)
    # The JSON-string arguments were turned into an object, as Qwen's template expects (it tojson's them).
    assert f"<|im_start|>assistant\n{CALL}<|im_end|>\n" in second_prompt
    assert '<tool_response>\n{"temperature": 21}\n</tool_response>' in second_prompt


def test_tool_call_stream(qwen: fucina.LLM) -> None:
    force, _ = scripted(qwen, "Let me check.\n" + CALL)
    chunks = list(qwen.create_chat_completion(ASK, tools=WEATHER, max_tokens=64, logits_processor=force, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant"} and deltas[-1] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert "".join(d.get("content", "") for d in deltas) == "Let me check."
    (tool_delta,) = [d for d in deltas if "tool_calls" in d]
    (call,) = tool_delta["tool_calls"]
    assert call["index"] == 0 and call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def test_mixed_reply_and_tool_choice(qwen: fucina.LLM) -> None:
    force, _ = scripted(qwen, "Let me check.\n" + CALL)
    r = qwen.create_chat_completion(ASK, tools=WEATHER, max_tokens=64, logits_processor=force)
    assert r["choices"][0]["message"]["content"] == "Let me check."
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    # tool_choice="none": the tools are not rendered and nothing is parsed.
    force, seen = scripted(qwen, CALL)
    r = qwen.create_chat_completion(ASK, tools=WEATHER, tool_choice="none", max_tokens=64, logits_processor=force)
    assert "<tools>" not in prompt_text(qwen, seen)
    assert r["choices"][0]["finish_reason"] == "stop" and r["choices"][0]["message"]["content"] == CALL
    # A named function is not enforced yet, but only that tool is offered; legacy functions work too.
    force, seen = scripted(qwen, CALL)
    named = {"type": "function", "function": {"name": "get_weather"}}
    r = qwen.create_chat_completion(ASK, tools=WEATHER, tool_choice=named, max_tokens=64, logits_processor=force)
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    force, _ = scripted(qwen, CALL)
    legacy = [t["function"] for t in WEATHER]
    r = qwen.create_chat_completion(ASK, functions=legacy, max_tokens=64, logits_processor=force)
    assert r["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


# ---------------------------------------------------------------------------------------------
# Tool calls on a template without tool syntax (the built-in Gemma format)


def test_tool_call_round_trip_without_template_syntax(llm: fucina.LLM) -> None:
    code = '```tool_code\nget_weather(city="Paris")\n```'
    force, seen = scripted(llm, code)
    r = llm.create_chat_completion(ASK, tools=WEATHER, max_tokens=32, logits_processor=force)
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    message = r["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    first = prompt_text(llm, seen)
    assert "You have access to the following functions" in first and '"name": "get_weather"' in first
    assert first.startswith("<bos><start_of_turn>user\n")  # folded into the first user turn, as Gemma does

    history = [*ASK, message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "21 C"}]
    force2, seen2 = scripted(llm, "It is 21 C.")
    r2 = llm.create_chat_completion(history, tools=WEATHER, max_tokens=16, logits_processor=force2)
    assert r2["choices"][0]["message"]["content"] == "It is 21 C."
    second = prompt_text(llm, seen2)
    assert f"<start_of_turn>model\n{code}<end_of_turn>\n" in second
    assert "<start_of_turn>user\n```tool_output\n21 C\n```<end_of_turn>\n<start_of_turn>model\n" in second


# A call to get_weather in each family's syntax.
REPLIES = {
    ToolCallFormat.HERMES: CALL,
    ToolCallFormat.QWEN3_CODER: "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "</function>\n</tool_call>",
    ToolCallFormat.LLAMA3: '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    ToolCallFormat.MISTRAL: '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
    ToolCallFormat.GRANITE: '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    ToolCallFormat.COMMAND_R: '<|START_ACTION|>[{"tool_name": "get_weather", "parameters": {"city": "Paris"}}]'
    "<|END_ACTION|>",
    ToolCallFormat.DEEPSEEK_R1: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    ToolCallFormat.GEMMA4: '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>',
    ToolCallFormat.DEEPSEEK_V3: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}'
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    ToolCallFormat.GLM4: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
    ToolCallFormat.KIMI_K2: "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>',
    ToolCallFormat.MINIMAX_M2: '<minimax:tool_call>\n<invoke name="get_weather">\n'
    '<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>',
    ToolCallFormat.DEEPSEEK_DSML: '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
    "</｜DSML｜function_calls>",
    ToolCallFormat.LFM2: "<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|>",
    ToolCallFormat.MINICPM: '<function name="get_weather"><param name="city">Paris</param></function>',
    ToolCallFormat.SOLAR_OPEN: "<|tool_calls|><|tool_call:begin|>c1<|tool_call:name|>get_weather<|tool_call:args|>"
    '{"city": "Paris"}<|tool_call:end|><|calls|>',
    ToolCallFormat.APERTUS: '<|tools_prefix|>[{"get_weather": {"city": "Paris"}}]<|tools_suffix|>',
    ToolCallFormat.GIGACHAT: '<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}',
    ToolCallFormat.SEED_OSS: "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
    "</function>\n</seed:tool_call>",
    ToolCallFormat.NEMOTRON: '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>',
    ToolCallFormat.TOOL_CALLS_TAG: '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>',
    ToolCallFormat.GPT_OSS: "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Paris"}',
    ToolCallFormat.MINIMAX_M3: ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>'
    "Paris]<]minimax[>[</city>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
    ToolCallFormat.KIMI_K3: '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument '
    'key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>',
    ToolCallFormat.HY3: "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n"
    "<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n"
    "</tool_call:opensource>\n</tool_calls:opensource>",
    ToolCallFormat.MUSE_GLIMMER: ' to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n'
    '<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls>',
    ToolCallFormat.FUNCTIONARY_V3_2: 'get_weather\n{"city": "Paris"}',
    ToolCallFormat.FIREFUNCTION_V2: ' functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    ToolCallFormat.COMMAND_R_PLUS: 'Action:\n```json\n[{"tool_name": "get_weather", '
    '"parameters": {"city": "Paris"}}]\n```',
}
# Command R+'s template lists only tools whose every parameter is described.
DESCRIBED = [
    {**t, "function": {**t["function"], "parameters": {**t["function"]["parameters"], "properties": {"city": city}}}}
    for t in WEATHER
    for city in [{**t["function"]["parameters"]["properties"]["city"], "description": "The city"}]
]
# Templates whose own tool listing fucina cannot use, so it describes the tools in the prompt: DeepSeek R1's
# and V3.1's write calls but not the tools; FireFunction v2's reads them from its own `functions` variable.
FUCINA_LISTS_TOOLS = {"fireworks-ai-llama-3-firefunction-v2"}
TEMPLATE_VARIABLES = {
    "fireworks-ai-llama-3-firefunction-v2": {
        "functions": json.dumps([t["function"] for t in DESCRIBED]),
        "datetime": "Jan 1",
    }
}
# Templates that transformers itself cannot render a tool result with: Kimi K2 Instruct's later revision
# and K2 Thinking queue the call ids with list.append, which the immutable sandbox refuses (SecurityError;
# tests/goldens/chat/renders.json records it), so fucina refuses too.
TOOL_RESULT_REFUSED = {"Kimi-K2-Instruct", "Kimi-K2-Thinking"}
TOOL_TEMPLATES = sorted(
    p.stem
    for p in TEMPLATES.glob("*.jinja")
    if detect_tool_call_format(p.read_text("utf-8")) is not ToolCallFormat.GENERIC and p.stem not in TOOL_RESULT_REFUSED
)


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_parsed_calls_render_back_with_every_tool_template(gemma_path: Path, name: str) -> None:
    """A call parsed from a reply in a template's own syntax, fed back with its result, renders with that
    template (ids and argument objects as it expects them)."""
    source = (TEMPLATES / f"{name}.jinja").read_text("utf-8")
    fmt = detect_tool_call_format(source)
    parsed = parse_tool_calls(REPLIES[fmt], fmt, tools=DESCRIBED)
    (call,) = parsed.tool_calls
    history = [
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": parsed.content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": "RESULT-21"},
    ]
    llm = fucina.LLM(gemma_path, n_ctx=64, chat_template=source)
    prompt = _render(llm, _messages(history), _tools(DESCRIBED, None), "auto", TEMPLATE_VARIABLES.get(name, {}))
    text = llm.detokenize(prompt.ids, special=True)
    assert "RESULT-21" in text and call["function"]["name"] in text
    listed = fmt in (ToolCallFormat.DEEPSEEK_R1, ToolCallFormat.DEEPSEEK_V3) or name in FUCINA_LISTS_TOOLS
    assert prompt.format is (ToolCallFormat.GENERIC if listed else fmt)


def test_tool_code_rendering_parses_back() -> None:
    calls = [
        {"function": {"name": "f", "arguments": {"s": 'it\'s "q"', "n": 1.5, "b": True, "x": None, "l": [1, {"k": 2}]}}}
    ]
    parsed = parse_tool_calls(_tool_code(calls), ToolCallFormat.GENERIC)
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == calls[0]["function"]["arguments"]
