"""fucina: run large language models from GGUF files on your own machine.

The hot path is Rust (`fucina._core`); this package is the typed Python surface.

>>> import fucina
>>> with fucina.GGUFFile(fucina.assets.default_model_path()) as f:   # doctest: +SKIP
...     print(f.metadata["general.architecture"], len(f.tensors))
gemma3 236
"""

from __future__ import annotations

from . import assets, data, quant
from ._core import (
    ArgumentTypeError,
    Engine,
    FucinaError,
    Generation,
    GGUFError,
    GGUFFile,
    GGUFWriter,
    GrammarError,
    GrammarWarning,
    InvalidArgumentError,
    Model,
    QueueFullError,
    ScheduledRequest,
    Scheduler,
    Session,
    StreamDecoder,
    TensorInfo,
    Tokenizer,
    UnsupportedModelError,
    __version__,
    build_info,
    read_gguf_header,
)
from .chat import (
    BuiltinTemplate,
    ChatFormat,
    ChatTemplate,
    ChatTemplateError,
    EmptyMessages,
    SystemMidConversation,
    TrailingAssistantMessage,
    render_chat_template,
)
from .conversation import Conversation
from .grammar import Grammar
from .llama import Llama, LlamaGrammar, LlamaState, LogitsProcessorList, StoppingCriteriaList
from .llm import LLM, LogitProcessor
from .sampling import SamplingParams

__all__ = [
    "LLM",
    "Conversation",
    "Llama",
    "LlamaGrammar",
    "LlamaState",
    "LogitsProcessorList",
    "StoppingCriteriaList",
    "LogitProcessor",
    "Grammar",
    "GrammarError",
    "GrammarWarning",
    "SamplingParams",
    "Engine",
    "Generation",
    "ArgumentTypeError",
    "BuiltinTemplate",
    "ChatFormat",
    "ChatTemplate",
    "ChatTemplateError",
    "EmptyMessages",
    "SystemMidConversation",
    "TrailingAssistantMessage",
    "InvalidArgumentError",
    "Model",
    "QueueFullError",
    "ScheduledRequest",
    "Scheduler",
    "Session",
    "FucinaError",
    "GGUFError",
    "GGUFFile",
    "GGUFWriter",
    "StreamDecoder",
    "TensorInfo",
    "Tokenizer",
    "UnsupportedModelError",
    "__version__",
    "assets",
    "data",
    "build_info",
    "quant",
    "read_gguf_header",
    "render_chat_template",
]
