"""fucina.BuiltinTemplate: the spec's built-in chat formats (§13.8.1), checked against the spec's own
examples and, byte for byte, against the model authors' templates in vendor/chat_templates/
(rendered with fucina.render_chat_template, which matches transformers)."""

from __future__ import annotations

import dataclasses
import doctest
from pathlib import Path
from typing import Any

import pytest

import fucina
import fucina.chat
from fucina import BuiltinTemplate, ChatFormat

TEMPLATES = Path(__file__).resolve().parent.parent / "vendor" / "chat_templates"

CHATML = BuiltinTemplate(ChatFormat.CHATML)
LLAMA3 = BuiltinTemplate(ChatFormat.LLAMA3)
GEMMA = BuiltinTemplate(ChatFormat.GEMMA)
GEMMA4 = BuiltinTemplate(ChatFormat.GEMMA4)
ALL = [CHATML, LLAMA3, GEMMA, GEMMA4]

Messages = list[dict[str, str]]


def _msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def _real(name: str, messages: Messages, **kwargs: Any) -> str:
    source = (TEMPLATES / f"{name}.jinja").read_text("utf-8")
    return fucina.render_chat_template(source, messages, add_generation_prompt=True, **kwargs)


# Simple string-content conversations, every content free of leading/trailing whitespace (the real
# Llama 3 / Gemma templates trim contents; the built-in formats keep them verbatim).
ONE_TURN: Messages = [_msg("user", "Hi")]
WITH_SYSTEM: Messages = [_msg("system", "Be terse."), _msg("user", "Hi")]
MULTI_TURN: Messages = [_msg("user", "Hi"), _msg("assistant", "Hello!"), _msg("user", "Bye")]
MULTI_TURN_SYSTEM: Messages = [_msg("system", "Be terse."), *MULTI_TURN]
CONVERSATIONS = {"one_turn": ONE_TURN, "with_system": WITH_SYSTEM, "multi": MULTI_TURN, "multi_sys": MULTI_TURN_SYSTEM}


# ---------------------------------------------------------------------------------------------
# The spec's examples, verbatim


def test_spec_detect_and_render_turn() -> None:
    t = BuiltinTemplate.detect("... {{ '<|im_start|>' }} ...")
    assert t is not None
    assert t.format is ChatFormat.CHATML
    assert t.stop_marker == "<|im_end|>"
    assert t.render_turn("Hi", system="Be terse.", first=True, think_off=False) == (
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_spec_render_messages_stateless_server_shape() -> None:
    t = BuiltinTemplate(ChatFormat.CHATML)
    rendered = t.render_messages(
        [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello!"},
            {"role": "user", "content": "Bye"},
        ],
        think_off=True,
    )
    assert rendered == (
        "<|im_start|>system\nBe terse.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"  # <think> stripped
        "<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


# ---------------------------------------------------------------------------------------------
# Detection, stop markers, construction


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("x <|im_start|> y", ChatFormat.CHATML),
        ("x <|start_header_id|> y", ChatFormat.LLAMA3),
        ("x {{ '<|turn>' + role }} y", ChatFormat.GEMMA4),
        ("x <start_of_turn> y", ChatFormat.GEMMA),
        # first match wins, in the spec's order
        ("<start_of_turn> <|turn> <|start_header_id|> <|im_start|>", ChatFormat.CHATML),
        ("<start_of_turn> <|turn>", ChatFormat.GEMMA4),
        ("no markers here", None),
        ("", None),
        (None, None),
    ],
)
def test_detect(template: str | None, expected: ChatFormat | None) -> None:
    t = BuiltinTemplate.detect(template)
    assert (None if t is None else t.format) is expected


VENDORED_FORMATS = {
    "Qwen-Qwen3-0.6B": ChatFormat.CHATML,
    "Qwen-Qwen2.5-7B-Instruct": ChatFormat.CHATML,
    "Qwen3-Coder": ChatFormat.CHATML,
    "HuggingFaceTB-SmolLM3-3B": ChatFormat.CHATML,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ChatFormat.CHATML,
    "meta-llama-Llama-3.1-8B-Instruct": ChatFormat.LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct": ChatFormat.LLAMA3,
    "google-gemma-2-2b-it": ChatFormat.GEMMA,
    "google-gemma-4-31B-it": ChatFormat.GEMMA4,
    "LFM2.5-8B-A1B": ChatFormat.CHATML,
    "openbmb-MiniCPM5-1B": ChatFormat.CHATML,
    "Bielik-11B-v3.0-Instruct": ChatFormat.CHATML,
    "LFM2-8B-A1B": ChatFormat.CHATML,
    "LFM2.5-Instruct": ChatFormat.CHATML,
    "MiMo-VL": ChatFormat.CHATML,
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ChatFormat.CHATML,
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ChatFormat.CHATML,
    "Qwen-QwQ-32B": ChatFormat.CHATML,
    "Qwen3.5-4B": ChatFormat.CHATML,
    "StepFun3.5-Flash": ChatFormat.CHATML,
    "fireworks-ai-llama-3-firefunction-v2": ChatFormat.LLAMA3,
    "meetkai-functionary-medium-v3.1": ChatFormat.LLAMA3,
    "meetkai-functionary-medium-v3.2": ChatFormat.LLAMA3,
    "meta-llama-Llama-3.3-70B-Instruct": ChatFormat.LLAMA3,
    "google-gemma-4-31B-it-interleaved": ChatFormat.GEMMA4,
}


def test_detect_vendored_templates() -> None:
    names = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))
    assert set(VENDORED_FORMATS) <= set(names)
    for name in names:
        t = BuiltinTemplate.detect((TEMPLATES / f"{name}.jinja").read_text("utf-8"))
        assert (None if t is None else t.format) is VENDORED_FORMATS.get(name), name


def test_stop_markers_and_default_bos() -> None:
    assert [t.stop_marker for t in ALL] == ["<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<turn|>"]
    assert [t.bos_token for t in ALL] == ["", "<|begin_of_text|>", "<bos>", "<bos>"]
    assert [f.value for f in ChatFormat] == ["chatml", "llama3", "gemma", "gemma4"]


def test_construction() -> None:
    assert BuiltinTemplate("gemma4") == GEMMA4  # type: ignore[arg-type]
    assert BuiltinTemplate(ChatFormat.LLAMA3, bos_token="") != LLAMA3
    assert BuiltinTemplate(ChatFormat.LLAMA3, bos_token="<|begin_of_text|>") == LLAMA3
    t = BuiltinTemplate.detect("<|start_header_id|>", bos_token="")
    assert t is not None and t.bos_token == ""
    assert LLAMA3.render_turn("U", first=True).startswith("<|begin_of_text|><|start_header_id|>user")
    assert (
        BuiltinTemplate(ChatFormat.LLAMA3, bos_token="").render_turn("U", first=True).startswith("<|start_header_id|>")
    )
    with pytest.raises(ValueError, match="format must be"):
        BuiltinTemplate("mistral")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bos_token"):
        BuiltinTemplate(ChatFormat.GEMMA, bos_token=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="chat_template"):
        BuiltinTemplate.detect(b"<|im_start|>")  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        CHATML.format = ChatFormat.GEMMA  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# The rendered forms, per format


def test_render_turn_forms() -> None:
    assert CHATML.render_turn("Bye", system="ignored on later turns", first=False) == (
        "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    )
    assert CHATML.render_turn("Hi", first=True, think_off=True) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert LLAMA3.render_turn("U", system="S", first=True) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert LLAMA3.render_turn("U", first=False, think_off=True) == (
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert GEMMA.render_turn("U", system="S", first=True, think_off=True) == (
        "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"
    )
    assert GEMMA.render_turn("U", system="S", first=False) == (
        "<end_of_turn>\n<start_of_turn>user\nU<end_of_turn>\n<start_of_turn>model\n"
    )
    # Thinking off (Gemma 4's template default): the model opener primes an empty thought channel.
    assert GEMMA4.render_turn("Hi", system=" Be terse.\n", first=True, think_off=True) == (
        "<bos><|turn>system\nBe terse.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    )
    assert GEMMA4.render_turn("Hi", first=True, think_off=True) == (
        "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    )
    # Thinking on: the system turn opens with <|think|>, even without a system prompt.
    assert GEMMA4.render_turn("Hi", first=True) == (
        "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"
    )
    assert GEMMA4.render_turn("Bye", first=False, think_off=True) == (
        "<turn|>\n<|turn>user\nBye<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    )
    assert GEMMA4.render_turn("Bye", first=False) == "<turn|>\n<|turn>user\nBye<turn|>\n<|turn>model\n"


def test_render_messages_forms() -> None:
    assert LLAMA3.render_messages([_msg("system", "S"), _msg("user", "U")]) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    # ChatML and Llama 3: every message its own block, any order (a system mid-conversation included).
    mixed = [_msg("user", "U"), _msg("system", "S"), _msg("assistant", "<think>r</think>A"), _msg("user", "V")]
    assert CHATML.render_messages(mixed) == (
        "<|im_start|>user\nU<|im_end|>\n<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
        "<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n"
    )
    assert LLAMA3.render_messages(mixed) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
        "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n<think>r</think>A<|eot_id|>"  # Llama 3 strips nothing
        "<|start_header_id|>user<|end_header_id|>\n\nV<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    # Gemma 1-3: leading system messages fold into the first user turn.
    two_systems = [
        _msg("system", "S1"),
        _msg("system", "S2"),
        _msg("user", "U"),
        _msg("assistant", "A"),
        _msg("user", "V"),
    ]
    assert GEMMA.render_messages(two_systems) == (
        "<bos><start_of_turn>user\nS1\n\nS2\n\nU<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n"
        "<start_of_turn>user\nV<end_of_turn>\n<start_of_turn>model\n"
    )
    # ... into the first USER turn, even when an assistant message comes first.
    assert GEMMA.render_messages([_msg("system", "S"), _msg("assistant", "A"), _msg("user", "U")]) == (
        "<bos><start_of_turn>model\nA<end_of_turn>\n<start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"
    )
    # Gemma 4: leading systems merge (trimmed, blank-line separated) into the one system turn.
    assert GEMMA4.render_messages(two_systems, think_off=True) == (
        "<bos><|turn>system\nS1\n\nS2<turn|>\n<|turn>user\nU<turn|>\n<|turn>model\nA<turn|>\n"
        "<|turn>user\nV<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    )
    assert GEMMA4.render_messages(
        [_msg("system", "Be terse."), _msg("user", "Hi"), _msg("assistant", "<|channel>thought\nhm\n<channel|>Hello.")]
        + [_msg("user", "Bye")],
        think_off=True,
    ) == (
        "<bos><|turn>system\nBe terse.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\nHello.<turn|>\n"
        "<|turn>user\nBye<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    )
    assert GEMMA4.render_messages([_msg("user", "Hi")]) == (
        "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<think>\nhm\n</think>\n\nHello!", "Hello!"),
        ("\n<think>hm</think>Hello!", "Hello!"),
        ("<think></think>", ""),
        ("Hello! <think>later</think> x", "Hello! <think>later</think> x"),  # only a leading block
        ("<think>unclosed", "<think>unclosed"),  # malformed: untouched
        ("  Hello!  ", "  Hello!  "),  # verbatim otherwise
    ],
)
def test_chatml_reasoning_strip(content: str, expected: str) -> None:
    rendered = CHATML.render_messages([_msg("assistant", content), _msg("user", "U")])
    assert (
        rendered
        == f"<|im_start|>assistant\n{expected}<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )


def test_reasoning_strip_only_where_the_format_has_one() -> None:
    # Gemma 4 strips its thought channel, not a <think> block; user content is never touched.
    rendered = GEMMA4.render_messages(
        [_msg("user", "<|channel>thought\nx<channel|>U"), _msg("assistant", "<think>r</think>A"), _msg("user", "V")],
        think_off=True,
    )
    assert "<|turn>user\n<|channel>thought\nx<channel|>U<turn|>" in rendered
    assert "<|turn>model\n<think>r</think>A<turn|>" in rendered
    assert "<start_of_turn>model\n<think>r</think>A<end_of_turn>" in GEMMA.render_messages(
        [_msg("user", "U"), _msg("assistant", "<think>r</think>A"), _msg("user", "V")]
    )


def test_think_off_only_affects_chatml_and_gemma4() -> None:
    for t in (LLAMA3, GEMMA):
        for messages in CONVERSATIONS.values():
            assert t.render_messages(messages, think_off=True) == t.render_messages(messages, think_off=False)
        assert t.render_turn("U", system="S", first=True, think_off=True) == t.render_turn("U", system="S", first=True)
    for t in (CHATML, GEMMA4):
        assert t.render_messages(ONE_TURN, think_off=True) != t.render_messages(ONE_TURN, think_off=False)


# ---------------------------------------------------------------------------------------------
# render_messages vs render_turn: same first-turn bytes, same incremental history


@pytest.mark.parametrize("t", ALL, ids=lambda t: t.format.value)
@pytest.mark.parametrize("think_off", [False, True])
@pytest.mark.parametrize("system", [None, "Be terse.", ""])
def test_first_turn_render_messages_equals_render_turn(t: BuiltinTemplate, think_off: bool, system: str | None) -> None:
    messages = ([] if system is None else [_msg("system", system)]) + [_msg("user", "Hi")]
    assert t.render_messages(messages, think_off=think_off) == t.render_turn(
        "Hi", system=system, first=True, think_off=think_off
    )


@pytest.mark.parametrize("t", ALL, ids=lambda t: t.format.value)
def test_incremental_turns_equal_stateless_history(t: BuiltinTemplate) -> None:
    # Generation stops at the stop marker without feeding it; the next turn closes the reply.
    fed = t.render_turn("Hi", system="Be terse.", first=True) + "Hello!" + t.render_turn("Bye", first=False)
    fed += "Sure." + t.render_turn("Again", first=False)
    history = [*MULTI_TURN_SYSTEM, _msg("assistant", "Sure."), _msg("user", "Again")]
    assert t.render_messages(history) == fed


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("t", ALL, ids=lambda t: t.format.value)
def test_errors(t: BuiltinTemplate) -> None:
    with pytest.raises(fucina.EmptyMessages, match="empty"):
        t.render_messages([])
    with pytest.raises(fucina.TrailingAssistantMessage, match=r"messages\[1\]"):
        t.render_messages([_msg("user", "U"), _msg("assistant", "half a reply")])
    with pytest.raises(fucina.TrailingAssistantMessage):
        t.render_messages([_msg("assistant", "half a reply")])
    with pytest.raises(
        ValueError, match=r"messages\[1\]\['role'\] must be 'system', 'user' or 'assistant', not 'tool'"
    ):
        t.render_messages([_msg("user", "U"), _msg("tool", "x")])
    with pytest.raises(TypeError, match=r"messages\[0\]\['content'\] must be a str, not NoneType"):
        t.render_messages([{"role": "user", "content": None}])
    with pytest.raises(TypeError, match=r"messages\[0\]\['content'\] must be a str, not list"):
        t.render_messages([{"role": "user", "content": [{"type": "text", "text": "x"}]}])
    with pytest.raises(TypeError, match=r"messages\[0\]\['role'\] must be a str"):
        t.render_messages([{"role": 1, "content": "x"}])
    with pytest.raises(ValueError, match=r"messages\[0\] has no 'content'"):
        t.render_messages([{"role": "user"}])
    with pytest.raises(ValueError, match=r"messages\[0\] has no 'role'"):
        t.render_messages([{"content": "x"}])
    with pytest.raises(TypeError, match=r"messages\[1\] must be a dict"):
        t.render_messages([_msg("user", "U"), "V"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="messages must be a list"):
        t.render_messages("Hi")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="user must be a str"):
        t.render_turn(None, first=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="system must be a str"):
        t.render_turn("U", system=1, first=True)  # type: ignore[arg-type]


def test_system_only_histories() -> None:
    assert CHATML.render_messages([_msg("system", "S")]) == "<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\n"
    assert LLAMA3.render_messages([_msg("system", "S")]) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert GEMMA4.render_messages([_msg("system", "S")], think_off=True) == (
        "<bos><|turn>system\nS<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    )
    # Gemma 1-3 has no place for a system prompt without a user turn to fold it into.
    with pytest.raises(fucina.ChatTemplateError, match="no user message follows"):
        GEMMA.render_messages([_msg("system", "S"), _msg("system", "T")])


@pytest.mark.parametrize("t", [GEMMA, GEMMA4], ids=lambda t: t.format.value)
def test_system_mid_conversation(t: BuiltinTemplate) -> None:
    with pytest.raises(fucina.SystemMidConversation, match=r"messages\[1\] is a system message .* single system slot"):
        t.render_messages([_msg("user", "U"), _msg("system", "S")])
    with pytest.raises(fucina.SystemMidConversation, match=r"messages\[3\]"):
        t.render_messages([_msg("system", "S"), _msg("user", "U"), _msg("assistant", "A"), _msg("system", "S2")])


def test_error_hierarchy() -> None:
    for cls in (fucina.EmptyMessages, fucina.TrailingAssistantMessage, fucina.SystemMidConversation):
        assert issubclass(cls, fucina.ChatTemplateError)
        assert issubclass(cls, fucina.FucinaError)
        assert issubclass(cls, ValueError)


def test_docstring_example() -> None:
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder(recurse=False).find(BuiltinTemplate, "BuiltinTemplate", globs={}):
        test.globs["BuiltinTemplate"] = BuiltinTemplate
        runner.run(test)
    assert runner.tries > 0
    assert runner.failures == 0


# ---------------------------------------------------------------------------------------------
# Byte equality with the model authors' templates


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("think_off", [False, True])
def test_chatml_matches_qwen3(name: str, think_off: bool) -> None:
    # Qwen3 leaves thinking on unless enable_thinking=False, which writes the empty think block.
    kwargs: dict[str, Any] = {"enable_thinking": False} if think_off else {}
    messages = CONVERSATIONS[name]
    assert CHATML.render_messages(messages, think_off=think_off) == _real("Qwen-Qwen3-0.6B", messages, **kwargs)


def test_chatml_matches_qwen3_history_edges() -> None:
    # Replayed reasoning is stripped by both; a later system message is its own block in both.
    messages = [
        _msg("user", "Hi"),
        _msg("assistant", "<think>\nhm\n</think>\n\nHello!"),
        _msg("system", "Now be terse."),
        _msg("user", "Bye"),
    ]
    for think_off in (False, True):
        kwargs: dict[str, Any] = {"enable_thinking": False} if think_off else {}
        assert CHATML.render_messages(messages, think_off=think_off) == _real("Qwen-Qwen3-0.6B", messages, **kwargs)


@pytest.mark.parametrize("name", ["with_system", "multi_sys"])
def test_chatml_matches_qwen25(name: str) -> None:
    messages = CONVERSATIONS[name]
    assert CHATML.render_messages(messages) == _real("Qwen-Qwen2.5-7B-Instruct", messages)


def test_chatml_matches_qwen25_default_system_spelled_out() -> None:
    # Without a system message Qwen2.5 writes its own default one; the built-in format writes none.
    default = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    assert CHATML.render_messages([_msg("system", default), *MULTI_TURN]) == _real(
        "Qwen-Qwen2.5-7B-Instruct", MULTI_TURN
    )


# Llama 3.1 / 3.2 always write a system block that starts with this preamble (date pinned here; 3.2 would
# otherwise read the clock). The built-in llama3 format is the spec's plain header scaffold, without it: with
# the preamble handed over as (the start of) the system prompt, the bytes are the real templates' exactly.
LLAMA_PREAMBLE = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"


@pytest.mark.parametrize("template", ["meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct"])
@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_llama3_matches_meta_templates_with_preamble(template: str, name: str) -> None:
    messages = CONVERSATIONS[name]
    if messages[0]["role"] == "system":
        with_preamble = [_msg("system", LLAMA_PREAMBLE + messages[0]["content"]), *messages[1:]]
    else:
        with_preamble = [_msg("system", LLAMA_PREAMBLE), *messages]
    real = _real(template, messages, bos_token="<|begin_of_text|>", date_string="26 Jul 2024")
    assert LLAMA3.render_messages(with_preamble) == real
    # and the plain form is the real render minus the preamble
    plain = LLAMA3.render_messages(messages)
    if messages[0]["role"] == "system":
        assert plain == real.replace(LLAMA_PREAMBLE, "", 1)
    else:
        assert plain == real.replace(f"<|start_header_id|>system<|end_header_id|>\n\n{LLAMA_PREAMBLE}<|eot_id|>", "", 1)


@pytest.mark.parametrize("name", ["one_turn", "multi"])
def test_gemma_matches_gemma2(name: str) -> None:
    messages = CONVERSATIONS[name]
    assert GEMMA.render_messages(messages) == _real("google-gemma-2-2b-it", messages, bos_token="<bos>")


@pytest.mark.parametrize("name", ["with_system", "multi_sys"])
def test_gemma_system_fold_matches_gemma2_with_folded_user(name: str) -> None:
    # Gemma 2's template refuses a system role (Gemma 3's folds it into the first user turn followed by
    # "\n\n"): the built-in fold equals Gemma 2 rendering that first user turn already folded.
    messages = CONVERSATIONS[name]
    folded = [_msg("user", messages[0]["content"] + "\n\n" + messages[1]["content"]), *messages[2:]]
    assert GEMMA.render_messages(messages) == _real("google-gemma-2-2b-it", folded, bos_token="<bos>")
    with pytest.raises(fucina.ChatTemplateError, match="System role not supported"):
        _real("google-gemma-2-2b-it", messages, bos_token="<bos>")


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("think_off", [False, True])
def test_gemma4_matches_gemma4_template(name: str, think_off: bool) -> None:
    # Gemma 4 thinks only with enable_thinking=True (<|think|> in the system turn); otherwise it primes the
    # empty thought channel, which is the built-in think_off.
    messages = CONVERSATIONS[name]
    real = _real("google-gemma-4-31B-it", messages, bos_token="<bos>", enable_thinking=not think_off)
    assert GEMMA4.render_messages(messages, think_off=think_off) == real
    if think_off:  # the template's default (enable_thinking undefined) is thinking off
        assert real == _real("google-gemma-4-31B-it", messages, bos_token="<bos>")


def test_gemma4_matches_gemma4_template_reasoning_stripped() -> None:
    messages = [
        _msg("system", "Be terse."),
        _msg("user", "Hi"),
        _msg("assistant", "<|channel>thought\nhm\n<channel|>Hello."),
        _msg("user", "Bye"),
    ]
    for think_off in (False, True):
        real = _real("google-gemma-4-31B-it", messages, bos_token="<bos>", enable_thinking=not think_off)
        assert GEMMA4.render_messages(messages, think_off=think_off) == real


@pytest.mark.parametrize(
    ("t", "template", "kwargs"),
    [
        (CHATML, "Qwen-Qwen3-0.6B", {}),
        (LLAMA3, "meta-llama-Llama-3.1-8B-Instruct", {"bos_token": "<|begin_of_text|>"}),
        (GEMMA, "google-gemma-2-2b-it", {"bos_token": "<bos>"}),
        (GEMMA4, "google-gemma-4-31B-it", {"bos_token": "<bos>", "enable_thinking": True}),
    ],
    ids=["chatml", "llama3", "gemma", "gemma4"],
)
def test_documented_difference_whitespace_is_verbatim(
    t: BuiltinTemplate, template: str, kwargs: dict[str, Any]
) -> None:
    # Llama 3 / Gemma templates trim contents; the built-in formats (like ChatML's Qwen3) keep them verbatim.
    messages = [_msg("user", " Hi\n")]
    ours = t.render_messages(messages)
    assert " Hi\n" in ours
    real = _real(template, messages, date_string="26 Jul 2024", **kwargs)
    assert (" Hi\n" in real) is (t.format is ChatFormat.CHATML)
