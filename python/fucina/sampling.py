"""`fucina.SamplingParams`: how the next token is chosen, with llama-cpp-python's names.

The sampler runs in Rust (crate ``fucina-sample``) with llama.cpp's semantics, in
llama-cpp-python's default chain order for these parameters::

    logit processors -> logit_bias -> penalties (repeat, frequency, presence over
    the last repeat_last_n generated tokens) -> top_k -> typical_p -> top_p (an
    exact nucleus) -> min_p -> temperature -> one categorical draw

or, with ``mirostat_mode`` 1 or 2, llama.cpp's Mirostat v1 / v2 in place of top_k ...
temperature (llama-cpp-python builds that chain: the temperature then only decides
greedy or not).

``temperature <= 0`` is greedy: the argmax after processors, penalties and bias,
and the random generator is not touched. Otherwise every committed token consumes
exactly one draw, so a ``seed`` fixes the tokens.

>>> import fucina
>>> fucina.SamplingParams(temperature=0.7, top_p=0.9, seed=1).top_p
0.9
>>> fucina.SamplingParams(top_p=0)  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
InvalidArgumentError: top_p must be in (0, 1], not 0
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ._core import ArgumentTypeError, InvalidArgumentError

__all__ = ["SamplingParams", "SAMPLING_FIELDS"]

_U64 = 1 << 64


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{name} must be a number, not {type(value).__name__}")
    v = float(value)
    if math.isnan(v):
        raise InvalidArgumentError(f"{name} must not be NaN")
    return v


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters (validated on construction; bad values raise
    ``fucina.InvalidArgumentError``, a ``ValueError``, naming the field).

    Defaults are llama-cpp-python's (``Llama.create_completion``). Note that
    :class:`fucina.LLM`'s ``generate`` / ``stream`` default to greedy decoding
    (``temperature=0.0``) unless given parameters.

    Attributes:
        temperature: Softmax temperature; ``<= 0`` is greedy.
        top_k: Keep the ``k`` most likely tokens (``<= 0``: all).
        top_p: Keep the smallest set whose probability reaches ``top_p`` (``1``: off).
        min_p: Drop tokens less likely than ``min_p`` times the most likely (``0``: off).
        typical_p: Locally typical sampling mass (``1``: off).
        repeat_penalty: Divide positive (multiply negative) logits of recent tokens (``1``: off).
        presence_penalty: Subtracted once from every recent token's logit.
        frequency_penalty: Subtracted per occurrence of a recent token.
        repeat_last_n: How many recent generated tokens the penalties look at (``-1``: all,
            ``0``: none); as in llama-cpp-python, prompt tokens are not counted.
        seed: Random seed; ``None`` draws a fresh one per generation.
        logit_bias: ``{token_id: bias}`` added to the logits (``-inf`` bans a token).
        mirostat_mode: ``0`` off; ``1`` / ``2``: Mirostat v1 / v2 (llama.cpp's, in place of the
            top-k ... temperature filters), targeting a surprise of ``mirostat_tau`` bits per token
            and adapting at rate ``mirostat_eta``; its state starts afresh with each generation.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64
    seed: int | None = None
    logit_bias: Mapping[int, float] | None = field(default=None)
    mirostat_mode: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1

    def __post_init__(self) -> None:
        t = _number("temperature", self.temperature)
        if not t >= 0 or math.isinf(t):
            raise InvalidArgumentError(f"temperature must be finite and >= 0, not {self.temperature}")
        _integer("top_k", self.top_k)
        p = _number("top_p", self.top_p)
        if not 0 < p <= 1:
            raise InvalidArgumentError(f"top_p must be in (0, 1], not {self.top_p}")
        m = _number("min_p", self.min_p)
        if not 0 <= m <= 1:
            raise InvalidArgumentError(f"min_p must be in [0, 1], not {self.min_p}")
        typ = _number("typical_p", self.typical_p)
        if not 0 < typ <= 1:
            raise InvalidArgumentError(f"typical_p must be in (0, 1], not {self.typical_p}")
        r = _number("repeat_penalty", self.repeat_penalty)
        if not 0 < r < math.inf:
            raise InvalidArgumentError(f"repeat_penalty must be finite and > 0, not {self.repeat_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            if math.isinf(_number(name, getattr(self, name))):
                raise InvalidArgumentError(f"{name} must be finite, not {getattr(self, name)}")
        if _integer("repeat_last_n", self.repeat_last_n) < -1:
            raise InvalidArgumentError(f"repeat_last_n must be >= -1, not {self.repeat_last_n}")
        if _integer("mirostat_mode", self.mirostat_mode) not in (0, 1, 2):
            raise InvalidArgumentError(f"mirostat_mode must be 0 (off), 1 or 2, not {self.mirostat_mode}")
        for name in ("mirostat_tau", "mirostat_eta"):
            if math.isinf(_number(name, getattr(self, name))):
                raise InvalidArgumentError(f"{name} must be finite, not {getattr(self, name)}")
        if self.seed is not None and not 0 <= _integer("seed", self.seed) < _U64:
            raise InvalidArgumentError(f"seed must be in [0, 2**64), not {self.seed}")
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, Mapping):
                raise ArgumentTypeError(
                    f"logit_bias must be a mapping of token id to bias, not {type(self.logit_bias).__name__}"
                )
            for tok, bias in self.logit_bias.items():
                # OpenAI clients send token ids as JSON object keys (strings).
                tid = int(tok) if isinstance(tok, str) and tok.isdigit() else tok
                if _integer("logit_bias token id", tid) < 0:
                    raise InvalidArgumentError(f"logit_bias token id must be >= 0, not {tok}")
                _number(f"logit_bias[{tok}]", bias)

    @property
    def greedy(self) -> bool:
        """Whether decoding is greedy (``temperature <= 0``)."""
        return self.temperature <= 0

    def to_core(self) -> dict[str, Any]:
        """Keyword arguments for ``_core.Engine.generate`` (a fresh seed when none is set)."""
        d = asdict(self)
        d["seed"] = secrets.randbits(64) if self.seed is None else self.seed
        bias = self.logit_bias or {}
        d["logit_bias"] = [(int(k), float(v)) for k, v in bias.items()]
        return d


SAMPLING_FIELDS = tuple(SamplingParams.__dataclass_fields__)
