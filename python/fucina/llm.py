"""`fucina.LLM`: load a GGUF model and generate text from Python.

>>> from fucina import LLM
>>> llm = LLM()                                   # the embedded Gemma 3 270M
>>> llm.generate("The capital of France is", max_tokens=8)   # doctest: +SKIP
' Paris.'
>>> llm.generate("Once upon a time", max_tokens=32, temperature=0.8, seed=7)  # doctest: +SKIP

The per-token loop (prefill, logit processors, sampler, stop rules, streaming
detokenization) runs in Rust with the GIL released; Python is called only for the
logit processors and progress callbacks you pass. Decoding is greedy unless
sampling parameters are given (like transformers' ``generate``);
:meth:`LLM.create_completion` uses llama-cpp-python's defaults instead.
"""

from __future__ import annotations

import os
import time
import uuid
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _core, assets
from ._core import ArgumentTypeError, InvalidArgumentError
from .chat import BuiltinTemplate, ChatTemplate, select_chat_template
from .chat_completion import create_chat_completion as _create_chat_completion
from .conversation import Conversation
from .grammar import Grammar, as_core
from .sampling import SAMPLING_FIELDS, SamplingParams

__all__ = ["LLM", "LogitProcessor", "KV_CACHE_TYPES"]

KV_CACHE_TYPES = ("f16", "q8_0")

LogitProcessor = Callable[[list[int], npt.NDArray[np.float32]], None]
"""A callable ``(token_ids, logits) -> None`` that edits the float32 logits row in
place (e.g. ``logits[banned] = -np.inf``). ``token_ids`` is the prompt followed by
the tokens generated so far."""

ProgressCallback = Callable[[int, int], None]

_GREEDY = SamplingParams(temperature=0.0)
_COMPLETION_DEFAULTS = SamplingParams()


def _check_max_tokens(max_tokens: int | None) -> None:
    if max_tokens is None:
        return
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise ArgumentTypeError(f"max_tokens must be an int or None, not {type(max_tokens).__name__}")
    if max_tokens < 0:
        raise InvalidArgumentError(f"max_tokens must be >= 0 (or None: up to the context size), not {max_tokens}")


def _stop_list(stop: str | Iterable[str] | None) -> list[str]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    for s in stops:
        if not isinstance(s, str):
            raise ArgumentTypeError(f"stop strings must be str, not {type(s).__name__}")
        if not s:
            raise InvalidArgumentError("stop strings must not be empty")
    return stops


def _processor_list(procs: LogitProcessor | Sequence[LogitProcessor] | None) -> list[LogitProcessor]:
    if procs is None:
        return []
    items = [procs] if callable(procs) else list(procs)
    for p in items:
        if not callable(p):
            raise ArgumentTypeError(f"logit_processors must be callables, not {type(p).__name__}")
    return items


def _params(base: SamplingParams, params: SamplingParams | None, overrides: dict[str, Any]) -> SamplingParams:
    """``params`` (or ``base``) with the explicitly passed sampling arguments applied."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if params is not None:
        if not isinstance(params, SamplingParams):
            raise ArgumentTypeError(f"params must be a fucina.SamplingParams, not {type(params).__name__}")
        if given:
            raise ArgumentTypeError(f"pass either params= or sampling arguments, not both (got {sorted(given)})")
        return params
    if not given:
        return base
    fields = {k: getattr(base, k) for k in SAMPLING_FIELDS}
    fields.update(given)
    return SamplingParams(**fields)


_POOLINGS = ("mean", "cls", "last")


class LLM:
    """A model with its tokenizer, generating text.

    Args:
        path: GGUF file; ``None`` uses the embedded default model.
        n_ctx: context capacity in tokens (per generation).
        n_threads: threads for the forward (default: all cores). Models with the same
            thread count share one thread pool.
        kv_cache_type: ``"f16"`` (default, like llama.cpp) or ``"q8_0"`` (half the memory).
        chat_format: render chats with a built-in format (``"chatml"``, ``"llama3"``, ``"gemma"``,
            ``"gemma4"``) instead of the model's own template.
        chat_template: render chats with this Jinja template instead of the model's own.
        batch_invariant: every row of a batched forward gives bitwise the logits it would get
            alone, so outputs never depend on how a prompt was chunked, cached or batched (a
            conversation's turns equal a stateless replay bit for bit). Prefill is slower; off by
            default (llama.cpp's prompt-batch arithmetic).
        moe_stream: read a mixture-of-experts model's experts on demand from the file into a RAM
            cache (the expert store) instead of mapping them whole: for models larger than memory.
            Outputs are bitwise the same. Ignored for models without experts.
        moe_cache_mb: the store's RAM budget for experts in MiB (default: room for all of them).
        moe_uncached: drop each streamed expert's pages from the OS page cache after reading it, so
            streaming does not evict the pages of the mapped dense weights.
        moe_io_threads: threads reading experts (default 4; 0 reads on the forward's thread).
        moe_trace: record the (layer, expert) requests and write them to this file when the model is
            closed (or at :meth:`moe_flush`); replay with ``fucina experts replay``. Implies
            ``moe_stream``.
        moe_prefetch: prefetch the next MoE layer's likely experts (its router run on the current
            layer's input) while a layer computes.
        moe_eviction: ``"heat"`` (default: lowest decayed routed count) or ``"lru"``
            (``FUCINA_MOE_LRU=1`` also selects LRU).
        moe_pins: seed a pinned tier from the usage histogram ``<gguf>.experts`` (written when a
            streaming model is closed) unless that histogram is flat (default on).

    Every generation runs on its own sequence, from an empty context, so results do
    not depend on what ran before; several generations may be interleaved.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        kv_cache_type: str = "f16",
        chat_format: str | None = None,
        chat_template: str | None = None,
        batch_invariant: bool = False,
        moe_stream: bool = False,
        moe_cache_mb: float | None = None,
        moe_uncached: bool = False,
        moe_io_threads: int | None = None,
        moe_trace: str | os.PathLike[str] | None = None,
        moe_prefetch: bool = False,
        moe_eviction: str | None = None,
        moe_pins: bool = True,
    ) -> None:
        if kv_cache_type not in KV_CACHE_TYPES:
            raise InvalidArgumentError(f"kv_cache_type must be one of {KV_CACHE_TYPES}, not {kv_cache_type!r}")
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int):
            raise ArgumentTypeError(f"n_ctx must be an int, not {type(n_ctx).__name__}")
        if n_ctx <= 0:
            raise InvalidArgumentError(f"n_ctx must be positive, not {n_ctx}")
        if path is not None and not os.fspath(path):
            # Path("") is the current directory: say what was passed instead.
            raise InvalidArgumentError("model path is empty (pass a GGUF file, or None for the default model)")
        self.path = Path(path) if path is not None else assets.default_model_path()
        self.model = _core.Model(
            self.path,
            n_threads=n_threads,
            moe_stream=moe_stream,
            moe_cache_mb=moe_cache_mb,
            moe_uncached=moe_uncached,
            moe_io_threads=moe_io_threads,
            moe_trace=moe_trace,
            moe_prefetch=moe_prefetch,
            moe_eviction=moe_eviction,
            moe_pins=moe_pins,
        )
        self.tokenizer = self.model.tokenizer()
        for note in self.tokenizer.warnings:
            warnings.warn(f"{self.path.name}: {note}", UserWarning, stacklevel=2)
        self.engine = _core.Engine(
            self.model, self.tokenizer, n_ctx=n_ctx, kv_cache_type=kv_cache_type, pinned=bool(batch_invariant)
        )
        self._kv_cache_type = kv_cache_type
        self._session: _core.Session | None = None
        self._cache: _core.Conversation | None = None
        self._chat_choice = (chat_format, chat_template)
        self._chat_template: ChatTemplate | BuiltinTemplate | None = None
        if chat_format is not None or chat_template is not None:
            _ = self.chat_template  # a bad format name or template fails here, not at the first chat

    def __repr__(self) -> str:
        return f"LLM({str(self.path)!r}, {self.model!r}, n_ctx={self.n_ctx})"

    @property
    def n_ctx(self) -> int:
        """Context capacity in tokens."""
        return self.engine.n_ctx

    def moe_stats(self) -> dict[str, Any] | None:
        """The expert store's numbers: hits, misses, ``hit_rate``, ``bytes_read``, prefetch
        counts, the cache shape and a one-paragraph ``report`` (``None`` unless streaming)."""
        return self.model.moe_stats()

    def moe_flush(self) -> None:
        """Write the expert trace (``moe_trace``) and the usage histogram now (closing the model
        writes them again with what came after)."""
        self.model.moe_flush()

    @property
    def n_vocab(self) -> int:
        """Vocabulary size."""
        return self.model.n_vocab

    # -- tokens -------------------------------------------------------------------
    def tokenize(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text`` (BOS added when the model asks and ``add_special``)."""
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int], *, special: bool = False) -> str:
        """Text of ``ids``."""
        return self.tokenizer.decode(list(ids), special=special)

    # -- embeddings -------------------------------------------------------------------
    def _embed_ids(self, item: Any, where: str, truncate: bool) -> list[int]:
        if isinstance(item, str):
            ids = self.tokenize(item) if item else []
        elif isinstance(item, Sequence) and item and all(isinstance(t, int) and not isinstance(t, bool) for t in item):
            ids = [int(t) for t in item]
        else:
            kind = type(item).__name__
            raise ArgumentTypeError(f"{where} must be a str or a non-empty list of token ids, not {kind}")
        if not ids:
            raise InvalidArgumentError(f"{where} is empty")
        if len(ids) > self.n_ctx:
            if not truncate:
                raise InvalidArgumentError(
                    f"{where} has {len(ids)} tokens; the context holds {self.n_ctx} (pass truncate=True to cut it)"
                )
            ids = ids[: self.n_ctx]
        return ids

    def _embed_inputs(self, input: Any, truncate: bool) -> tuple[bool, list[list[int]]]:
        """(whether ``input`` is one item, the token ids of each item)."""
        one = isinstance(input, str) or (
            isinstance(input, Sequence) and bool(input) and all(isinstance(t, int) for t in input)
        )
        if one:
            return True, [self._embed_ids(input, "input", truncate)]
        if isinstance(input, (bytes, Mapping)) or not isinstance(input, Sequence) or not input:
            raise ArgumentTypeError(
                f"input must be a str, a list of str or token ids, not {type(input).__name__ if input else 'empty'}"
            )
        return False, [self._embed_ids(x, f"input[{i}]", truncate) for i, x in enumerate(input)]

    def _embeddings(
        self, input: Any, *, normalize: bool, truncate: bool, pooling: str | None
    ) -> tuple[bool, list[list[float]], int]:
        """(whether ``input`` is one item, each item's embedding, the tokens embedded)."""
        one, inputs = self._embed_inputs(input, truncate)
        vectors = [self.engine.embed(ids, normalize=normalize, pooling=pooling).tolist() for ids in inputs]
        return one, vectors, sum(len(ids) for ids in inputs)

    def embed(
        self,
        input: str | Sequence[str] | Sequence[int],
        *,
        normalize: bool = True,
        truncate: bool = False,
        pooling: str | None = None,
    ) -> list[float] | list[list[float]]:
        """Embeddings of ``input`` (a text, a list of texts, or token ids): the model's final hidden states
        over the text's tokens (special tokens included as the tokenizer adds them) pooled as llama.cpp
        pools them, scaled to unit length with ``normalize``; one vector for one input, a list for a list.
        ``pooling`` is ``"mean"``, ``"cls"`` (first token) or ``"last"`` (last token); by default the one
        the GGUF declares (``{arch}.pooling_type``: embedding models such as Qwen3-Embedding pool their
        last token), the mean where it declares none (:attr:`pooling`). Each input runs on a temporary
        sequence (the prompt cache and running generations are untouched). An input longer than the
        context raises :class:`InvalidArgumentError`, or is cut with ``truncate``. ``fucina serve``
        answers ``/v1/embeddings`` the same way."""
        if not isinstance(normalize, bool):
            raise ArgumentTypeError(f"normalize must be a bool, not {type(normalize).__name__}")
        if pooling is not None and pooling not in _POOLINGS:
            raise InvalidArgumentError(f"pooling must be one of {', '.join(_POOLINGS)} or None, not {pooling!r}")
        one, vectors, _ = self._embeddings(input, normalize=normalize, truncate=bool(truncate), pooling=pooling)
        return vectors[0] if one else vectors

    @property
    def pooling(self) -> str:
        """How :meth:`embed` pools by default: what the GGUF declares, ``"mean"`` where it declares none."""
        return self.engine.pooling

    def create_embedding(self, input: str | Sequence[str], model: str | None = None) -> dict[str, Any]:
        """OpenAI's ``embeddings.create`` answer for ``input`` (unit-length vectors pooled as :meth:`embed`
        pools by default, as ``fucina serve``'s ``/v1/embeddings``): ``{"object": "list", "data":
        [{"object": "embedding", "embedding", "index"}], "model", "usage": {"prompt_tokens",
        "total_tokens"}}``."""
        _, vectors, total = self._embeddings(input, normalize=True, truncate=False, pooling=None)
        data = [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)]
        return {
            "object": "list",
            "data": data,
            "model": model if model is not None else str(self.path),
            "usage": {"prompt_tokens": total, "total_tokens": total},
        }

    # -- chat templates -------------------------------------------------------------
    def _special_text(self, token: int | None) -> str:
        if token is None:
            return ""
        return self.tokenizer.token_to_piece(token, special=True).decode("utf-8", "replace")

    @property
    def chat_template(self) -> ChatTemplate | BuiltinTemplate:
        """The template chats render with: the ``chat_format`` / ``chat_template`` given at
        construction, else the GGUF's ``tokenizer.chat_template``, else the built-in format whose
        turn markers the vocabulary holds (see :func:`fucina.chat.select_chat_template`)."""
        if self._chat_template is None:
            with _core.GGUFFile(self.path, tensors=False) as f:
                own = f.get("tokenizer.chat_template")
            fmt, source = self._chat_choice
            self._chat_template = select_chat_template(
                own if isinstance(own, str) else None,
                bos_token=self._special_text(self.tokenizer.bos_id),
                eos_token=self._special_text(self.tokenizer.eos_id),
                has_token=lambda text: self.tokenizer.token_to_id(text) is not None,
                chat_format=fmt,
                chat_template=source,
            )
        return self._chat_template

    @property
    def chat_stop_ids(self) -> list[int]:
        """Token ids that end an assistant turn besides the end-of-generation tokens: the built-in
        format's stop marker (a Jinja template's turn end is one of the model's EOG tokens)."""
        template = self.chat_template
        if isinstance(template, BuiltinTemplate):
            marker = self.tokenizer.token_to_id(template.stop_marker)
            if marker is not None and not self.tokenizer.is_eog(marker):
                return [marker]
        return []

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        tokenize: bool = True,
        **kwargs: Any,
    ) -> list[int] | str:
        """``messages`` rendered with :attr:`chat_template` (transformers' name and semantics):
        token ids by default, the text with ``tokenize=False``. The text is tokenized with special
        tokens parsed and no BOS added (templates write their own, as llama-cpp-python assumes);
        extra keywords (``enable_thinking=False``, ``documents=[...]``) go to the template."""
        text = self.chat_template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt, **kwargs)
        if not tokenize:
            return text
        return self.tokenize(text, add_special=False, parse_special=True)

    def chat(
        self,
        system: str | None = None,
        *,
        max_tokens: int | None = 512,
        stop: str | Iterable[str] | None = None,
        params: SamplingParams | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        speculation: bool = True,
        **sampling: Any,
    ) -> Conversation:
        """A new :class:`~fucina.Conversation` with this model: ``send`` / ``stream`` turns on one
        KV cache. Sampling is llama.cpp's (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05)
        unless ``params`` or sampling keywords (``temperature=0``, ``seed=1``, ...) say otherwise;
        ``template_kwargs`` go to the chat template (``{"enable_thinking": False}``)."""
        unknown = sorted(set(sampling) - set(SAMPLING_FIELDS))
        if unknown:
            raise ArgumentTypeError(f"unknown argument(s) {unknown}; sampling arguments are {list(SAMPLING_FIELDS)}")
        merged = _params(_COMPLETION_DEFAULTS, params, sampling)
        return Conversation(
            self,
            system=system,
            max_tokens=max_tokens,
            params=merged,
            stop=stop,
            template_kwargs=template_kwargs,
            speculation=speculation,
        )

    # -- low level ----------------------------------------------------------------
    @property
    def session(self) -> _core.Session:
        """The low-level context :meth:`eval` appends to (created on first use)."""
        if self._session is None:
            self._session = _core.Session(self.model, n_ctx=self.n_ctx, kv_cache_type=self._kv_cache_type)
        return self._session

    def eval(self, ids: Sequence[int]) -> npt.NDArray[np.float32]:
        """Append ``ids`` to the low-level context; return the last token's logits."""
        result: npt.NDArray[np.float32] = self.session.eval(list(ids))
        return result

    def reset(self) -> None:
        """Forget the low-level context."""
        self.session.reset()

    @property
    def tokens(self) -> list[int]:
        """Tokens in the low-level context."""
        return self.session.tokens

    def logits(self, ids: Sequence[int], *, all: bool = False) -> npt.NDArray[np.float32]:
        """Logits of ``ids`` evaluated from an empty context: ``[n_vocab]`` for the last
        token, or ``[len(ids), n_vocab]`` with ``all``. The low-level context is left as it was."""
        result: npt.NDArray[np.float32] = self.engine.logits(list(ids), all=all)
        return result

    # -- generation ---------------------------------------------------------------
    def _prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, (str, bytes)):
            ids = self.tokenize(prompt)
        elif isinstance(prompt, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = [int(t) for t in prompt]
        else:
            raise ArgumentTypeError(f"prompt must be a str or a sequence of token ids, not {type(prompt).__name__}")
        if not ids:
            raise InvalidArgumentError("the prompt is empty")
        return ids

    def _start(
        self,
        prompt: str | Sequence[int],
        max_tokens: int | None,
        params: SamplingParams,
        stop: str | Iterable[str] | None,
        logit_processors: LogitProcessor | Sequence[LogitProcessor] | None,
        on_prefill: ProgressCallback | None,
        logprobs: int | None = None,
        ignore_eos: bool = False,
        stop_ids: Sequence[int] = (),
        special: bool = False,
        cache_prompt: bool = False,
        speculation: bool = True,
        reference: str | Sequence[int] | None = None,
        grammar: Grammar | None = None,
        reasoning_budget: tuple[list[int], list[int], list[int], int, bool] | None = None,
    ) -> tuple[list[int], _core.Generation]:
        _check_max_tokens(max_tokens)
        stops = _stop_list(stop)
        procs = _processor_list(logit_processors)
        if on_prefill is not None and not callable(on_prefill):
            raise ArgumentTypeError("on_prefill must be callable")
        ids = self._prompt_ids(prompt)
        gen = self.engine.generate(
            ids,
            max_tokens=max_tokens,
            stop=stops,
            logprobs=logprobs,
            processors=procs,
            on_prefill=on_prefill,
            ignore_eos=ignore_eos,
            stop_ids=list(stop_ids),
            special=special,
            conversation=self._prompt_cache() if cache_prompt else None,
            speculation=bool(speculation),
            reference=self._reference_ids(reference),
            grammar=as_core(grammar),
            reasoning_budget=reasoning_budget,
            **params.to_core(),
        )
        return ids, gen

    def _reference_ids(self, reference: str | Sequence[int] | None) -> list[int] | None:
        if reference is None:
            return None
        if isinstance(reference, str):
            return self.tokenize(reference, add_special=False)
        if isinstance(reference, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in reference):
            return [int(t) for t in reference]
        raise ArgumentTypeError(f"reference must be a str or a sequence of token ids, not {type(reference).__name__}")

    def _prompt_cache(self) -> _core.Conversation | None:
        """The sequence ``cache_prompt`` requests continue on (llama.cpp's prompt cache: the longest
        common prefix with the previous request is kept), or ``None`` while one is still running
        on it (that request then gets a fresh sequence)."""
        if self._cache is None:
            self._cache = _core.Conversation(self.engine)
        return None if self._cache.busy else self._cache

    def _start_greedy(self, scope: dict[str, Any]) -> _core.Generation:
        """The generation ``generate`` / ``stream`` / ``stream_tokens`` start from their
        arguments (``locals()``): greedy unless sampling arguments or ``params`` say otherwise."""
        params_ = _params(_GREEDY, scope["params"], dict(_sampling_args(scope)))
        _, gen = self._start(
            scope["prompt"],
            scope["max_tokens"],
            params_,
            scope["stop"],
            scope["logit_processors"],
            scope["on_prefill"],
            ignore_eos=scope["ignore_eos"],
            speculation=scope["speculation"],
            reference=scope["reference"],
            grammar=scope["grammar"],
        )
        return gen

    def stream_tokens(
        self,
        prompt: str | Sequence[int],
        max_tokens: int | None = 128,
        *,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        typical_p: float | None = None,
        repeat_penalty: float | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        repeat_last_n: int | None = None,
        seed: int | None = None,
        logit_bias: Mapping[int, float] | None = None,
        mirostat_mode: int | None = None,
        mirostat_tau: float | None = None,
        mirostat_eta: float | None = None,
        params: SamplingParams | None = None,
        stop: str | Iterable[str] | None = None,
        logit_processors: LogitProcessor | Sequence[LogitProcessor] | None = None,
        on_prefill: ProgressCallback | None = None,
        ignore_eos: bool = False,
        speculation: bool = True,
        reference: str | Sequence[int] | None = None,
        grammar: Grammar | None = None,
    ) -> Generator[int, None, None]:
        """Continue ``prompt`` one token id at a time (see :meth:`stream`): ends after an
        end-of-generation token (not yielded), a stop string (the token that completed
        it is yielded), or ``max_tokens`` (``None``: until the context is full)."""
        return self._iter_tokens(self._start_greedy(locals()))

    @staticmethod
    def _iter_tokens(gen: _core.Generation) -> Generator[int, None, None]:
        try:
            for token, emitted, _text, _finish, _lp in gen:
                if emitted:
                    yield token
        finally:
            gen.close()

    @staticmethod
    def _iter_text(gen: _core.Generation) -> Generator[str, None, None]:
        try:
            for _token, _emitted, text, _finish, _lp in gen:
                if text:
                    yield text
        finally:
            gen.close()

    def stream(
        self,
        prompt: str | Sequence[int],
        max_tokens: int | None = 128,
        *,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        typical_p: float | None = None,
        repeat_penalty: float | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        repeat_last_n: int | None = None,
        seed: int | None = None,
        logit_bias: Mapping[int, float] | None = None,
        mirostat_mode: int | None = None,
        mirostat_tau: float | None = None,
        mirostat_eta: float | None = None,
        params: SamplingParams | None = None,
        stop: str | Iterable[str] | None = None,
        logit_processors: LogitProcessor | Sequence[LogitProcessor] | None = None,
        on_prefill: ProgressCallback | None = None,
        ignore_eos: bool = False,
        speculation: bool = True,
        reference: str | Sequence[int] | None = None,
        grammar: Grammar | None = None,
    ) -> Generator[str, None, None]:
        """Continue ``prompt`` (text or token ids), yielding text pieces (complete UTF-8).

        Greedy unless sampling arguments (llama-cpp-python's names) or ``params`` are
        given. Stops at an end-of-generation token, after ``max_tokens`` tokens, or
        before the first ``stop`` string (never emitted, even when split over tokens).
        ``logit_processors`` edit each step's logits in place; ``on_prefill(done,
        total)`` follows the prompt's evaluation (chunks of 512 tokens); ``ignore_eos``
        keeps generating past end-of-generation tokens (benchmarks). Arguments are
        checked before any compute; closing the iterator early stops generation.

        Lossless speculative decoding is on (``speculation=False`` turns it off): drafts from
        text the model has already seen (the prompt, the output so far, a ``reference``
        document or token ids: RAG) are verified several tokens per forward, and the output,
        draws included, is exactly what plain decoding gives; a cost gate keeps it off where
        drafts do not pay. Generations with Python ``logit_processors`` decode plainly.

        ``grammar`` (a :class:`fucina.Grammar`: JSON Schema, regex, Lark) restricts the output
        to what it matches: tokens it forbids are masked, tokens it leaves no choice in are
        committed without sampling, and the generation ends with the end-of-turn token once it
        is complete (or with ``max_tokens``, finish reason ``"length"``).
        """
        return self._iter_text(self._start_greedy(locals()))

    def generate(
        self,
        prompt: str | Sequence[int],
        max_tokens: int | None = 128,
        *,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        typical_p: float | None = None,
        repeat_penalty: float | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        repeat_last_n: int | None = None,
        seed: int | None = None,
        logit_bias: Mapping[int, float] | None = None,
        mirostat_mode: int | None = None,
        mirostat_tau: float | None = None,
        mirostat_eta: float | None = None,
        params: SamplingParams | None = None,
        stop: str | Iterable[str] | None = None,
        logit_processors: LogitProcessor | Sequence[LogitProcessor] | None = None,
        on_prefill: ProgressCallback | None = None,
        ignore_eos: bool = False,
        speculation: bool = True,
        reference: str | Sequence[int] | None = None,
        grammar: Grammar | None = None,
    ) -> str:
        """The continuation of ``prompt`` as one string (see :meth:`stream`)."""
        return "".join(self._iter_text(self._start_greedy(locals())))

    def create_completion(
        self,
        prompt: str | Sequence[int],
        max_tokens: int | None = 16,
        *,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: str | Iterable[str] | None = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        logit_bias: Mapping[int, float] | None = None,
        logit_processors: LogitProcessor | Sequence[LogitProcessor] | None = None,
        repeat_last_n: int = 64,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        params: SamplingParams | None = None,
        model: str | None = None,
        speculation: bool = True,
        reference: str | Sequence[int] | None = None,
        grammar: Grammar | None = None,
    ) -> Any:
        """An OpenAI ``text_completion`` (llama-cpp-python's ``create_completion``).

        Returns ``{"id", "object": "text_completion", "created", "model", "choices":
        [{"index", "text", "logprobs", "finish_reason": "stop" | "length"}], "usage"}``,
        or with ``stream=True`` an iterator of chunk dicts of the same shape (the last
        one carries ``finish_reason``). Defaults are llama-cpp-python's (sampling at
        temperature 0.8); ``logprobs=N`` adds OpenAI's ``tokens`` / ``token_logprobs``
        / ``top_logprobs`` / ``text_offset`` from the model's own distribution;
        ``echo`` prepends the prompt (with its logprobs, the first one ``None``).
        """
        if logprobs is not None:
            if isinstance(logprobs, bool) or not isinstance(logprobs, int):
                raise ArgumentTypeError(f"logprobs must be an int or None, not {type(logprobs).__name__}")
            if logprobs < 0:
                raise InvalidArgumentError(f"logprobs must be >= 0, not {logprobs}")
        if params is None:
            params_ = SamplingParams(
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                min_p=min_p,
                typical_p=typical_p,
                repeat_penalty=repeat_penalty,
                presence_penalty=presence_penalty,
                frequency_penalty=frequency_penalty,
                repeat_last_n=repeat_last_n,
                seed=seed,
                logit_bias=logit_bias,
                mirostat_mode=mirostat_mode,
                mirostat_tau=mirostat_tau,
                mirostat_eta=mirostat_eta,
            )
        else:
            params_ = _params(_COMPLETION_DEFAULTS, params, {})
        ids, gen = self._start(
            prompt,
            max_tokens,
            params_,
            stop,
            logit_processors,
            None,
            logprobs,
            speculation=speculation,
            reference=reference,
            grammar=grammar,
        )
        prompt_text = prompt if isinstance(prompt, str) else self.detokenize(ids)
        meta = {
            "id": f"cmpl-{uuid.uuid4()}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model if model is not None else str(self.path),
        }
        prompt_lp = self._prompt_logprobs(ids, logprobs) if (echo and logprobs is not None) else None
        chunks = self._completion_chunks(gen, meta, prompt_text, echo, logprobs, prompt_lp, ids)
        if stream:
            return chunks
        text, finish, lp = "", None, _Logprobs() if logprobs is not None else None
        for chunk in chunks:
            choice = chunk["choices"][0]
            text += choice["text"]
            finish = choice["finish_reason"] or finish
            if lp is not None and choice["logprobs"] is not None:
                lp.extend(choice["logprobs"])
        n_gen = sum(1 for t in gen.tokens if not self.tokenizer.is_eog(t))
        return {
            **meta,
            "choices": [
                {
                    "text": text,
                    "index": 0,
                    "logprobs": lp.as_dict() if lp is not None else None,
                    "finish_reason": finish,
                }
            ],
            "usage": {
                "prompt_tokens": len(ids),
                "completion_tokens": n_gen,
                "total_tokens": len(ids) + n_gen,
            },
        }

    def create_chat_completion(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        functions: Sequence[Mapping[str, Any]] | None = None,
        function_call: str | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        response_format: Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        model: str | None = None,
        logits_processor: LogitProcessor | Sequence[LogitProcessor] | None = None,
        logit_bias: Mapping[int, float] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        repeat_last_n: int = 64,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        params: SamplingParams | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        cache_prompt: bool = True,
        speculation: bool = True,
        grammar: Grammar | None = None,
        parallel_tool_calls: bool | None = None,
        reasoning_format: str = "auto",
        reasoning_effort: str | None = None,
        reasoning_budget: int | None = None,
        reasoning_budget_message: str = "",
        continue_final_message: bool | None = None,
        reference: str | Sequence[int] | None = None,
    ) -> Any:
        """An OpenAI ``chat.completion`` (llama-cpp-python's ``create_chat_completion``: its keyword
        names and defaults, temperature 0.2).

        ``messages`` are OpenAI message dicts (``content`` a string or a list of ``{"type": "text"}``
        parts; assistant ``tool_calls`` with ``arguments`` as a JSON string or a dict; ``tool``
        messages with their ``tool_call_id``), rendered with :attr:`chat_template`. Returns ``{"id",
        "object": "chat.completion", "created", "model", "choices": [{"index", "message": {"role":
        "assistant", "content", "tool_calls"?, "reasoning_content"?}, "logprobs", "finish_reason"}],
        "usage"}``; with
        ``stream=True`` an iterator of ``chat.completion.chunk`` dicts: a first ``{"role":
        "assistant"}`` delta, ``{"content": ...}`` deltas, one ``{"tool_calls": [...]}`` delta holding
        each call whole (with its ``index``), and a last empty delta carrying ``finish_reason``.

        ``tools`` are OpenAI function schemas, rendered by the template; the reply is parsed back
        with the call syntax the template teaches (:mod:`fucina.tool_calls`): calls land in
        ``message.tool_calls`` with ``finish_reason: "tool_calls"`` and ``content`` ``None`` when the
        reply is only calls. While tools are offered, special tokens are kept in the reply's text (call
        markers are often control tokens), and a stream holds back text that may start a call. A
        template with no tool syntax gets the tools described in the prompt, Gemma's ``tool_code``
        convention (see :mod:`fucina.chat_completion`). ``tool_choice="none"`` leaves the tools out of
        the prompt and parses no calls; ``"required"`` and a named function (only that tool is offered)
        are enforced by a grammar over the template's call syntax (:mod:`fucina.tool_grammar`): the
        reply is one or more calls of the offered tools with arguments valid against their schemas
        (exactly one call for a named function or ``parallel_tool_calls=False``; Gemma 4's and
        Qwen3-Coder's calls fix the tool and the parameter names, their values stay free text).
        ``functions`` / ``function_call`` are the legacy spellings of ``tools`` / ``tool_choice``.

        A thinking model's reasoning block (``<think>…</think>``, Gemma 4's thought channel, gpt-oss's
        analysis channel: the markers the template writes, :mod:`fucina.reasoning`) is returned as
        ``message.reasoning_content`` (streamed as ``delta.reasoning_content``) and ``content`` holds
        the answer alone, from which calls are parsed: llama.cpp's server default
        (``reasoning_format="auto"``, or ``"deepseek"``). ``reasoning_format="none"`` leaves the
        reasoning in the content. ``reasoning_effort`` (OpenAI's ``"none"`` … ``"high"``) goes to the
        template as llama.cpp passes it: ``"none"`` sets ``enable_thinking=False`` (Qwen3, Gemma 4,
        ...), any other effort is the template's ``reasoning_effort`` (gpt-oss). While a template has
        reasoning markers, special tokens are kept in the reply's text as they are for tools.
        ``reasoning_budget`` caps the reasoning block at that many tokens (llama.cpp's
        ``--reasoning-budget``: ``-1`` or ``None`` for no cap, ``0`` to close it at once): when the cap is
        reached, ``reasoning_budget_message`` (if any) and the block's closing marker are forced and the
        model goes on with its answer. It needs a template with reasoning markers and no grammar.

        A last assistant message is a prefill, as llama.cpp's server reads it: the reply continues
        that message instead of starting a new turn (its ``content``, after its ``reasoning_content``
        in the template's reasoning block, which stays open when the message has only reasoning), and
        ``content`` / ``reasoning_content`` hold only what the model added. A call the prefill opens
        is parsed whole, and a ``response_format`` or forced call grammar continues the prefill (it must
        be a start the grammar allows). ``continue_final_message=False`` renders such a message as the
        template does instead (most open a new turn after it); ``True`` requires one.

        ``response_format`` (``{"type": "text" | "json_object"}``, with an optional ``"schema"``, or
        ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``) constrains the reply
        with a :class:`fucina.Grammar`: the content is JSON (valid against the schema when one is
        given; enforced ``strict`` or not). Keywords llguidance does not implement are left
        unenforced with a :class:`fucina.GrammarWarning`, or, with ``"strict": true``, raise
        :class:`fucina.GrammarError` naming them before anything is generated (see
        :meth:`fucina.Grammar.json_schema`); ``grammar`` (a :class:`fucina.Grammar`) constrains the
        reply to any grammar instead.
        ``logprobs=True`` adds OpenAI's ``choices[].logprobs.content[{token, logprob, bytes,
        top_logprobs}]`` with ``top_logprobs`` alternatives (0-20). ``logits_processor`` takes fucina
        logit processors (in place, see :data:`LogitProcessor`); ``chat_template_kwargs`` are extra
        template variables (``{"enable_thinking": False}``). With ``cache_prompt`` (the default, as in
        llama.cpp's server and llama-cpp-python) the request continues on the LLM's prompt-cache
        sequence, so a client re-sending a growing history prefills only what is new (a request made
        while another still streams on it gets a fresh sequence); pass ``cache_prompt=False``, or
        build the LLM with ``batch_invariant=True``, for results independent of earlier requests down
        to the last bit. ``reference`` (text or token ids the reply is expected to repeat: a file
        being edited, as OpenAI's Predicted Outputs) is quoted by the speculative drafts; the reply is
        the same with it or without. Bad input raises
        :class:`InvalidArgumentError` / :class:`ArgumentTypeError` naming the field, a failing template
        :class:`fucina.ChatTemplateError`.
        """
        return _create_chat_completion(
            self,
            messages,
            functions=functions,
            function_call=function_call,
            tools=tools,
            tool_choice=tool_choice,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            typical_p=typical_p,
            stream=stream,
            stop=stop,
            seed=seed,
            response_format=response_format,
            max_tokens=max_tokens,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            repeat_penalty=repeat_penalty,
            model=model,
            logits_processor=logits_processor,
            logit_bias=logit_bias,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            repeat_last_n=repeat_last_n,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
            params=params,
            chat_template_kwargs=chat_template_kwargs,
            cache_prompt=cache_prompt,
            speculation=speculation,
            grammar=grammar,
            parallel_tool_calls=parallel_tool_calls,
            reasoning_format=reasoning_format,
            reasoning_effort=reasoning_effort,
            reasoning_budget=reasoning_budget,
            reasoning_budget_message=reasoning_budget_message,
            continue_final_message=continue_final_message,
            reference=reference,
        )

    def _piece(self, token: int) -> str:
        return self.tokenizer.token_to_piece(token, special=False).decode("utf-8", errors="ignore")

    def _prompt_logprobs(self, ids: list[int], n: int) -> list[tuple[float | None, list[tuple[int, float]]]]:
        rows = self.engine.prompt_logprobs(ids, n)
        out: list[tuple[float | None, list[tuple[int, float]]]] = [(None, [])]
        out.extend(rows)
        return out

    def _completion_chunks(
        self,
        gen: _core.Generation,
        meta: dict[str, Any],
        prompt_text: str,
        echo: bool,
        logprobs: int | None,
        prompt_lp: list[tuple[float | None, list[tuple[int, float]]]] | None,
        ids: list[int],
    ) -> Iterator[dict[str, Any]]:
        offset = 0 if echo else len(prompt_text)

        def chunk(text: str, lp: _Logprobs | None, finish: str | None) -> dict[str, Any]:
            return {
                **meta,
                "choices": [
                    {
                        "text": text,
                        "index": 0,
                        "logprobs": lp.as_dict() if lp is not None else None,
                        "finish_reason": finish,
                    }
                ],
            }

        try:
            if echo:
                lp0 = None
                if prompt_lp is not None:
                    lp0 = _Logprobs()
                    for tok, (tlp, top) in zip(ids, prompt_lp, strict=True):
                        piece = self._piece(tok)
                        lp0.add(piece, offset, tlp, {self._piece(t): v for t, v in top} if tlp is not None else None)
                        offset += len(piece)
                else:
                    offset = len(prompt_text)
                yield chunk(prompt_text, lp0, None)
            emitted_len = 0
            for token, emitted, text, finish, tok_lp in gen:
                lp = None
                if logprobs is not None and tok_lp is not None and emitted:
                    piece = self._piece(token)
                    lp = _Logprobs()
                    lp.add(piece, offset + emitted_len, tok_lp[0], {self._piece(t): v for t, v in tok_lp[1]})
                emitted_len += len(text)
                if text or finish is not None or lp is not None:
                    yield chunk(text, lp, finish)
        finally:
            gen.close()


class _Logprobs:
    """OpenAI's completion ``logprobs`` object, built token by token."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.text_offset: list[int] = []
        self.token_logprobs: list[float | None] = []
        self.top_logprobs: list[dict[str, float] | None] = []

    def add(self, piece: str, offset: int, logprob: float | None, top: dict[str, float] | None) -> None:
        self.tokens.append(piece)
        self.text_offset.append(offset)
        self.token_logprobs.append(logprob)
        self.top_logprobs.append(top)

    def extend(self, d: dict[str, Any]) -> None:
        self.tokens += d["tokens"]
        self.text_offset += d["text_offset"]
        self.token_logprobs += d["token_logprobs"]
        self.top_logprobs += d["top_logprobs"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "text_offset": self.text_offset,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
        }


def _sampling_args(scope: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The sampling arguments among a method's ``locals()``."""
    for name in SAMPLING_FIELDS:
        if name in scope:
            yield name, scope[name]
