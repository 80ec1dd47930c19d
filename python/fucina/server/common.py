"""What the OpenAI and Anthropic routes share: the served model's names, request-to-sampling
conversion with llama.cpp's server defaults, stop strings, the context-length check, and gathering
a job's choices while watching for the client going away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from .. import _core
from ..llm import LLM
from ..sampling import SamplingParams
from .errors import ApiError
from .hub import Choice, Hub, Job
from .streaming import until_disconnected

if TYPE_CHECKING:
    from .openai_schema import Prediction

__all__ = [
    "ServerState",
    "Defaults",
    "sampling_params",
    "request_sampling",
    "stop_list",
    "completion_budget",
    "gather",
    "drain",
    "cached_tokens",
]


@dataclass(frozen=True)
class Defaults:
    """Sampling used for fields a request leaves out: llama.cpp's server defaults."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64


@dataclass
class ServerState:
    """Everything a route needs: the hub, the model's public names and the server's limits."""

    hub: Hub
    model_id: str
    aliases: frozenset[str]
    max_tokens_cap: int | None = None
    defaults: Defaults = field(default_factory=Defaults)
    created: int = field(default_factory=lambda: int(time.time()))
    extra_processors: Callable[[Mapping[str, Any]], list[Callable[[list[int], Any], None]]] | None = None
    """Per-request Python logit processors, for applications embedding the server (run under the GIL;
    ``None``: none, and Python stays off the per-token path)."""
    reasoning_format: str = "auto"
    """Whether replies get their reasoning split off, for requests that do not say (see
    :class:`fucina.server.ServerConfig`)."""
    reasoning_budget: int = -1
    """Tokens a reasoning block may take, for requests that do not say (-1: no cap)."""

    @property
    def llm(self) -> LLM:
        return self.hub.llm

    @property
    def n_ctx(self) -> int:
        return self.hub.scheduler.n_ctx

    def check_model(self, name: str) -> None:
        """404 unless ``name`` is the served model (its id or an alias)."""
        if name != self.model_id and name not in self.aliases:
            raise ApiError(
                404,
                f"The model {name!r} does not exist: this server serves {self.model_id!r}",
                param="model",
                code="model_not_found",
            )

    def processors(self, body: Mapping[str, Any]) -> list[Callable[[list[int], Any], None]]:
        return self.extra_processors(body) if self.extra_processors is not None else []


def sampling_params(
    state: ServerState,
    *,
    temperature: float | None,
    top_p: float | None,
    top_k: int | None = None,
    min_p: float | None = None,
    typical_p: float | None = None,
    repeat_penalty: float | None = None,
    repeat_last_n: int | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    seed: int | None = None,
    logit_bias: Mapping[str, float] | None = None,
    mirostat: int | None = None,
    mirostat_tau: float | None = None,
    mirostat_eta: float | None = None,
) -> SamplingParams:
    """The request's sampling, defaults filled in (a 400 naming the field for a bad value)."""
    d = state.defaults
    bias: dict[int, float] | None = None
    if logit_bias:
        n_vocab = state.llm.n_vocab
        bias = {}
        for key, value in logit_bias.items():
            if not key.isdigit() or int(key) >= n_vocab:
                raise ApiError(
                    400, f"logit_bias key {key!r} is not a token id (0 to {n_vocab - 1})", param="logit_bias"
                )
            if not -100 <= value <= 100:
                raise ApiError(400, f"logit_bias[{key}] must be in [-100, 100], not {value}", param="logit_bias")
            bias[int(key)] = float(value)
    try:
        return SamplingParams(
            temperature=d.temperature if temperature is None else temperature,
            # top_p = 0 keeps only the most likely token (OpenAI allows it; the sampler needs > 0).
            top_p=d.top_p if top_p is None else max(top_p, 1e-9),
            top_k=d.top_k if top_k is None else top_k,
            min_p=d.min_p if min_p is None else min_p,
            typical_p=d.typical_p if typical_p is None else typical_p,
            repeat_penalty=d.repeat_penalty if repeat_penalty is None else repeat_penalty,
            repeat_last_n=d.repeat_last_n if repeat_last_n is None else repeat_last_n,
            presence_penalty=presence_penalty or 0.0,
            frequency_penalty=frequency_penalty or 0.0,
            seed=None if seed is None else seed % (1 << 64),
            logit_bias=bias,
            mirostat_mode=mirostat or 0,
            mirostat_tau=5.0 if mirostat_tau is None else mirostat_tau,
            mirostat_eta=0.1 if mirostat_eta is None else mirostat_eta,
        )
    except (_core.InvalidArgumentError, _core.ArgumentTypeError) as e:
        raise ApiError(400, str(e)) from None


def request_sampling(state: ServerState, body: Any) -> SamplingParams:
    """The sampling an OpenAI request body asks for (chat and text completions, Responses): its
    OpenAI fields and llama.cpp's extensions, defaults filled in."""
    return sampling_params(
        state,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        min_p=body.min_p,
        typical_p=body.typical_p,
        repeat_penalty=body.repeat_penalty,
        repeat_last_n=body.repeat_last_n,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        seed=body.seed,
        logit_bias=body.logit_bias,
        mirostat=body.mirostat,
        mirostat_tau=body.mirostat_tau,
        mirostat_eta=body.mirostat_eta,
    )


def stop_list(stop: str | list[str] | None, param: str = "stop") -> list[str]:
    """Stop strings as a list (each non-empty)."""
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    for i, s in enumerate(stops):
        if not s:
            raise ApiError(400, f"{param}[{i}] is empty: stop strings must not be empty", param=param)
    return stops


def completion_budget(state: ServerState, prompt_tokens: int, requested: int | None, *, param: str) -> int:
    """The ``max_tokens`` to run with: what was asked, but no more than the room the prompt leaves in
    the context (llama.cpp's server does the same: clients sized for hosted models send
    ``max_tokens`` of 4096 and more, which a local context may not hold; the reply then ends with
    ``finish_reason`` ``"length"`` when the context is full), within the server's cap. A prompt that
    leaves no room is a 400 naming the limit (OpenAI's ``context_length_exceeded``)."""
    n_ctx = state.n_ctx
    if prompt_tokens >= n_ctx:
        raise ApiError(
            400,
            f"This model's maximum context length is {n_ctx} tokens. However, your prompt has {prompt_tokens} "
            "tokens, which leaves no room for a completion. Please reduce the length of the prompt.",
            param=param,
            code="context_length_exceeded",
        )
    budget = n_ctx - prompt_tokens if requested is None else min(requested, n_ctx - prompt_tokens)
    if state.max_tokens_cap is not None:
        budget = min(budget, state.max_tokens_cap)
    return budget


async def drain(job: Job, request: Request, fold: Callable[[int, tuple[Any, ...]], None]) -> bool:
    """Feed every ``(index, event)`` of ``job`` to ``fold`` until all requests ended (``True``), or
    until the client disconnects (``False``; the job is then cancelled)."""

    async def run() -> None:
        async for i, event in job.events():
            fold(i, event)

    work = asyncio.ensure_future(run())
    watch = asyncio.ensure_future(until_disconnected(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            work.result()
            return True
        return False
    finally:
        for task in (work, watch):
            task.cancel()
        job.close()


async def gather(job: Job, request: Request) -> list[Choice] | None:
    """Every choice of ``job`` once all ended, or ``None`` if the client disconnected first. A failed
    request raises its :class:`ApiError`."""
    choices = [Choice() for _ in job.requests]
    done = await drain(job, request, lambda i, event: choices[i].add(event))
    return choices if done else None


def prediction_ids(st: ServerState, prediction: Prediction | None) -> list[int]:
    """A predicted output's token ids (no BOS, special-token text left as text); ``[]`` without one."""
    if prediction is None:
        return []
    text = prediction.text()
    return st.llm.tokenize(text, add_special=False) if text else []


def openai_usage(prompt_tokens: int, cached: int, choices: list[Choice], predicted: bool) -> dict[str, Any]:
    """OpenAI's ``usage`` block. With a predicted output, ``completion_tokens_details`` counts the
    speculative draft tokens (quoted from the prediction or from the reply so far) that verification
    accepted and rejected, over every choice."""
    completion = sum(c.completion_tokens for c in choices)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    if predicted:
        drafted = sum(c.drafted for c in choices)
        accepted = sum(c.accepted for c in choices)
        usage["completion_tokens_details"] = {
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": drafted - accepted,
        }
    return usage


def cached_tokens(choices: list[Choice], prompts: int = 1) -> int:
    """The prompts' cached positions for the usage block. Choices come ``n`` per prompt, in prompt
    order; each prompt (and so its cached prefix) is counted once, as ``prompt_tokens`` counts it,
    whatever ``n`` is: the first choice's of each."""
    n = len(choices) // max(prompts, 1)
    return sum(choices[i * n].cached_tokens for i in range(prompts)) if n else 0
