"""``GET /metrics``: the scheduler's counters and gauges, and HTTP request counts, in Prometheus'
text exposition format (names prefixed ``fucina_``).

Counters end in ``_total``; throughput gauges are averages over the time spent in prefill and in
decode (llama.cpp's server reports the same pair), the prefix-cache hit rate is cached prompt
positions over prompt tokens, and the speculation acceptance rate accepted over drafted tokens.
"""

from __future__ import annotations

from collections import Counter

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["router", "RequestCounter", "render"]

router = APIRouter()

# (metric, scheduler key, type, help)
_SERIES = [
    ("requests_submitted_total", "requests_submitted", "counter", "Generation and embedding requests queued."),
    ("requests_rejected_total", "requests_rejected", "counter", "Requests refused because the queue was full."),
    ("requests_completed_total", "requests_completed", "counter", "Generations that ran to a finish reason."),
    ("requests_cancelled_total", "requests_cancelled", "counter", "Requests cancelled (client disconnects)."),
    ("requests_failed_total", "requests_failed", "counter", "Requests that failed on their own error."),
    ("embeddings_total", "embeddings", "counter", "Embedding requests answered."),
    ("queue_depth", "queue_depth", "gauge", "Requests waiting for a slot."),
    ("slots_busy", "slots_busy", "gauge", "Slots running a generation (live slots)."),
    ("slots_total", "slots_total", "gauge", "Slots in the pool (--parallel)."),
    ("prompt_tokens_total", "prompt_tokens", "counter", "Prompt tokens of admitted generations."),
    ("prompt_tokens_cached_total", "prompt_tokens_cached", "counter", "Prompt positions taken from the prefix cache."),
    ("prompt_tokens_copied_total", "prompt_tokens_copied", "counter", "Cached positions copied from another slot."),
    ("prompt_tokens_evaluated_total", "prompt_tokens_evaluated", "counter", "Prompt tokens evaluated (prefill)."),
    ("generated_tokens_total", "generated_tokens", "counter", "Tokens generated."),
    ("steps_total", "steps", "counter", "Scheduler steps (one batched forward each)."),
    ("decode_rows_total", "decode_rows", "counter", "Decode rows evaluated."),
    ("prefill_seconds_total", "prefill_seconds", "counter", "Seconds of forward time spent on prompt rows."),
    ("decode_seconds_total", "decode_seconds", "counter", "Seconds of forward time spent on decode rows."),
    ("prompt_tokens_per_second", "prompt_tokens_per_second", "gauge", "Average prompt throughput (tokens/s)."),
    (
        "generated_tokens_per_second",
        "generated_tokens_per_second",
        "gauge",
        "Average generation throughput (tokens/s).",
    ),
    ("prefix_cache_hit_rate", "prefix_cache_hit_rate", "gauge", "Cached prompt positions over prompt tokens."),
    ("spec_drafted_tokens_total", "spec_drafted", "counter", "Speculative draft tokens verified."),
    ("spec_accepted_tokens_total", "spec_accepted", "counter", "Speculative draft tokens accepted."),
    ("spec_acceptance_rate", "spec_acceptance_rate", "gauge", "Accepted over drafted speculative tokens."),
    ("cancel_steps_max", "cancel_steps_max", "gauge", "Most scheduler steps a cancellation took to free its slot."),
]


class RequestCounter:
    """Counts HTTP responses by route path and status code (for ``fucina_http_requests_total``)."""

    def __init__(self, app: ASGIApp, counts: Counter[tuple[str, int]]) -> None:
        self.app = app
        self.counts = counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.counts[(path, int(message["status"]))] += 1
            await send(message)

        await self.app(scope, receive, counting)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(metrics: dict[str, int | float], http: Counter[tuple[str, int]], known_paths: frozenset[str]) -> str:
    """The exposition text. Paths outside ``known_paths`` are counted as ``other`` (no unbounded labels)."""
    lines: list[str] = []
    for name, key, kind, help_text in _SERIES:
        lines += [f"# HELP fucina_{name} {help_text}", f"# TYPE fucina_{name} {kind}", f"fucina_{name} {metrics[key]}"]
    lines += [
        "# HELP fucina_http_requests_total HTTP responses by route and status.",
        "# TYPE fucina_http_requests_total counter",
    ]
    folded: Counter[tuple[str, int]] = Counter()
    for (path, status), n in http.items():
        folded[(path if path in known_paths else "other", status)] += n
    for (path, status), n in sorted(folded.items()):
        lines.append(f'fucina_http_requests_total{{route="{_escape(path)}",status="{status}"}} {n}')
    return "\n".join(lines) + "\n"


@router.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    app = request.app
    text = render(app.state.fucina.hub.scheduler.metrics(), app.state.http_counts, app.state.known_paths)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
