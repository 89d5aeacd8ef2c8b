"""neuron_smoke.evaluate.plots: each plot is a PNG of the size its rows ask for, and None without rows or without
matplotlib."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from neuron_smoke.evaluate import plots

pytest.importorskip("matplotlib", reason="the plots need the `eval` extra (matplotlib)")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DPI = 90  # plots._png's resolution


@pytest.fixture(autouse=True)
def _agg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPLBACKEND", "Agg")  # no display; the module draws on bare Figures, this is a safeguard


def _written(tmp_path: Path, name: str, png: bytes | None) -> tuple[int, int]:
    """Write the PNG to a file, check it is one, and return its (width, height) in pixels from the IHDR chunk."""
    assert png is not None
    path = tmp_path / name
    path.write_bytes(png)
    data = path.read_bytes()
    assert path.stat().st_size > 1000 and data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _layers(n: int) -> list[dict[str, Any]]:
    return [{"layer": f"block.{i}.mlp", "worst_vs_cpu": 10.0**-i, "worst_vs_baseline": 0.0} for i in range(n)]


def test_layer_errors_is_a_png_as_wide_as_the_figure_and_as_tall_as_its_layers(tmp_path: Path) -> None:
    assert _written(tmp_path, "few.png", plots.layer_errors(_layers(3), 1e-3)) == (12 * DPI, int(2.5 * DPI))
    many = 40  # taller than the minimum: 0.22 inch a layer and an inch of margin
    width, height = _written(tmp_path, "many.png", plots.layer_errors(_layers(many), 1e-3))
    assert width == 12 * DPI and height == pytest.approx((0.22 * many + 1) * DPI, abs=1)


def test_outputs_gradients_and_weights_are_charted_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[Any] = []
    monkeypatch.setattr(plots, "_png", lambda fig: drawn.append(fig) or b"png")
    layers = [
        {"layer": "fc", "output_vs_cpu": 0.5, "grad_vs_cpu": 0.25, "weight_vs_cpu": 0.125, "worst_vs_cpu": 0.5},
        {"layer": "head", "output_vs_cpu": 0.0, "grad_vs_cpu": 1e-3, "weight_vs_cpu": None, "worst_vs_cpu": 1e-3},
    ]
    assert plots.layer_errors(layers, 1e-3) == b"png"
    [fig] = drawn
    assert [ax.get_title() for ax in fig.axes] == ["outputs", "gradients", "updated weights"]
    widths = [[bar.get_width() for bar in ax.patches] for ax in fig.axes]  # one bar a layer (no baseline values)
    assert widths == [[0.5, plots.FLOOR], [0.25, 1e-3], [0.125, plots.FLOOR]]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["fc", "head"]


def test_layer_errors_draws_a_reference_that_is_absent_or_zero(tmp_path: Path) -> None:
    only_cpu = [{"layer": "fc", "output_vs_cpu": 0.0}, {"layer": "head", "grad_vs_cpu": None}]
    _written(tmp_path, "cpu.png", plots.layer_errors(only_cpu, 1e-3))  # zeros and None sit on the log floor


def test_sweep_times_and_fallback_modules_are_pngs(tmp_path: Path) -> None:
    rows = [
        {"shape": "1x8", "compile_s": 1.5, "p50_ms": 0.2, "p95_ms": 0.5},
        {"shape": "4x8", "compile_s": 0.0, "p50_ms": 3, "p95_ms": 3},
    ]
    assert _written(tmp_path, "sweep.png", plots.sweep_times(rows)) == (7 * DPI, int(3.2 * DPI))
    fallback = [{"module": "a", "op": "aten::gelu", "calls": 4}, {"module": None, "op": "aten::erfinv", "calls": None}]
    assert _written(tmp_path, "fallback.png", plots.fallback_modules(fallback)) == (7 * DPI, int(2.0 * DPI))


def test_no_rows_give_no_plot() -> None:
    assert plots.layer_errors([], 1e-3) is None
    assert plots.sweep_times([]) is None
    assert plots.fallback_modules([]) is None


def test_without_matplotlib_there_are_no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plots.importlib.util, "find_spec", lambda name: None)
    assert not plots.available()
    assert plots.layer_errors(_layers(2), 1e-3) is None
    assert plots.sweep_times([{"shape": "1x8", "compile_s": 1.0, "p50_ms": 1.0, "p95_ms": 1.0}]) is None
    assert plots.fallback_modules([{"module": "a", "op": "gelu", "calls": 1}]) is None


def test_the_left_margin_grows_with_the_longest_label_within_bounds() -> None:
    short, long = plots._label_room(["fc"], 9, 7), plots._label_room(["transformer.h.1.mlp.c_proj"], 9, 7)
    assert 0.08 <= short < long <= 0.6
    assert plots._label_room([], 9, 7) == 0.08 and plots._label_room(["x" * 500], 9, 7) == 0.6


def test_loss_curves_draw_the_curves_present_and_none_without_any(tmp_path: Path) -> None:
    curves: dict[str, list[float] | None] = {"device": [2.0, 1.8, 1.9], "baseline": [2.0, 1.8, 1.6], "cpu": None}
    assert _written(tmp_path, "loss.png", plots.loss_curves(curves, 3)) == (7 * DPI, int(3.2 * DPI))
    assert plots.loss_curves({"device": [], "baseline": None}, None) is None
