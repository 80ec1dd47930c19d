"""Our writer against gguf-py, both directions, byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as T

import fucina

RNG = np.random.default_rng(0)

# (key, value, gguf-py type, item type) for every value type, scalar and array.
VALUES: list[tuple[str, Any, T, T | None]] = [
    ("v.u8", 200, T.UINT8, None),
    ("v.i8", -100, T.INT8, None),
    ("v.u16", 60000, T.UINT16, None),
    ("v.i16", -30000, T.INT16, None),
    ("v.u32", 4_000_000_000, T.UINT32, None),
    ("v.i32", -2_000_000_000, T.INT32, None),
    ("v.f32", 0.1, T.FLOAT32, None),
    ("v.bool", True, T.BOOL, None),
    ("v.str", "héllo, мир ✓ 🎉", T.STRING, None),
    ("v.u64", 2**64 - 1, T.UINT64, None),
    ("v.i64", -(2**63), T.INT64, None),
    ("v.f64", -2.5e300, T.FLOAT64, None),
    ("a.u8", [0, 255, 7], T.ARRAY, T.UINT8),
    ("a.i8", [-128, 127], T.ARRAY, T.INT8),
    ("a.u16", [1, 65535], T.ARRAY, T.UINT16),
    ("a.i16", [-5, 5], T.ARRAY, T.INT16),
    ("a.u32", [1, 2, 3], T.ARRAY, T.UINT32),
    ("a.i32", [-1, 0, 1], T.ARRAY, T.INT32),
    ("a.f32", [0.5, -1.25, 3.0e38], T.ARRAY, T.FLOAT32),
    ("a.bool", [True, False, True], T.ARRAY, T.BOOL),
    ("a.str", ["a", "", "ccc", "日本語"], T.ARRAY, T.STRING),
    ("a.u64", [2**64 - 1, 0], T.ARRAY, T.UINT64),
    ("a.i64", [-(2**63), 2**63 - 1], T.ARRAY, T.INT64),
    ("a.f64", [1e-300, -0.0], T.ARRAY, T.FLOAT64),
]

# name, gguf-py raw dtype (None = infer from numpy), data, logical shape
f32 = RNG.standard_normal((3, 8), dtype=np.float32)
f16 = RNG.standard_normal((4, 16)).astype(np.float16)
i32 = np.arange(10, dtype=np.int32)
q8_0 = RNG.integers(0, 256, (2, 2 * 34), dtype=np.uint8)  # 2 rows of 64 elements
q4_k = RNG.integers(0, 256, (3, 144), dtype=np.uint8)  # 3 rows of 256 elements
TENSORS: list[tuple[str, Q | None, np.ndarray, tuple[int, ...]]] = [
    ("t.f32", None, f32, (3, 8)),
    ("t.f16", None, f16, (4, 16)),
    ("t.i32", None, i32, (10,)),
    ("t.q8_0", Q.Q8_0, q8_0, (2, 64)),
    ("t.q4_k", Q.Q4_K, q4_k, (3, 256)),
]


# Arrays of arrays: gguf-py writes them (its reader cannot return them, so they are
# only in the gguf-py -> fucina direction).
NESTED = [[1, 2, 3], [4], [5, 6]]


def write_with_gguf_py(path: Path, split_max_tensors: int = 0) -> None:
    w = gguf.GGUFWriter(path, "llama", split_max_tensors=split_max_tensors)
    for key, value, vtype, sub in VALUES:
        w.add_key_value(key, value, vtype, sub_type=sub)
    w.add_key_value("a.nested", NESTED, T.ARRAY)
    for name, raw, data, _ in TENSORS:
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_with_fucina(path: Path) -> None:
    w = fucina.GGUFWriter()
    w.add("general.architecture", "llama")
    for key, value, vtype, sub in VALUES:
        w.add(key, value, type=vtype.name, item_type=sub.name if sub is not None else None)
    for name, raw, data, shape in TENSORS:
        if raw is None:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data.tobytes(), ggml_type=raw.name, shape=shape)
    w.write(path)


def test_gguf_py_reads_our_file_identically(tmp_path: Path) -> None:
    ours = tmp_path / "ours.gguf"
    write_with_fucina(ours)
    r = gguf.GGUFReader(ours)
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert list(fields) == ["general.architecture"] + [k for k, *_ in VALUES]
    for key, value, vtype, sub in VALUES:
        field = fields[key]
        assert field.types == ([vtype, sub] if sub is not None else [vtype]), key
        got = field.contents()
        if vtype == T.FLOAT32:
            assert got == pytest.approx(value, rel=1e-7), key
        elif sub == T.FLOAT32:
            assert got == [float(np.float32(x)) for x in value], key
        else:
            assert got == value, key
    by_name = {t.name: t for t in r.tensors}
    assert list(by_name) == [name for name, *_ in TENSORS]
    for name, raw, data, shape in TENSORS:
        t = by_name[name]
        assert t.data.tobytes() == data.tobytes(), name
        assert tuple(int(d) for d in reversed(t.shape)) == shape, name
        assert t.tensor_type == (raw if raw is not None else gguf.GGMLQuantizationType[t.tensor_type.name])


def test_gguf_py_file_round_trips_byte_for_byte(tmp_path: Path) -> None:
    src = tmp_path / "py.gguf"
    write_with_gguf_py(src)
    with fucina.GGUFFile(src) as f:
        assert f.metadata["a.str"] == ["a", "", "ccc", "日本語"]
        assert f.metadata_types["a.u64"] == "ARRAY[UINT64]"
        assert f.metadata["a.nested"] == NESTED
        assert f.metadata_types["a.nested"] == "ARRAY[ARRAY[INT32]]"
        np.testing.assert_array_equal(f.tensor("t.f16"), f16)
        np.testing.assert_array_equal(f.tensor("t.f32"), f32)
        assert f.tensor("t.q4_k").shape == (3, 144)
        rewritten = fucina.GGUFWriter.from_file(f).to_bytes()
    assert rewritten == src.read_bytes()
    # And through a file on disk.
    out = tmp_path / "rewritten.gguf"
    with fucina.GGUFFile(src) as f:
        fucina.GGUFWriter.from_file(f).write(out)
    assert out.read_bytes() == src.read_bytes()


def test_gguf_py_split_pair_opens_as_one_and_round_trips(tmp_path: Path) -> None:
    write_with_gguf_py(tmp_path / "model.gguf", split_max_tensors=3)
    parts = sorted(tmp_path.glob("model-*-of-*.gguf"))
    assert [p.name for p in parts] == ["model-00001-of-00002.gguf", "model-00002-of-00002.gguf"]
    with fucina.GGUFFile(parts[0]) as f:
        assert [Path(p).name for p in f.paths] == [p.name for p in parts]
        assert list(f.tensors) == [name for name, *_ in TENSORS]
        assert [t.part for t in f.tensors.values()] == [0, 0, 0, 1, 1]
        assert f.metadata["split.count"] == 2
        np.testing.assert_array_equal(f.tensor("t.q8_0"), q8_0)
        for i, part in enumerate(parts):
            assert fucina.GGUFWriter.from_file(f, part=i).to_bytes() == part.read_bytes()
    # Opening the second part also finds the whole model.
    with fucina.GGUFFile(parts[1]) as f:
        assert len(f.tensors) == len(TENSORS)


def test_writer_rejects_bad_input(tmp_path: Path) -> None:
    w = fucina.GGUFWriter()
    with pytest.raises(fucina.GGUFError, match="needs 34 bytes, got 33"):
        w.add_tensor("q", b"\0" * 33, ggml_type="Q8_0", shape=(32,))
    with pytest.raises(fucina.GGUFError, match="block size 32"):
        w.add_tensor("q", b"\0" * 34, ggml_type="Q8_0", shape=(31,))
    with pytest.raises(fucina.GGUFError, match="unknown ggml type"):
        w.add_tensor("q", b"", ggml_type="Q9_9", shape=(0,))
    with pytest.raises(fucina.GGUFError, match="does not fit GGUF type UINT8"):
        w.add("k", 300, type="UINT8")
    with pytest.raises(fucina.GGUFError, match="explicit item_type"):
        w.add("k", [])
    with pytest.raises(fucina.GGUFError, match="needs an explicit ggml_type"):
        w.add_tensor("b", np.zeros(4, dtype=np.uint8))
    w.add_tensor("ok", np.zeros(4, dtype=np.float32))
    with pytest.raises(fucina.GGUFError, match="duplicate tensor name 'ok'"):
        w.add_tensor("ok", np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="version"):
        fucina.GGUFWriter(version=1)
    # A failed write leaves an existing file untouched.
    target = tmp_path / "keep.gguf"
    target.write_bytes(b"precious")
    w.add("general.alignment", 3, type="UINT32")
    with pytest.raises(fucina.GGUFError, match="power of two"):
        w.write(target)
    assert target.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.gguf"]
