"""The MoE expert store from Python: ``LLM(..., moe_stream=True, ...)`` gives bitwise the
resident logits and tokens, records a trace, reports its stats; ``fucina run --moe-*`` and
``fucina experts replay`` work as a user runs them (subprocesses)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fucina
from fucina import _core

TINY = Path(__file__).parent / "goldens" / "model" / "tiny" / "qwen3moe-q8_0.gguf"


def _byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode table: one token per byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny qwen3moe (2 MoE layers of 20 experts, top-2, a 256-token vocabulary) with a
    byte-level tokenizer added, so ``LLM`` can run it."""
    path = tmp_path_factory.mktemp("moe") / "tiny-moe.gguf"
    w = _core.GGUFWriter.from_file(_core.GGUFFile(TINY))
    w.add("tokenizer.ggml.model", "gpt2")
    w.add("tokenizer.ggml.pre", "qwen2")
    w.add("tokenizer.ggml.tokens", _byte_tokens())
    w.add("tokenizer.ggml.token_type", [1] * 256, item_type="INT32")
    w.add("tokenizer.ggml.merges", [], item_type="STRING")
    w.add("tokenizer.ggml.eos_token_id", 0, type="UINT32")
    w.write(path)
    return path


def test_llm_moe_stream_is_bitwise_resident_and_records_a_trace(tiny_moe: Path, tmp_path: Path) -> None:
    ids = list(range(40, 72))
    resident = fucina.LLM(tiny_moe, n_threads=2)
    assert resident.moe_stats() is None
    want = resident.logits(ids, all=True)
    want_text = resident.generate("moe", max_tokens=12, temperature=0)
    trace = tmp_path / "tiny.trace"
    for cache_mb in (0.02, 0.1, None):
        llm = fucina.LLM(tiny_moe, n_threads=2, moe_stream=True, moe_cache_mb=cache_mb, moe_trace=trace, moe_pins=False)
        got = llm.logits(ids, all=True)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), cache_mb
        assert llm.generate("moe", max_tokens=12, temperature=0) == want_text
        stats = llm.moe_stats()
        assert stats is not None
        assert stats["misses"] > 0 and stats["hits"] + stats["misses"] > 0
        assert "[moe stream:" in stats["report"]
        llm.moe_flush()
        assert trace.read_text().startswith("fucina-experts-trace 1")
        replay = _core.experts_replay(trace)
        assert replay["live"]["hits"] == stats["hits"]
        assert replay["live"]["misses"] == stats["misses"]
        if cache_mb is None:  # room for every expert: nothing evicted, no pins
            assert stats["cache_bytes"] == stats["expert_bytes"]


def test_llm_moe_arguments_are_checked(tiny_moe: Path) -> None:
    with pytest.raises(ValueError, match="moe_eviction"):
        fucina.LLM(tiny_moe, moe_stream=True, moe_eviction="fifo")
    with pytest.raises(ValueError, match="moe_cache_mb"):
        fucina.LLM(tiny_moe, moe_stream=True, moe_cache_mb=-1.0)
    with pytest.raises(ValueError, match="io threads"):
        fucina.LLM(tiny_moe, moe_stream=True, moe_io_threads=1000)


def _fucina(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fucina", *args], capture_output=True, text=True, timeout=120)


def test_cli_run_streams_and_experts_replay_prints_a_table_and_plot(tiny_moe: Path, tmp_path: Path) -> None:
    trace = tmp_path / "run.trace"
    common = ["run", "hello", "-m", str(tiny_moe), "-n", "16", "--temp", "0", "--ignore-eos", "-t", "2"]
    plain = _fucina(*common, "--no-speculation")
    assert plain.returncode == 0, plain.stderr
    r = _fucina(
        *common,
        "--no-speculation",
        "--moe-stream",
        "--moe-cache-mb=0.05",
        "--moe-io-threads=2",
        "--moe-uncached",
        f"--moe-trace={trace}",
        "--stats",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout
    assert "[moe stream:" in r.stderr and "uncached" in r.stderr
    assert trace.exists()
    plot = tmp_path / "sweep.svg"
    rp = _fucina("experts", "replay", str(trace), "--slots", "1", "2", "4", "20", "--plot", str(plot))
    assert rp.returncode == 0, rp.stderr
    lines = rp.stdout.splitlines()
    assert "live: heat" in lines[0]
    header = lines[1].split()
    assert header == ["slots", "lru", "heat", "slru", "belady", "pinned+lru"]
    rates = {int(line.split()[0]): line for line in lines[2:6]}
    assert set(rates) == {1, 2, 4, 20}
    assert plot.read_text().startswith("<svg")
    assert f"plot: {plot}" in rp.stdout
    bad = _fucina("experts", "replay", str(tmp_path / "missing.trace"))
    assert bad.returncode == 1 and "missing.trace" in bad.stderr
