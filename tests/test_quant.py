"""fucina.quant and GGUFFile.tensor(dequantize=True) against gguf-py's codecs."""

from __future__ import annotations

from pathlib import Path

import gguf.quants
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fucina
import fucina.quant

# Types gguf-py can both quantize and dequantize.
ROUND_TRIP = [Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(ROUND_TRIP),
    st.integers(1, 4),
    # Magnitudes below 1e-6 make gguf-py divide by subnormal scales and cast NaN to
    # uint8, which numpy leaves platform-defined: not a contract worth pinning.
    hnp.arrays(np.float32, 64 * 4, elements=st.floats(-1e4, 1e4, width=32).filter(lambda v: v == 0 or abs(v) > 1e-6)),
)
def test_quantize_and_dequantize_bit_identical_to_gguf_py(ty: Q, rows: int, data: np.ndarray) -> None:
    x = data[: rows * 64].reshape(rows, 64)
    ours = fucina.quant.quantize(x, ty.name)
    ref = gguf.quants.quantize(x, ty)
    assert ours == ref.tobytes()
    back = fucina.quant.dequantize(ours, ty.name, x.shape)
    np.testing.assert_array_equal(back.view(np.uint32), gguf.quants.dequantize(ref, ty).view(np.uint32))


def test_real_gemma_tensors_dequantize_like_gguf_py(gemma_path: Path) -> None:
    with fucina.GGUFFile(gemma_path) as f:
        seen = set()
        for name, info in f.tensors.items():
            if info.type in seen or info.n_bytes > 4_000_000:
                continue
            seen.add(info.type)
            ours = f.tensor(name, dequantize=True)
            assert ours.dtype == np.float32 and list(ours.shape) == info.shape
            ref = gguf.quants.dequantize(f.tensor(name), Q[info.type])
            np.testing.assert_array_equal(ours.view(np.uint32), ref.astype(np.float32).view(np.uint32), err_msg=name)
        assert {"Q5_0", "Q4_K", "Q6_K", "F32"} <= seen


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="bytes hold 32 elements"):
        fucina.quant.dequantize(b"\0" * 34, "Q8_0", (64,))
    with pytest.raises(ValueError):
        fucina.quant.dequantize(b"\0" * 33, "Q8_0", (32,))
    with pytest.raises(fucina.FucinaError):
        fucina.quant.dequantize(b"\0" * 36, "Q8_1", (32,))
    with pytest.raises(ValueError, match="unknown ggml type|Q9_9"):
        fucina.quant.quantize(np.zeros(32, np.float32), "Q9_9")
    with pytest.raises(ValueError):
        fucina.quant.quantize(np.zeros(31, np.float32), "Q8_0")


def test_build_info_reports_the_kernel_set() -> None:
    info = fucina.build_info()
    assert info["isa"] in {"scalar", "avx2", "avx512", "neon"}


# Byte offsets of the f16 scale fields per block type; non-finite scales are made
# finite (their NaN/Inf behaviour is pinned by the Rust goldens' explicit edge cases).
F16_FIELDS: dict[Q, list[int]] = {
    Q.Q4_0: [0],
    Q.Q4_1: [0, 2],
    Q.Q5_0: [0],
    Q.Q5_1: [0, 2],
    Q.Q8_0: [0],
    Q.Q2_K: [80, 82],
    Q.Q3_K: [108],
    Q.Q4_K: [0, 2],
    Q.Q5_K: [0, 2],
    Q.Q6_K: [208],
    Q.IQ2_XXS: [0],
    Q.IQ2_XS: [0],
    Q.IQ2_S: [0],
    Q.IQ3_XXS: [0],
    Q.IQ3_S: [0],
    Q.IQ1_S: [0],
    Q.IQ4_NL: [0],
    Q.IQ4_XS: [0],
    Q.TQ1_0: [52],
    Q.TQ2_0: [64],
}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(F16_FIELDS)), st.integers(1, 3), st.randoms(use_true_random=False))
def test_random_blocks_dequantize_bit_identical_to_gguf_py(ty: Q, n_blocks: int, rnd: object) -> None:
    block, size = gguf.GGML_QUANT_SIZES[ty]
    raw = np.frombuffer(rnd.randbytes(size * n_blocks), dtype=np.uint8).reshape(n_blocks, size).copy()  # type: ignore[attr-defined]
    for off in F16_FIELDS[ty]:
        field = raw[:, off : off + 2].copy().view(np.uint16)
        field[(field & 0x7C00) == 0x7C00] &= np.uint16(0xBFFF)
        raw[:, off : off + 2] = field.view(np.uint8)
    ours = fucina.quant.dequantize(raw.tobytes(), ty.name, (n_blocks * block,))
    ref = gguf.quants.dequantize(raw.reshape(1, -1), ty).reshape(-1).astype(np.float32)
    np.testing.assert_array_equal(ours.view(np.uint32), ref.view(np.uint32))
