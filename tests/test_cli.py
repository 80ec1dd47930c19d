"""The `fucina` command line, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import load_golden


def fucina(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fucina", *args], capture_output=True, text=True, timeout=120)


def test_info_on_gemma_prints_correct_facts(gemma_path: Path) -> None:
    golden = load_golden("gguf", "gemma3-270m-q4_k_m.json")
    r = fucina("info", str(gemma_path))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    n_params = sum(t["n_elements"] for t in golden["tensors"])
    assert "architecture    gemma3" in out
    assert f"({n_params:,})" in out
    assert "context length  32768" in out
    assert "tokenizer       llama (pre: default), vocab size 262144" in out
    has_template = "tokenizer.chat_template" in golden["metadata"]
    assert f"chat template   {'present' if has_template else 'absent'}" in out
    assert "embedding length 640" in out
    for ty in {t["type"] for t in golden["tensors"]}:
        n = sum(1 for t in golden["tensors"] if t["type"] == ty)
        assert any(line.split()[:2] == [ty, str(n)] for line in out.splitlines()), ty


def test_info_defaults_to_embedded_model_and_json(gemma_path: Path) -> None:
    r = fucina("info", "--json")
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)
    assert facts["paths"] == [str(gemma_path)]
    assert facts["architecture"] == "gemma3"
    assert facts["vocab_size"] == 262_144
    assert facts["block_count"] == 18
    assert sum(row["bytes"] for row in facts["quant_mix"].values()) == facts["tensor_data_bytes"]


def test_info_header_only_on_truncated_qwen(qwen_header_path: Path) -> None:
    golden = load_golden("gguf", "qwen2-vocab-header.json")
    r = fucina("info", "--header-only", str(qwen_header_path))
    assert r.returncode == 0, r.stderr
    assert "metadata (27 keys; tensor data not checked)" in r.stdout
    listed = [line.split()[0] for line in r.stdout.split("metadata (27 keys")[1].splitlines()[1:] if line.strip()]
    assert listed == list(golden["metadata"])
    assert "tokenizer       gpt2 (pre: deepseek-r1-qwen), vocab size 152064" in r.stdout
    assert "ARRAY[STRING]" in r.stdout


def test_info_full_open_of_truncated_file_fails_cleanly(qwen_header_path: Path) -> None:
    r = fucina("info", str(qwen_header_path))
    assert r.returncode == 1
    assert r.stderr.startswith("fucina: error: tensor '")
    assert "past the end of the file" in r.stderr
    assert "Traceback" not in r.stderr


def test_info_on_garbage_file(tmp_path: Path) -> None:
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04 not a gguf")
    r = fucina("info", str(p))
    assert r.returncode == 1
    assert "not a GGUF file" in r.stderr


def test_version_flag() -> None:
    r = fucina("--version")
    assert r.returncode == 0 and r.stdout.startswith("fucina ")


def test_run_streams_the_greedy_continuation(gemma_path: Path) -> None:
    from fucina import LLM

    prompt = "The capital of France is"
    want = LLM(gemma_path, n_ctx=64).generate(prompt, max_tokens=12)
    r = fucina("run", prompt, "-n", "12", "-c", "64", "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout == want + "\n"
    r = fucina("run", prompt, "-n", "4", "--echo", "-v")
    assert r.returncode == 0 and r.stdout.startswith(prompt)
    assert "prompt tokens" in r.stderr


def test_run_reports_missing_model_cleanly(tmp_path: Path) -> None:
    r = fucina("run", "hi", "--model", str(tmp_path / "missing.gguf"))
    assert r.returncode == 1 and "missing.gguf" in r.stderr and "Traceback" not in r.stderr


def test_run_samples_by_default_and_a_seed_fixes_it(gemma_path: Path) -> None:
    prompt = "Once upon a time"
    a = fucina("run", prompt, "-n", "16", "-c", "64", "--seed", "11")
    b = fucina("run", prompt, "-n", "16", "-c", "64", "--seed", "11")
    assert a.returncode == 0 and b.returncode == 0, a.stderr
    assert a.stdout == b.stdout
    outs = {fucina("run", prompt, "-n", "16", "-c", "64", "--seed", str(s)).stdout for s in range(4)}
    assert len(outs) >= 2, "sampling with different seeds gave one continuation"
    # llama-cli's Mirostat flags: a seed fixes it too, and a near-zero target is the greedy text.
    m = ("--mirostat", "2", "--mirostat-ent", "4", "--mirostat-lr", "0.2", "--seed", "5")
    c = fucina("run", prompt, "-n", "16", "-c", "64", *m)
    assert c.returncode == 0 and c.stdout == fucina("run", prompt, "-n", "16", "-c", "64", *m).stdout, c.stderr
    tight = fucina(
        "run", prompt, "-n", "16", "-c", "64", "--mirostat", "1", "--mirostat-ent", "0.01", "--mirostat-lr", "0"
    )
    assert tight.stdout == fucina("run", prompt, "-n", "16", "-c", "64", "--temp", "0").stdout


def test_run_rejects_bad_values_without_a_traceback() -> None:
    for args, field in [
        (["--temp", "-1"], "temperature"),
        (["--top-p", "2"], "top_p"),
        (["--min-p", "nan"], "min_p"),
        (["--repeat-penalty", "0"], "repeat_penalty"),
        (["-n", "-3"], "max_tokens"),
        (["--stop", ""], "stop"),
    ]:
        r = fucina("run", "hi", *args)
        assert r.returncode == 1, (args, r.stderr)
        assert field in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = fucina("run", "hi", "--temp", "warm")
    assert r.returncode == 2 and "invalid float value" in r.stderr and "Traceback" not in r.stderr


def test_run_ctrl_c_exits_cleanly(gemma_path: Path) -> None:
    import signal
    import time

    p = subprocess.Popen(
        # Seeded and past end-of-generation tokens: generation cannot end before the signal.
        [sys.executable, "-m", "fucina", "run", "Once upon a time", "-n", "4000", "-c", "4096", "--temp", "1"]
        + ["--seed", "7", "--ignore-eos"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    p.stdout.read(1)  # generation has started
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err


def test_run_ignore_eos_generates_max_tokens(gemma_path: Path) -> None:
    r = fucina("run", "The end.", "-n", "24", "--temp", "0", "--ignore-eos", "-v")
    assert r.returncode == 0, r.stderr
    assert ", 24 generated," in r.stderr


def test_tokenize_prints_ids_and_pieces(gemma_path: Path) -> None:
    from fucina import Tokenizer

    tok = Tokenizer.from_gguf(gemma_path)
    text = "Hello, world! ünïcödé"
    r = fucina("tokenize", text)
    assert r.returncode == 0, r.stderr
    ids = tok.encode(text)
    lines = r.stdout.splitlines()
    assert [int(line.split("->")[0]) for line in lines[:-1]] == ids
    assert lines[-1] == f"{len(ids)} tokens"
    r = fucina("tokenize", text, "--ids", "--no-bos")
    assert r.stdout.strip() == str(tok.encode(text, add_special=False))
    r = subprocess.run(
        [sys.executable, "-m", "fucina", "tokenize", "-", "--ids"], input=text, capture_output=True, text=True
    )
    assert r.stdout.strip() == str(ids)


def test_bench_prints_llama_bench_rows(gemma_path: Path) -> None:
    r = fucina("bench", "-p", "32", "-n", "8", "-r", "2")
    assert r.returncode == 0, r.stderr
    rows = {line.split("|")[4].strip(): line.split("|")[5].strip() for line in r.stdout.splitlines()[2:]}
    assert set(rows) == {"pp32", "tg8"}
    for rate in rows.values():
        mean, sd = (float(x) for x in rate.split("±"))
        assert mean > 0 and sd >= 0
    r = fucina("bench", "-n", "0")
    assert r.returncode == 1 and "n-gen" in r.stderr and "Traceback" not in r.stderr
