"""Reasoning in a model's reply: the thinking block split from the answer.

Thinking models write their reasoning before the answer between markers their chat template knows
(``<think>…</think>`` for Qwen3, QwQ, DeepSeek R1, GLM, SmolLM3, MiniMax, Kimi; Gemma 4's thought
channel; gpt-oss's analysis channel; ...). As llama.cpp's server does by default
(``--reasoning-format auto``), fucina returns that block as ``message.reasoning_content`` (streamed as
``delta.reasoning_content``, an Anthropic ``thinking`` block) and the answer alone as ``content``, so
tool calls and JSON answers are parsed from the answer, not from the thoughts.

The syntax is picked from the template's source (:func:`detect_reasoning_syntax`). A template whose
generation prompt already opens the block (DeepSeek R1's newer templates end with ``<think>\\n``)
makes the reply start inside it (``open_at_start``). A block is only reasoning at the very start of
the reply; a block left open when generation stops is all reasoning (llama.cpp does the same).

>>> from fucina.reasoning import THINK, split_reasoning
>>> split_reasoning("<think>\\n7 * 13 = 91.\\n</think>\\n\\nNo, 91 is not prime.", THINK)
('7 * 13 = 91.', 'No, 91 is not prime.')
"""

from __future__ import annotations

import dataclasses

__all__ = ["THINK", "ReasoningStream", "ReasoningSyntax", "detect_reasoning_syntax", "split_reasoning"]


@dataclasses.dataclass(frozen=True)
class ReasoningSyntax:
    """How a family's reply marks its reasoning: ``open`` … ``close``, then the answer.

    ``answer_prefix`` is a header some families write before the answer (gpt-oss's final channel,
    ``<|channel|>final<|message|>``), dropped whether or not a reasoning block came first; after a
    block it may follow ``answer_header`` (gpt-oss starts a new message, ``<|start|>assistant``)."""

    open: str
    close: str
    answer_prefix: str = ""
    answer_header: str = ""

    def __post_init__(self) -> None:
        if not self.open or not self.close:
            raise ValueError("a reasoning syntax needs non-empty open and close markers")


THINK = ReasoningSyntax("<think>", "</think>")
# Checked in order: the first whose markers are in the template's source wins (``<think>`` last: other
# families' templates may also mention it).
_SYNTAXES: tuple[tuple[tuple[str, ...], ReasoningSyntax], ...] = (
    (
        ("<|channel|>analysis<|message|>",),
        ReasoningSyntax(
            "<|channel|>analysis<|message|>", "<|end|>", "<|channel|>final<|message|>", "<|start|>assistant"
        ),
    ),
    (("<|channel>thought", "<channel|>"), ReasoningSyntax("<|channel>thought", "<channel|>")),
    (("<seed:think>", "</seed:think>"), ReasoningSyntax("<seed:think>", "</seed:think>")),
    (("<|START_THINKING|>", "<|END_THINKING|>"), ReasoningSyntax("<|START_THINKING|>", "<|END_THINKING|>")),
    (("[THINK]", "[/THINK]"), ReasoningSyntax("[THINK]", "[/THINK]")),
    (("<mm:think>", "</mm:think>"), ReasoningSyntax("<mm:think>", "</mm:think>")),
    (("</think>",), THINK),
)


def detect_reasoning_syntax(template: str | None) -> ReasoningSyntax | None:
    """The reasoning markers a chat template's source writes, or ``None`` (no template, or one that
    knows no thinking block)."""
    if template is None:
        return None
    if not isinstance(template, str):
        raise TypeError(f"template must be a str or None, not {type(template).__name__}")
    for markers, syntax in _SYNTAXES:
        if all(m in template for m in markers):
            return syntax
    return None


def opens_reasoning(prompt: str, syntax: ReasoningSyntax) -> bool:
    """Whether a rendered prompt ends inside an open reasoning block (its generation prompt wrote the
    opening marker), so that the reply starts in the reasoning."""
    tail = prompt.rstrip()
    return tail.endswith(syntax.open.rstrip()) and not tail.endswith(syntax.close.rstrip())


def _partial(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


class ReasoningStream:
    """Splits a streamed reply into reasoning and answer as the text arrives.

    :meth:`feed` returns ``(reasoning, answer)`` pieces that are final: text that could still be the
    start of a marker, and whitespace that would be stripped around the block, is held back until more
    text decides it. :meth:`finish` returns what is left. The pieces joined are exactly
    :func:`split_reasoning`'s result for the whole text (``reasoning`` ``None`` there when the reply
    has no block).
    """

    def __init__(self, syntax: ReasoningSyntax, *, open_at_start: bool = False) -> None:
        self.syntax = syntax
        self._text = ""
        # "lead": deciding whether the reply opens a block; "think": inside it; "gap": after the close,
        # before the answer's first character; "answer": passing through.
        self._state = "think" if open_at_start else "lead"
        self._at = 0  # index in _text up to which input is consumed
        self._held = ""  # reasoning whitespace held back (dropped if the block closes after it)
        self._started = False  # the reasoning's first non-space character was seen
        self.had_block = open_at_start

    def feed(self, piece: str) -> tuple[str, str]:
        """Add ``piece``; return the reasoning and answer text that are final now."""
        self._text += piece
        return self._advance(final=False)

    def finish(self) -> tuple[str, str]:
        """The reasoning and answer text still held back, at the end of the reply."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> tuple[str, str]:
        s, t = self.syntax, self._text
        think, answer = "", ""
        while True:
            rest = t[self._at :]
            if self._state == "lead":
                head = rest.lstrip()
                if head.startswith(s.open):
                    self._at = len(t) - len(head) + len(s.open)
                    self._state, self.had_block = "think", True
                    continue
                if s.answer_prefix and head.startswith(s.answer_prefix):
                    # No reasoning: the answer's header is dropped all the same.
                    self._at = len(t) - len(head) + len(s.answer_prefix)
                    self._state = "gap"
                    continue
                undecided = not head or s.open.startswith(head) or (s.answer_prefix or "\0").startswith(head)
                if not final and undecided:
                    return think, answer
                self._state = "answer"
                continue
            if self._state == "think":
                if not self._started:
                    # The reasoning starts at its first non-space character.
                    stripped = rest.lstrip()
                    self._at += len(rest) - len(stripped)
                    rest = stripped
                    self._started = bool(rest)
                close = rest.find(s.close)
                if close >= 0:
                    think += (self._held + rest[:close]).rstrip()
                    self._held = ""
                    self._at += close + len(s.close)
                    self._state = "gap"
                    continue
                keep = 0 if final else _partial(rest, s.close)
                body = rest[: len(rest) - keep]
                if final:
                    think += (self._held + body).rstrip()
                    self._held = ""
                    self._at = len(t)
                    return think, answer
                trimmed = body.rstrip()
                if trimmed:
                    think += self._held + trimmed
                    self._held = body[len(trimmed) :]
                else:
                    self._held += body
                self._at += len(body)
                return think, answer
            if self._state == "gap":
                head = rest.lstrip()
                prefix = s.answer_header + s.answer_prefix if self.had_block else ""
                if prefix and not head.startswith(prefix):
                    if not final and (not head or prefix.startswith(head)):
                        return think, answer
                elif prefix:
                    head = head[len(prefix) :].lstrip()
                elif not head and not final:
                    return think, answer
                self._at = len(t) - len(head)
                self._state = "answer"
                continue
            answer += rest
            self._at = len(t)
            return think, answer


def split_reasoning(text: str, syntax: ReasoningSyntax, *, open_at_start: bool = False) -> tuple[str | None, str]:
    """``(reasoning, answer)`` of a whole reply: the leading block's text (stripped; ``None`` when
    the reply has no block) and the text after it (leading whitespace dropped)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    stream = ReasoningStream(syntax, open_at_start=open_at_start)
    think, answer = stream.feed(text)
    more_think, more_answer = stream.finish()
    return (think + more_think if stream.had_block else None), answer + more_answer
