#!/usr/bin/env python3
"""Serving throughput and latency: ``fucina serve`` vs llama-cpp-python's server
(``python -m llama_cpp.server``) vs llama.cpp's ``llama-server``, same GGUF, same threads, on loopback.

    python benches/server.py [--model PATH] [--threads 2] [--clients 1,4,8,16] [--max-tokens 64]
                             [--servers fucina,llama-cpp-python,llama-server] [--prefix-clients 8]

Peers come from benches/.peers (benches/setup_peers.sh builds both); ``--peer-python`` and
``--llama-server`` point elsewhere. Each server runs alone, as its own process, with slots for the
largest client count (llama-cpp-python's server has one context and serialises requests) and the
same context per slot.

Load: N concurrent clients, each streaming ``--requests`` text completions of ``--max-tokens`` tokens
(greedy, a distinct prompt per client; ``ignore_eos`` where the server has it, so those requests are
full length; tokens are counted as streamed chunks, one per token on all three servers). Reported
per server and N: aggregate generated tokens/s over the round's wall time, the same while all N clients
are at work ("all live": from the start until the first client has finished its requests; a fixed
amount of work per client leaves a tail in which fewer clients stream, long where requests run at
different speeds, as speculative ones do), time to first token (TTFT) p50 / p95, inter-token latency
(ITL, gaps between streamed chunks) p50 / p95; then ratios ours/peer (>1 is better for throughput, <1
for latencies).

Prefix cache: ``--prefix-clients`` concurrent chat requests sharing a ~1,000-token system prompt (each
with its own question), after one warm-up request with it; TTFT p95 of ours with the prefix cache
against ours without it (``--no-prefix-cache``), and the peers' for reference.

The targets of issue 15: at 8 clients, aggregate throughput >= 3x our single-client throughput,
>= 2x llama-cpp-python's server and >= 1.2x llama-server's; with the shared system prompt, TTFT p95
>= 5x better with the prefix cache than without. Numbers from a shared machine are noisy.
"""

from __future__ import annotations

import sys
from pathlib import Path

# benches/tokenize.py would shadow the standard library's tokenize (imported by httpx's dependencies)
# for a script run from this directory.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "benches" / ".peers"
TOPICS = ["rivers", "stars", "bread", "winter", "robots", "gardens", "oceans", "deserts", "music", "trains"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    name: str
    cmd: list[str]
    port: int
    model: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited at startup: {' '.join(self.cmd)}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} did not come up")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def make_server(name: str, args: argparse.Namespace, slots: int, ctx: int, *, prefix_cache: bool = True) -> Server:
    port = free_port()
    model = str(args.model)
    t = str(args.threads)
    if name == "fucina":
        cmd = [sys.executable, "-m", "fucina", "serve", model, "--port", str(port), "--threads", t]
        cmd += ["--parallel", str(slots), "--ctx-size", str(ctx), "--max-queue", "1024", "--log-level", "warning"]
        if not prefix_cache:
            cmd.append("--no-prefix-cache")
        return Server("fucina" if prefix_cache else "fucina (no prefix cache)", cmd, port, Path(model).stem)
    if name == "llama-server":
        cmd = [str(args.llama_server), "-m", model, "--port", str(port), "-t", t, "-tb", t, "-np", str(slots)]
        cmd += ["-c", str(ctx * slots), "--no-webui", "-a", "peer"]
        return Server(name, cmd, port, "peer")
    if name == "llama-cpp-python":
        cmd = [str(args.peer_python), "-m", "llama_cpp.server", "--model", model, "--port", str(port)]
        cmd += ["--n_threads", t, "--n_threads_batch", t, "--n_ctx", str(ctx), "--model_alias", "peer"]
        # By default a new request interrupts the one streaming; queue them instead.
        cmd += ["--interrupt_requests", "False"]
        return Server(name, cmd, port, "peer")
    raise ValueError(name)


@dataclass
class Sample:
    ttft: float = 0.0
    gaps: list[float] = field(default_factory=list)
    tokens: int = 0
    failed: str | None = None
    # perf_counter() of every streamed token chunk
    times: list[float] = field(default_factory=list)


async def stream_one(http: httpx.AsyncClient, server: Server, route: str, body: dict[str, Any]) -> Sample:
    s = Sample()
    t0 = time.perf_counter()
    last = None
    finish = None
    chunks = 0
    async with http.stream("POST", f"{server.url}{route}", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{server.name}: {r.status_code} {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if not data.get("choices"):
                continue
            c = data["choices"][0]
            text = c.get("text") if "text" in c else (c.get("delta") or {}).get("content")
            finish = c.get("finish_reason") or finish
            if text:
                now = time.perf_counter()
                if last is None:
                    s.ttft = now - t0
                else:
                    s.gaps.append(now - last)
                last = now
                s.times.append(now)
                chunks += 1
    s.tokens = body["max_tokens"] if finish == "length" else chunks
    return s


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


async def load_round(server: Server, clients: int, args: argparse.Namespace) -> dict[str, float]:
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=3600, limits=limits) as http:
        done_at: list[float] = []

        async def client(i: int) -> list[Sample]:
            out = []
            for r in range(args.requests):
                topic = TOPICS[(i + r) % len(TOPICS)]
                body = {
                    "model": server.model,
                    "prompt": f"Client {i} writes a long essay about {topic}. It begins:",
                    "max_tokens": args.max_tokens,
                    "temperature": 0,
                    # Full-length requests where the server has the extension (ours, llama-server);
                    # llama-cpp-python ignores it, and its requests end at the model's EOS, if any.
                    "ignore_eos": True,
                    "stream": True,
                }
                for attempt in range(3):
                    try:
                        out.append(await stream_one(http, server, "/v1/completions", body))
                    except httpx.RemoteProtocolError as e:
                        # A pooled keep-alive connection the server had closed (llama-server
                        # dropped a few at 8 clients): retried on a new connection, as the
                        # openai client does.
                        if attempt == 2:
                            out.append(Sample(failed=f"{type(e).__name__}: {e}"))
                        else:
                            print(f"{server.name}: retried a request ({type(e).__name__}: {e})", flush=True)
                        continue
                    except (httpx.HTTPError, RuntimeError) as e:
                        out.append(Sample(failed=f"{type(e).__name__}: {e}"))
                    break
            done_at.append(time.perf_counter())
            return out

        t0 = time.perf_counter()
        samples = [s for group in await asyncio.gather(*(client(i) for i in range(clients))) for s in group]
        wall = time.perf_counter() - t0
    failed = [s for s in samples if s.failed]
    for reason in sorted({s.failed for s in failed if s.failed}):
        print(f"{server.name}, {clients} clients: a request failed: {reason}", flush=True)
    samples = [s for s in samples if not s.failed]
    gaps = [g for s in samples for g in s.gaps]
    ttfts = [s.ttft for s in samples]
    # While every client is still at work: from the start until the first client is done with all
    # of its requests (the whole round for one client). A fixed amount of work per client leaves
    # a tail in which fewer clients stream (with speculation, requests run at different speeds).
    live_end = min(done_at)
    live_tokens = sum(1 for s in samples for t in s.times if t <= live_end)
    return {
        "failed": len(failed),
        "tok_s": sum(s.tokens for s in samples) / wall,
        "live_tok_s": live_tokens / max(live_end - t0, 1e-9),
        "ttft_p50": pct(ttfts, 0.5),
        "ttft_p95": pct(ttfts, 0.95),
        "itl_p50": pct(gaps, 0.5),
        "itl_p95": pct(gaps, 0.95),
    }


async def prefix_round(server: Server, clients: int, system: str) -> float:
    async with httpx.AsyncClient(timeout=3600) as http:

        def body(question: str) -> dict[str, Any]:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
            return {"model": server.model, "messages": messages, "max_tokens": 8, "temperature": 0, "stream": True}

        await stream_one(http, server, "/v1/chat/completions", body("Say hello."))
        questions = [
            f"In one word, what do you think of {TOPICS[i % len(TOPICS)]} (question {i})?" for i in range(clients)
        ]
        samples = await asyncio.gather(*(stream_one(http, server, "/v1/chat/completions", body(q)) for q in questions))
    return pct([s.ttft for s in samples], 0.95)


def system_prompt(n_words: int = 900) -> str:
    words = "the assistant answers questions about geography history science cooking music and travel".split()
    text = " ".join(words[i % len(words)] for i in range(n_words))
    return f"You are a helpful assistant. Background notes follow. {text}. End of notes."


def _row(name: str, c: int, r: dict[str, float]) -> str:
    failed = f"  ({r['failed']:.0f} requests FAILED)" if r["failed"] else ""
    return (
        f"{name:<26} {c:>3} clients: {r['tok_s']:7.1f} tok/s ({r['live_tok_s']:7.1f} all live)  "
        f"TTFT p50 {r['ttft_p50'] * 1e3:7.0f} ms p95 {r['ttft_p95'] * 1e3:7.0f} ms  "
        f"ITL p50 {r['itl_p50'] * 1e3:6.1f} ms p95 {r['itl_p95'] * 1e3:6.1f} ms{failed}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=None, help="GGUF (default: the embedded Gemma 3 270M)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clients", default="1,4,8,16")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=2, help="streamed requests per client per round")
    p.add_argument("--repeat", type=int, default=2, help="rounds per server and client count (best kept)")
    p.add_argument("--ctx", type=int, default=2048, help="context per slot")
    p.add_argument("--servers", default="fucina,llama-cpp-python,llama-server")
    p.add_argument("--prefix-clients", type=int, default=8, help="0 skips the prefix-cache round")
    p.add_argument("--peer-python", type=Path, default=PEERS / "bin" / "python")
    p.add_argument("--llama-server", type=Path, default=PEERS / "llama.cpp-build" / "bin" / "llama-server")
    args = p.parse_args()
    if args.model is None:
        import fucina

        args.model = fucina.assets.default_model_path()
    levels = [int(c) for c in args.clients.split(",")]
    names = args.servers.split(",")
    slots = max(levels + [args.prefix_clients])
    print(
        f"model {args.model}, {args.threads} threads, {args.max_tokens} tokens x {args.requests} requests per "
        f"client, best of {args.repeat} interleaved rounds"
    )
    # Every server is up at once (idle ones cost nothing) and the rounds alternate between them, so a
    # busy spell on a shared machine hits all of them; each keeps its best round.
    servers = [make_server(name, args, slots, args.ctx) for name in names]
    results: dict[str, dict[int, dict[str, float]]] = {s.name: {} for s in servers}
    prefix: dict[str, float] = {}
    system = system_prompt()
    try:
        for s in servers:
            s.start()
            asyncio.run(load_round(s, 1, argparse.Namespace(**{**vars(args), "requests": 1})))  # warm-up
        for _ in range(args.repeat):
            for c in levels:
                for s in servers:
                    r = asyncio.run(load_round(s, c, args))
                    print(_row(s.name, c, r), flush=True)
                    best = results[s.name].get(c)
                    if best is None or r["tok_s"] > best["tok_s"]:
                        results[s.name][c] = r
        if args.prefix_clients:
            for s in servers:
                try:
                    prefix[s.name] = min(asyncio.run(prefix_round(s, args.prefix_clients, system)) for _ in range(2))
                except httpx.HTTPError as e:
                    # A server that fails the shared-prompt round (a peer that crashed, say) is
                    # reported; the rounds above are kept.
                    alive = s.proc is not None and s.proc.poll() is None
                    print(
                        f"{s.name:<26} shared-prompt round FAILED ({type(e).__name__}: {e}; "
                        f"server {'running' if alive else f'exited with {s.proc.returncode if s.proc else None}'})"
                    )
    finally:
        for s in servers:
            s.stop()
    if args.prefix_clients and "fucina" in names:
        cold = make_server("fucina", args, slots, args.ctx, prefix_cache=False)
        cold.start()
        try:
            prefix[cold.name] = asyncio.run(prefix_round(cold, args.prefix_clients, system))
        finally:
            cold.stop()
    print("\nbest rounds")
    for name, rows in results.items():
        for c in levels:
            print(_row(name, c, rows[c]))
    for name, ttft in prefix.items():
        print(
            f"{name:<26} shared ~1,000-token system prompt, {args.prefix_clients} clients: TTFT p95 {ttft * 1e3:.0f} ms"
        )
    ours = results.get("fucina")
    if ours:
        print("\nratios (ours/peer; throughput >1 and latencies <1 are better)")
        base = ours[levels[0]]["tok_s"]
        live = ours[levels[0]]["live_tok_s"]
        for c in levels:
            print(
                f"  fucina {c:>2} clients / fucina {levels[0]} client(s), throughput: {ours[c]['tok_s'] / base:.2f}x "
                f"(while all {c} stream: {ours[c]['live_tok_s'] / live:.2f}x)"
            )
        for peer, rows in results.items():
            if peer == "fucina":
                continue
            for c in levels:
                o, q = ours[c], rows[c]
                print(
                    f"  vs {peer:<18} {c:>3} clients: throughput {o['tok_s'] / q['tok_s']:.2f}x "
                    f"(all live {o['live_tok_s'] / q['live_tok_s']:.2f}x), "
                    f"TTFT p95 {o['ttft_p95'] / q['ttft_p95']:.2f}x, ITL p95 {o['itl_p95'] / q['itl_p95']:.2f}x"
                )
    if "fucina" in prefix and "fucina (no prefix cache)" in prefix:
        ratio = prefix["fucina (no prefix cache)"] / prefix["fucina"]
        print(f"  prefix cache: TTFT p95 {ratio:.1f}x better with it than without (target >= 5x)")
        for peer in names[1:]:
            if peer in prefix:
                print(f"  vs {peer}: shared-prompt TTFT p95 {prefix['fucina'] / prefix[peer]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
