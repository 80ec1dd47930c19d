"""fucina.Tokenizer from Python: llama.cpp parity through the binding, streaming, batches."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fucina
from conftest import GOLDENS


def unescape(line: str) -> bytes:
    out = bytearray()
    for m in re.finditer(r"\\\\|\\n|\\r|\\t|\\x([0-9a-fA-F]{2})|\\u\{([0-9a-fA-F]+)\}|[^\\]", line):
        tok = m.group(0)
        if m.group(1):
            out.append(int(m.group(1), 16))
        elif m.group(2):
            out += chr(int(m.group(2), 16)).encode()
        else:
            out += {"\\\\": b"\\", "\\n": b"\n", "\\r": b"\r", "\\t": b"\t"}.get(tok, tok.encode())
    return bytes(out)


def corpus(name: str = "corpus.txt") -> list[bytes]:
    lines = (GOLDENS / "tokenizer" / name).read_text().splitlines()
    return [unescape(line) for line in lines if not line.startswith("#")]


def ids_by_mode(name: str, mode: str) -> dict[int, list[int]]:
    """One mode's lines of a .ids golden; for "p", `<i> =` lines take the plain ids of the
    file the header names ("same as the p line of <file>")."""
    text = (GOLDENS / "tokenizer" / name).read_text()
    base_name = re.search(r"same as the p line of (\S+)", text)
    base: dict[int, list[int]] | None = None
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        idx, m, *ids = line.split(" ")
        if m == mode:
            out[int(idx)] = [int(i) for i in ids if i]
        elif m == "=" and mode == "p":
            assert base_name, f"{name}: '=' line without a base file"
            if base is None:
                base = ids_by_mode(base_name.group(1), "p")
            out[int(idx)] = base[int(idx)]
    return out


def plain_ids(name: str) -> dict[int, list[int]]:
    return ids_by_mode(name, "p")


@pytest.fixture(scope="module")
def gemma_tok(gemma_path: Path) -> fucina.Tokenizer:
    return fucina.Tokenizer.from_gguf(gemma_path)


@pytest.fixture(scope="module")
def qwen_tok(qwen_header_path: Path) -> fucina.Tokenizer:
    return fucina.Tokenizer.from_gguf(qwen_header_path)


@pytest.mark.parametrize("which", ["gemma3", "qwen2"])
def test_batch_encode_matches_llama_cpp_on_corpus(which: str, request: pytest.FixtureRequest) -> None:
    tok: fucina.Tokenizer = request.getfixturevalue("gemma_tok" if which == "gemma3" else "qwen_tok")
    texts = corpus()
    want = plain_ids(f"{which}.ids")
    assert len(texts) >= 2000 and len(want) == len(texts)
    got = tok.encode_batch(texts, add_special=False)
    mismatches = [i for i in range(len(texts)) if got[i] != want[i]]
    assert not mismatches, f"{len(mismatches)} mismatches, first: {texts[mismatches[0]]!r}"


def test_facts(gemma_tok: fucina.Tokenizer, qwen_tok: fucina.Tokenizer) -> None:
    assert (gemma_tok.kind, gemma_tok.vocab_size, len(gemma_tok)) == ("spm", 262_144, 262_144)
    assert (qwen_tok.kind, qwen_tok.vocab_size) == ("bpe", 152_064)
    assert gemma_tok.add_bos and gemma_tok.encode("hi")[0] == gemma_tok.bos_id
    assert gemma_tok.encode("hi", add_special=False)[0] != gemma_tok.bos_id
    assert qwen_tok.eos_id is not None and qwen_tok.is_eog(qwen_tok.eos_id)


def test_stream_decoder_concatenates_to_decode(qwen_tok: fucina.Tokenizer) -> None:
    text = "naïve café — 東京 🎉👩‍👩‍👧 done"
    ids = qwen_tok.encode(text, add_special=False)
    dec = qwen_tok.stream_decoder()
    pieces = [dec.push(i) for i in ids] + [dec.flush()]
    assert "".join(pieces) == qwen_tok.decode(ids) == text
    # Byte-level tokens split characters: some pushes must have held bytes back.
    assert any(p == "" for p in pieces[:-1])
    assert all("\ufffd" not in p for p in pieces)


def test_parse_special(qwen_tok: fucina.Tokenizer) -> None:
    special = qwen_tok.encode("<｜User｜>hi", add_special=False, parse_special=True)
    plain = qwen_tok.encode("<｜User｜>hi", add_special=False, parse_special=False)
    assert len(special) < len(plain)
    assert qwen_tok.token_to_id("<｜User｜>") == special[0]


def test_bad_file_is_clear(tmp_path: Path) -> None:
    p = tmp_path / "nope.gguf"
    w = fucina.GGUFWriter()
    w.add("general.architecture", "llama")
    w.add("tokenizer.ggml.model", "gpt2")
    w.add("tokenizer.ggml.pre", "qwen2")
    w.add("tokenizer.ggml.tokens", ["a", "b"])
    w.write(p)
    with pytest.raises(fucina.FucinaError, match="merges"):
        fucina.Tokenizer.from_gguf(p)


# --- Gemma 4 (tokenizer.ggml.model = "gemma4") ------------------------------------------
# The vocabulary is Gemma 3's presented as a Gemma 4 one, built here exactly as
# tools/make_gemma4_vocab.py writes it (gemma4.vocab records the merges' count and hash,
# so a drift between the two fails loudly); the ids are llama.cpp's.

GEMMA4_TOKENS = [  # tools/make_gemma4_vocab.py: in place of <unused0>.. (ids 6..)
    ("<|turn>", 3),
    ("<turn|>", 3),
    ("<|think|>", 3),
    ("<|channel>", 4),
    ("<channel|>", 4),
    ("<|tool>", 3),
    ("<tool|>", 3),
    ("<|tool_call>", 4),
    ("<tool_call|>", 4),
    ("<|tool_response>", 4),
    ("<tool_response|>", 4),
    ('<|"|>', 4),
    ("<|image|>", 3),
    ("<|audio|>", 3),
    ("<|video|>", 3),
]


def gemma4_merges(tokens: list[str], scores: list[float]) -> list[str]:
    """transformers' generate_merges, as tools/make_gemma4_vocab.py derives the merges."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for merge, score in dict(zip(tokens, scores, strict=True)).items():
        local = [(merge[:k], merge[k:], score) for k in range(1, len(merge))]
        local = [m for m in local if m[0] in vocab and m[1] in vocab]
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda v: (v[2], len(v[0]), len(v[1])), reverse=True)
    return [f"{left} {right}" for left, right, _ in merges]


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for x in data:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


@pytest.fixture(scope="module")
def gemma4_tok(gemma_path: Path, tmp_path_factory: pytest.TempPathFactory) -> fucina.Tokenizer:
    md = fucina.GGUFFile(gemma_path, tensors=False).metadata
    tokens = list(md["tokenizer.ggml.tokens"])
    types = list(md["tokenizer.ggml.token_type"])
    scores = list(md["tokenizer.ggml.scores"])
    for k, (text, ttype) in enumerate(GEMMA4_TOKENS):
        assert tokens[6 + k] == f"<unused{k}>"
        tokens[6 + k], types[6 + k] = text, ttype
    merges = gemma4_merges(tokens, scores)
    facts = (GOLDENS / "tokenizer" / "gemma4.vocab").read_text()
    want = re.search(r"^merges (\d+) ([0-9a-f]+)$", facts, re.M)
    assert want, "gemma4.vocab lacks its merges line"
    got = (str(len(merges)), f"{fnv1a64(chr(10).join(merges).encode()):016x}")
    assert got == want.groups(), "merges differ from tools/make_gemma4_vocab.py's"
    w = fucina.GGUFWriter()
    w.add("general.architecture", "gemma3")
    w.add("tokenizer.ggml.model", "gemma4")
    w.add("tokenizer.ggml.tokens", tokens, "ARRAY", "STRING")
    w.add("tokenizer.ggml.scores", scores, "ARRAY", "FLOAT32")
    w.add("tokenizer.ggml.token_type", types, "ARRAY", "INT32")
    w.add("tokenizer.ggml.merges", merges, "ARRAY", "STRING")
    for key in ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"):
        w.add(f"tokenizer.ggml.{key}", md[f"tokenizer.ggml.{key}"], "UINT32")
    w.add("tokenizer.ggml.add_space_prefix", False)
    w.add("tokenizer.ggml.add_bos_token", True)
    path = tmp_path_factory.mktemp("gemma4") / "gemma4.gguf"
    w.write(path)
    return fucina.Tokenizer.from_gguf(path)


@pytest.mark.parametrize(
    ("texts_file", "ids_file"), [("corpus.txt", "gemma4.ids"), ("gemma4_extra.txt", "gemma4_extra.ids")]
)
def test_gemma4_matches_llama_cpp(gemma4_tok: fucina.Tokenizer, texts_file: str, ids_file: str) -> None:
    texts = corpus(texts_file)
    plain = ids_by_mode(ids_file, "p")
    special = {**plain, **ids_by_mode(ids_file, "s")}
    assert len(plain) == len(texts)
    got_plain = gemma4_tok.encode_batch(texts, add_special=False)
    got_special = gemma4_tok.encode_batch(texts, add_special=False, parse_special=True)
    bad = [i for i in range(len(texts)) if got_plain[i] != plain[i] or got_special[i] != special[i]]
    assert not bad, f"{len(bad)} of {len(texts)} texts differ from llama.cpp, first: {texts[bad[0]]!r}"
    for i, ids in ids_by_mode(ids_file, "a").items():
        assert gemma4_tok.encode(texts[i]) == ids, texts[i]


def test_gemma4_facts_and_decoding(gemma4_tok: fucina.Tokenizer) -> None:
    t = gemma4_tok
    assert (t.kind, t.vocab_size, t.bos_id, t.eos_id, t.add_bos) == ("bpe", 262_144, 2, 1, True)
    turn_end, eos_text = t.token_to_id("<turn|>"), t.token_to_id("</s>")
    assert turn_end is not None and eos_text is not None
    assert t.is_eog(turn_end) and not t.is_eog(eos_text)
    ids = t.encode("<|turn>user\nHi  there<turn|>", add_special=False, parse_special=True)
    assert ids[0] == t.token_to_id("<|turn>")
    assert t.decode(ids) == "user\nHi  there"
    assert t.decode(ids, special=True) == "<|turn>user\nHi  there<turn|>"
    text = "naïve café — 東京 🎉👩‍👩‍👧 \U000f0001 done"
    ids = t.encode(text, add_special=False)
    dec = t.stream_decoder()
    assert "".join([dec.push(i) for i in ids] + [dec.flush()]) == t.decode(ids) == text


def qwen_with_pre(qwen_header_path: Path, pre: str | None, path: Path) -> fucina.Tokenizer:
    """The Qwen2 vocabulary with tokenizer.ggml.pre replaced (or removed), as the
    qwen2_pre_<name>.ids goldens were made."""
    f = fucina.GGUFFile(qwen_header_path, tensors=False)
    w = fucina.GGUFWriter()
    for key, value in f.metadata.items():
        if key == "tokenizer.ggml.pre" or not (key.startswith("tokenizer.ggml.") or key == "general.architecture"):
            continue
        vtype = f.metadata_types[key]
        item = vtype[len("ARRAY[") : -1] if vtype.startswith("ARRAY[") else None
        w.add(key, value, "ARRAY" if item else vtype, item)
    if pre is not None:
        w.add("tokenizer.ggml.pre", pre)
    w.write(path)
    return fucina.Tokenizer.from_gguf(path)


@pytest.mark.parametrize("pre", [None, "tekken", "bloom", "kimi-k2", "sarvam-moe"])
def test_more_pretokenizers_match_llama_cpp(qwen_header_path: Path, tmp_path: Path, pre: str | None) -> None:
    """A few of llama.cpp's pretokenizer names through the binding (the crate's tests
    check all of them); a missing tokenizer.ggml.pre is llama.cpp's default."""
    tok = qwen_with_pre(qwen_header_path, pre, tmp_path / "qwen.gguf")
    # Loading said what it worked around (LLM turns these into UserWarnings).
    assert bool(tok.warnings) == (pre is None)
    assert pre is not None or "tokenizer.ggml.pre" in tok.warnings[0]
    want = plain_ids(f"qwen2_pre_{pre or 'default'}.ids")
    texts = corpus()
    got = tok.encode_batch([texts[i] for i in want], add_special=False)
    bad = [i for i, g in zip(want, got, strict=True) if g != want[i]]
    assert len(want) > 600 and not bad, f"{len(bad)} of {len(want)} differ, first: {texts[bad[0]]!r}"
