"""ggml block formats from Python: dequantize and quantize raw GGUF tensor bytes.

Bit-identical to gguf-py's ``gguf.quants`` where gguf-py implements a codec, and
to ggml's C reference elsewhere.

>>> import numpy as np, fucina.quant as q
>>> x = np.linspace(-1, 1, 64, dtype=np.float32)
>>> blocks = q.quantize(x, "Q8_0")            # 2 blocks of 34 bytes
>>> y = q.dequantize(blocks, "Q8_0", (64,))
>>> float(abs(x - y).max()) < 0.01
True
"""

from __future__ import annotations

from ._core import dequantize, quantize

__all__ = ["dequantize", "quantize"]
