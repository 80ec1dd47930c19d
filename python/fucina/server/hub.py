"""The bridge between asyncio and the Rust scheduler.

The scheduler thread (``fucina._core.Scheduler``) runs every token with the GIL released and
queues events per request. One daemon thread here blocks in ``Scheduler.wait_ready`` (also without
the GIL) and, when requests have news, wakes their asyncio tasks with
``loop.call_soon_threadsafe``: the event loop never blocks, and Python runs once per step per
request, not per token of a busy batch.

A :class:`Job` is one or more scheduled requests awaited together (a request with ``n`` choices is
``n`` scheduled requests): ``async for index, event in job.events()`` yields each request's events
in order. Closing a job (or leaving its ``async for`` early) cancels whatever still runs, which
frees the slots at the scheduler's next step.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import _core
from ..grammar import Grammar
from ..llm import LLM
from ..sampling import SamplingParams
from .errors import ApiError

__all__ = ["Hub", "Job", "Choice", "Sampling"]

# How often the waiter thread re-checks for shutdown while nothing happens (seconds).
_WAIT_SLICE = 0.25
_U64 = 1 << 64

# Event kinds of a failed request (``("error", kind, message)``) and the status they map to.
_ERROR_STATUS = {"invalid": 400, "processor": 500, "unavailable": 503, "internal": 500}


@dataclass
class Sampling:
    """One request's generation settings, in the scheduler's terms."""

    max_tokens: int | None
    params: SamplingParams
    stop: list[str] = field(default_factory=list)
    stop_ids: list[int] = field(default_factory=list)
    logprobs: int | None = None
    special: bool = False
    ignore_eos: bool = False
    processors: list[Callable[[list[int], Any], None]] = field(default_factory=list)
    grammar: Grammar | None = None
    grammar_param: str = "response_format"
    """The request field a grammar that fails to compile is reported under."""
    reasoning_budget: tuple[list[int], list[int], list[int], int, bool] | None = None
    reference: list[int] = field(default_factory=list)
    """Token ids the speculative drafts may quote (a predicted output); no token changes with it."""


@dataclass
class Choice:
    """What one scheduled request produced, gathered from its events."""

    text: str = ""
    finish_reason: str | None = None
    stop_index: int | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cancelled: bool = False
    logprobs: list[tuple[int, tuple[float, list[tuple[int, float]]]]] = field(default_factory=list)
    drafted: int = 0
    """Speculative draft tokens verified (the finished event's count)."""
    accepted: int = 0
    """Of those, the ones verification accepted."""

    def add(self, event: tuple[Any, ...]) -> None:
        """Fold one event in (errors raise :class:`ApiError`)."""
        kind = event[0]
        if kind == "started":
            self.prompt_tokens, self.cached_tokens = event[1], event[2]
        elif kind == "token":
            _, token, emitted, text, finish, lp, stop_index = event
            self.text += text
            if emitted:
                self.completion_tokens += 1
                if lp is not None:
                    self.logprobs.append((token, lp))
            if finish is not None:
                self.finish_reason = finish
                self.stop_index = stop_index
        elif kind == "finished":
            self.cancelled = bool(event[2])
            self.finish_reason = self.finish_reason or event[1]
            self.drafted, self.accepted = int(event[3]), int(event[4])
        elif kind == "error":
            raise_event_error(event)


def raise_event_error(event: tuple[Any, ...]) -> None:
    """Raise the :class:`ApiError` for a request's ``("error", kind, message)`` event."""
    _, kind, message = event
    status = _ERROR_STATUS.get(kind, 500)
    raise ApiError(status, message if status < 500 else f"generation failed: {message}")


class Job:
    """Scheduled requests awaited together from asyncio (see the module docs)."""

    def __init__(self, hub: Hub, requests: Sequence[_core.ScheduledRequest]) -> None:
        self._hub = hub
        self.requests = list(requests)
        self._wake = asyncio.Event()
        self._open = [True] * len(self.requests)
        for r in self.requests:
            hub._register(r.id, self._wake)

    async def events(self) -> AsyncIterator[tuple[int, tuple[Any, ...]]]:
        """``(index, event)`` for every event of every request, until each has ended."""
        try:
            while any(self._open):
                # Cleared before draining: an event queued after the drain sets it again.
                self._wake.clear()
                got = False
                for i, r in enumerate(self.requests):
                    if not self._open[i]:
                        continue
                    for event in r.take():
                        got = True
                        if event[0] in ("finished", "error", "embedding"):
                            self._open[i] = False
                        yield i, event
                if not got and any(self._open):
                    await self._wake.wait()
        finally:
            self.close()

    def close(self) -> None:
        """Cancel whatever still runs (idempotent)."""
        for i, r in enumerate(self.requests):
            if self._open[i]:
                r.cancel()
                self._open[i] = False
            self._hub._unregister(r.id)


class Hub:
    """The server's model, scheduler and waiter thread."""

    def __init__(self, llm: LLM, scheduler: _core.Scheduler) -> None:
        self.llm = llm
        self.scheduler = scheduler
        self._waiting: dict[int, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start waking ``loop``'s tasks (call from the loop, at startup)."""
        self._loop = loop
        self._stop.clear()
        self._thread = threading.Thread(target=self._wait_loop, name="fucina-hub", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the waiter thread and the scheduler (queued and running requests end)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.scheduler.shutdown()

    def _wait_loop(self) -> None:
        while not self._stop.is_set():
            ids = self.scheduler.wait_ready(_WAIT_SLICE)
            loop = self._loop
            if ids and loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self._wake, ids)
                except RuntimeError:  # the loop closed between the check and the call
                    return

    def _wake(self, ids: list[int]) -> None:
        for i in ids:
            ev = self._waiting.get(i)
            if ev is not None:
                ev.set()

    def _register(self, rid: int, ev: asyncio.Event) -> None:
        self._waiting[rid] = ev

    def _unregister(self, rid: int) -> None:
        self._waiting.pop(rid, None)

    # -- requests -------------------------------------------------------------------------
    def submit(self, prompts: Sequence[list[int]], settings: Sequence[Sampling], *, n: int = 1) -> Job:
        """Queue ``n`` generations of each prompt (with its settings), prompt-major: choice ``p * n + j``
        is prompt ``p``'s ``j``-th, sampled with seed ``seed + j`` when a seed is set."""
        requests: list[_core.ScheduledRequest] = []
        try:
            for prompt, s in zip(prompts, settings, strict=True):
                core = s.params.to_core()
                base_seed = core.pop("seed")
                for j in range(n):
                    seed = (base_seed + j) % _U64 if s.params.seed is not None else secrets.randbits(64)
                    requests.append(
                        self.scheduler.submit(
                            prompt,
                            max_tokens=s.max_tokens,
                            seed=seed,
                            stop=s.stop,
                            stop_ids=s.stop_ids,
                            logprobs=s.logprobs,
                            special=s.special,
                            ignore_eos=s.ignore_eos,
                            speculation=not s.processors,
                            processors=s.processors,
                            grammar=s.grammar._core if s.grammar is not None else None,
                            reasoning_budget=s.reasoning_budget,
                            reference=s.reference,
                            **core,
                        )
                    )
        except _core.QueueFullError as e:
            for r in requests:
                r.cancel()
            raise ApiError(429, f"{e}; retry later", code="queue_full") from None
        except _core.GrammarError as e:
            for r in requests:
                r.cancel()
            param = settings[0].grammar_param if settings else "response_format"
            raise ApiError(400, str(e), param=param, code="invalid_response_format") from None
        except (_core.InvalidArgumentError, _core.ArgumentTypeError) as e:
            for r in requests:
                r.cancel()
            raise ApiError(400, str(e)) from None
        return Job(self, requests)

    def embed(self, inputs: list[list[int]]) -> Job:
        """Queue one embedding per token list."""
        requests: list[_core.ScheduledRequest] = []
        try:
            for ids in inputs:
                requests.append(self.scheduler.embed(ids))
        except _core.QueueFullError as e:
            for r in requests:
                r.cancel()
            raise ApiError(429, f"{e}; retry later", code="queue_full") from None
        except (_core.InvalidArgumentError, _core.ArgumentTypeError) as e:
            for r in requests:
                r.cancel()
            raise ApiError(400, str(e), param="input") from None
        return Job(self, requests)
