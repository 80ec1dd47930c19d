"""Supervised fine-tuning data (spec §13.7): instruction/response pairs, their
encoding into shifted, prompt-masked training samples, and a deterministic loader.

>>> from fucina.data import Loader
>>> Loader(8, "shuffled", seed=42).perm
[3, 6, 0, 7, 1, 2, 5, 4]

The loader's ``(seed, epoch) -> permutation`` mapping is a checkpoint contract: a
trainer stores a :class:`LoaderState` (three ints, JSON-safe) and a restored loader
continues with exactly the samples the interrupted one would have produced. It never
changes once checkpoints exist against it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from ._core import FucinaError
from .chat import BuiltinTemplate

__all__ = [
    "IGNORE_INDEX",
    "EmptyDataset",
    "InvalidLoaderState",
    "Loader",
    "LoaderState",
    "MalformedJsonl",
    "Pair",
    "Sample",
    "SampleTooLong",
    "SftDataError",
    "SftText",
    "encode_pair",
    "encode_prompt",
]

IGNORE_INDEX = -100
"""Label of positions the loss ignores (PyTorch's ``CrossEntropyLoss`` default)."""

_MASK64 = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment


class SftDataError(FucinaError, ValueError):
    """Base of the SFT data errors."""


class MalformedJsonl(SftDataError):
    """A JSONL line that is not an object with the configured string fields (the message names path and line)."""


class SampleTooLong(SftDataError):
    """The ``seq_max`` window leaves no supervised (response) token."""


class EmptyDataset(SftDataError):
    """A loader over zero samples."""


class InvalidLoaderState(SftDataError):
    """A :class:`LoaderState` that does not fit the loader (index past the dataset)."""


@dataclass(frozen=True)
class Pair:
    """One instruction and the response to learn."""

    instruction: str
    response: str


class SftText:
    """A list of :class:`Pair`\\ s, from memory or a JSONL file."""

    def __init__(self, pairs: Iterable[Pair]) -> None:
        self.pairs: list[Pair] = list(pairs)
        for i, p in enumerate(self.pairs):
            if not isinstance(p, Pair):
                raise TypeError(f"pair {i} is a {type(p).__name__}, not a fucina.data.Pair")

    @classmethod
    def from_pairs(cls, pairs: Iterable[Pair | tuple[str, str]]) -> SftText:
        """From ``Pair``\\ s or ``(instruction, response)`` tuples."""
        out = []
        for i, p in enumerate(pairs):
            if isinstance(p, Pair):
                out.append(p)
            elif isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p):
                out.append(Pair(p[0], p[1]))
            else:
                raise TypeError(f"pair {i} must be a Pair or an (instruction, response) tuple of str")
        return cls(out)

    @classmethod
    def from_jsonl(
        cls,
        path: str | os.PathLike[str],
        *,
        instruction_key: str = "instruction",
        response_key: str = "response",
    ) -> SftText:
        """One JSON object per line, the two strings under ``instruction_key`` and
        ``response_key``; blank lines are skipped. Any other line raises
        :class:`MalformedJsonl` naming the file and the (1-based) line."""
        p = Path(path)
        pairs = []
        with p.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{p}:{lineno}"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise MalformedJsonl(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
                if not isinstance(obj, dict):
                    raise MalformedJsonl(f"{where}: expected a JSON object, got {type(obj).__name__}")
                fields = []
                for key in (instruction_key, response_key):
                    if key not in obj:
                        raise MalformedJsonl(f"{where}: missing key {key!r}")
                    if not isinstance(obj[key], str):
                        raise MalformedJsonl(f"{where}: {key!r} must be a string, got {type(obj[key]).__name__}")
                    fields.append(obj[key])
                pairs.append(Pair(fields[0], fields[1]))
        return cls(pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> Pair:
        return self.pairs[i]

    def __iter__(self) -> Iterator[Pair]:
        return iter(self.pairs)


class _Encoder(Protocol):
    def encode(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = False) -> list[int]: ...


@dataclass(frozen=True)
class Sample:
    """A training pair: ``labels[i]`` is the token after ``inputs[i]`` (or the ignore index)."""

    inputs: list[int]
    labels: list[int]


def encode_prompt(
    tokenizer: _Encoder,
    template: BuiltinTemplate,
    instruction: str,
    *,
    system: str | None = None,
    think_off: bool = True,
) -> list[int]:
    """The token ids of one user turn rendered by ``template`` (conversation start,
    system prompt, the instruction, the assistant opener)."""
    text = template.render_turn(instruction, system=system, first=True, think_off=think_off)
    return tokenizer.encode(text, add_special=False, parse_special=True)


def encode_pair(
    tokenizer: _Encoder,
    template: BuiltinTemplate,
    pair: Pair,
    *,
    seq_max: int = 256,
    ignore_index: int = IGNORE_INDEX,
    mask_prompt: bool = True,
    system: str | None = None,
    think_off: bool = True,
) -> Sample:
    """Render, tokenize and shift one pair into a :class:`Sample`.

    The response and the template's stop marker are tokenized apart from the prompt:
    tokenizing the concatenated text would let BPE merges cross the join and change
    the ids. Prompt positions are labelled ``ignore_index`` (unless ``mask_prompt`` is
    off); the sample keeps its first ``seq_max`` input positions, and a window with no
    supervised token left raises :class:`SampleTooLong`.
    """
    if seq_max <= 0:
        raise ValueError(f"seq_max must be positive, not {seq_max}")
    prompt = encode_prompt(tokenizer, template, pair.instruction, system=system, think_off=think_off)
    response = tokenizer.encode(pair.response, add_special=False, parse_special=False)
    response += tokenizer.encode(template.stop_marker, add_special=False, parse_special=True)
    full = prompt + response
    inputs = full[:-1]
    labels = [tok if (i + 1 >= len(prompt) or not mask_prompt) else ignore_index for i, tok in enumerate(full[1:])]
    inputs, labels = inputs[:seq_max], labels[:seq_max]
    if all(label == ignore_index for label in labels):
        raise SampleTooLong(
            f"the prompt has {len(prompt)} tokens, so a window of {seq_max} inputs holds no response token"
        )
    return Sample(inputs, labels)


@dataclass(frozen=True)
class LoaderState:
    """Where a :class:`Loader` is: ints that round-trip through JSON unchanged."""

    seed: int
    epoch: int
    index: int

    def to_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch, "index": self.index}

    @classmethod
    def from_dict(cls, d: Mapping[str, int]) -> LoaderState:
        return cls(int(d["seed"]), int(d["epoch"]), int(d["index"]))


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _stream_start(seed: int, i: int) -> int:
    """The i-th value of the counter-based stream of ``seed`` (the spec's ``rng.at``)."""
    return _mix((seed + (i + 1) * _GOLDEN_GAMMA) & _MASK64)


def _permutation(n: int, seed: int, epoch: int) -> list[int]:
    """Identity order, then Fisher–Yates driven by a splitmix64 stream seeded with
    ``at(seed, epoch)``: ``j = next % (i + 1)`` for ``i`` from ``n - 1`` down to 1."""
    perm = list(range(n))
    state = _stream_start(seed, epoch)
    for i in range(n - 1, 0, -1):
        state = (state + _GOLDEN_GAMMA) & _MASK64
        j = _mix(state) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Loader:
    """Deterministic sample order over ``n`` samples: ``"sequential"`` round-robin, or
    ``"shuffled"``, a fresh permutation per epoch that is a pure function of
    ``(seed, epoch)``. Iterating never ends; each epoch visits every index once."""

    def __init__(self, n: int, order: Literal["sequential", "shuffled"] = "shuffled", seed: int = 0) -> None:
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {type(n).__name__}")
        if n <= 0:
            raise EmptyDataset("a loader needs at least one sample")
        if order not in ("sequential", "shuffled"):
            raise ValueError(f"order must be 'sequential' or 'shuffled', not {order!r}")
        if not 0 <= seed <= _MASK64:
            raise ValueError(f"seed must be in [0, 2**64), not {seed}")
        self.n, self.order = n, order
        self._seed, self._epoch, self._index = seed, 0, 0
        self.perm = self._make_perm()

    def _make_perm(self) -> list[int]:
        if self.order == "sequential":
            return list(range(self.n))
        return _permutation(self.n, self._seed, self._epoch)

    def next(self) -> int:
        """The next sample index (moving into the next epoch after the last)."""
        if self._index == self.n:
            self._epoch += 1
            self._index = 0
            self.perm = self._make_perm()
        out = self.perm[self._index]
        self._index += 1
        return out

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        return self.next()

    def take(self, k: int) -> list[int]:
        """The next ``k`` indices."""
        return [self.next() for _ in range(k)]

    def state(self) -> LoaderState:
        """The position to checkpoint."""
        return LoaderState(self._seed, self._epoch, self._index)

    def restore(self, state: LoaderState) -> None:
        """Continue exactly where ``state`` was taken (seed, epoch and index come from it)."""
        if not 0 <= state.index <= self.n or state.epoch < 0 or not 0 <= state.seed <= _MASK64:
            raise InvalidLoaderState(f"state {state} does not fit a loader over {self.n} samples")
        self._seed, self._epoch, self._index = state.seed, state.epoch, state.index
        self.perm = self._make_perm()
