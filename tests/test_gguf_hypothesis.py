"""Property tests from Python: hostile bytes never crash, and metadata round-trips."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import fucina


def _valid_file() -> bytes:
    w = fucina.GGUFWriter()
    w.add("general.architecture", "llama")
    w.add("tokenizer.ggml.tokens", ["<s>", "a", "bc"])
    w.add("llama.block_count", 2, type="UINT32")
    w.add("llama.rope.freq_base", 10000.0)
    w.add_tensor("blk.0.w", b"\x01" * 34 * 2, ggml_type="Q8_0", shape=(2, 32))
    return w.to_bytes()


VALID = _valid_file()


def _open_bytes(data: bytes, tensors: bool = True) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.gguf"
        p.write_bytes(data)
        try:
            f = fucina.GGUFFile(p, tensors=tensors)
        except fucina.GGUFError:
            return
        # Whatever opened must be fully usable.
        _ = f.metadata, f.metadata_types
        for name in f.tensors:
            try:
                f.tensor(name)
            except fucina.GGUFError:
                assert not tensors, "a fully validated file refused its own tensor"
        f.close()


mutation = st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255))


@settings(max_examples=300, deadline=None)
@given(st.lists(mutation, min_size=1, max_size=8), st.integers(0, len(VALID)), st.booleans())
def test_mutated_files_open_or_raise_gguf_error(muts: list[tuple[int, int]], cut: int, tensors: bool) -> None:
    data = bytearray(VALID)
    for i, b in muts:
        data[i] = b
    _open_bytes(bytes(data[: max(cut, 1)] if cut < len(VALID) // 2 else data), tensors)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_after_magic(tail: bytes) -> None:
    _open_bytes(b"GGUF\x03\x00\x00\x00" + tail)


scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**31), 2**31 - 1),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=20),
)
values: st.SearchStrategy[Any] = st.one_of(
    scalars,
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=10),
    st.lists(st.text(max_size=8), min_size=1, max_size=10),
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=30), values, max_size=12))
def test_metadata_round_trips(meta: dict[str, Any]) -> None:
    w = fucina.GGUFWriter()
    for k, v in meta.items():
        w.add(k, v)
    data = w.to_bytes()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.gguf"
        p.write_bytes(data)
        with fucina.GGUFFile(p) as f:
            assert f.metadata == meta
            assert fucina.GGUFWriter.from_file(f).to_bytes() == data
