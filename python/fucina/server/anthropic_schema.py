"""Pydantic models of Anthropic's Messages API requests (``/v1/messages`` and
``/v1/messages/count_tokens``), with Anthropic's field names and bounds.

Content blocks are a tagged union on ``type``: ``text``, ``tool_use``, ``tool_result``, ``document``,
``thinking``, ``redacted_thinking`` and ``image`` are recognised (images and PDF documents are refused
by the route: the models served take text only); any other type is a 400 naming the block. Tools are
the client's own (``type`` absent or ``"custom"``, with an ``input_schema``) or Anthropic's built-in
ones (``web_search_20250305``, ``bash_20250124``, ...), which the route skips.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from .openai_schema import MAX_INT, Body

__all__ = ["MessagesRequest", "CountTokensRequest", "AnthropicMessage", "AnthropicTool", "ContentBlock"]


class TextBlock(Body):
    type: Literal["text"]
    text: str


class ImageBlock(Body):
    type: Literal["image"]
    source: dict[str, Any]


class DocumentBlock(Body):
    """A document: plain text (``source.type`` ``"text"``) or text blocks (``"content"``) are read;
    PDFs (``"base64"``, ``"url"``, ``"file"``) are refused by the route."""

    type: Literal["document"]
    source: dict[str, Any]
    title: str | None = None
    context: str | None = None


class ThinkingBlock(Body):
    """Earlier reasoning, sent back by clients as it came (its ``signature`` is not checked)."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(Body):
    type: Literal["redacted_thinking"]
    data: str | None = None


class ToolUseBlock(Body):
    type: Literal["tool_use"]
    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=256)
    input: dict[str, Any]


ResultBlock = Annotated[TextBlock | ImageBlock | DocumentBlock, Field(discriminator="type")]
"""What a ``tool_result``'s content list may hold."""


class ToolResultBlock(Body):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1, max_length=256)
    content: str | list[ResultBlock] | None = None
    is_error: bool | None = None


ContentBlock = Annotated[
    TextBlock | ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class AnthropicMessage(Body):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class AnthropicTool(Body):
    """A tool: the client's own (``type`` absent or ``"custom"``; ``input_schema`` required), or one of
    Anthropic's built-in tools (any other ``type``), which this server does not offer the model."""

    type: str | None = Field(None, max_length=64)
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class AnthropicToolChoice(Body):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(None, min_length=1, max_length=256)
    disable_parallel_tool_use: bool | None = None


class AnthropicThinking(Body):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0, le=MAX_INT)


class OutputFormat(Body):
    """Structured outputs: the reply is JSON valid against ``schema``."""

    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)


class OutputConfig(Body):
    format: OutputFormat | None = None
    effort: str | None = Field(None, max_length=32)


class _Prompt(Body):
    _whole_request = True

    model: str = Field(max_length=256)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[AnthropicTool] | None = Field(None, max_length=128)
    tool_choice: AnthropicToolChoice | None = None
    thinking: AnthropicThinking | None = None


class MessagesRequest(_Prompt):
    """``POST /v1/messages``."""

    max_tokens: int = Field(ge=1, le=MAX_INT)
    stop_sequences: list[str] | None = Field(None, max_length=16)
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0, le=MAX_INT)
    metadata: dict[str, Any] | None = None
    output_config: OutputConfig | None = None
    output_format: OutputFormat | None = None
    """The structured-outputs beta's spelling of ``output_config.format``."""


class CountTokensRequest(_Prompt):
    """``POST /v1/messages/count_tokens``."""
