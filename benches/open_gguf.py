#!/usr/bin/env python3
"""Opening a GGUF and listing its tensors: fucina vs gguf-py's GGUFReader, side by side.

    python benches/open_gguf.py [PATH]      # default: the embedded Gemma 3 270M (253 MB)

Each variant runs in a fresh subprocess per repetition (so nothing is cached in
the interpreter; the file itself is in the page cache for both). Reports the
median wall time, the ratio ours/peer, and how much of the file became resident
in our process (VmRSS growth): far below the file size means the tensor data was
not read.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

REPS = 15

CHILD = r"""
import json, sys, time
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
which, path = sys.argv[1], sys.argv[2]
if which == "fucina":
    import fucina
    before = rss_kib()
    t0 = time.perf_counter()
    f = fucina.GGUFFile(path)
    names = list(f.tensors)
    dt = time.perf_counter() - t0
else:
    import gguf
    before = rss_kib()
    t0 = time.perf_counter()
    r = gguf.GGUFReader(path)
    names = [t.name for t in r.tensors]
    dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "n": len(names), "rss_growth_kib": rss_kib() - before}))
"""


def run(which: str, path: Path) -> list[dict[str, float]]:
    out = []
    for _ in range(REPS):
        r = subprocess.run([sys.executable, "-c", CHILD, which, str(path)], capture_output=True, text=True, check=True)
        out.append(json.loads(r.stdout))
    return out


def main() -> None:
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
    else:
        import fucina

        path = fucina.assets.default_model_path()
    size = path.stat().st_size
    ours, peer = run("fucina", path), run("gguf-py", path)
    assert ours[0]["n"] == peer[0]["n"], "the readers disagree on the tensor count"
    t_ours = statistics.median(r["seconds"] for r in ours)
    t_peer = statistics.median(r["seconds"] for r in peer)
    rss = statistics.median(r["rss_growth_kib"] for r in ours) * 1024
    print(f"file: {path} ({size / 1e6:.1f} MB, {ours[0]['n']} tensors), {REPS} fresh processes each")
    print(f"fucina.GGUFFile + list tensors : {t_ours * 1e3:8.2f} ms (median)")
    print(f"gguf.GGUFReader + list tensors : {t_peer * 1e3:8.2f} ms (median)")
    print(f"ratio ours/peer (time)         : {t_ours / t_peer:8.3f}  ({t_peer / t_ours:.1f}x faster)")
    print(f"resident growth, ours          : {rss / 1e6:8.2f} MB of {size / 1e6:.1f} MB ({100 * rss / size:.1f}%)")


if __name__ == "__main__":
    main()
