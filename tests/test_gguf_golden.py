"""Our reader against gguf-py's GGUFReader, through goldens from tools/gen_gguf_goldens.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import fucina
from conftest import load_golden


def canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def type_name(types: list[str]) -> str:
    """gguf-py's type chain (["ARRAY", "STRING"]) in our notation ("ARRAY[STRING]")."""
    head, *rest = types
    return f"{head}[{type_name(rest)}]" if rest else head


def assert_metadata_matches(f: fucina.GGUFFile, golden: dict[str, Any]) -> None:
    md, types = f.metadata, f.metadata_types
    assert list(md) == list(golden["metadata"]), "keys or key order differ"
    for key, want in golden["metadata"].items():
        assert types[key] == type_name(want["types"]), key
        got = md[key]
        if "value" in want:
            assert got == want["value"], key
        else:
            assert isinstance(got, list) and len(got) == want["len"], key
            assert got[:4] == want["head"], key
            assert hashlib.sha256(canonical(got).encode()).hexdigest() == want["sha256"], key


def test_gemma_metadata_and_tensors_equal_gguf_py(gemma_path: Path) -> None:
    golden = load_golden("gguf", "gemma3-270m-q4_k_m.json")
    with fucina.GGUFFile(gemma_path) as f:
        assert f.version == golden["version"]
        assert f.alignment == golden["alignment"]
        assert f.data_offsets == [golden["data_offset"]]
        assert_metadata_matches(f, golden)
        tensors = f.tensors
        assert list(tensors) == [t["name"] for t in golden["tensors"]]
        for want in golden["tensors"]:
            got = tensors[want["name"]]
            assert (got.type, got.dims, got.n_elements, got.n_bytes, got.offset) == (
                want["type"],
                want["dims"],
                want["n_elements"],
                want["n_bytes"],
                want["offset"],
            ), want["name"]


def test_qwen_header_only_equals_gguf_py_reading_of_vocab_copy(qwen_header_path: Path) -> None:
    golden = load_golden("gguf", "qwen2-vocab-header.json")
    f = fucina.read_gguf_header(qwen_header_path)
    assert not f.tensors_validated
    assert len(f.metadata) == golden["n_kv"] == 27
    assert_metadata_matches(f, golden)
    assert len(f.metadata["tokenizer.ggml.tokens"]) == 152_064
    assert f.metadata["tokenizer.ggml.pre"] == "deepseek-r1-qwen"
    assert "tokenizer.chat_template" in f.metadata


def test_qwen_full_open_names_first_tensor_past_eof(qwen_header_path: Path) -> None:
    size = qwen_header_path.stat().st_size
    header = fucina.read_gguf_header(qwen_header_path)
    first_missing = next(t for t in header.tensors.values() if t.offset + t.n_bytes > size)
    with pytest.raises(fucina.GGUFError, match=rf"tensor '{first_missing.name}'.*past the end of the file"):
        fucina.GGUFFile(qwen_header_path)
    with pytest.raises(ValueError):  # GGUFError is also a ValueError
        fucina.GGUFFile(qwen_header_path)
    with pytest.raises(fucina.GGUFError, match="past the end"):
        header.tensor_bytes(first_missing.name)


def test_tensor_arrays_are_zero_copy_and_read_only(gemma_path: Path) -> None:
    import numpy as np

    with fucina.GGUFFile(gemma_path) as f:
        norm = f.tensor("output_norm.weight")
        assert norm.dtype == np.float32 and norm.shape == (640,)
        raw = f.tensor_bytes("output_norm.weight")
        assert raw.nbytes == 640 * 4 and not raw.flags.writeable and not raw.flags.owndata
        np.testing.assert_array_equal(raw.view(np.float32), norm)
        embd = f.tensor("token_embd.weight")
        assert embd.dtype == np.uint8 and embd.shape == (262_144, 640 // 32 * 34)
        with pytest.raises(ValueError):
            norm[0] = 1.0
    # Arrays outlive close(): they keep the mapping alive.
    assert float(norm.sum()) == float(np.frombuffer(raw.tobytes(), np.float32).sum())
    assert f.closed
    with pytest.raises(fucina.GGUFError, match="closed"):
        _ = f.metadata


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        fucina.GGUFFile(tmp_path / "nope.gguf")


def test_directory_is_named_as_one(tmp_path: Path) -> None:
    # Mapping a directory fails with ENODEV ("No such device"): the error says what is wrong.
    with pytest.raises(IsADirectoryError, match="is a directory, not a GGUF file"):
        fucina.GGUFFile(tmp_path)
    with pytest.raises(IsADirectoryError, match="is a directory, not a GGUF file"):
        fucina.LLM(tmp_path)
    with pytest.raises(fucina.InvalidArgumentError, match="model path is empty"):
        fucina.LLM("")


def test_unknown_tensor_name(gemma_path: Path) -> None:
    with fucina.GGUFFile(gemma_path) as f, pytest.raises(fucina.GGUFError, match="no tensor named 'nope'"):
        f.tensor("nope")
