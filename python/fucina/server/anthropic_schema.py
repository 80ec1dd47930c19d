"""Pydantic models of Anthropic's Messages API requests (``/v1/messages`` and
``/v1/messages/count_tokens``), with Anthropic's field names and bounds.

Content blocks are a tagged union on ``type``: ``text``, ``tool_use``, ``tool_result`` and
``image`` are recognised (images are refused by the route: the models served take text only); any
other type is a 400 naming the block.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from .openai_schema import MAX_INT, Body

__all__ = ["MessagesRequest", "CountTokensRequest", "AnthropicMessage", "AnthropicTool", "ContentBlock"]


class TextBlock(Body):
    type: Literal["text"]
    text: str


class ImageBlock(Body):
    type: Literal["image"]
    source: dict[str, Any]


class ToolUseBlock(Body):
    type: Literal["tool_use"]
    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=256)
    input: dict[str, Any]


class ToolResultBlock(Body):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1, max_length=256)
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None


ContentBlock = Annotated[TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")]


class AnthropicMessage(Body):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class AnthropicTool(Body):
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    input_schema: dict[str, Any]


class AnthropicToolChoice(Body):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(None, min_length=1, max_length=256)
    disable_parallel_tool_use: bool | None = None


class AnthropicThinking(Body):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=0, le=MAX_INT)


class _Prompt(Body):
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


class CountTokensRequest(_Prompt):
    """``POST /v1/messages/count_tokens``."""
