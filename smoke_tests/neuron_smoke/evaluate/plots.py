"""The report's plots (matplotlib, Agg), each returned as PNG bytes; None when matplotlib is not installed."""

from __future__ import annotations

import importlib.util
import io
from typing import Any

FLOOR = 1e-12  # errors are drawn on a log scale; an exact match sits on the floor


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _figure(width: float, height: float, left: float = 0.12) -> Any:
    """A bare matplotlib Figure (no pyplot: its import and figure manager cost more than the drawing), with fixed
    margins instead of tight_layout, which would draw every figure twice. `left` leaves room for y labels."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=left, right=0.97, top=0.95, bottom=max(0.12, 0.55 / height))
    return fig


def _label_room(labels: list[str], width: float, fontsize: float) -> float:
    """The left margin, as a fraction of the figure, that `labels` at `fontsize` points need (about 0.6 em a char)."""
    inches = max((len(label) for label in labels), default=0) * fontsize * 0.6 / 72 + 0.3
    return min(0.6, max(0.08, inches / width))


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


PANELS = (("output", "outputs"), ("grad", "gradients"), ("weight", "updated weights"))


def layer_errors(layers: list[dict[str, Any]], rtol: float) -> bytes | None:
    """One panel each for the layers' outputs, gradients (their weights' and what they pass on) and updated weights:
    the worst error of the kind per layer, against each reference."""
    if not available() or not layers:
        return None
    names = [entry["layer"] for entry in layers]
    height = max(2.5, 0.22 * len(names) + 1)
    fig = _figure(12, height, left=_label_room(names, 12, 7))
    fig.subplots_adjust(top=1 - 0.3 / height)  # room for the panels' titles
    axes = fig.subplots(1, len(PANELS), sharey=True)
    y = list(range(len(names)))
    for ax, (kind, title) in zip(axes, PANELS, strict=True):
        for offset, ref, color in ((-0.2, "baseline", "tab:blue"), (0.2, "cpu", "tab:orange")):
            values = [max(entry.get(f"{kind}_vs_{ref}") or 0.0, FLOOR) for entry in layers]
            if any(entry.get(f"{kind}_vs_{ref}") is not None for entry in layers):
                ax.barh([v + offset for v in y], values, height=0.4, color=color, label=f"vs {ref}")
        ax.axvline(rtol, color="red", linestyle="--", label=f"rtol {rtol:g}")
        ax.set_xscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("worst normwise error", fontsize=8)
    axes[0].set_yticks(y, names, fontsize=7)
    axes[0].invert_yaxis()
    axes[0].legend(fontsize=7)
    return _png(fig)


def sweep_times(rows: list[dict[str, Any]]) -> bytes | None:
    """Per shape: the compile, and the step's p50 with a whisker up to its p95 (the spread of the timed steps)."""
    if not available() or not rows:
        return None
    shapes = [r["shape"] for r in rows]
    fig = _figure(7, 3.2)
    fig.subplots_adjust(right=0.88, bottom=0.2, top=0.8)  # the legend sits above the axes
    ax = fig.subplots()
    x = list(range(len(shapes)))
    ax.bar([i - 0.2 for i in x], [r["compile_s"] for r in rows], width=0.4, label="compile (s)", color="tab:red")
    ax2 = ax.twinx()
    p50 = [r["p50_ms"] for r in rows]
    spread = [[0.0] * len(rows), [r["p95_ms"] - r["p50_ms"] for r in rows]]
    ax2.bar([i + 0.2 for i in x], p50, width=0.4, yerr=spread, capsize=3, label="step p50, whisker to p95 (ms)")
    ax.set_xticks(x, shapes, rotation=30, fontsize=8)
    ax.set_ylabel("compile time (s)")
    ax2.set_ylabel("training step (ms)")
    fig.legend(loc="upper left", fontsize=8, ncols=2)
    return _png(fig)


def fallback_modules(rows: list[dict[str, Any]]) -> bytes | None:
    if not available() or not rows:
        return None
    labels = [f"{r['module']}: {r['op']}" for r in rows]
    fig = _figure(7, max(2.0, 0.3 * len(labels) + 1), left=_label_room(labels, 7, 8))
    ax = fig.subplots()
    ax.barh(range(len(labels)), [r["calls"] or 0 for r in rows], color="tab:purple")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("calls that fell back to the CPU")
    return _png(fig)


def loss_curves(curves: dict[str, list[float] | None], diverged_at: int | None) -> bytes | None:
    """The loss per step of each curve present (device, baseline, cpu), and the step where they part, if any."""
    shown = {name: values for name, values in curves.items() if values}
    if not available() or not shown:
        return None
    fig = _figure(7, 3.2)
    ax = fig.subplots()
    styles = {"baseline": ("tab:blue", "-", "o"), "device": ("tab:orange", "--", "x"), "cpu": ("tab:green", ":", ".")}
    for name, values in shown.items():
        color, line, marker = styles.get(name, ("tab:gray", "-", "."))
        ax.plot(range(1, len(values) + 1), values, color=color, linestyle=line, marker=marker, label=name)
    if diverged_at is not None:
        ax.axvline(diverged_at, color="red", linestyle="--", label=f"diverges at step {diverged_at}")
    ax.xaxis.get_major_locator().set_params(integer=True)  # steps are whole
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    return _png(fig)
