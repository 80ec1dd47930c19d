"""Expert-trace replay for ``fucina experts replay``: the table and the plot.

The replay itself runs in Rust (``fucina._core.experts_replay``): the live policy exactly as
the store ran it, and a capacity sweep of LRU, heat (decayed routed counts, the store's
default), segmented LRU, Belady-optimal and pinned+LRU. This module formats its rows as a
table (hit rate and streamed MiB per policy and capacity) and draws hit rate against
capacity: with matplotlib when it is installed (``pip install 'fucina[plot]'``) as PNG,
otherwise as a dependency-free SVG.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from . import _core

POLICIES = ("lru", "heat", "slru", "belady", "pinned+lru")


def replay(
    trace: str | os.PathLike[str],
    slots: list[int] | None = None,
    pins_from: str | os.PathLike[str] | None = None,
    heat_decay: float | None = None,
) -> dict[str, Any]:
    """The replay of ``trace`` (see ``fucina._core.experts_replay``)."""
    return _core.experts_replay(trace, slots=slots, pins_from=pins_from, heat_decay=heat_decay)


def table(result: dict[str, Any]) -> str:
    """Hit rate (and MiB streamed) per capacity and policy, one line per capacity."""
    rows: list[dict[str, Any]] = result["rows"]
    caps = sorted({int(r["slots"]) for r in rows})
    cell = {(r["policy"], r["slots"]): r for r in rows}
    live = result["live"]
    requests = live["hits"] + live["misses"]
    live_rate = live["hits"] / requests if requests else 0.0
    lines = [
        f"{result['calls']} layer calls over {result['moe_layers']} MoE layers of up to {result['n_expert']} experts; "
        f"live: {result['eviction']} at {result['live_slots']} slots per layer, {live['hits']} hits / "
        f"{live['misses']} misses ({100 * live_rate:.1f}%), {live['bytes'] / 2**20:.1f} MiB streamed",
        "slots " + "".join(f"{p:>20}" for p in POLICIES),
    ]
    for c in caps:
        parts = []
        for p in POLICIES:
            r = cell.get((p, c))
            parts.append(f"{100 * r['hit_rate']:6.1f}% {r['bytes'] / 2**20:9.1f}MiB" if r else f"{'-':>20}")
        lines.append(f"{c:>5} " + "".join(f"{x:>20}" for x in parts))
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> Path:
    """Hit rate against capacity per policy, written to ``path`` (PNG via matplotlib when
    installed and asked for, else SVG: the suffix becomes ``.svg``)."""
    series = {
        p: sorted((int(r["slots"]), float(r["hit_rate"])) for r in result["rows"] if r["policy"] == p) for p in POLICIES
    }
    if path.suffix.lower() != ".svg":
        try:
            # Imported by name: matplotlib is optional (the `plot` extra) and untyped here.
            matplotlib: Any = importlib.import_module("matplotlib")
            matplotlib.use("Agg")
            plt: Any = importlib.import_module("matplotlib.pyplot")
        except ImportError:
            path = path.with_suffix(".svg")
        else:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for p, pts in series.items():
                ax.plot([x for x, _ in pts], [100 * y for _, y in pts], marker="o", label=p)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("cache slots per layer")
            ax.set_ylabel("hit rate (%)")
            ax.legend()
            ax.grid(alpha=0.3)
            fig.tight_layout()
            fig.savefig(path)
            plt.close(fig)
            return path
    path.write_text(_svg(series), encoding="utf-8")
    return path


_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#000000", "#9467bd")


def _svg(series: dict[str, list[tuple[int, float]]]) -> str:
    """A line chart of hit rate (0-100%) against log2 capacity, as SVG text."""
    import math

    w, h, m = 640, 400, 50
    xs = [x for pts in series.values() for x, _ in pts] or [1]
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    span = hi - lo or 1.0

    def px(x: int) -> float:
        return m + (math.log2(x) - lo) / span * (w - 2 * m)

    def py(y: float) -> float:
        return h - m - y * (h - 2 * m)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
        f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
        f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">cache slots per layer</text>',
        f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle">hit rate (%)</text>',
    ]
    for t in range(0, 101, 20):
        out.append(f'<text x="{m - 5}" y="{py(t / 100) + 4:.1f}" text-anchor="end">{t}</text>')
    for x in sorted(set(xs)):
        out.append(f'<text x="{px(x):.1f}" y="{h - m + 15}" text-anchor="middle">{x}</text>')
    for i, (name, pts) in enumerate(series.items()):
        color = _COLORS[i % len(_COLORS)]
        d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{w - m + 5}" y="{m + 15 * i}" fill="{color}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
