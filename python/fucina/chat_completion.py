"""OpenAI chat completions over an :class:`fucina.LLM`: messages in, ``chat.completion`` dicts (or
``chat.completion.chunk`` streams) out, with tool calls parsed back into ``message.tool_calls``.

This module holds the logic behind :meth:`fucina.LLM.create_chat_completion`: checking the request,
preparing the messages for the model's chat template, running the generation and shaping the
result. The prompt is the model's chat template rendered with the request's tools; the reply is
parsed with the call syntax that template teaches (:mod:`fucina.tool_calls`).

A template with no tool syntax (the built-in formats, Gemma 1–3) gets the tools described in the
system prompt (or, for templates without a system role, the first user message) with Gemma's
``tool_code`` convention: calls as Python in a ```` ```tool_code ```` block, results returned in a
```` ```tool_output ```` block. Earlier calls and results in the history are written the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from . import _core
from ._core import ArgumentTypeError, InvalidArgumentError
from .chat import BuiltinTemplate, ChatTemplate, ChatTemplateError
from .grammar import Grammar
from .reasoning import ReasoningStream, ReasoningSyntax, detect_reasoning_syntax, opens_reasoning
from .sampling import SamplingParams
from .tool_calls import ParsedReply, ToolCallFormat, ToolCallStream, detect_tool_call_format
from .tool_grammar import tool_call_grammar

if TYPE_CHECKING:
    from .llm import LLM, LogitProcessor

__all__ = ["create_chat_completion"]

_TOOL_CHOICES = ("none", "auto", "required")
_RESPONSE_FORMATS = ("text", "json_object", "json_schema")
# OpenAI's bound on top_logprobs.
_MAX_TOP_LOGPROBS = 20
_PROBE = "fucina_probe"


def _type_name(value: object) -> str:
    return type(value).__name__


# ---------------------------------------------------------------------------------------------
# What a template can render (probed once per template, as llama.cpp's template capabilities are)


@dataclass(frozen=True)
class _Caps:
    tools: bool
    """The template writes the request's tools into the prompt."""
    object_arguments: bool
    """Earlier tool calls' ``arguments`` must be objects (most templates ``tojson`` them)."""
    system_role: bool


def _renders(
    template: ChatTemplate, messages: list[dict[str, Any]], tools: Any, needle: str, *, repr_ok: bool = True
) -> bool:
    try:
        out = template.render(messages, tools=tools, add_generation_prompt=True)
    except Exception:  # an untrusted template failing in any way means "cannot"
        return False
    # Arguments written as a Python dict ({'arg': ...}) mean the template wanted them as a JSON string.
    return needle in out and (repr_ok or "{'arg'" not in out)


@lru_cache(maxsize=32)
def _caps(template: ChatTemplate | BuiltinTemplate) -> _Caps:
    if isinstance(template, BuiltinTemplate):
        return _Caps(tools=False, object_arguments=False, system_role=True)
    tool = {
        "type": "function",
        "function": {
            "name": f"{_PROBE}_tool",
            "description": "probe",
            # Described: Command R+'s template lists only tools whose every parameter has a description.
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string", "description": "probe"}},
                "required": ["arg"],
            },
        },
    }

    def history(arguments: Any) -> list[dict[str, Any]]:
        call = {"id": "call00001", "type": "function", "function": {"name": f"{_PROBE}_tool", "arguments": arguments}}
        return [
            {"role": "user", "content": "User message"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
            {"role": "assistant", "content": "Done"},
            {"role": "user", "content": "User message"},
        ]

    user = [{"role": "user", "content": "User message"}]
    return _Caps(
        tools=_renders(template, user, [tool], f"{_PROBE}_tool"),
        object_arguments=_renders(
            template, history({"arg": f"{_PROBE}_value"}), [tool], f"{_PROBE}_value", repr_ok=False
        ),
        system_role=_renders(template, [{"role": "system", "content": f"{_PROBE}_system"}, *user], None, _PROBE),
    )


# ---------------------------------------------------------------------------------------------
# Checking the request


def _text_content(where: str, content: Any) -> str:
    """A message's content as one string: OpenAI text parts are joined, ``None`` is empty."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        texts: list[str] = []
        for j, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise ArgumentTypeError(f"{where}[{j}] must be a content part dict, not {_type_name(part)}")
            kind = part.get("type")
            if kind != "text":
                raise InvalidArgumentError(
                    f"{where}[{j}] has type {kind!r}: only text parts are supported (no image or audio input yet)"
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise ArgumentTypeError(f"{where}[{j}]['text'] must be a str, not {_type_name(text)}")
            texts.append(text)
        return "".join(texts)
    raise ArgumentTypeError(f"{where} must be a str, a list of text parts or None, not {_type_name(content)}")


def _arguments_object(where: str, arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except ValueError as e:
            raise InvalidArgumentError(f"{where} is not valid JSON: {e}") from None
        if isinstance(value, dict):
            return value
        raise InvalidArgumentError(f"{where} must encode a JSON object, not {_type_name(value)}")
    raise ArgumentTypeError(f"{where} must be a JSON string or a dict, not {_type_name(arguments)}")


def _tool_calls(i: int, calls: Any) -> list[dict[str, Any]]:
    where = f"messages[{i}]['tool_calls']"
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence):
        raise ArgumentTypeError(f"{where} must be a list of tool calls, not {_type_name(calls)}")
    out: list[dict[str, Any]] = []
    for j, call in enumerate(calls):
        if not isinstance(call, Mapping):
            raise ArgumentTypeError(f"{where}[{j}] must be a dict, not {_type_name(call)}")
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            raise InvalidArgumentError(f"{where}[{j}] has no 'function' dict")
        if not isinstance(fn.get("name"), str):
            raise ArgumentTypeError(f"{where}[{j}]['function']['name'] must be a str")
        args = _arguments_object(f"{where}[{j}]['function']['arguments']", fn.get("arguments", {}))
        out.append({**call, "type": call.get("type", "function"), "function": {**fn, "arguments": args}})
    return out


def _messages(messages: Any) -> list[dict[str, Any]]:
    """The messages as plain dicts: contents as strings, tool-call arguments as objects."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ArgumentTypeError(f"messages must be a list of message dicts, not {_type_name(messages)}")
    if not messages:
        raise InvalidArgumentError("messages is empty")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ArgumentTypeError(f"messages[{i}] must be a dict with a 'role', not {_type_name(message)}")
        role = message.get("role")
        if not isinstance(role, str):
            raise ArgumentTypeError(f"messages[{i}]['role'] must be a str, not {_type_name(role)}")
        msg = dict(message)
        msg["content"] = _text_content(f"messages[{i}]['content']", message.get("content"))
        if message.get("tool_calls") is not None:
            if role != "assistant":
                raise InvalidArgumentError(f"messages[{i}] has tool_calls but its role is {role!r}, not 'assistant'")
            msg["tool_calls"] = _tool_calls(i, message["tool_calls"])
        out.append(msg)
    return out


def _tools(tools: Any, functions: Any) -> list[dict[str, Any]] | None:
    if functions is not None:
        if tools is not None:
            raise InvalidArgumentError("pass tools or the legacy functions, not both")
        if isinstance(functions, (str, bytes, Mapping)) or not isinstance(functions, Sequence):
            raise ArgumentTypeError(f"functions must be a list of function schemas, not {_type_name(functions)}")
        tools = [{"type": "function", "function": f} for f in functions]
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise ArgumentTypeError(f"tools must be a list of tool dicts, not {_type_name(tools)}")
    out: list[dict[str, Any]] = []
    for j, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise ArgumentTypeError(f"tools[{j}] must be a dict, not {_type_name(tool)}")
        if tool.get("type", "function") != "function":
            raise InvalidArgumentError(f"tools[{j}]['type'] must be 'function', not {tool.get('type')!r}")
        fn = tool.get("function")
        if not isinstance(fn, Mapping):
            raise InvalidArgumentError(f"tools[{j}] has no 'function' dict")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidArgumentError(f"tools[{j}]['function']['name'] must be a non-empty str")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, Mapping):
            raise ArgumentTypeError(f"tools[{j}]['function']['parameters'] must be a JSON schema dict")
        out.append({**tool, "type": "function"})
    return out


def _tool_choice(choice: Any, function_call: Any, tools: list[dict[str, Any]] | None) -> str | dict[str, Any]:
    """``"none"`` / ``"auto"`` / ``"required"`` or the named-function dict (checked against ``tools``)."""
    if function_call is not None:
        if choice is not None:
            raise InvalidArgumentError("pass tool_choice or the legacy function_call, not both")
        named = isinstance(function_call, Mapping) and "name" in function_call
        choice = {"type": "function", "function": {"name": function_call["name"]}} if named else function_call
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            raise InvalidArgumentError(
                f"tool_choice must be one of {_TOOL_CHOICES} or a named function, not {choice!r}"
            )
        if choice == "required" and not tools:
            raise InvalidArgumentError("tool_choice='required' needs tools")
        return choice
    fn = choice.get("function") if isinstance(choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise InvalidArgumentError(
            "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}, "
            f"not {choice!r}"
        )
    if not any(t["function"]["name"] == name for t in tools or ()):
        raise InvalidArgumentError(f"tool_choice names {name!r}, which is not one of the tools")
    return {"type": "function", "function": {"name": name}}


def _response_format(fmt: Any) -> Grammar | None:
    """The grammar ``response_format`` asks for (``None`` for plain text)."""
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping):
        raise ArgumentTypeError(f"response_format must be a dict, not {_type_name(fmt)}")
    kind = fmt.get("type")
    if kind not in _RESPONSE_FORMATS:
        raise InvalidArgumentError(f"response_format['type'] must be one of {_RESPONSE_FORMATS}, not {kind!r}")
    if kind == "json_object" and fmt.get("schema") is not None and not isinstance(fmt["schema"], Mapping):
        raise ArgumentTypeError("response_format['schema'] must be a JSON schema dict")
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, Mapping):
            raise InvalidArgumentError("response_format of type 'json_schema' needs a 'json_schema' dict")
        if not isinstance(spec.get("name"), str):
            raise InvalidArgumentError("response_format['json_schema']['name'] must be a str")
        if spec.get("schema") is not None and not isinstance(spec["schema"], Mapping):
            raise ArgumentTypeError("response_format['json_schema']['schema'] must be a JSON schema dict")
        schema = spec.get("schema")
        strict = spec.get("strict") is True
        return Grammar.json_schema(schema, strict=strict) if schema is not None else Grammar.json_object()
    if kind == "json_object":
        schema = fmt.get("schema")
        return Grammar.json_schema(schema) if schema is not None else Grammar.json_object()
    return None


def _top_logprobs(logprobs: Any, top_logprobs: Any) -> int | None:
    """The engine's logprobs count: ``None`` (off) unless ``logprobs``; then ``top_logprobs`` or 0."""
    if logprobs is not None and not isinstance(logprobs, bool):
        raise ArgumentTypeError(f"logprobs must be a bool or None, not {_type_name(logprobs)}")
    if top_logprobs is not None:
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int):
            raise ArgumentTypeError(f"top_logprobs must be an int or None, not {_type_name(top_logprobs)}")
        if not 0 <= top_logprobs <= _MAX_TOP_LOGPROBS:
            raise InvalidArgumentError(f"top_logprobs must be in [0, {_MAX_TOP_LOGPROBS}], not {top_logprobs}")
    if not logprobs:
        return None
    return top_logprobs or 0


# ---------------------------------------------------------------------------------------------
# Templates without tool syntax: tools described in the prompt, calls and results as tool_code


def _py_literal(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_py_literal(k)}: {_py_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_py_literal(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a Python string literal too
    return repr(value)


def _tool_code(calls: list[dict[str, Any]]) -> str:
    lines = []
    for call in calls:
        fn = call["function"]
        args = ", ".join(f"{k}={_py_literal(v)}" for k, v in fn["arguments"].items())
        lines.append(f"{fn['name']}({args})")
    return "```tool_code\n" + "\n".join(lines) + "\n```"


def _tools_prompt(tools: list[dict[str, Any]]) -> str:
    schemas = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    return (
        "You have access to the following functions:\n"
        f"{schemas}\n\n"
        "To call functions, reply with only the calls, written as Python in a tool_code block:\n"
        '```tool_code\nfunction_name(argument="value")\n```\n'
        "The results come back in a tool_output block. If no function is needed, answer normally."
    )


def _inline_tools(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, system_role: bool
) -> list[dict[str, Any]]:
    """The history rewritten for a template with no tool syntax: tool calls as ``tool_code`` blocks in
    the assistant's content, tool results as ``tool_output`` blocks in user turns (consecutive user
    turns merged), and the tools' description at the start."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        role, content = msg["role"], msg["content"]
        if role == "assistant" and msg.get("tool_calls"):
            code = _tool_code(msg["tool_calls"])
            msg = {"role": "assistant", "content": f"{content}\n{code}" if content else code}
        elif role == "tool":
            msg = {"role": "user", "content": f"```tool_output\n{content}\n```"}
        if msg["role"] == "user" and out and out[-1]["role"] == "user":
            out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + msg["content"]}
            continue
        out.append({k: v for k, v in msg.items() if k not in ("tool_calls", "tool_call_id")})
    if tools:
        prompt = _tools_prompt(tools)
        if out[0]["role"] == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + prompt}
        elif system_role:
            out.insert(0, {"role": "system", "content": prompt})
        else:
            first_user = next((i for i, m in enumerate(out) if m["role"] == "user"), None)
            if first_user is None:
                out.insert(0, {"role": "user", "content": prompt})
            else:
                out[first_user] = {**out[first_user], "content": prompt + "\n\n" + out[first_user]["content"]}
    return out


@dataclass(frozen=True)
class _Prefill:
    """A trailing assistant message the reply continues (llama.cpp's assistant prefill, Anthropic's
    prefill): its content and reasoning, the template's reasoning markers and whether its generation
    prompt opened a reasoning block (what the text written after the generation prompt depends on).
    ``text`` is that text once :meth:`_Prompt.constrained` has written it ("" before)."""

    content: str
    reasoning: str
    syntax: ReasoningSyntax | None
    thinking: bool
    text: str = ""

    def written(self, grammar: Grammar | None) -> str:
        """The text after the generation prompt: under a grammar (which writes the whole reply) the
        content alone; else the reasoning (in its block, which stays open when the message has only
        reasoning, as llama.cpp continues it) and the content, in the family's framing."""
        syntax = self.syntax
        if grammar is not None or syntax is None:
            return self.content
        if syntax.has_block and self.reasoning and not self.content:
            return ("" if self.thinking else syntax.open) + self.reasoning
        text = ""
        block = syntax.has_block and (self.thinking or bool(self.reasoning))
        if block:
            text = ("" if self.thinking else syntax.open) + self.reasoning + syntax.close + syntax.answer_header
        return text + syntax.answer_prefix + self.content


@dataclass(frozen=True)
class _Prompt:
    ids: list[int]
    tools: list[dict[str, Any]] | None
    """The tools the model was offered (``None``: no call parsing)."""
    format: ToolCallFormat
    reasoning: ReasoningSyntax | None = None
    """The template's reasoning markers (``None``: the reply is not split)."""
    thinking: bool = False
    """The generation prompt opened the reasoning block: the reply starts inside it."""
    prefill: _Prefill | None = None
    """The assistant message the reply continues (``None``: the reply starts a new one)."""
    closed: bool = False
    """The generation prompt ends with the reasoning block closed (thinking off: ``<think></think>``)."""

    @property
    def special(self) -> bool:
        """Whether replies are decoded with special tokens rendered: call and reasoning markers are
        often control tokens (``[TOOL_CALLS]``, ``<|channel>``)."""
        return self.tools is not None or self.reasoning is not None

    def without_reasoning(self) -> _Prompt:
        """The prompt for a reply whose reasoning stays in the content (``reasoning_format="none"``): the
        text is left as it is, except a family's answer framing where it has no reasoning to keep
        (functionary v3.2's ``all\\n`` recipient line, which llama.cpp drops whatever the format)."""
        framing = self.reasoning if self.reasoning is not None and not self.reasoning.has_block else None
        return dataclasses.replace(self, reasoning=framing, thinking=False)

    def constrained(self, llm: LLM, grammar: Grammar | None) -> tuple[_Prompt, Grammar | None]:
        """The prompt and grammar of a reply under ``grammar`` (``None``: unconstrained). A grammar (a
        JSON answer, forced calls) cannot close a reasoning block the generation prompt opened, so such
        a reply is read as the answer. An assistant prefill is written after the generation prompt
        here, and a grammar continues it (:meth:`Grammar.after`)."""
        prompt = self if grammar is None or not self.thinking else dataclasses.replace(self, thinking=False)
        pre = self.prefill
        if pre is None or pre.text:
            return prompt, grammar
        text = pre.written(grammar)
        if grammar is not None:
            grammar = grammar.after(text)
        extra = llm.tokenize(text, add_special=False, parse_special=True) if text else []
        return dataclasses.replace(prompt, ids=prompt.ids + extra, prefill=dataclasses.replace(pre, text=text)), grammar


def _template_roles(messages: list[dict[str, Any]], template: ChatTemplate, system_role: bool) -> list[dict[str, Any]]:
    """Roles as llama.cpp adapts them to a Jinja template: ``developer`` is ``system`` (but for gpt-oss's
    harmony templates, which have a developer message), and for a template without a system role (Gemma
    2, early Mistral: they raise on one) a leading system message is merged into the message after it."""
    if "<|channel|>" not in template.source:
        messages = [{**m, "role": "system"} if m["role"] == "developer" else m for m in messages]
    if system_role or not messages or messages[0]["role"] != "system":
        return messages
    if len(messages) == 1:
        return messages[1:]
    first, second = messages[0], messages[1]
    return [{**second, "content": f"{first['content']}\n{second['content']}"}, *messages[2:]]


def _split_prefill(
    messages: list[dict[str, Any]], continue_final_message: bool | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The messages to render and the trailing assistant message the reply continues (``None``: the
    reply is a new assistant turn). As llama.cpp's server does it by default, a last assistant message
    is continued (``continue_final_message=None``); ``False`` renders it as the template does (most
    open a new turn after it), ``True`` requires one."""
    if continue_final_message is not None and not isinstance(continue_final_message, bool):
        raise ArgumentTypeError(
            f"continue_final_message must be a bool or None, not {_type_name(continue_final_message)}"
        )
    last = messages[-1] if messages else None
    if continue_final_message is False or last is None or last["role"] != "assistant":
        if continue_final_message:
            raise InvalidArgumentError("continue_final_message needs an assistant message last in messages")
        return messages, None
    if last.get("tool_calls"):
        if continue_final_message:
            raise InvalidArgumentError("cannot continue an assistant message that contains tool calls")
        return messages, None
    if len(messages) >= 2 and messages[-2]["role"] == "assistant":
        raise InvalidArgumentError(
            f"messages[{len(messages) - 2}] and messages[{len(messages) - 1}] are both assistant messages: only "
            "the last message can be an assistant prefill for the reply to continue"
        )
    if not any(m["role"] != "system" for m in messages[:-1]):
        raise InvalidArgumentError("an assistant prefill needs a user message before it")
    return messages[:-1], last


def _render(
    llm: LLM,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    choice: str | dict[str, Any],
    template_kwargs: Mapping[str, Any],
    continue_final_message: bool | None = None,
) -> _Prompt:
    """The chat prompt for ``messages``; a trailing assistant message becomes the prompt's
    :class:`_Prefill` (see :func:`_split_prefill`), written by :meth:`_Prompt.constrained`."""
    messages, last = _split_prefill(messages, continue_final_message)
    template = llm.chat_template
    caps = _caps(template)
    offered = None if choice == "none" or not tools else tools
    if isinstance(choice, dict) and offered is not None:
        offered = [t for t in offered if t["function"]["name"] == choice["function"]["name"]]
    has_tool_turns = any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
    if caps.tools and isinstance(template, ChatTemplate):
        fmt = detect_tool_call_format(template.source)
        msgs = messages if caps.object_arguments else [_string_arguments(m) for m in messages]
    else:
        fmt = ToolCallFormat.GENERIC
        msgs = _inline_tools(messages, offered, caps.system_role) if offered or has_tool_turns else messages
    if isinstance(template, ChatTemplate):
        msgs = _template_roles(msgs, template, caps.system_role)
    try:
        text = template.render(
            msgs, tools=offered if caps.tools else None, add_generation_prompt=True, **template_kwargs
        )
    except ChatTemplateError:
        raise
    except (TypeError, ValueError) as e:
        # The built-in formats check messages themselves (a role they have no block for, ...).
        raise InvalidArgumentError(str(e)) from e
    ids = llm.tokenize(text, add_special=False, parse_special=True)
    if not ids:
        raise InvalidArgumentError("the rendered chat prompt is empty")
    syntax = detect_reasoning_syntax(template.source) if isinstance(template, ChatTemplate) else None
    thinking = syntax is not None and opens_reasoning(text, syntax)
    closed = syntax is not None and syntax.has_block and text.rstrip().endswith(syntax.close.strip())
    prefill = None
    if last is not None:
        reasoning = last.get("reasoning_content")
        if reasoning is not None and not isinstance(reasoning, str):
            where = f"messages[{len(messages)}]['reasoning_content']"
            raise ArgumentTypeError(f"{where} must be a str, not {_type_name(reasoning)}")
        prefill = _Prefill(last["content"], reasoning or "", syntax, thinking)
    return _Prompt(ids, offered, fmt, syntax, thinking, prefill, closed)


def _forced_calls(llm: LLM, prompt: _Prompt, choice: str | dict[str, Any], parallel: bool | None) -> Grammar | None:
    """The grammar that enforces ``tool_choice="required"`` or a named function (``None`` otherwise):
    the reply is one or more calls (exactly one for a named function or ``parallel_tool_calls=False``)
    of the offered tools in the template's call syntax, arguments valid against their schemas."""
    if prompt.tools is None or choice in ("auto", "none"):
        return None
    template = llm.chat_template
    source = template.source if isinstance(template, ChatTemplate) else ""

    def special(marker: str) -> str | None:
        ids = llm.tokenize(marker, add_special=False, parse_special=True)
        # A control token renders to nothing as text: the grammar names it by id.
        if len(ids) == 1 and llm.tokenizer.token_to_piece(ids[0], special=False) == b"":
            return f"<[{ids[0]}]>"
        return None

    one = isinstance(choice, dict) or parallel is False
    return tool_call_grammar(
        prompt.format, prompt.tools, special, parallel=not one, template_source=source, reasoning=not prompt.closed
    )


_REASONING_FORMATS = ("auto", "deepseek", "none")
_REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def _template_kwargs(
    base: Mapping[str, Any] | None, *, reasoning_effort: Any = None, thinking: bool | None = None
) -> dict[str, Any]:
    """The chat template's extra variables, with OpenAI's ``reasoning_effort`` mapped as llama.cpp maps
    it (``"none"`` is ``enable_thinking=False``; any other effort goes to the template as
    ``reasoning_effort``, which gpt-oss's template reads) and Anthropic's ``thinking`` switch as
    ``enable_thinking``. Variables the request set itself win."""
    if base is not None and not isinstance(base, Mapping):
        raise ArgumentTypeError(f"chat_template_kwargs must be a dict, not {_type_name(base)}")
    out = dict(base or {})
    if reasoning_effort is not None:
        if reasoning_effort not in _REASONING_EFFORTS:
            raise InvalidArgumentError(
                f"reasoning_effort must be one of {', '.join(_REASONING_EFFORTS)}, not {reasoning_effort!r}"
            )
        if reasoning_effort == "none":
            out.setdefault("enable_thinking", False)
        else:
            out.setdefault("reasoning_effort", reasoning_effort)
    if thinking is not None:
        out.setdefault("enable_thinking", thinking)
    return out


def _reasoning_format(value: Any) -> bool:
    """Whether replies get their reasoning split off (llama.cpp's ``reasoning_format``: ``"auto"`` and
    ``"deepseek"`` split it into ``reasoning_content``, ``"none"`` leaves it in the content)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"reasoning_format must be a str, not {_type_name(value)}")
    if value not in _REASONING_FORMATS:
        raise InvalidArgumentError(f"reasoning_format must be one of {', '.join(_REASONING_FORMATS)}, not {value!r}")
    return value != "none"


_ReasoningBudget = tuple[list[int], list[int], list[int], int, bool]


def _reasoning_budget(
    llm: LLM, prompt: _Prompt, budget: Any, grammar: Grammar | None, message: str = ""
) -> _ReasoningBudget | None:
    """The engine's reasoning budget for ``prompt`` (llama.cpp's ``--reasoning-budget``): at most
    ``budget`` tokens in the reasoning block, then ``message`` and the block's closing marker are
    forced; ``None`` for no cap (``budget`` ``None`` or -1), for a template without a reasoning block,
    under a grammar (which already fixes the whole reply) and after an assistant prefill."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise ArgumentTypeError(f"reasoning_budget must be an int, not {_type_name(budget)}")
    if budget < -1:
        raise InvalidArgumentError(f"reasoning_budget must be -1 (no cap) or at least 0, not {budget}")
    syntax = prompt.reasoning
    if budget == -1 or syntax is None or not syntax.has_block or grammar is not None or prompt.prefill is not None:
        return None
    if not isinstance(message, str):
        raise ArgumentTypeError(f"reasoning_budget_message must be a str, not {_type_name(message)}")

    def ids(text: str) -> list[int]:
        return llm.tokenize(text, add_special=False, parse_special=True)

    # What follows the block is forced too where the family starts a new message there (gpt-oss's final
    # channel, Muse Glimmer's to=user message), so the forced close never stops at a marker that also ends
    # a message. A section that follows (Kimi K3's response, Cohere2 MoE's text or action) is the model's.
    header = syntax.answer_header + syntax.answer_prefix if syntax.answer_header else ""
    forced = ids(message + syntax.close + header)
    if set(forced) & set(llm.chat_stop_ids):
        return None
    return (ids(syntax.open), ids(syntax.close), forced, budget, prompt.thinking)


def _string_arguments(msg: dict[str, Any]) -> dict[str, Any]:
    if not msg.get("tool_calls"):
        return msg
    calls = [
        {**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
        for c in msg["tool_calls"]
    ]
    return {**msg, "tool_calls": calls}


# ---------------------------------------------------------------------------------------------
# The reply


class _LogprobRows:
    """OpenAI chat ``logprobs.content`` entries, built token by token."""

    def __init__(self, llm: LLM, special: bool) -> None:
        self._tok = llm.tokenizer
        self._special = special
        self.rows: list[dict[str, Any]] = []

    def _entry(self, token: int, logprob: float) -> dict[str, Any]:
        raw = self._tok.token_to_piece(token, special=self._special)
        return {"token": raw.decode("utf-8", errors="ignore"), "logprob": logprob, "bytes": list(raw)}

    def add(self, token: int, lp: tuple[float, list[tuple[int, float]]]) -> None:
        self.rows.append({**self._entry(token, lp[0]), "top_logprobs": [self._entry(t, v) for t, v in lp[1]]})

    def take(self) -> dict[str, Any] | None:
        if not self.rows:
            return None
        rows, self.rows = self.rows, []
        return {"content": rows, "refusal": None}


def _finish(parsed: ParsedReply | None, finish: str | None) -> str | None:
    return "tool_calls" if parsed is not None and parsed.tool_calls else finish


@dataclass(frozen=True)
class _Reply:
    """A whole reply: its reasoning (``None``: no reasoning block), its answer text and, when tools
    were offered, the answer split into content and calls."""

    reasoning: str | None
    text: str
    parsed: ParsedReply | None

    def message(self) -> dict[str, Any]:
        """OpenAI's ``message``, with llama.cpp's ``reasoning_content`` when the reply reasoned."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.parsed is not None and self.parsed.tool_calls:
            msg = {"role": "assistant", "content": self.parsed.content, "tool_calls": self.parsed.tool_calls}
        if self.reasoning is not None:
            msg["reasoning_content"] = self.reasoning
        return msg

    def finish_reason(self, finish: str | None) -> str | None:
        return _finish(self.parsed, finish)


class _ReplyStream:
    """A reply as it streams: the reasoning block split off first (when the template has one), then,
    when tools were offered, calls held back from the answer. The pieces :meth:`feed` and
    :meth:`finish` return, joined, are the whole :class:`_Reply`'s reasoning and content."""

    def __init__(self, prompt: _Prompt) -> None:
        syntax = prompt.reasoning
        self._think = None if syntax is None else ReasoningStream(syntax, open_at_start=prompt.thinking)
        self._calls = ToolCallStream(prompt.format, tools=prompt.tools) if prompt.tools is not None else None
        self._reasoning = ""
        self._answer = ""
        # An assistant prefill is read as the reply's start (a call it opens is parsed whole), and what
        # it contributes (``_prefix``: reasoning, answer) is left out of what the reply returns;
        # ``_skip`` is the part of it the returned pieces have not passed yet.
        self._prefix = self._skip = ("", "")
        self._held = ("", "")
        pre = prompt.prefill
        if pre is not None and pre.text:
            alone = _ReplyStream(dataclasses.replace(prompt, prefill=None))
            alone.feed(pre.text)
            reply = alone.finish()[2]
            self._prefix = self._skip = (reply.reasoning or "", reply.text)
            self._held = self._drop(*self._split(self._feed(pre.text)))

    def _drop(self, think: str, answer: str) -> tuple[str, str]:
        """``think`` and ``answer`` without the prefill's part still to skip (skipping ends at the first
        character that differs: the prefill went elsewhere, into a call)."""
        out = []
        skips = []
        for text, skip in zip((think, answer), self._skip, strict=True):
            n = len(os.path.commonprefix([text, skip]))
            if n < len(skip) and n < len(text):
                skip, n = "", 0
            out.append(text[n:])
            skips.append(skip[n:])
        self._skip = (skips[0], skips[1])
        return out[0], out[1]

    def _feed(self, piece: str) -> tuple[str, str]:
        return self._think.feed(piece) if self._think is not None else ("", piece)

    def _split(self, pair: tuple[str, str]) -> tuple[str, str]:
        think, answer = pair
        self._reasoning += think
        self._answer += answer
        if self._calls is not None:
            answer = self._calls.feed(answer) if answer else ""
        return think, answer

    def _with_held(self, think: str, answer: str) -> tuple[str, str]:
        held, self._held = self._held, ("", "")
        return held[0] + think, held[1] + answer

    def feed(self, piece: str) -> tuple[str, str]:
        """Add ``piece``; return the reasoning and content text that are final now."""
        return self._with_held(*self._drop(*self._split(self._feed(piece))))

    def finish(self) -> tuple[str, str, _Reply]:
        """The reasoning and content still held back, and the whole reply."""
        think, answer = self._split(self._think.finish() if self._think is not None else ("", ""))
        parsed = None
        if self._calls is not None:
            rest, parsed = self._calls.finish()
            answer += rest
        think, answer = self._with_held(*self._drop(think, answer))
        pre_think, pre_answer = self._prefix
        reasoning = None
        if self._think is not None and self._think.had_block:
            reasoning = _after_prefix(self._reasoning, pre_think)
            reasoning = None if pre_think and not reasoning else reasoning
        if parsed is not None and pre_answer:
            parsed = ParsedReply(_after_prefix(parsed.text, pre_answer), parsed.tool_calls)
        return think, answer, _Reply(reasoning, _after_prefix(self._answer, pre_answer), parsed)


def _after_prefix(text: str, prefix: str) -> str:
    """``text`` without the prefill's ``prefix`` (all of it when ``text`` is a start of the prefix: a
    call parser trims the text around calls, so the content before a call may be the prefill trimmed)."""
    if text.startswith(prefix):
        return text[len(prefix) :]
    return "" if text and prefix.startswith(text) else text


def _reply(prompt: _Prompt, text: str) -> _Reply:
    """A whole reply split as :class:`_ReplyStream` splits it."""
    stream = _ReplyStream(prompt)
    stream.feed(text)
    return stream.finish()[2]


def _completion(
    llm: LLM, gen: _core.Generation, prompt: _Prompt, meta: dict[str, Any], rows: _LogprobRows | None
) -> dict[str, Any]:
    text, finish = "", None
    try:
        for token, emitted, piece, fin, lp in gen:
            text += piece
            finish = fin or finish
            if rows is not None and emitted and lp is not None:
                rows.add(token, lp)
    finally:
        gen.close()
    reply = _reply(prompt, text)
    n_gen = _completion_tokens(llm, gen)
    return {
        **meta,
        "choices": [
            {
                "index": 0,
                "message": reply.message(),
                "logprobs": (rows.take() or {"content": [], "refusal": None}) if rows is not None else None,
                "finish_reason": reply.finish_reason(finish),
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt.ids),
            "completion_tokens": n_gen,
            "total_tokens": len(prompt.ids) + n_gen,
            "prompt_tokens_details": {"cached_tokens": gen.reused_tokens},
        },
    }


def _completion_tokens(llm: LLM, gen: _core.Generation) -> int:
    stops = set(llm.chat_stop_ids)
    return sum(1 for t in gen.tokens if not llm.tokenizer.is_eog(t) and t not in stops)


def _deltas(think: str, answer: str) -> dict[str, Any]:
    """A chunk's ``delta`` for new reasoning and content text (empty when there is neither)."""
    delta: dict[str, Any] = {}
    if think:
        delta["reasoning_content"] = think
    if answer:
        delta["content"] = answer
    return delta


def _chunks(
    gen: _core.Generation, prompt: _Prompt, meta: dict[str, Any], rows: _LogprobRows | None
) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        lp = rows.take() if rows is not None else None
        return {**meta, "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}]}

    splitter = _ReplyStream(prompt)
    finish: str | None = None
    try:
        yield chunk({"role": "assistant"})
        for token, emitted, piece, fin, lp in gen:
            finish = fin or finish
            if rows is not None and emitted and lp is not None:
                rows.add(token, lp)
            delta = _deltas(*splitter.feed(piece))
            if delta:
                yield chunk(delta)
        think, rest, reply = splitter.finish()
        if think or rest:
            yield chunk(_deltas(think, rest))
        if reply.parsed is not None and reply.parsed.tool_calls:
            deltas = [{"index": i, **call} for i, call in enumerate(reply.parsed.tool_calls)]
            yield chunk({"tool_calls": deltas})
        yield chunk({}, reply.finish_reason(finish))
    finally:
        gen.close()


def create_chat_completion(
    llm: LLM,
    messages: Sequence[Mapping[str, Any]],
    *,
    functions: Sequence[Mapping[str, Any]] | None = None,
    function_call: str | Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: str | Mapping[str, Any] | None = None,
    temperature: float = 0.2,
    top_p: float = 0.95,
    top_k: int = 40,
    min_p: float = 0.05,
    typical_p: float = 1.0,
    stream: bool = False,
    stop: str | Sequence[str] | None = None,
    seed: int | None = None,
    response_format: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    repeat_penalty: float = 1.0,
    model: str | None = None,
    logits_processor: LogitProcessor | Sequence[LogitProcessor] | None = None,
    logit_bias: Mapping[int, float] | None = None,
    logprobs: bool | None = None,
    top_logprobs: int | None = None,
    repeat_last_n: int = 64,
    mirostat_mode: int = 0,
    mirostat_tau: float = 5.0,
    mirostat_eta: float = 0.1,
    params: SamplingParams | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    cache_prompt: bool = True,
    speculation: bool = True,
    grammar: Grammar | None = None,
    parallel_tool_calls: bool | None = None,
    reasoning_format: str = "auto",
    reasoning_effort: str | None = None,
    reasoning_budget: int | None = None,
    reasoning_budget_message: str = "",
    continue_final_message: bool | None = None,
    reference: str | Sequence[int] | None = None,
) -> Any:
    """See :meth:`fucina.LLM.create_chat_completion`."""
    msgs = _messages(messages)
    tools_ = _tools(tools, functions)
    choice = _tool_choice(tool_choice, function_call, tools_)
    from_format = _response_format(response_format)
    if grammar is not None and from_format is not None:
        raise InvalidArgumentError("give either grammar or a JSON response_format, not both")
    grammar = grammar if grammar is not None else from_format
    n_logprobs = _top_logprobs(logprobs, top_logprobs)
    if not isinstance(stream, bool):
        raise ArgumentTypeError(f"stream must be a bool, not {_type_name(stream)}")
    if params is None:
        params = SamplingParams(
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            typical_p=typical_p,
            repeat_penalty=repeat_penalty,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            repeat_last_n=repeat_last_n,
            seed=seed,
            logit_bias=logit_bias,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
        )
    elif not isinstance(params, SamplingParams):
        raise ArgumentTypeError(f"params must be a fucina.SamplingParams, not {_type_name(params)}")
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise ArgumentTypeError(f"parallel_tool_calls must be a bool, not {_type_name(parallel_tool_calls)}")
    split_reasoning = _reasoning_format(reasoning_format)
    kwargs = _template_kwargs(chat_template_kwargs, reasoning_effort=reasoning_effort)
    prompt = _render(llm, msgs, tools_, choice, kwargs, continue_final_message)
    rendered = prompt
    if not split_reasoning:
        prompt = prompt.without_reasoning()
    if grammar is None or from_format is not None:
        # A forced call is the whole reply: response_format shapes answers, and there is none to shape.
        grammar = _forced_calls(llm, prompt, choice, parallel_tool_calls) or grammar
    prompt, grammar = prompt.constrained(llm, grammar)
    budget = _reasoning_budget(llm, rendered, reasoning_budget, grammar, reasoning_budget_message)
    special = prompt.special
    _, gen = llm._start(
        prompt.ids,
        max_tokens,
        params,
        stop,
        logits_processor,
        None,
        logprobs=n_logprobs,
        stop_ids=llm.chat_stop_ids,
        special=special,
        cache_prompt=cache_prompt,
        speculation=speculation,
        reference=reference,
        grammar=grammar,
        reasoning_budget=budget,
    )
    rows = _LogprobRows(llm, special) if n_logprobs is not None else None
    meta = {
        "id": f"chatcmpl-{uuid.uuid4()}",
        "object": "chat.completion.chunk" if stream else "chat.completion",
        "created": int(time.time()),
        "model": model if model is not None else str(llm.path),
    }
    if stream:
        return _chunks(gen, prompt, meta, rows)
    return _completion(llm, gen, prompt, meta, rows)
