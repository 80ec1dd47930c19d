"""Reasoning in a model's reply: the thinking block split from the answer, the answer's framing dropped.

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

Some families also frame the answer itself, and that framing is not content either (llama.cpp's
parsers drop it): gpt-oss's final-channel header, Muse Glimmer's `` to=user<|message|>`` message
header, Kimi K3's ``<|open|>response<|sep|>…<|close|>response<|sep|>`` section, Cohere2 MoE's
``<|START_TEXT|>…<|END_TEXT|>``, Command R7B's ``<|START_RESPONSE|>…<|END_RESPONSE|>``,
functionary v3.2's ``all\\n`` recipient line (a family with no reasoning at all: a syntax of framing
only).

>>> from fucina.reasoning import THINK, split_reasoning
>>> split_reasoning("<think>\\n7 * 13 = 91.\\n</think>\\n\\nNo, 91 is not prime.", THINK)
('7 * 13 = 91.', 'No, 91 is not prime.')
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["THINK", "ReasoningStream", "ReasoningSyntax", "detect_reasoning_syntax", "split_reasoning"]


@dataclasses.dataclass(frozen=True)
class ReasoningSyntax:
    """How a family's reply marks its reasoning: ``open`` … ``close``, then the answer.

    ``answer_prefix`` is a header some families write before the answer (gpt-oss's final channel,
    ``<|channel|>final<|message|>``), dropped whether or not a reasoning block came first; after a
    block it may follow ``answer_header`` (gpt-oss starts a new message, ``<|start|>assistant``).

    ``ends`` are further markers that end the block without being part of it, left for the answer: a
    tool call the model starts without closing its thoughts (Qwen3.5's ``<tool_call>``), or the
    answer's own opener (Kimi K3's ``<|open|>response<|sep|>``). ``answer_close`` are markers that close
    the answer's section (Kimi K3's ``<|close|>response<|sep|>``, Muse Glimmer's ``<|eom|>`` before a
    tool message): dropped from the answer, whatever follows them (calls) kept. ``repeats``: further
    blocks may follow a block, each after ``answer_header`` (Muse Glimmer's ``to=self`` messages); their
    texts are joined by a blank line. ``open_in_reasoning``: the opening marker is text the reasoning
    starts with (Apriel 1.6's ``Here are my reasoning steps:``, as llama.cpp returns it).

    ``open`` and ``close`` are both empty for a family that frames its answer but does not reason
    (functionary v3.2's ``all\\n``): the reply never has a block."""

    open: str
    close: str
    answer_prefix: str = ""
    answer_header: str = ""
    ends: tuple[str, ...] = ()
    answer_close: tuple[str, ...] = ()
    repeats: bool = False
    open_in_reasoning: bool = False

    def __post_init__(self) -> None:
        if bool(self.open) != bool(self.close) or not (self.open or self.answer_prefix or self.answer_close):
            raise ValueError(
                "a reasoning syntax needs non-empty open and close markers (or, framing only an answer, "
                "neither and an answer_prefix or answer_close)"
            )
        if not all(self.ends) or not all(self.answer_close):
            raise ValueError("ends and answer_close markers must be non-empty")

    @property
    def has_block(self) -> bool:
        """Whether the family writes a reasoning block at all (not only answer framing)."""
        return bool(self.open)


THINK = ReasoningSyntax("<think>", "</think>")
# Reasoning that a tool call may end before </think> (llama.cpp's Qwen3-Coder, Ling 3 and Kimi K2 parsers).
_THINK_UNTIL_CALL = ReasoningSyntax("<think>", "</think>", ends=("<tool_call>",))
_KIMI_K2_THINKING = ReasoningSyntax("<think>", "</think>", ends=("<|tool_calls_section_begin|>", "<|tool_call_begin|>"))


def _cohere_section(section: str) -> tuple[tuple[str, ...], tuple[str, ...], ReasoningSyntax]:
    """A Cohere family's detection entry: thoughts, then the answer in <|START_{section}|>…<|END_{section}|>
    or an action (left for the call parser)."""
    start, end = f"<|START_{section}|>", f"<|END_{section}|>"
    markers = ("<|START_THINKING|>", "<|END_THINKING|>", start, "<|START_ACTION|>")
    syntax = ReasoningSyntax(
        "<|START_THINKING|>", "<|END_THINKING|>", start, ends=(start, "<|START_ACTION|>"), answer_close=(end,)
    )
    return markers, (), syntax


# Checked in order: the first whose every marker is in the template's source (and none of its excluded
# markers) wins. ``<think>`` last: other families' templates may also mention it.
_SYNTAXES: tuple[tuple[tuple[str, ...], tuple[str, ...], ReasoningSyntax], ...] = (
    (
        ("<|channel|>analysis<|message|>",),
        (),
        ReasoningSyntax(
            "<|channel|>analysis<|message|>", "<|end|>", "<|channel|>final<|message|>", "<|start|>assistant"
        ),
    ),
    # Muse Glimmer: every message is "<|start|>assistant to=RECIPIENT<|message|>…", ended by <|eom|> (more
    # messages follow) or <|eot|>; thoughts go to "self", the answer to "user", calls to the tool.
    (
        ("<atem:function_calls>", "<|eom|>"),
        (),
        ReasoningSyntax(
            " to=self<|message|>",
            "<|eom|>",
            " to=user<|message|>",
            "<|start|>assistant",
            answer_close=("<|eom|>", "<|eot|>"),
            repeats=True,
        ),
    ),
    # Kimi K3's XTML sections: [think] response [tools] </message>; the generation prompt opens think
    # (or, thinking off, response).
    (
        ("<|open|>", "<|close|>", "<|end_of_msg|>"),
        (),
        ReasoningSyntax(
            "<|open|>think<|sep|>",
            "<|close|>think<|sep|>",
            "<|open|>response<|sep|>",
            ends=("<|open|>response<|sep|>",),
            answer_close=("<|close|>response<|sep|>", "<|close|>message<|sep|>", "<|end_of_msg|>"),
        ),
    ),
    # Cohere2 MoE and Command R7B: thoughts, then either <|START_TEXT|>content<|END_TEXT|> (R7B:
    # <|START_RESPONSE|>…<|END_RESPONSE|>) or <|START_ACTION|>calls.
    _cohere_section("TEXT"),
    _cohere_section("RESPONSE"),
    # Apriel 1.6: the generation prompt starts the reasoning in words, a marker ends it.
    (
        ("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),
        (),
        ReasoningSyntax("Here are my reasoning steps:\n", "[BEGIN FINAL RESPONSE]", open_in_reasoning=True),
    ),
    # Functionary v3.2: the generation prompt ends with ">>>"; a reply to the user starts with "all\n".
    ((">>>all",), (), ReasoningSyntax("", "", "all\n")),
    (("<|channel>thought", "<channel|>"), (), ReasoningSyntax("<|channel>thought", "<channel|>")),
    (("<seed:think>", "</seed:think>"), (), ReasoningSyntax("<seed:think>", "</seed:think>")),
    (("<|START_THINKING|>", "<|END_THINKING|>"), (), ReasoningSyntax("<|START_THINKING|>", "<|END_THINKING|>")),
    (("[THINK]", "[/THINK]"), (), ReasoningSyntax("[THINK]", "[/THINK]")),
    # MiniMax M3: a reply that does not think starts with a bare </mm:think>.
    (("<mm:think>", "</mm:think>"), (), ReasoningSyntax("<mm:think>", "</mm:think>", "</mm:think>")),
    (("<|tool_calls_section_begin|>", "</think>"), (), _KIMI_K2_THINKING),
    (("<role>ASSISTANT</role>", "<arg_key>", "</think>"), (), _THINK_UNTIL_CALL),
    # Qwen3-Coder's XML calls with thinking (Qwen3.5, Nemotron 3 Nano, StepFun 3.5), as llama.cpp picks them.
    (
        ("<tool_call>", "<function=", "<parameter=", "</think>"),
        ("'<tool_call><function=' ~ tool_call.name ~ '>'",),
        _THINK_UNTIL_CALL,
    ),
    (("</think>",), (), THINK),
)
# Hunyuan 3 builds its tags with a suffix: '<think{}>'.format(HYTK), HYTK = ':opensource'.
_FORMATTED_THINK = re.compile(r"""['"]<think\{\}>['"]\s*\.format\(\s*([A-Za-z_]\w*)\s*\)""")
_SUFFIXED_THINK = re.compile(r"<think(:[A-Za-z0-9_\-]+)>")


def _suffixed_think(template: str) -> ReasoningSyntax | None:
    """``<think:S>…</think:S>`` (Hunyuan 3), ``S`` written in the template or set in a variable it formats in."""
    suffix = None
    if (m := _FORMATTED_THINK.search(template)) is not None:
        value = re.search(rf"""set\s+{m.group(1)}\s*=\s*['"]([^'"]+)['"]""", template)
        suffix = value.group(1) if value is not None else None
    elif (m := _SUFFIXED_THINK.search(template)) is not None and f"</think{m.group(1)}>" in template:
        suffix = m.group(1)
    return ReasoningSyntax(f"<think{suffix}>", f"</think{suffix}>") if suffix else None


def detect_reasoning_syntax(template: str | None) -> ReasoningSyntax | None:
    """The reasoning markers a chat template's source writes, or ``None`` (no template, or one that
    knows no thinking block and no answer framing)."""
    if template is None:
        return None
    if not isinstance(template, str):
        raise TypeError(f"template must be a str or None, not {type(template).__name__}")
    for markers, excluded, syntax in _SYNTAXES:
        # A suffixed block (Hunyuan 3) before the plain <think>, which such a template may mention too.
        if syntax is THINK and (suffixed := _suffixed_think(template)) is not None:
            return suffixed
        if all(m in template for m in markers) and not any(m in template for m in excluded):
            return syntax
    return None


def opens_reasoning(prompt: str, syntax: ReasoningSyntax) -> bool:
    """Whether a rendered prompt ends inside an open reasoning block (its generation prompt wrote the
    opening marker), so that the reply starts in the reasoning."""
    if not syntax.has_block:
        return False
    tail = prompt.rstrip()
    return tail.endswith(syntax.open.rstrip()) and not tail.endswith(syntax.close.rstrip())


def _partial(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def _first(text: str, markers: tuple[str, ...]) -> tuple[int, str] | None:
    """The earliest of ``markers`` in ``text`` (the longest where two start together) and where it is."""
    hits = [(at, -len(m), m) for m in markers if (at := text.find(m)) >= 0]
    if not hits:
        return None
    at, _, marker = min(hits)
    return at, marker


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
        # "lead": deciding whether the reply opens a block; "think": inside it; "gap": after the close (or
        # the answer's header), before the answer's first character; "answer": passing through.
        self._state = "lead"
        self._at = 0  # index in _text up to which input is consumed
        self._held = ""  # reasoning whitespace held back (dropped if the block closes after it)
        self._pending = ""  # reasoning text to return first (the opening marker, for open_in_reasoning)
        self._started = False  # the block's first non-space character was seen
        self._framed = False  # in "gap": the answer's header is consumed (only whitespace is dropped now)
        self._said = False  # some reasoning text was returned
        self.had_block = False
        if open_at_start and syntax.has_block:
            self._enter_block()

    def _enter_block(self) -> None:
        s = self.syntax
        self._state, self.had_block, self._started = "think", True, False
        # A later block (``repeats``) is set apart from the reasoning before it by a blank line.
        self._held = "\n\n" if self._said else ""
        if s.open_in_reasoning:
            opener = s.open.rstrip()
            self._pending, self._held = self._held + opener, s.open[len(opener) :]
            self._started = True

    def feed(self, piece: str) -> tuple[str, str]:
        """Add ``piece``; return the reasoning and answer text that are final now."""
        self._text += piece
        return self._advance(final=False)

    def finish(self) -> tuple[str, str]:
        """The reasoning and answer text still held back, at the end of the reply."""
        return self._advance(final=True)

    def _gap_markers(self) -> list[tuple[str, bool]]:
        """What may follow a block before the answer: ``(marker, opens another block)``."""
        s = self.syntax
        if self._framed or not self.had_block:
            return []
        out = []
        if s.repeats and s.answer_header:
            out.append((s.answer_header + s.open, True))
        if s.answer_header + s.answer_prefix:
            out.append((s.answer_header + s.answer_prefix, False))
        return out

    def _advance(self, final: bool) -> tuple[str, str]:
        think, answer = self._step(final)
        self._said = self._said or bool(think)
        return think, answer

    def _step(self, final: bool) -> tuple[str, str]:
        s, t = self.syntax, self._text
        think, answer = "", ""
        while True:
            rest = t[self._at :]
            if self._state == "lead":
                head = rest.lstrip()
                opener, prefix = s.open.lstrip(), s.answer_prefix.lstrip()
                if opener and head.startswith(opener):
                    self._at = len(t) - len(head) + len(opener)
                    self._said = self._said or bool(think)
                    self._enter_block()
                    continue
                if prefix and head.startswith(prefix):
                    # No reasoning: the answer's header is dropped all the same.
                    self._at = len(t) - len(head) + len(prefix)
                    self._state, self._framed = "gap", True
                    continue
                undecided = not head or any(m.startswith(head) for m in (opener, prefix) if m)
                if not final and undecided:
                    return think, answer
                self._state = "answer"
                continue
            if self._state == "think":
                think += self._pending
                self._pending = ""
                if not self._started:
                    # The reasoning starts at its first non-space character.
                    stripped = rest.lstrip()
                    self._at += len(rest) - len(stripped)
                    rest = stripped
                    self._started = bool(rest)
                hit = _first(rest, (s.close, *s.ends))
                if hit is not None:
                    at, marker = hit
                    think += (self._held + rest[:at]).rstrip()
                    self._held = ""
                    # The close is part of the block; another end marker is left for the answer.
                    self._at += at + (len(marker) if marker == s.close else 0)
                    self._state, self._framed = "gap", False
                    continue
                keep = 0 if final else max(_partial(rest, m) for m in (s.close, *s.ends))
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
                markers = self._gap_markers()
                found = next(((m, again) for m, again in markers if head.startswith(m)), None)
                if found is not None:
                    self._at = len(t) - len(head) + len(found[0])
                    if found[1]:
                        self._said = self._said or bool(think)
                        self._enter_block()
                    else:
                        self._framed = True
                    continue
                if not final and (not head or any(m.startswith(head) for m, _ in markers)):
                    return think, answer
                self._at = len(t) - len(head)
                self._state = "answer"
                continue
            # The answer, less the markers that close its section.
            while (hit := _first(rest, s.answer_close)) is not None:
                at, marker = hit
                answer += rest[:at]
                self._at += at + len(marker)
                rest = rest[at + len(marker) :]
            keep = 0 if final or not s.answer_close else max(_partial(rest, m) for m in s.answer_close)
            answer += rest[: len(rest) - keep]
            self._at += len(rest) - keep
            return think, answer


def split_reasoning(text: str, syntax: ReasoningSyntax, *, open_at_start: bool = False) -> tuple[str | None, str]:
    """``(reasoning, answer)`` of a whole reply: the leading block's text (stripped; ``None`` when
    the reply has no block) and the text after it (leading whitespace dropped), less the answer's
    framing."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    stream = ReasoningStream(syntax, open_at_start=open_at_start)
    think, answer = stream.feed(text)
    more_think, more_answer = stream.finish()
    return (think + more_think if stream.had_block else None), answer + more_answer
