"""Type stubs for the Rust extension module `fucina._core` (checked by mypy.stubtest)."""

from collections.abc import Callable, Iterator, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, final

import numpy as np
import numpy.typing as npt

__version__: str
__all__ = [
    "FucinaError",
    "GGUFError",
    "GGUFFile",
    "GGUFWriter",
    "TensorInfo",
    "UnsupportedModelError",
    "__version__",
    "build_info",
    "read_gguf_header",
    "dequantize",
    "quantize",
    "Tokenizer",
    "StreamDecoder",
    "Model",
    "Session",
    "Engine",
    "Generation",
    "Conversation",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "Grammar",
    "GrammarCompiler",
    "GrammarError",
    "GrammarWarning",
    "GrammarMatcher",
    "QueueFullError",
    "Scheduler",
    "ScheduledRequest",
    "experts_replay",
    "sample_logits",
]

class FucinaError(Exception):
    """Base class of every error fucina raises."""

class GGUFError(FucinaError, ValueError):
    """A GGUF file is malformed, truncated, or used wrongly."""

class UnsupportedModelError(FucinaError, ValueError):
    """The model's architecture or tensor types are not supported."""

class InvalidArgumentError(FucinaError, ValueError):
    """An argument has a value fucina cannot use (the message names it)."""

class ArgumentTypeError(FucinaError, TypeError):
    """An argument has a type fucina cannot use (the message names it)."""

class GrammarError(InvalidArgumentError):
    """A grammar, regex or JSON Schema is invalid or uses an unsupported feature, or generation cannot follow it
    any further (the message names it)."""

class GrammarWarning(UserWarning):
    """Part of a JSON Schema (a keyword, format or pattern llguidance does not implement) is not enforced."""

@final
class Grammar:
    """A constraint on generated text (see ``fucina.Grammar``)."""

    @staticmethod
    def json_schema(schema: str) -> Grammar: ...
    @staticmethod
    def compiled_json_schema(schema: str, lenient: bool = False) -> str: ...
    @staticmethod
    def json_object() -> Grammar: ...
    @staticmethod
    def regex(pattern: str) -> Grammar: ...
    @staticmethod
    def lark(text: str) -> Grammar: ...
    def after(self, prefix: str) -> Grammar: ...
    @property
    def prefix(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def source(self) -> str: ...

@final
class GrammarCompiler:
    """Compiles grammars against a tokenizer's vocabulary."""

    def __new__(cls, tokenizer: Tokenizer, n_vocab: int | None = None) -> GrammarCompiler: ...
    @property
    def vocab_size(self) -> int: ...
    def compile(self, grammar: Grammar) -> GrammarMatcher: ...

@final
class GrammarMatcher:
    """One grammar's state over a token stream."""

    def mask(self) -> tuple[npt.NDArray[np.bool_], float]:
        """Allowed next tokens and the microseconds the mask took."""
    def consume(self, tokens: Sequence[int]) -> None: ...
    def forced_tokens(self) -> list[int]: ...
    def valid_prefix_len(self, tokens: Sequence[int]) -> int: ...
    @property
    def accepting(self) -> bool: ...
    @property
    def stopped(self) -> bool: ...

class QueueFullError(FucinaError, RuntimeError):
    """A scheduler's queue is full: the request was not queued (retry later)."""

def sample_logits(logits: npt.NDArray[np.float32], history: Sequence[int], params: Any, seed: int) -> int:
    """The token a fresh sampler with ``params`` (a ``fucina.SamplingParams``) and RNG ``seed`` draws
    from ``logits`` (not modified) after ``history``."""

def experts_replay(
    trace: str | PathLike[str],
    slots: Sequence[int] | None = None,
    pins_from: str | PathLike[str] | None = None,
    heat_decay: float | None = None,
) -> dict[str, Any]:
    """Replay a recorded expert trace: the live counts and a capacity sweep of LRU, heat,
    segmented LRU, Belady and pinned+LRU (``rows``: one dict per policy and capacity)."""

def build_info() -> dict[str, Any]:
    """Version, build and CPU facts, for bug reports: ``version``, ``target_arch``,
    ``target_os``, ``debug``, ``n_cpus``, ``isa`` (the kernels chosen for this CPU, or
    ``FUCINA_ISA``) and ``ggml_build`` (``"avx2"`` or ``"avx512"``: the llama.cpp build
    whose vector-width-dependent float orders the logits follow, the one llama.cpp
    makes on this CPU unless ``FUCINA_GGML_BUILD`` says otherwise)."""

@final
class TensorInfo:
    """A tensor's header entry."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str:
        """ggml type name, e.g. ``"Q4_K"``."""
    @property
    def type_id(self) -> int: ...
    @property
    def dims(self) -> list[int]:
        """Dimensions in ggml order (fastest-varying first)."""
    @property
    def shape(self) -> list[int]:
        """Shape in numpy (row-major) order: ``dims`` reversed."""
    @property
    def n_elements(self) -> int: ...
    @property
    def n_bytes(self) -> int: ...
    @property
    def offset(self) -> int:
        """Absolute byte offset of the data in its file."""
    @property
    def part(self) -> int:
        """Index of the split part holding the data."""

@final
class GGUFFile:
    """A GGUF model (every part of a split model), memory-mapped.

    Opening parses the header only; tensor data is read when you touch it.
    ``tensors=False`` skips checking that tensor data is present (partial
    downloads, vocabulary-only files).
    """

    def __new__(cls, path: str | PathLike[str], *, tensors: bool = True) -> GGUFFile: ...
    @property
    def metadata(self) -> dict[str, Any]:
        """All key/value metadata as plain Python values (lists for arrays)."""
    @property
    def metadata_types(self) -> dict[str, str]:
        """Value type of each key in gguf-py naming, e.g. ``"ARRAY[STRING]"``."""
    def get(self, key: str, default: Any = None) -> Any:
        """One metadata value, or ``default`` when absent."""
    @property
    def tensors(self) -> dict[str, TensorInfo]:
        """Tensor infos by name, in file order."""
    def tensor_bytes(self, name: str) -> npt.NDArray[np.uint8]:
        """A tensor's raw bytes: read-only, zero-copy."""
    def tensor(self, name: str, *, dequantize: bool = False) -> npt.NDArray[Any]:
        """A tensor as a zero-copy array (raw uint16 bits for BF16, raw blocks for quantized
        types), or with ``dequantize=True`` a new float32 array."""
    @property
    def version(self) -> int: ...
    @property
    def alignment(self) -> int: ...
    @property
    def paths(self) -> list[Path]: ...
    @property
    def data_offsets(self) -> list[int]: ...
    @property
    def tensors_validated(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Release the file; arrays already returned stay valid."""
    def __enter__(self) -> GGUFFile: ...
    def __exit__(self, *_args: object) -> bool: ...
    def __len__(self) -> int: ...
    def __contains__(self, name: str, /) -> bool: ...

def read_gguf_header(path: str | PathLike[str]) -> GGUFFile:
    """Parse only the header and key/value section (tensor data may be absent)."""

@final
class GGUFWriter:
    """Builds a GGUF file: metadata in insertion order, then tensors."""

    def __new__(cls, version: int = 3) -> GGUFWriter: ...
    @staticmethod
    def from_file(file: GGUFFile, part: int = 0) -> GGUFWriter:
        """A writer holding a copy of one part of an open file."""
    def add(self, key: str, value: Any, type: str | None = None, item_type: str | None = None) -> None:
        """Set a metadata key; types are inferred like gguf-py unless given."""
    def add_tensor(
        self,
        name: str,
        data: npt.NDArray[Any] | bytes,
        ggml_type: str | int | None = None,
        shape: Sequence[int] | None = None,
    ) -> None:
        """Add a tensor from a numpy array, or raw blocks with ``ggml_type`` and ``shape``."""
    def write(self, path: str | PathLike[str]) -> None:
        """Write the file atomically."""
    def to_bytes(self) -> bytes: ...

def dequantize(raw: bytes, ggml_type: str | int, shape: Sequence[int]) -> npt.NDArray[np.float32]:
    """Decode raw block bytes to float32 of ``shape`` (numpy order; last dim = ggml row)."""

def quantize(array: npt.ArrayLike, ggml_type: str | int) -> bytes:
    """Encode a float array (last dim a multiple of the block size) to block bytes."""

@final
class StreamDecoder:
    """Token-by-token detokenizer that emits only complete UTF-8 characters."""

    def push(self, id: int) -> str:
        """Add one token; return the newly complete text (possibly "")."""
    def flush(self) -> str:
        """End of output: return held-back bytes (an incomplete tail becomes U+FFFD)."""
    def reset(self) -> None:
        """Drop held-back bytes."""

@final
class Tokenizer:
    """A tokenizer read from GGUF metadata (byte-level BPE or SentencePiece), token-exact with llama.cpp."""

    @staticmethod
    def from_gguf(path: str | PathLike[str]) -> Tokenizer:
        """Read the tokenizer from a GGUF file (only the metadata is read)."""
    def encode(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``; ``parse_special`` maps control-token text to ids."""
    def encode_batch(
        self, texts: Sequence[str | bytes], *, add_special: bool = True, parse_special: bool = False
    ) -> list[list[int]]:
        """``encode`` over many texts, in parallel with the GIL released."""
    def decode(self, ids: Sequence[int], *, special: bool = False) -> str:
        """The text of ``ids`` (invalid UTF-8 replaced by U+FFFD)."""
    def decode_bytes(self, ids: Sequence[int], *, special: bool = False) -> bytes:
        """The raw bytes of ``ids``."""
    def token_to_piece(self, id: int, *, special: bool = True) -> bytes:
        """The bytes token ``id`` renders to (llama.cpp ``token_to_piece``)."""
    def token_to_id(self, text: str | bytes) -> int | None:
        """The id whose vocabulary text is ``text``, or None."""
    def is_eog(self, id: int) -> bool:
        """Whether ``id`` ends generation (EOS, end-of-turn, ...)."""
    def stream_decoder(self, *, special: bool = False) -> StreamDecoder:
        """A decoder for token-by-token output."""
    @property
    def vocab_size(self) -> int: ...
    @property
    def warnings(self) -> list[str]:
        """What loading the vocabulary worked around as llama.cpp does (a missing pretokenizer)."""
    @property
    def bos_id(self) -> int | None: ...
    @property
    def eos_id(self) -> int | None: ...
    @property
    def eot_id(self) -> int | None: ...
    @property
    def add_bos(self) -> bool: ...
    @property
    def add_eos(self) -> bool: ...
    @property
    def kind(self) -> str:
        """``"bpe"`` or ``"spm"``."""
    def __len__(self) -> int: ...

@final
class Model:
    """A model's weights bound from a GGUF file (memory-mapped, GGUF precision); shared by sessions."""

    def __new__(
        cls,
        path: str | PathLike[str],
        n_threads: int | None = None,
        *,
        moe_stream: bool = False,
        moe_cache_mb: float | None = None,
        moe_uncached: bool = False,
        moe_io_threads: int | None = None,
        moe_trace: str | PathLike[str] | None = None,
        moe_prefetch: bool = False,
        moe_eviction: str | None = None,
        moe_heat_decay: float | None = None,
        moe_pins: bool = True,
    ) -> Model: ...
    @property
    def architecture(self) -> str: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_layer(self) -> int: ...
    @property
    def n_embd(self) -> int: ...
    @property
    def n_ctx_train(self) -> int: ...
    @property
    def n_threads(self) -> int: ...
    @property
    def weight_bytes_per_token(self) -> int:
        """Bytes of weights read to produce one token."""
    def wait_repacked(self) -> None:
        """Block until the background repacking of weights (Q4_K; Q8_0 and Q6_K on
        AVX-512) has finished (results are the same before and after; only speed
        changes)."""
    @property
    def repacked_bytes(self) -> int:
        """Bytes of weights repacked into the interleaved form so far."""
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer, built from the already-open file's metadata."""
    @property
    def path(self) -> Path: ...
    def moe_stats(self) -> dict[str, Any] | None:
        """The expert store's numbers (``None`` unless the experts stream)."""
    def moe_flush(self) -> None:
        """Write the expert trace (when recording) and the usage histogram now."""

@final
class Session:
    """One sequence over a model: its KV cache and evaluated tokens."""

    def __new__(cls, model: Model, n_ctx: int = 4096, kv_cache_type: str = "f16") -> Session: ...
    def eval(self, tokens: Sequence[int], *, all: bool = False) -> npt.NDArray[np.float32]:
        """Append tokens; logits of the last token, or of every appended token with ``all``."""
    def eval_argmax(self, tokens: Sequence[int]) -> int:
        """Append tokens; argmax of the last token's logits."""
    def generate_greedy(self, prompt: Sequence[int], max_tokens: int, stop_ids: Sequence[int] = ...) -> list[int]:
        """Greedy continuation of ``prompt``, stopping after any of ``stop_ids``."""
    def save_state(self) -> bytes:
        """The whole state (tokens and KV rows, bit for bit) as bytes."""
    def load_state(self, state: bytes) -> None:
        """Replace the state with bytes from :meth:`save_state` (same model and cache shape)."""
    def reset(self) -> None: ...
    def truncate(self, n: int) -> None: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def kv_cache_bytes(self) -> int: ...
    @property
    def pinned(self) -> bool:
        """Every token of a batch computed bitwise as if evaluated alone (default off:
        llama.cpp's batch-size-dependent kernel orders)."""
    @pinned.setter
    def pinned(self, value: bool) -> None: ...

_Logprobs = tuple[float, list[tuple[int, float]]]
"""A token's ``(logprob, [(id, logprob), ...])`` under the model's raw distribution."""

_Step = tuple[int, bool, str, str | None, _Logprobs | None]
"""``(token, emitted, text, finish_reason, logprobs)``: the committed token, whether it is
part of the output (not for the end-of-generation token that ended it), the text that
became final, ``"stop"`` / ``"length"`` on the last step, and the logprobs when asked."""

_ReasoningBudget = tuple[Sequence[int], Sequence[int], Sequence[int], int, bool]
"""``(start_ids, end_ids, forced_ids, budget, open)`` of a reasoning budget."""

@final
class Engine:
    """A model, its tokenizer and a pool of sequences that generations run on."""

    def __new__(
        cls,
        model: Model,
        tokenizer: Tokenizer,
        *,
        n_ctx: int = 4096,
        kv_cache_type: str = "f16",
        pinned: bool = False,
    ) -> Engine: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def pinned(self) -> bool:
        """Whether every row of a batched forward gives bitwise the logits it would get alone."""
    @property
    def n_live(self) -> int:
        """Sequences currently allocated (live generations)."""
    @property
    def tokenizer(self) -> Tokenizer: ...
    def logits(self, tokens: Sequence[int], *, all: bool = False) -> npt.NDArray[np.float32]:
        """Logits of ``tokens`` on a fresh sequence (last token, or every token with ``all``)."""
    def embed(
        self, tokens: Sequence[int], *, normalize: bool = True, pooling: str | None = None
    ) -> npt.NDArray[np.float32]:
        """The final hidden states of ``tokens`` on a temporary sequence, pooled (``"mean"``, ``"cls"``,
        ``"last"``; ``None``: the model's declared pooling, else the mean), unit length with ``normalize``."""
    @property
    def pooling(self) -> str:
        """The pooling the model's GGUF declares (``"mean"`` where it declares none)."""
    def prompt_logprobs(self, tokens: Sequence[int], n: int) -> list[_Logprobs]:
        """For each token after the first: its logprob given the ones before, and the top ``n``."""
    def generate(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int | None,
        seed: int,
        temperature: float = 0.0,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        repeat_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_last_n: int = 64,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        logit_bias: Sequence[tuple[int, float]] | None = None,
        stop: Sequence[str] = ...,
        stop_ids: Sequence[int] = ...,
        ignore_eos: bool = False,
        logprobs: int | None = None,
        special: bool = False,
        processors: Sequence[Callable[[list[int], npt.NDArray[np.float32]], None]] = ...,
        on_prefill: Callable[[int, int], None] | None = None,
        conversation: Conversation | None = None,
        speculation: bool = False,
        reference: Sequence[int] | None = None,
        grammar: Grammar | None = None,
        reasoning_budget: _ReasoningBudget | None = None,
    ) -> Generation:
        """Start continuing ``prompt``; every argument is checked before any compute. With
        ``conversation``, on its sequence, keeping the common prefix of what it holds.
        ``reasoning_budget``: ``(start_ids, end_ids, forced_ids, budget, open)``, at most ``budget``
        tokens inside a reasoning block, then ``forced_ids`` (``open``: the prompt opened the block)."""
    def check_grammar(self, grammar: Grammar) -> str | None:
        """Compile ``grammar`` against the vocabulary (raises ``GrammarError``); returns what a
        leniently compiled JSON Schema leaves unenforced, if anything."""

@final
class Generation:
    """A prompt being continued; iterate for ``(token, emitted, text, finish_reason, logprobs)`` tuples."""

    def __iter__(self) -> Iterator[_Step]: ...
    def __next__(self) -> _Step: ...
    def close(self) -> None:
        """End the generation and free its sequence (idempotent); a conversation's turn is
        written to its persistence sidecar."""
    @staticmethod
    def step_batch(gens: Sequence[Generation]) -> list[_Step | BaseException | None]:
        """One lockstep step of several generations of one engine: decoding streams share one
        batched forward; per generation its step, ``None`` once finished, or its exception."""
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def reused_tokens(self) -> int:
        """Prompt tokens kept from the sequence's cache instead of evaluated (``cached_tokens``)."""
    @property
    def prompt_tokens(self) -> list[int]: ...
    @property
    def tokens(self) -> list[int]:
        """Tokens committed so far (including a final end-of-generation token)."""
    @property
    def draws(self) -> int:
        """Random draws consumed (one per sampled token; none when greedy)."""
    @property
    def spec_stats(self) -> dict[str, Any] | None:
        """Speculative decoding's counts and the gate's state (``None`` when off)."""
    @property
    def grammar_stats(self) -> dict[str, Any] | None:
        """The grammar's ``masks``, ``mask_us``, ``wait_us`` and ``forced`` (``None`` without one)."""

@final
class Conversation:
    """A conversation's sequence in an engine's pool: the history's KV rows across turns."""

    def __new__(cls, engine: Engine) -> Conversation: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def last_reused_tokens(self) -> int: ...
    @property
    def busy(self) -> bool:
        """Whether a turn is in flight (its generation neither finished nor closed)."""
    @property
    def persistent(self) -> bool: ...
    def reset(self) -> None: ...
    def enable_persistence(self, path: str | PathLike[str]) -> tuple[int, str | None]:
        """Persist to ``path``; returns (positions resumed, why an existing file was ignored)."""
    def save(self, path: str | PathLike[str]) -> None:
        """Write the current state to a new sidecar at ``path`` (atomically replaced)."""
    def sync(self) -> None: ...
    def close(self) -> None: ...

_Event = tuple[Any, ...]
"""A scheduled request's event: ``("started", prompt_tokens, cached_tokens)``, ``("token", token,
emitted, text, finish_reason, logprobs, stop_index)``, ``("finished", finish_reason, cancelled,
spec_drafted, spec_accepted)``, ``("error", kind, message)`` or ``("embedding", vector)``."""

@final
class Scheduler:
    """Continuous batching over one model: ``n_slots`` requests decode in one batched forward per
    step, prompts prefill in chunks between decode steps, prefixes are reused across requests."""

    def __new__(
        cls,
        model: Model,
        tokenizer: Tokenizer,
        *,
        n_slots: int = 4,
        n_ctx: int = 4096,
        kv_cache_type: str = "f16",
        max_queue: int = 64,
        prefill_chunk: int = 512,
        prefix_cache: bool = True,
        pinned: bool = True,
    ) -> Scheduler: ...
    def submit(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int | None,
        seed: int,
        temperature: float = 0.0,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        repeat_penalty: float = 1.0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_last_n: int = 64,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        logit_bias: Sequence[tuple[int, float]] | None = None,
        stop: Sequence[str] = ...,
        stop_ids: Sequence[int] = ...,
        ignore_eos: bool = False,
        logprobs: int | None = None,
        special: bool = False,
        speculation: bool = False,
        processors: Sequence[Callable[[list[int], npt.NDArray[np.float32]], None]] = ...,
        grammar: Grammar | None = None,
        reasoning_budget: _ReasoningBudget | None = None,
        reference: Sequence[int] = ...,
    ) -> ScheduledRequest:
        """Check and queue a generation (``InvalidArgumentError`` for bad arguments or a prompt that
        does not fit, ``QueueFullError`` when the queue is full). With ``speculation`` the request
        drafts from its own text (and from ``reference``, token ids of a document the output is
        expected to quote) each step and verifies the draft as extra rows of the shared batched
        forward (or its own step when it runs alone); with ``pinned`` numerics (the default) its
        tokens are exactly those without it."""
    def embed(self, tokens: Sequence[int]) -> ScheduledRequest:
        """Queue an embedding (final hidden states pooled as the model declares, unit length)."""
    def wait_ready(self, timeout: float) -> list[int]:
        """Ids of requests with new events, waiting up to ``timeout`` seconds (GIL released)."""
    def metrics(self) -> dict[str, int | float]:
        """Counters and gauges (requests, queue depth, slots, tokens, throughput, cache, speculation)."""
    @property
    def n_slots(self) -> int: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def max_queue(self) -> int: ...
    def shutdown(self) -> None:
        """Stop the scheduler thread (queued and running requests end with an error event)."""

@final
class ScheduledRequest:
    """A request queued on a :class:`Scheduler`; dropping it cancels it."""

    @property
    def id(self) -> int: ...
    def take(self) -> list[_Event]:
        """Every event queued so far, without waiting."""
    @property
    def closed(self) -> bool:
        """Whether its last event has been queued."""
    def cancel(self) -> None:
        """Cancel it (a running request frees its slot at the next step); idempotent."""
    @property
    def cancelled(self) -> bool: ...
