"""Opening a model maps it; the tensor data is not read until someone touches it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = r"""
import sys, fucina
def rss():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmRSS:"))
before = rss()
f = fucina.GGUFFile(sys.argv[1])
names = list(f.tensors)
opened = rss() - before
f.tensor_bytes("token_embd.weight").sum()   # touch 178 MB of data
print(opened, rss() - before)
"""


def test_open_does_not_read_tensor_data(gemma_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, str(gemma_path)], capture_output=True, text=True, check=True)
    opened, touched = map(int, out.stdout.split())
    size = gemma_path.stat().st_size
    # The header (vocabulary included) is ~6 MB; the data is 247 MB.
    assert opened < size // 8, f"opening made {opened} bytes resident"
    # Control: touching the embedding table does make it resident, so the probe works.
    assert touched > opened + 150_000_000
