"""The report's plots (matplotlib, Agg), each returned as PNG bytes; None when matplotlib is not installed."""

from __future__ import annotations

import importlib.util
import io
from typing import Any

FLOOR = 1e-12  # errors are drawn on a log scale; an exact match sits on the floor


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, imported on the first plot (it costs about a second)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90)
    _pyplot().close(fig)
    return buf.getvalue()


def layer_errors(layers: list[dict[str, Any]], rtol: float) -> bytes | None:
    if not available() or not layers:
        return None
    plt = _pyplot()
    names = [entry["layer"] for entry in layers]
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.22 * len(names) + 1)))
    y = list(range(len(names)))
    for offset, ref, color in ((-0.2, "baseline", "tab:blue"), (0.2, "cpu", "tab:orange")):
        values = [max(entry.get(f"worst_vs_{ref}", 0.0) or 0.0, FLOOR) for entry in layers]
        if any(entry.get(f"worst_vs_{ref}") is not None for entry in layers):
            ax.barh([v + offset for v in y], values, height=0.4, color=color, label=f"vs {ref}")
    ax.axvline(rtol, color="red", linestyle="--", label=f"rtol {rtol:g}")
    ax.set_xscale("log")
    ax.set_yticks(y, names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("worst normwise error of the layer's tensors")
    ax.legend(fontsize=8)
    return _png(fig)


def sweep_times(rows: list[dict[str, Any]]) -> bytes | None:
    if not available() or not rows:
        return None
    plt = _pyplot()
    shapes = [r["shape"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    x = list(range(len(shapes)))
    ax.bar([i - 0.2 for i in x], [r["compile_s"] for r in rows], width=0.4, label="compile (s)", color="tab:red")
    ax2 = ax.twinx()
    ax2.bar([i + 0.2 for i in x], [r["steady_p50_ms"] for r in rows], width=0.4, label="steady p50 (ms)")
    ax.set_xticks(x, shapes, rotation=30, fontsize=8)
    ax.set_ylabel("compile time (s)")
    ax2.set_ylabel("steady state p50 (ms)")
    fig.legend(loc="upper left", fontsize=8)
    return _png(fig)


def fallback_modules(rows: list[dict[str, Any]]) -> bytes | None:
    if not available() or not rows:
        return None
    plt = _pyplot()
    labels = [f"{r['module']}: {r['op']}" for r in rows]
    fig, ax = plt.subplots(figsize=(7, max(2.0, 0.3 * len(labels) + 1)))
    ax.barh(range(len(labels)), [r["calls"] or 0 for r in rows], color="tab:purple")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("calls that fell back to the CPU")
    return _png(fig)
