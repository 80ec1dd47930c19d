"""`fucina.Conversation`: a chat whose KV cache lives across turns.

A conversation keeps its messages in Python and its history's KV rows in one sequence
of the model's engine. Every turn renders the FULL message history with the model's
chat template and hands the token ids to the engine, which keeps the longest common
prefix of them and what the sequence already holds and prefills only the rest. So an
incremental :meth:`Conversation.send` and a stateless :meth:`Conversation.send_messages`
of the same history are the same computation (and produce the same tokens), an edited
history (or a template that strips earlier reasoning) simply reuses less, and each
ordinary turn prefills only its new tokens.

>>> import fucina
>>> chat = fucina.LLM().chat(system="You are terse.", seed=1)   # doctest: +SKIP
>>> chat.send("Name a colour.")                                  # doctest: +SKIP
'Blue.'
>>> chat.last_reused_tokens                                      # doctest: +SKIP
0

With :meth:`Conversation.enable_persistence` every turn is also written to a crash-safe
sidecar file (FUXKV001: token ids and KV rows, record count published last) and the
messages next to it, so a new process resumes the conversation warm, with nothing
prefilled again.
"""

from __future__ import annotations

import enum
import json
import os
import warnings
from collections.abc import Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from . import _core
from ._core import ArgumentTypeError, InvalidArgumentError
from .grammar import Grammar, as_core
from .sampling import SAMPLING_FIELDS, SamplingParams

if TYPE_CHECKING:
    from .llm import LLM, ProgressCallback

__all__ = ["Conversation"]

_MESSAGES_VERSION = 1


class _Default(enum.Enum):
    """``max_tokens`` not given: the conversation's own cap applies."""

    MAX_TOKENS = 0


_DEFAULT = _Default.MAX_TOKENS
_Cap = int | None | Literal[_Default.MAX_TOKENS]


def _messages_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _check_text(name: str, text: object) -> str:
    if not isinstance(text, str):
        raise ArgumentTypeError(f"{name} must be a str, not {type(text).__name__}")
    return text


class Conversation:
    """A multi-turn chat with one model (create it with :meth:`fucina.LLM.chat`).

    Args:
        llm: the model.
        system: the system prompt (the first message), if any.
        max_tokens: the default cap on each reply's tokens (``None``: until the context is full).
        params: sampling for every turn (llama.cpp's defaults unless given); a turn's keyword
            arguments override them.
        stop: strings that end a reply (never part of it).
        template_kwargs: extra variables for the chat template (``enable_thinking=False``, ...).
        speculation: lossless speculative decoding (on by default; the replies are exactly
            the plain ones, only faster where drafts from the history or a reference hit).

    Replies end at the template's turn-end marker, a ``stop`` string or ``max_tokens``; the
    token that completes a stop string is neither returned nor kept in the history.
    """

    def __init__(
        self,
        llm: LLM,
        *,
        system: str | None = None,
        max_tokens: int | None = 512,
        params: SamplingParams | None = None,
        stop: str | Iterable[str] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        speculation: bool = True,
    ) -> None:
        from .llm import _check_max_tokens, _stop_list

        _check_max_tokens(max_tokens)
        self._llm = llm
        self._system = None if system is None else _check_text("system", system)
        self._max_tokens = max_tokens
        self._params = params if params is not None else SamplingParams()
        if not isinstance(self._params, SamplingParams):
            raise ArgumentTypeError(f"params must be a SamplingParams, not {type(self._params).__name__}")
        self._stop = _stop_list(stop)
        self._template_kwargs = dict(template_kwargs or {})
        self._speculation = bool(speculation)
        self._references: list[int] = []
        self._spec_totals: dict[str, Any] | None = None
        self._core = _core.Conversation(llm.engine)
        self._messages: list[dict[str, Any]] = self._initial_messages()
        self._persist: Path | None = None
        self.last_finish_reason: str | None = None
        """Why the last reply ended: ``"stop"``, ``"length"``, or ``None`` before any."""
        self.last_prompt_tokens = 0
        """Tokens of the last turn's rendered history."""

    def _initial_messages(self) -> list[dict[str, Any]]:
        return [] if self._system is None else [{"role": "system", "content": self._system}]

    def __repr__(self) -> str:
        return f"Conversation(messages={len(self._messages)}, tokens={len(self.tokens)})"

    # -- state ------------------------------------------------------------------------
    @property
    def history(self) -> list[dict[str, Any]]:
        """The messages so far (copies), the system prompt first."""
        return [dict(m) for m in self._messages]

    @property
    def tokens(self) -> list[int]:
        """Token ids whose KV rows the conversation holds."""
        return self._core.tokens

    @property
    def last_reused_tokens(self) -> int:
        """History tokens the last turn kept from the cache instead of prefilling (OpenAI's
        ``cached_tokens``)."""
        return self._core.last_reused_tokens

    @property
    def last_prefilled_tokens(self) -> int:
        """History tokens the last turn evaluated."""
        return self.last_prompt_tokens - self.last_reused_tokens

    def add_reference(self, text: str | Sequence[int]) -> None:
        """Give the replies a reference document (text or token ids) that speculation may
        draft from: answers quoting it come several tokens per forward (RAG). The replies
        themselves are unchanged."""
        ids = self._llm._reference_ids(text)
        if ids:
            self._references.extend(ids)

    @property
    def spec_stats(self) -> dict[str, Any] | None:
        """Speculative decoding's counts summed over the turns (``steps``, ``spec_steps``,
        ``drafted``, ``accepted``, ``bonus``, ``committed``, ...), ``tokens_per_step``,
        ``acceptance_rate``, and the last turn's ``gate`` state; ``None`` before any turn or
        with speculation off."""
        if self._spec_totals is None:
            return None
        out = dict(self._spec_totals)
        steps, drafted = out.get("steps", 0), out.get("drafted", 0)
        out["tokens_per_step"] = out.get("committed", 0) / steps if steps else 0.0
        out["acceptance_rate"] = out.get("accepted", 0) / drafted if drafted else 0.0
        return out

    def _add_stats(self, gen: _core.Generation) -> None:
        stats = gen.spec_stats
        if stats is None:
            return
        totals = self._spec_totals if self._spec_totals is not None else {}
        for k, v in stats.items():
            totals[k] = v if isinstance(v, str) else totals.get(k, 0) + v
        self._spec_totals = totals

    def reset(self) -> None:
        """Forget every turn (the system prompt stays); with persistence, the files too."""
        self._core.reset()
        self._messages = self._initial_messages()
        self._save_messages()

    def close(self) -> None:
        """Free the conversation's sequence now (it is unusable after)."""
        self._core.close()

    # -- persistence ------------------------------------------------------------------
    def enable_persistence(self, path: str | os.PathLike[str]) -> int:
        """Persist the conversation at ``path`` (and its messages at ``path + ".json"``) and
        resume what a compatible file there holds; returns the positions resumed (0: fresh).

        Call it once, before the first turn. A file written for another model, another KV
        geometry or dtype, or with a corrupted header is not loaded: it is reset, with a
        warning. A file torn by a crash resumes the prefix it holds.
        """
        if self._persist is not None:
            raise InvalidArgumentError("persistence is already on")
        if len(self._messages) > len(self._initial_messages()):
            raise InvalidArgumentError("enable persistence before the first turn")
        target = Path(os.fspath(path))
        resumed, ignored = self._core.enable_persistence(target)
        if ignored is not None:
            warnings.warn(f"ignored the KV file {target}: {ignored}; starting afresh", RuntimeWarning, stacklevel=2)
        self._persist = target
        if resumed:
            self._messages = self._load_messages(target) or self._messages
        self._save_messages()
        return resumed

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the conversation as it is now to ``path`` (and ``path + ".json"``), a file
        :meth:`enable_persistence` (``fucina chat --resume``) resumes warm. Each file is replaced
        atomically; persistence, if on, goes on writing its own file."""
        target = Path(os.fspath(path))
        self._core.save(target)
        self._write_messages(target)

    def _load_messages(self, path: Path) -> list[dict[str, Any]] | None:
        side = _messages_path(path)
        try:
            data = json.loads(side.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            warnings.warn(f"ignored the messages file {side}: {e}", RuntimeWarning, stacklevel=3)
            return None
        messages = data.get("messages") if isinstance(data, dict) else None
        if data.get("version") != _MESSAGES_VERSION or not isinstance(messages, list):
            warnings.warn(f"ignored the messages file {side}: not a fucina messages file", RuntimeWarning, stacklevel=3)
            return None
        return [dict(m) for m in messages if isinstance(m, dict)]

    def _save_messages(self) -> None:
        if self._persist is not None:
            self._write_messages(self._persist)

    def _write_messages(self, path: Path) -> None:
        side = _messages_path(path)
        tmp = side.with_name(side.name + ".tmp")
        tmp.write_text(json.dumps({"version": _MESSAGES_VERSION, "messages": self._messages}), encoding="utf-8")
        os.replace(tmp, side)

    # -- turns ------------------------------------------------------------------------
    def _begin(
        self,
        messages: list[dict[str, Any]],
        max_tokens: int | None,
        overrides: dict[str, Any],
        on_prefill: ProgressCallback | None = None,
        grammar: Grammar | None = None,
    ) -> _core.Generation:
        from .llm import _check_max_tokens, _params

        _check_max_tokens(max_tokens)
        unknown = sorted(set(overrides) - set(SAMPLING_FIELDS))
        if unknown:
            raise ArgumentTypeError(f"unknown sampling argument(s) {unknown}; expected some of {list(SAMPLING_FIELDS)}")
        params = _params(self._params, None, overrides)
        ids = self._llm.apply_chat_template(messages, **self._template_kwargs)
        assert isinstance(ids, list)
        gen = self._llm.engine.generate(
            ids,
            max_tokens=max_tokens,
            stop=self._stop,
            stop_ids=self._llm.chat_stop_ids,
            conversation=self._core,
            on_prefill=on_prefill,
            speculation=self._speculation,
            reference=self._references or None,
            grammar=as_core(grammar),
            **params.to_core(),
        )
        self.last_prompt_tokens = len(ids)
        return gen

    def _cap(self, max_tokens: _Cap) -> int | None:
        return self._max_tokens if max_tokens is _DEFAULT else max_tokens

    def _turn(self, messages: list[dict[str, Any]], gen: _core.Generation) -> Generator[str, None, None]:
        reply: list[str] = []
        keep = False
        try:
            for _token, _emitted, text, finish, _lp in gen:
                if text:
                    reply.append(text)
                    yield text
                if finish is not None:
                    self.last_finish_reason = finish
            keep = True
        except (GeneratorExit, KeyboardInterrupt):
            # Stopped by the caller: the partial reply is the turn (the cache holds it).
            keep = True
            raise
        finally:
            gen.close()
            self._add_stats(gen)
            if keep:
                self._messages = [*messages, {"role": "assistant", "content": "".join(reply)}]
                self._save_messages()

    def stream(
        self,
        text: str,
        *,
        max_tokens: _Cap = _DEFAULT,
        on_prefill: ProgressCallback | None = None,
        grammar: Grammar | None = None,
        **sampling: Any,
    ) -> Generator[str, None, None]:
        """Send a user message; yield the reply's text pieces as they are decoded. Arguments
        are checked (and the turn started) before the first piece is asked for. Closing the
        iterator early ends the reply there (what was produced stays in the history); an
        error leaves the history as it was. ``on_prefill(done, total)`` follows the
        evaluation of the history tokens the cache did not hold. ``grammar`` (a
        :class:`fucina.Grammar`) constrains the reply."""
        messages = [*self._messages, {"role": "user", "content": _check_text("text", text)}]
        return self._turn(messages, self._begin(messages, self._cap(max_tokens), sampling, on_prefill, grammar))

    def send(
        self,
        text: str,
        *,
        max_tokens: _Cap = _DEFAULT,
        on_prefill: ProgressCallback | None = None,
        grammar: Grammar | None = None,
        **sampling: Any,
    ) -> str:
        """Send a user message and return the reply. Sampling keywords (``temperature``,
        ``seed``, ...) override the conversation's for this turn; ``grammar`` (a
        :class:`fucina.Grammar`) constrains the reply."""
        return "".join(self.stream(text, max_tokens=max_tokens, on_prefill=on_prefill, grammar=grammar, **sampling))

    def stream_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: _Cap = _DEFAULT,
        on_prefill: ProgressCallback | None = None,
        grammar: Grammar | None = None,
        **sampling: Any,
    ) -> Generator[str, None, None]:
        """:meth:`send_messages`, yielding the reply's text pieces as they are decoded."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise ArgumentTypeError(f"messages must be a list of message dicts, not {type(messages).__name__}")
        msgs = [dict(m) for m in messages]
        return self._turn(msgs, self._begin(msgs, self._cap(max_tokens), sampling, on_prefill, grammar))

    def send_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: _Cap = _DEFAULT,
        on_prefill: ProgressCallback | None = None,
        grammar: Grammar | None = None,
        **sampling: Any,
    ) -> str:
        """The stateless shape: reply to a FULL message history (which replaces this
        conversation's), reusing the longest common token prefix of its render and the cache;
        :attr:`last_reused_tokens` says how many tokens were kept."""
        pieces = self.stream_messages(
            messages, max_tokens=max_tokens, on_prefill=on_prefill, grammar=grammar, **sampling
        )
        return "".join(pieces)

    @staticmethod
    def send_batch(
        conversations: Sequence[Conversation],
        texts: Sequence[str],
        *,
        max_tokens: _Cap = _DEFAULT,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Send ``texts[i]`` to ``conversations[i]`` for every i, decoding the replies in
        lockstep: one batched forward per step for all live streams (each stream's tokens are
        exactly those a plain :meth:`send` gives). A stream that fails (its history does not
        fit, its sampler fails) ends alone; the others go on. Returns the replies; a failed
        stream's exception is raised after every stream has finished, or returned in its
        place with ``return_exceptions=True``."""
        convs = list(conversations)
        users = [_check_text(f"texts[{i}]", t) for i, t in enumerate(texts)]
        if not convs:
            raise InvalidArgumentError("send_batch needs at least one conversation")
        if len(convs) != len(users):
            raise InvalidArgumentError(f"{len(convs)} conversations but {len(users)} texts")
        for i, c in enumerate(convs):
            if not isinstance(c, Conversation):
                raise ArgumentTypeError(f"conversations[{i}] is a {type(c).__name__}, not a Conversation")
            if c._llm is not convs[0]._llm:
                raise InvalidArgumentError(f"conversations[{i}] belongs to another LLM")
            if any(c is o for o in convs[:i]):
                raise InvalidArgumentError(f"conversations[{i}] appears twice")
        results: list[Any] = [None] * len(convs)
        gens: dict[int, _core.Generation] = {}
        gens_all: dict[int, _core.Generation] = {}
        turns: dict[int, list[dict[str, Any]]] = {}
        replies: dict[int, list[str]] = {}
        for i, (c, text) in enumerate(zip(convs, users, strict=True)):
            turns[i] = [*c._messages, {"role": "user", "content": text}]
            try:
                gens[i] = gens_all[i] = c._begin(turns[i], c._cap(max_tokens), {})
                replies[i] = []
            except Exception as e:  # noqa: BLE001 - a stream's own failure is its result
                results[i] = e
        try:
            while gens:
                order = list(gens)
                steps = _core.Generation.step_batch([gens[i] for i in order])
                for i, step in zip(order, steps, strict=True):
                    if isinstance(step, BaseException):
                        results[i] = step
                        del gens[i]
                        continue
                    if step is None:
                        del gens[i]
                        continue
                    _token, _emitted, text, finish, _lp = step
                    if text:
                        replies[i].append(text)
                    if finish is not None:
                        convs[i].last_finish_reason = finish
                        del gens[i]
        finally:
            for g in gens.values():
                g.close()
            for i in replies:
                convs[i]._add_stats(gens_all[i])
            for i, reply in replies.items():
                if isinstance(results[i], BaseException):
                    continue  # a failed stream's history stays as it was: resend it
                c = convs[i]
                c._messages = [*turns[i], {"role": "assistant", "content": "".join(reply)}]
                c._save_messages()
                results[i] = "".join(reply)
        if not return_exceptions:
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return results
