"""Pydantic models of the OpenAI requests the server takes (they generate its OpenAPI schema).

Field names, types and ranges are OpenAI's; llama.cpp's sampling extensions (``top_k``, ``min_p``,
``typical_p``, ``repeat_penalty``, ``repeat_last_n``, ``ignore_eos``) and ``chat_template_kwargs`` are
accepted too,
as llama.cpp's server accepts them. Unknown fields are ignored (clients send vendor extras). Every
bound is explicit, so huge numbers, NaN and infinities are 400s naming the field, never a crash.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import ApiError

__all__ = [
    "MAX_INT",
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "DetokenizeRequest",
    "EmbeddingRequest",
    "ResponseFormat",
    "ResponsesRequest",
    "StreamOptions",
    "TokenizeRequest",
    "Tool",
]

MAX_INT = 2**31 - 1
"""Upper bound of count-like fields (max_tokens, ...): any larger number is a 400."""
_MAX_N = 16
_MAX_STOPS = 16
_MAX_TOOLS = 128
_MAX_PREDICTION = 1 << 22
"""Characters of a predicted output (a whole source file fits; the request size limit caps it anyway)."""
_SEED_MIN = -(2**63)
_SEED_MAX = 2**64 - 1


def _admits_none(annotation: Any) -> bool:
    if annotation is Any or annotation is None or annotation is type(None):
        return True
    if typing.get_origin(annotation) is Annotated:
        return _admits_none(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_admits_none(a) for a in typing.get_args(annotation))
    return False


@functools.cache
def _defaulted_by_null(model: type[BaseModel]) -> frozenset[str]:
    """The keys (names and aliases) of ``model``'s optional fields whose type has no ``null``."""
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        if not info.is_required() and not _admits_none(info.annotation):
            keys.add(name)
            if info.alias:
                keys.add(info.alias)
    return frozenset(keys)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_at(value: Any) -> tuple[str, str] | None:
    """The first string in a decoded JSON value holding an unpaired UTF-16 surrogate (a JSON ``\\ud800``
    escape with no partner: valid JSON, not Unicode), as its field path and the surrogate. Iterative:
    any nesting depth the JSON parser took."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, path = stack.pop()
        if isinstance(v, str):
            m = None if v.isascii() else _SURROGATE.search(v)
            if m:
                return path, m.group()
        elif isinstance(v, dict):
            items = [(x, f"{path}.{k}" if path else str(k)) for k, x in v.items()]
            items += [(k, f"{path}.{k!r}" if path else repr(k)) for k in v if isinstance(k, str) and not k.isascii()]
            stack.extend(reversed(items))
        elif isinstance(v, list):
            stack.extend(reversed([(x, f"{path}[{i}]") for i, x in enumerate(v)]))
    return None


class Body(BaseModel):
    """Base of every request model: unknown fields ignored, no NaN or infinity anywhere.

    ``null`` for an optional field means its default, as OpenAI's API reads it: clients built on
    other SDKs (LangChain, LlamaIndex, the Vercel AI SDK, hand-rolled JSON) send ``"n": null`` or
    ``"stream": null`` for what they leave unset. A required field stays required.
    """

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    _whole_request: ClassVar[bool] = False
    """A route's whole body: its text is checked for unpaired surrogates (a 400 naming the field, where
    encoding it for the tokenizer would fail later)."""

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if cls._whole_request:
            found = _surrogate_at(data)
            if found:
                where, char = found
                raise ApiError(
                    400, f"{where}: unpaired UTF-16 surrogate \\u{ord(char):04x} (not valid Unicode)", param=where
                )
        keys = _defaulted_by_null(cls)
        if not any(data.get(k, 0) is None for k in keys):
            return data
        return {k: v for k, v in data.items() if v is not None or k not in keys}


class ToolCallFunction(Body):
    name: str = Field(max_length=256)
    arguments: str | dict[str, Any] = "{}"


class ToolCall(Body):
    id: str | None = Field(None, max_length=256)
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(Body):
    """One message; ``content`` a string or a list of ``{"type": "text", "text": ...}`` parts. An
    assistant's ``reasoning_content`` (llama.cpp's field, which clients send back) reaches the template,
    which keeps the reasoning of the turn in progress (Qwen3's, ...)."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(None, max_length=256)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(None, max_length=256)
    reasoning_content: str | None = None
    function_call: ToolCallFunction | None = None
    """An assistant's call in the legacy ``functions`` API (read as its one ``tool_calls`` entry)."""


class FunctionDefinition(Body):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Body):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(Body):
    name: str = Field(min_length=1, max_length=256)


class NamedToolChoice(Body):
    type: Literal["function"] = "function"
    function: NamedFunction


class AllowedTools(Body):
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]] = Field(min_length=1, max_length=_MAX_TOOLS)


class AllowedToolsChoice(Body):
    """``{"type": "allowed_tools", ...}``: only the listed tools may be called, ``mode`` as tool_choice."""

    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class JsonSchemaSpec(Body):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)


class ResponseFormat(Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)


class StreamOptions(Body):
    include_usage: bool = False


class PredictionPart(Body):
    type: Literal["text"] = "text"
    text: str = Field(max_length=_MAX_PREDICTION)


class Prediction(Body):
    """OpenAI's Predicted Outputs: text the reply is expected to repeat in large part (a file being
    edited, a document being revised). It becomes a reference the speculative drafts quote: replies
    are the same with or without it, only sooner where they do repeat it."""

    type: Literal["content"]
    content: str | Annotated[list[PredictionPart], Field(max_length=1024)] = Field(max_length=_MAX_PREDICTION)

    def text(self) -> str:
        """The predicted text (parts joined as OpenAI joins them: back to back)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class _Sampling(Body):
    """Sampling fields shared by chat and text completions."""

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    n: int = Field(1, ge=1, le=_MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | Annotated[list[str], Field(max_length=_MAX_STOPS)] | None = None
    seed: int | None = Field(None, ge=_SEED_MIN, le=_SEED_MAX)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = Field(None, max_length=1024)
    user: str | None = None
    top_k: int | None = Field(None, ge=0, le=MAX_INT)
    min_p: float | None = Field(None, ge=0, le=1)
    typical_p: float | None = Field(None, gt=0, le=1)
    repeat_penalty: float | None = Field(None, gt=0, le=100)
    repeat_last_n: int | None = Field(None, ge=-1, le=MAX_INT)
    mirostat: int | None = Field(None, ge=0, le=2)
    """llama.cpp's Mirostat: 0 off, 1 or 2 (v1 / v2) in place of top-k ... temperature."""
    mirostat_tau: float | None = Field(None, ge=0, le=100)
    mirostat_eta: float | None = Field(None, ge=0, le=10)
    ignore_eos: bool = False


class StructuredOutputs(Body):
    """vLLM's ``structured_outputs`` (one field of it): the reply matches a JSON Schema, a regex, one of
    the choices, or a grammar."""

    json_: dict[str, Any] | str | None = Field(None, alias="json")
    regex: str | None = Field(None, max_length=1 << 16)
    choice: Annotated[list[str], Field(min_length=1, max_length=1024)] | None = None
    grammar: str | None = Field(None, max_length=1 << 20)
    json_object: bool | None = None

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)


class _Constrained(Body):
    """llama.cpp's and vLLM's server's own constraint fields, on chat and text completions."""

    grammar: str | None = Field(None, max_length=1 << 20)
    """A GBNF grammar the reply must match (llama.cpp's ``grammar``)."""
    json_schema: dict[str, Any] | None = None
    """A JSON Schema the reply must be valid against (llama.cpp's ``json_schema``; ``{}``: any object)."""
    guided_json: dict[str, Any] | str | None = None
    """vLLM's: a JSON Schema (an object or its JSON text) the reply must be valid against."""
    guided_regex: str | None = Field(None, max_length=1 << 16)
    """vLLM's: a regular expression (Rust ``regex`` syntax) the whole reply must match."""
    guided_choice: Annotated[list[str], Field(min_length=1, max_length=1024)] | None = None
    """vLLM's: the reply is exactly one of these strings."""
    guided_grammar: str | None = Field(None, max_length=1 << 20)
    """vLLM's: a grammar the reply must match (GBNF, ``root ::= ...``, or Lark, ``start: ...``)."""
    structured_outputs: StructuredOutputs | None = None
    """vLLM's newer form of the ``guided_*`` fields."""


class ChatCompletionRequest(_Sampling, _Constrained):
    """``POST /v1/chat/completions``."""

    _whole_request = True

    model: str = Field(max_length=256)
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_INT)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_INT)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = Field(None, max_length=_MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | AllowedToolsChoice | None = None
    parallel_tool_calls: bool | None = None
    functions: list[FunctionDefinition] | None = Field(None, min_length=1, max_length=_MAX_TOOLS)
    """The legacy form of ``tools`` (OpenAI's deprecated ``functions`` API): the reply's call comes
    back as ``message.function_call`` with ``finish_reason`` ``"function_call"``, one call at most."""
    function_call: Literal["none", "auto"] | NamedFunction | None = None
    """The legacy form of ``tool_choice`` (with ``functions``)."""
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_format: Literal["auto", "deepseek", "none"] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    reasoning_budget_tokens: int | None = Field(None, ge=-1, le=MAX_INT)
    """llama.cpp's cap on the reasoning block's tokens (-1: none; default: the server's)."""
    thinking_budget_tokens: int | None = Field(None, ge=-1, le=MAX_INT)
    """Another name llama.cpp's server takes for ``reasoning_budget_tokens``."""
    reasoning_budget_message: str | None = Field(None, max_length=4096)
    """Text forced before the closing marker when the budget runs out."""
    continue_final_message: bool | None = None
    """A last assistant message is continued (a prefill: the reply holds only what is added) unless
    this is ``false`` (llama.cpp's server and vLLM's name)."""
    prediction: Prediction | None = None
    """OpenAI's Predicted Outputs (see :class:`Prediction`); ``usage.completion_tokens_details`` then
    counts the draft tokens verification accepted and rejected."""


class CompletionRequest(_Sampling, _Constrained):
    """``POST /v1/completions``: ``prompt`` a string, a list of strings, token ids or lists of them."""

    _whole_request = True

    model: str = Field(max_length=256)
    prompt: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    max_tokens: int | None = Field(16, ge=0, le=MAX_INT)
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool = False
    best_of: int | None = Field(None, ge=1, le=_MAX_N)
    suffix: str | None = None
    response_format: ResponseFormat | None = None
    """As on chat completions (vLLM takes it here too)."""
    prediction: Prediction | None = None
    """As on chat completions (OpenAI's Predicted Outputs, here for text completions too)."""


class EmbeddingRequest(Body):
    """``POST /v1/embeddings``."""

    _whole_request = True

    model: str = Field(max_length=256)
    input: str | list[str] | list[int] | list[list[int]] = Field(min_length=1)
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, le=MAX_INT)
    user: str | None = None


class ResponsesTool(Body):
    """A Responses API tool: ``function`` tools are offered; built-in ones (web search, ...) skipped."""

    type: str = Field(max_length=64)
    name: str | None = Field(None, min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ResponsesToolChoice(Body):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=256)


class ResponsesAllowedTools(Body):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]] = Field(min_length=1, max_length=_MAX_TOOLS)


class ResponsesTextFormat(Body):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = Field(None, max_length=256)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)


class ResponsesText(Body):
    format: ResponsesTextFormat | None = None


class ResponsesReasoning(Body):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None


class ResponsesRequest(_Sampling):
    """``POST /v1/responses``: OpenAI's Responses API, stateless (no ``previous_response_id``)."""

    _whole_request = True

    model: str = Field(max_length=256)
    input: str | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=4096)]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_INT)
    tools: list[ResponsesTool] | None = Field(None, max_length=_MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | ResponsesToolChoice | ResponsesAllowedTools | None = None
    parallel_tool_calls: bool | None = None
    text: ResponsesText | None = None
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_format: Literal["auto", "deepseek", "none"] | None = None
    reasoning: ResponsesReasoning | None = None


class TokenizeRequest(Body):
    """``POST /tokenize`` (llama.cpp's server shape)."""

    _whole_request = True

    content: str
    add_special: bool = False
    parse_special: bool = False
    with_pieces: bool = False


class DetokenizeRequest(Body):
    """``POST /detokenize``."""

    tokens: list[int] = Field(max_length=1_000_000)
