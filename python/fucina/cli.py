"""The ``fucina`` command line.

    fucina run PROMPT [--model PATH] [--max-tokens N] [--temp T] [--top-k K] [--top-p P]
               [--min-p P] [--repeat-penalty R] [--seed S]   continue PROMPT, streaming
    fucina chat [--model PATH] [--system TEXT] [--resume FILE] [-n N] [--temp T] [--seed S]
                                                         chat in the terminal, streaming replies
    fucina info [PATH] [--header-only] [--json]          describe a GGUF model
    fucina tokenize TEXT [--model PATH] [--ids] [--no-bos] [--parse-special]
                                                         token ids and pieces of TEXT ("-": stdin)
    fucina bench [--model PATH] [-p 512] [-n 128] [-r 3] [-t THREADS]
                                                         prefill / decode tok/s, llama-bench's pp/tg shape
    fucina serve [MODEL] [--host 127.0.0.1] [--port 8000] [--parallel N] [--ctx-size C]
                 [--api-key KEY] [--cors ORIGINS]        OpenAI / Anthropic-compatible HTTP server
    fucina experts replay TRACE [--slots N ...] [--pins-from FILE] [--heat-decay X] [--plot PATH]
                                                         replay an expert trace (--moe-trace) through
                                                         the cache policies across capacities

run and chat take the expert-store flags --moe-stream --moe-cache-mb=N --moe-uncached
--moe-io-threads=N --moe-trace=PATH (and --moe-prefetch, --moe-lru) for MoE models.

PATH / --model / MODEL default to the embedded model (Gemma 3 270M).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _core, assets
from .chat import BuiltinTemplate
from .sampling import SamplingParams


def _fmt_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _fmt_count(n: int) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{suffix}"
    return str(n)


def _short(value: Any, limit: int = 80) -> str:
    if isinstance(value, list):
        head = ", ".join(_short(v, 24) for v in value[:4])
        more = f", ... ({len(value)} items)" if len(value) > 4 else ""
        return f"[{head}{more}]"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(f: _core.GGUFFile) -> dict[str, Any]:
    """The facts `fucina info` prints, as a dict (also the ``--json`` output)."""
    md = f.metadata
    arch = md.get("general.architecture")
    tensors = f.tensors
    mix: dict[str, dict[str, int]] = {}
    for t in tensors.values():
        row = mix.setdefault(t.type, {"tensors": 0, "elements": 0, "bytes": 0})
        row["tensors"] += 1
        row["elements"] += t.n_elements
        row["bytes"] += t.n_bytes
    tokens = md.get("tokenizer.ggml.tokens")
    return {
        "paths": [str(p) for p in f.paths],
        "file_bytes": sum(Path(p).stat().st_size for p in f.paths),
        "gguf_version": f.version,
        "name": md.get("general.name"),
        "architecture": arch,
        "parameters": sum(t.n_elements for t in tensors.values()),
        "n_tensors": len(tensors),
        "tensor_data_bytes": sum(t.n_bytes for t in tensors.values()),
        "quant_mix": dict(sorted(mix.items(), key=lambda kv: -kv[1]["bytes"])),
        "file_type": md.get("general.file_type"),
        "context_length": md.get(f"{arch}.context_length") if arch else None,
        "embedding_length": md.get(f"{arch}.embedding_length") if arch else None,
        "block_count": md.get(f"{arch}.block_count") if arch else None,
        "tokenizer": md.get("tokenizer.ggml.model"),
        "tokenizer_pre": md.get("tokenizer.ggml.pre"),
        "vocab_size": len(tokens) if isinstance(tokens, list) else None,
        "chat_template": "tokenizer.chat_template" in md,
        "split_parts": len(f.paths),
        "tensors_validated": f.tensors_validated,
        "n_kv": len(md),
    }


def _print_info(facts: dict[str, Any], f: _core.GGUFFile, header_only: bool) -> None:
    out = sys.stdout.write
    out(f"file            {', '.join(facts['paths'])} ({_fmt_bytes(facts['file_bytes'])})\n")
    if facts["split_parts"] > 1:
        out(f"split parts     {facts['split_parts']}\n")
    out(f"gguf version    {facts['gguf_version']}\n")
    if facts["name"]:
        out(f"name            {facts['name']}\n")
    out(f"architecture    {facts['architecture']}\n")
    out(f"parameters      {_fmt_count(facts['parameters'])} ({facts['parameters']:,})\n")
    out(f"tensors         {facts['n_tensors']} ({_fmt_bytes(facts['tensor_data_bytes'])} of data)\n")
    for ty, row in facts["quant_mix"].items():
        weights, size = _fmt_count(row["elements"]), _fmt_bytes(row["bytes"])
        out(f"  {ty:<8} {row['tensors']:>5} tensors {weights:>9} weights {size:>12}\n")
    for key in ("context_length", "embedding_length", "block_count"):
        if facts[key] is not None:
            out(f"{key.replace('_', ' '):<15} {facts[key]}\n")
    if facts["tokenizer"]:
        pre = f" (pre: {facts['tokenizer_pre']})" if facts["tokenizer_pre"] else ""
        out(f"tokenizer       {facts['tokenizer']}{pre}, vocab size {facts['vocab_size']}\n")
    out(f"chat template   {'present' if facts['chat_template'] else 'absent'}\n")
    if header_only:
        out(f"\nmetadata ({facts['n_kv']} keys; tensor data not checked)\n")
        types = f.metadata_types
        for key, value in f.metadata.items():
            out(f"  {key:<44} {types[key]:<16} {_short(value)}\n")


def _cmd_info(args: argparse.Namespace) -> int:
    path = args.path if args.path is not None else assets.default_model_path()
    f = _core.read_gguf_header(path) if args.header_only else _core.GGUFFile(path)
    with f:
        facts = describe(f)
        if args.json:
            if args.header_only:
                facts["metadata_keys"] = list(f.metadata)
            json.dump(facts, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            _print_info(facts, f, args.header_only)
    return 0


def _sampling(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
        mirostat_mode=args.mirostat,
        mirostat_tau=args.mirostat_ent,
        mirostat_eta=args.mirostat_lr,
    )


def _add_sampling(p: argparse.ArgumentParser) -> None:
    """llama-cli's sampling flags and defaults."""
    p.add_argument("--temp", type=float, default=0.8, help="temperature; 0 is greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=40, help="top-k sampling; 0 is off (default 40)")
    p.add_argument("--top-p", type=float, default=0.95, help="top-p (nucleus) sampling; 1 is off (default 0.95)")
    p.add_argument("--min-p", type=float, default=0.05, help="min-p sampling; 0 is off (default 0.05)")
    p.add_argument("--repeat-penalty", type=float, default=1.0, help="repetition penalty; 1 is off (default 1.0)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one each run)")
    p.add_argument(
        "--mirostat",
        type=int,
        choices=[0, 1, 2],
        default=0,
        help="Mirostat sampling in place of top-k/top-p/min-p: 1 or 2 (default 0: off)",
    )
    p.add_argument("--mirostat-lr", type=float, default=0.1, help="Mirostat learning rate, eta (default 0.1)")
    p.add_argument("--mirostat-ent", type=float, default=5.0, help="Mirostat target entropy, tau (default 5.0)")


def _cmd_run(args: argparse.Namespace) -> int:
    from .llm import LLM

    t0 = time.perf_counter()
    llm = LLM(args.model, n_ctx=args.ctx, n_threads=args.threads, kv_cache_type=args.kv_cache_type, **_moe_kwargs(args))
    t_load = time.perf_counter() - t0
    show_progress = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if show_progress and total > 512:
            sys.stderr.write(f"\rprefill {done}/{total} tokens")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    params = _sampling(args)
    ids = llm.tokenize(args.prompt)
    out = sys.stdout
    if args.echo:
        out.write(args.prompt)
    n = 0
    t1 = time.perf_counter()
    reference = Path(args.reference).read_text(encoding="utf-8") if args.reference else None
    _, gen = llm._start(
        ids,
        args.max_tokens,
        params,
        args.stop,
        None,
        progress,
        ignore_eos=args.ignore_eos,
        speculation=not args.no_speculation,
        reference=reference,
    )
    try:
        for _token, emitted, text, _finish, _lp in gen:
            n += emitted
            if text:
                out.write(text)
                out.flush()
    finally:
        gen.close()
    out.write("\n")
    if args.verbose:
        dt = time.perf_counter() - t1
        sys.stderr.write(
            f"[{llm.model.architecture}, {len(ids)} prompt tokens, {n} generated, "
            f"load {t_load * 1e3:.0f} ms, generation {dt:.2f} s]\n"
        )
    if args.stats:
        sys.stderr.write(_spec_report(gen.spec_stats) + "\n")
    _moe_finish(llm, args.stats)
    return 0


def _add_moe(p: argparse.ArgumentParser) -> None:
    """The expert-store flags (MoE models; the spec's --moe-mirror flags are not implemented)."""
    g = p.add_argument_group("MoE expert streaming")
    g.add_argument(
        "--moe-stream", action="store_true", help="read experts on demand into a RAM cache (models larger than RAM)"
    )
    g.add_argument("--moe-cache-mb", type=float, default=None, metavar="N", help="RAM for experts (default: all)")
    g.add_argument("--moe-uncached", action="store_true", help="drop streamed experts from the OS page cache")
    g.add_argument("--moe-io-threads", type=int, default=None, metavar="N", help="expert reader threads (default 4)")
    g.add_argument(
        "--moe-trace", default=None, metavar="PATH", help="record (layer, expert) requests to PATH (implies streaming)"
    )
    g.add_argument("--moe-prefetch", action="store_true", help="prefetch the next layer's likely experts")
    g.add_argument("--moe-lru", action="store_true", help="evict least recently used (default: decayed heat)")


def _moe_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "moe_stream": args.moe_stream,
        "moe_cache_mb": args.moe_cache_mb,
        "moe_uncached": args.moe_uncached,
        "moe_io_threads": args.moe_io_threads,
        "moe_trace": args.moe_trace,
        "moe_prefetch": args.moe_prefetch,
        "moe_eviction": "lru" if args.moe_lru else None,
    }


def _moe_finish(llm: Any, report: bool) -> None:
    """Write the expert trace and histogram; with ``report`` print the stream stats."""
    stats = llm.moe_stats()
    if stats is None:
        return
    llm.moe_flush()
    if report:
        sys.stderr.write(stats["report"] + "\n")


def _cmd_experts_replay(args: argparse.Namespace) -> int:
    from . import experts

    result = experts.replay(args.trace, slots=args.slots, pins_from=args.pins_from, heat_decay=args.heat_decay)
    print(experts.table(result))
    if not args.no_plot:
        target = Path(args.plot) if args.plot else Path(str(args.trace) + ".png")
        written = experts.plot(result, target)
        print(f"plot: {written}")
    return 0


def _spec_report(stats: dict[str, Any] | None) -> str:
    """The speculative decoder's numbers in one paragraph (``--stats``)."""
    if stats is None:
        return "[speculation off]"
    steps, drafted = stats["steps"], stats["drafted"]
    per_step = stats["committed"] / steps if steps else 0.0
    rate = stats["accepted"] / drafted if drafted else 0.0
    return (
        f"[speculation: {stats['committed']} tokens in {steps} steps ({per_step:.2f} per step); "
        f"{stats['spec_steps']} verifies, {drafted} drafted, {stats['accepted']} accepted ({rate:.0%}), "
        f"{stats['bonus']} bonus; {stats['fallback_steps']} plain steps without a draft, "
        f"{stats['disabled_steps']} with the gate off; {stats['gate']}]"
    )


_CHAT_HELP = """commands: /reset forgets the conversation, /save FILE writes it (resume with --resume FILE),
/exit (or Ctrl-D) leaves; end a line with \\ to continue it, or put \"\"\" alone on a line to start and end a
multiline message; Ctrl-C stops a reply."""


def _read_message(prompt: str, more_prompt: str) -> str | None:
    """One user message from the terminal (``None`` at end of input): a line, lines joined by a
    trailing backslash, or a block between two ``\"\"\"`` lines."""
    try:
        line = input(prompt)
    except EOFError:
        return None
    if line.strip() == '"""':
        lines: list[str] = []
        while True:
            try:
                more = input(more_prompt)
            except EOFError:
                break
            if more.strip() == '"""':
                break
            lines.append(more)
        return "\n".join(lines)
    lines = [line]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        try:
            lines.append(input(more_prompt))
        except EOFError:
            break
    return "\n".join(lines)


def _cmd_chat(args: argparse.Namespace) -> int:
    from .llm import LLM

    try:
        import readline  # noqa: F401 - line editing and history for input()
    except ImportError:
        pass
    # A streaming model's trace and histogram are written when it is freed, on return.
    llm = LLM(args.model, n_ctx=args.ctx, n_threads=args.threads, **_moe_kwargs(args))
    chat = llm.chat(system=args.system, max_tokens=args.max_tokens, params=_sampling(args))
    err = sys.stderr
    if args.resume is not None:
        resumed = chat.enable_persistence(args.resume)
        turns = sum(1 for m in chat.history if m["role"] == "user")
        if resumed:
            err.write(f"resumed {args.resume}: {turns} turns, {resumed} tokens in the cache (nothing prefilled)\n")
        else:
            err.write(f"new conversation, saved to {args.resume} after every turn\n")
    interactive = sys.stdin.isatty()
    if interactive:
        template = llm.chat_template
        how = "its chat template"
        if isinstance(template, BuiltinTemplate):
            how = f"built-in {template.format.value} format"
        err.write(f"fucina chat with {llm.path.name} ({how}); /help for commands, /exit to leave\n")
    out = sys.stdout
    while True:
        try:
            text = _read_message("> " if interactive else "", "... " if interactive else "")
        except KeyboardInterrupt:
            out.write("\n")
            return 0
        if text is None:
            if interactive:
                out.write("\n")
            return 0
        command = text.strip()
        if not command:
            continue
        if command in ("/exit", "/quit"):
            return 0
        if command == "/help":
            err.write(_CHAT_HELP + "\n")
            continue
        if command == "/reset":
            chat.reset()
            err.write("conversation reset\n")
            continue
        if command.startswith("/save"):
            target = command[len("/save") :].strip()
            if not target:
                err.write("usage: /save FILE\n")
                continue
            try:
                chat.save(target)
            except (_core.FucinaError, OSError) as e:
                err.write(f"could not save: {e}\n")
            else:
                err.write(f"saved to {target} (resume with: fucina chat --resume {target})\n")
            continue
        try:
            for piece in chat.stream(text):
                out.write(piece)
                out.flush()
        except KeyboardInterrupt:
            out.write(" [stopped]")
        out.write("\n")
        out.flush()


def _cmd_tokenize(args: argparse.Namespace) -> int:
    path = args.model if args.model is not None else assets.default_model_path()
    tok = _core.Tokenizer.from_gguf(path)
    text = sys.stdin.read() if args.text == "-" else args.text
    ids = tok.encode(text, add_special=not args.no_bos, parse_special=args.parse_special)
    if args.ids:
        sys.stdout.write(f"{ids}\n")
        return 0
    for i in ids:
        piece = tok.token_to_piece(i, special=True)
        shown = piece.decode("utf-8", errors="backslashreplace")
        sys.stdout.write(f"{i:>8} -> {shown!r}\n")
    sys.stdout.write(f"{len(ids)} tokens\n")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    """llama-bench's two tests on the user's model: ``pp{N}`` (prefill N tokens into an
    empty context, one batch) and ``tg{N}`` (N tokens generated greedily through the
    Rust generation loop), each as mean ± standard deviation over ``-r`` repetitions
    after one warm-up."""
    import random
    import statistics

    from .llm import LLM

    for name in ("n_prompt", "n_gen", "repetitions"):
        if getattr(args, name) <= 0:
            raise _core.InvalidArgumentError(f"--{name.replace('_', '-')} must be positive")
    llm = LLM(args.model, n_ctx=args.n_prompt + args.n_gen + 8, n_threads=args.threads)
    llm.model.wait_repacked()  # time the settled kernels, as llama-bench times its repacked ones
    rng = random.Random(0)
    n_vocab = llm.n_vocab
    prompt = [rng.randrange(min(1000, n_vocab - 1), n_vocab) for _ in range(args.n_prompt)]
    start = llm.tokenize("", add_special=True) or prompt[:1]

    n_prompt: int = args.n_prompt
    n_gen: int = args.n_gen

    def pp() -> float:
        t = time.perf_counter()
        llm.logits(prompt)
        return n_prompt / (time.perf_counter() - t)

    def tg() -> float:
        t = time.perf_counter()
        llm.generate(start, max_tokens=n_gen, ignore_eos=True)
        return n_gen / (time.perf_counter() - t)

    size = llm.path.stat().st_size
    out = sys.stdout
    out.write(f"| {'model':<28} | {'size':>10} | {'threads':>7} | {'test':>8} | {'t/s':>18} |\n")
    out.write(f"| {'-' * 28} | {'-' * 10} | {'-' * 7} | {'-' * 8} | {'-' * 18} |\n")
    for test, fn in ((f"pp{args.n_prompt}", pp), (f"tg{args.n_gen}", tg)):
        fn()  # warm-up
        runs = [fn() for _ in range(args.repetitions)]
        sd = statistics.stdev(runs) if len(runs) > 1 else 0.0
        rate = f"{statistics.mean(runs):.2f} ± {sd:.2f}"
        name = f"{llm.model.architecture} {_fmt_count(llm.model.n_layer)}L"
        out.write(f"| {name:<28} | {_fmt_bytes(size):>10} | {llm.model.n_threads:>7} | {test:>8} | {rate:>18} |\n")
        out.flush()
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .server import API_KEY_ENV, ServerConfig, serve
    except ImportError as e:
        sys.stderr.write(f"fucina: serve needs the server extra (pip install 'fucina[server]'): {e}\n")
        return 1
    import os

    origins = [o.strip() for o in (args.cors or "").split(",") if o.strip()]
    config = ServerConfig(
        model=args.model,
        model_id=args.alias,
        host=args.host,
        port=args.port,
        parallel=args.parallel,
        ctx_size=args.ctx_size,
        threads=args.threads,
        api_key=args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV),
        cors_origins=origins,
        max_queue=args.max_queue,
        max_tokens=args.max_tokens,
        prefix_cache=not args.no_prefix_cache,
        kv_cache_type=args.kv_cache_type,
        reasoning_format=args.reasoning_format,
        reasoning_budget=args.reasoning_budget,
    )
    serve(config, log_level=args.log_level)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fucina", description="Run LLMs from GGUF files on your own machine.")
    parser.add_argument("--version", action="version", version=f"fucina {_core.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="continue a prompt",
        description="Continue a prompt. Samples with llama-cli's defaults (--temp 0.8 --top-k 40 --top-p 0.95 "
        "--min-p 0.05); --temp 0 is greedy.",
    )
    run.add_argument("prompt", help="the text to continue")
    run.add_argument("-m", "--model", type=Path, default=None, help="GGUF file (default: the embedded model)")
    run.add_argument("-n", "--max-tokens", type=int, default=128, help="tokens to generate (default 128)")
    run.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all cores)")
    run.add_argument("-c", "--ctx", type=int, default=4096, help="context size in tokens (default 4096)")
    run.add_argument("--kv-cache-type", choices=["f16", "q8_0"], default="f16", help="KV cache precision")
    _add_sampling(run)
    run.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    run.add_argument(
        "--ignore-eos", action="store_true", help="keep generating past end-of-generation tokens (as llama-cli's)"
    )
    run.add_argument("--echo", action="store_true", help="print the prompt before the continuation")
    run.add_argument("-v", "--verbose", action="store_true", help="print timing to stderr")
    run.add_argument(
        "--no-speculation", action="store_true", help="plain decoding (speculation never changes the output)"
    )
    run.add_argument("--reference", metavar="FILE", default=None, help="a document speculation may draft from")
    run.add_argument(
        "--stats", action="store_true", help="print speculative decoding's (and the expert store's) numbers to stderr"
    )
    _add_moe(run)
    run.set_defaults(func=_cmd_run)
    chat = sub.add_parser(
        "chat",
        help="chat in the terminal",
        description="Chat with a model in the terminal: replies stream as they are decoded, the KV cache lives "
        "across turns. " + _CHAT_HELP,
    )
    chat.add_argument("-m", "--model", type=Path, default=None, help="GGUF file (default: the embedded model)")
    chat.add_argument("-s", "--system", default=None, help="system prompt")
    chat.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="FILE",
        help="resume the conversation saved in FILE (warm: its KV cache is loaded, not recomputed) and save "
        "every turn to it; a new FILE starts a new conversation",
    )
    chat.add_argument("-n", "--max-tokens", type=int, default=512, help="tokens per reply at most (default 512)")
    chat.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all cores)")
    chat.add_argument("-c", "--ctx", type=int, default=4096, help="context size in tokens (default 4096)")
    _add_sampling(chat)
    _add_moe(chat)
    chat.set_defaults(func=_cmd_chat)
    info = sub.add_parser("info", help="describe a GGUF model", description="Describe a GGUF model file.")
    info.add_argument("path", nargs="?", type=Path, help="GGUF file (default: the embedded default model)")
    info.add_argument(
        "--header-only",
        action="store_true",
        help="parse only the header (works on partial downloads) and list every metadata key",
    )
    info.add_argument("--json", action="store_true", help="print the facts as JSON")
    info.set_defaults(func=_cmd_info)
    tokenize = sub.add_parser("tokenize", help="show the tokens of a text", description="Tokenize a text.")
    tokenize.add_argument("text", help='the text ("-" reads standard input)')
    tokenize.add_argument("-m", "--model", type=Path, default=None, help="GGUF file (default: the embedded model)")
    tokenize.add_argument("--ids", action="store_true", help="print only the list of ids")
    tokenize.add_argument("--no-bos", action="store_true", help="do not add BOS/EOS as the model would")
    tokenize.add_argument("--parse-special", action="store_true", help="map control-token text to its ids")
    tokenize.set_defaults(func=_cmd_tokenize)
    bench = sub.add_parser(
        "bench",
        help="measure prefill and decode speed",
        description="Prefill (ppN) and decode (tgN) tokens/s on a model, in llama-bench's shape.",
    )
    bench.add_argument("-m", "--model", type=Path, default=None, help="GGUF file (default: the embedded model)")
    bench.add_argument("-p", "--n-prompt", type=int, default=512, help="prompt tokens for the pp test (default 512)")
    bench.add_argument("-n", "--n-gen", type=int, default=128, help="tokens for the tg test (default 128)")
    bench.add_argument("-r", "--repetitions", type=int, default=3, help="repetitions per test (default 3)")
    bench.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all cores)")
    bench.set_defaults(func=_cmd_bench)
    serve = sub.add_parser(
        "serve",
        help="serve a model over HTTP (OpenAI and Anthropic APIs)",
        description="Serve a model over HTTP: OpenAI's /v1/chat/completions, /v1/completions, /v1/models and "
        "/v1/embeddings, Anthropic's /v1/messages, /tokenize, /detokenize, /health and /metrics, with continuous "
        "batching of up to --parallel requests. Needs the server extra (pip install 'fucina[server]').",
    )
    serve.add_argument("model", nargs="?", type=Path, default=None, help="GGUF file (default: the embedded model)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: loopback only)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("-np", "--parallel", type=int, default=4, help="requests decoded together (default 4)")
    serve.add_argument("-c", "--ctx-size", type=int, default=4096, help="context per request in tokens (default 4096)")
    serve.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all cores)")
    serve.add_argument(
        "--api-key", default=None, help="require this key on every route but /health (default: $FUCINA_API_KEY)"
    )
    serve.add_argument("--cors", default=None, metavar="ORIGINS", help="comma-separated origins allowed by CORS")
    serve.add_argument("--alias", default=None, help="the model name clients use (default: the file's stem)")
    serve.add_argument("--max-queue", type=int, default=64, help="requests that may wait for a slot (default 64)")
    serve.add_argument("--max-tokens", type=int, default=None, help="cap on tokens per completion (default: none)")
    serve.add_argument("--no-prefix-cache", action="store_true", help="never reuse prompt prefixes across requests")
    serve.add_argument("--kv-cache-type", choices=["f16", "q8_0"], default="f16", help="KV cache precision")
    serve.add_argument(
        "--reasoning-format",
        choices=["auto", "deepseek", "none"],
        default="auto",
        help="auto/deepseek: a thinking model's reasoning goes to reasoning_content (Anthropic: thinking blocks); "
        "none: it stays in the text (default auto)",
    )
    serve.add_argument(
        "--reasoning-budget",
        type=int,
        default=-1,
        metavar="N",
        help="tokens a thinking model's reasoning block may take before its closing marker is forced: "
        "-1 no cap, 0 close it at once (default -1; a request's reasoning_budget_tokens overrides it)",
    )
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(func=_cmd_serve)
    experts = sub.add_parser("experts", help="MoE expert-store tools", description="MoE expert-store tools.")
    esub = experts.add_subparsers(dest="experts_command", required=True, metavar="TOOL")
    rp = esub.add_parser(
        "replay",
        help="replay an expert trace through the cache policies",
        description="Replay a trace recorded with --moe-trace through LRU, heat, segmented LRU, Belady-optimal and "
        "pinned+LRU across a capacity sweep: hit rates and streamed bytes as a table and a plot. LRU flat where "
        "Belady climbs means the policy, not the capacity, is the bottleneck.",
    )
    rp.add_argument("trace", type=Path, help="the trace file")
    rp.add_argument("--slots", type=int, nargs="+", default=None, metavar="N", help="capacities (experts per layer)")
    rp.add_argument(
        "--pins-from", type=Path, default=None, metavar="FILE", help="pinned+LRU's pins from a <gguf>.experts histogram"
    )
    rp.add_argument("--heat-decay", type=float, default=None, metavar="X", help="heat decay per layer call (0, 1]")
    rp.add_argument("--plot", default=None, metavar="PATH", help="plot file (default TRACE.png, or .svg)")
    rp.add_argument("--no-plot", action="store_true", help="print the table only")
    rp.set_defaults(func=_cmd_experts_replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fucina`` command."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except (_core.FucinaError, OSError, ValueError) as e:
        sys.stderr.write(f"fucina: error: {e}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("\nfucina: interrupted\n")
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
