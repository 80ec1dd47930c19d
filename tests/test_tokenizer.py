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


def corpus() -> list[bytes]:
    lines = (GOLDENS / "tokenizer" / "corpus.txt").read_text().splitlines()
    return [unescape(line) for line in lines if not line.startswith("#")]


def plain_ids(name: str) -> dict[int, list[int]]:
    out = {}
    for line in (GOLDENS / "tokenizer" / name).read_text().splitlines():
        if line.startswith("#"):
            continue
        idx, mode, *ids = line.split(" ")
        if mode == "p":
            out[int(idx)] = [int(i) for i in ids if i]
    return out


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
