"""`fucina.LLM`: load a GGUF model and generate text from Python.

>>> from fucina import LLM
>>> llm = LLM()                                   # the embedded Gemma 3 270M
>>> llm.generate("The capital of France is", max_tokens=8)   # doctest: +SKIP
' Paris.'

The per-token loop runs in Rust with the GIL released; this class composes the
model, one KV-cache session and the tokenizer. Decoding is greedy for now
(sampling arrives with `fucina.SamplingParams`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from . import _core, assets

KV_CACHE_TYPES = ("f16", "q8_0")
PREFILL_CHUNK = 512  # tokens per forward when reporting prefill progress


class LLM:
    """A model plus one conversation's state (KV cache, evaluated tokens).

    Args:
        path: GGUF file; ``None`` uses the embedded default model.
        n_ctx: context capacity of the KV cache, in tokens.
        n_threads: threads for the forward (default: all cores).
        kv_cache_type: ``"f16"`` (default, like llama.cpp) or ``"q8_0"`` (half the memory).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        kv_cache_type: str = "f16",
    ) -> None:
        if kv_cache_type not in KV_CACHE_TYPES:
            raise ValueError(f"kv_cache_type must be one of {KV_CACHE_TYPES}, not {kv_cache_type!r}")
        if n_ctx <= 0:
            raise ValueError(f"n_ctx must be positive, not {n_ctx}")
        self.path = Path(path) if path is not None else assets.default_model_path()
        self.model = _core.Model(self.path, n_threads=n_threads)
        self.tokenizer = _core.Tokenizer.from_gguf(self.path)
        self.session = _core.Session(self.model, n_ctx=n_ctx, kv_cache_type=kv_cache_type)

    def __repr__(self) -> str:
        return f"LLM({str(self.path)!r}, {self.model!r}, n_ctx={self.n_ctx})"

    @property
    def n_ctx(self) -> int:
        """Context capacity in tokens."""
        return self.session.n_ctx

    @property
    def n_vocab(self) -> int:
        """Vocabulary size."""
        return self.model.n_vocab

    # -- tokens -------------------------------------------------------------------
    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text`` (BOS added when the model asks and ``add_special``)."""
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int], special: bool = False) -> str:
        """Text of ``ids``."""
        return self.tokenizer.decode(list(ids), special=special)

    # -- low level ----------------------------------------------------------------
    def eval(self, ids: Sequence[int]) -> npt.NDArray[np.float32]:
        """Append ``ids`` to the context; return the last token's logits."""
        result: npt.NDArray[np.float32] = self.session.eval(list(ids))
        return result

    def reset(self) -> None:
        """Forget the context."""
        self.session.reset()

    @property
    def tokens(self) -> list[int]:
        """Tokens evaluated so far."""
        return self.session.tokens

    def logits(self, ids: Sequence[int], all: bool = False) -> npt.NDArray[np.float32]:
        """Logits of ``ids`` evaluated from an empty context: ``[n_vocab]`` for the last
        token, or ``[len(ids), n_vocab]`` with ``all``. The context is left holding ``ids``."""
        self.session.reset()
        result: npt.NDArray[np.float32] = self.session.eval(list(ids), all=all)
        return result

    # -- generation ---------------------------------------------------------------
    def _prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        ids = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
        return ids

    def stream_tokens(
        self,
        prompt: str | Sequence[int],
        max_tokens: int = 128,
        on_prefill: Callable[[int, int], None] | None = None,
    ) -> Iterator[int]:
        """Greedy continuation of ``prompt`` from an empty context, one token id at a
        time; ends after an end-of-generation token (not yielded) or ``max_tokens``.

        ``on_prefill(done, total)`` is called as the prompt is evaluated (in chunks of
        512 tokens), for progress bars on long prompts.
        """
        ids = self._prompt_ids(prompt)
        if len(ids) + max_tokens > self.n_ctx:
            max_tokens = self.n_ctx - len(ids)
            if max_tokens <= 0:
                raise ValueError(f"the prompt has {len(ids)} tokens; the context holds {self.n_ctx}")
        self.session.reset()
        chunk = PREFILL_CHUNK if on_prefill is not None else len(ids)
        for start in range(0, len(ids) - chunk, chunk):
            self.session.eval(ids[start : start + chunk])
            if on_prefill is not None:
                on_prefill(start + chunk, len(ids))
        next_id = self.session.eval_argmax(ids[len(self.session.tokens) :])
        if on_prefill is not None:
            on_prefill(len(ids), len(ids))
        for i in range(max_tokens):
            if self.tokenizer.is_eog(next_id):
                return
            yield next_id
            if i + 1 < max_tokens:
                next_id = self.session.eval_argmax([next_id])

    def stream(
        self,
        prompt: str | Sequence[int],
        max_tokens: int = 128,
        stop: str | Iterable[str] | None = None,
        on_prefill: Callable[[int, int], None] | None = None,
    ) -> Iterator[str]:
        """Greedy continuation of ``prompt`` as text pieces (complete UTF-8 only).

        Stops at an end-of-generation token, after ``max_tokens`` tokens, or before the
        first occurrence of any ``stop`` string (which is not emitted).
        """
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        hold = max((len(s) for s in stops), default=1) - 1
        decoder = self.tokenizer.stream_decoder()
        pending = ""
        for tok in self.stream_tokens(prompt, max_tokens, on_prefill):
            pending += decoder.push(tok)
            cut = min((i for i in (pending.find(s) for s in stops) if i >= 0), default=-1)
            if cut >= 0:
                if pending[:cut]:
                    yield pending[:cut]
                return
            if len(pending) > hold:
                emit, pending = pending[: len(pending) - hold], pending[len(pending) - hold :]
                yield emit
        pending += decoder.flush()
        cut = min((i for i in (pending.find(s) for s in stops) if i >= 0), default=-1)
        if cut >= 0:
            pending = pending[:cut]
        if pending:
            yield pending

    def generate(
        self, prompt: str | Sequence[int], max_tokens: int = 128, stop: str | Iterable[str] | None = None
    ) -> str:
        """Greedy continuation of ``prompt`` (see :meth:`stream`), as one string."""
        return "".join(self.stream(prompt, max_tokens=max_tokens, stop=stop))
