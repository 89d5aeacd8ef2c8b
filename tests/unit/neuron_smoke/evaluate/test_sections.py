"""neuron_smoke.evaluate.sections: the report's sections from the JSON data alone, per mode and per finding."""

from __future__ import annotations

from typing import Any

import pytest

from neuron_smoke.evaluate import buckets, plots, sections
from tests.unit.neuron_smoke.evaluate._readiness import nothing_found


def _readiness(**changes: Any) -> dict[str, Any]:
    return {**nothing_found(), "compile_tried": False, "untied": [], **changes}


def _scan_data(**changes: Any) -> dict[str, Any]:
    """What a scan (no baseline, on the CPU) writes: no tensors compared."""
    data = {
        "mode": "scan",
        "model": {"name": "mlp", "class": "m.MLP", "parameters": 12345},
        "device": {"backend": "cpu", "compile_backend": "aot_eager"},
        "versions": {"torch": "2.13.0", "torch-neuronx": "not installed"},
        "rtol": 1e-3,
        "exit_code": 0,
        "timing": {"first_call_s": 0.5, "p50_ms": 1.0, "p95_ms": 2.0, "iterations": 10},
        "readiness": _readiness(),
        "inventory": [
            {"op": "aten::addmm.default", "module": "fc1", "calls": 1, "dtypes": ["float32"]},
            {"op": "aten::addmm.default", "module": "fc2", "calls": 2, "dtypes": ["float32"]},
            {"op": "aten::gelu.default", "module": "act", "calls": 1, "dtypes": ["bfloat16"]},
        ],
    }
    return {**data, **changes}


def _row(
    tensor: str, cpu: float, base: float | None, ok: bool = True, shape: list[int] | None = None
) -> dict[str, Any]:
    return {
        "tensor": tensor,
        "shape": [2, 3] if shape is None else shape,
        "vs_cpu": cpu,
        "vs_baseline": base,
        "cpu_vs_baseline": base,
        "source": "-" if ok else "device",
        "ok": ok,
    }


def _compare_data() -> dict[str, Any]:
    tensors = [
        _row("loss", 0.0, 0.0, shape=[]),
        _row("grad/fc1.weight", 0.5, 0.0, ok=False),
        _row("act/fc1/out/0", 9, 9),
        _row("actgrad/fc1/out/0", 7, 7),
    ]
    return _scan_data(
        mode="compare",
        tensors=tensors,
        origins={"baseline": [], "cpu": [{"call": "fc1", "layer": "fc1", "input_error": 0.0, "output_error": 0.5}]},
        grad_origins={
            "baseline": [],
            "cpu": [{"call": "fc2", "layer": "fc2", "input_error": 0.0, "output_error": 0.2}],
        },
        layers=[{"layer": "fc1", "tensors": 2, "grad_vs_cpu": 0.5, "worst_vs_cpu": 0.5, "worst_vs_baseline": 0.0}],
        baseline={
            "path": "/b",
            "started": "2026-01-01T00:00:00+00:00",
            "device": {"backend": "cuda"},
            "versions": {"torch": "2.9.0"},
            "timing": {"first_call_s": 0.1, "p50_ms": 0.3, "p95_ms": 0.4, "iterations": 5},
        },
    )


def _titles(data: dict[str, Any]) -> list[str]:
    return [s.title for s in sections.build_sections(data)]


def test_a_scan_has_no_comparison_sections() -> None:
    assert _titles(_scan_data()) == [
        "Summary",
        "Timing (forward, loss, backward)",
        "Readiness",
        "Op inventory (one step, forward and backward)",
    ]


def test_a_comparison_names_the_baseline_and_where_errors_start() -> None:
    found = {s.title: s for s in sections.build_sections(_compare_data())}
    assert list(found)[1:4] == ["Where errors start", "Per layer", "Per tensor"]
    summary = " ".join(found["Summary"].text)
    assert "Mode compare; model mlp (m.MLP, 12,345 parameters); device cpu (compile backend aot_eager)" in summary
    assert "Baseline /b: recorded 2026-01-01T00:00:00+00:00 on cuda with torch 2.9.0." in summary
    assert "4 tensors compared; 1 beyond rtol 0.001." in summary
    assert found["Where errors start"].rows == [
        ["baseline", "outputs", "none", None, None],
        ["cpu", "outputs", "fc1", 0.0, 0.5],
        ["baseline", "gradients", "none", None, None],
        ["cpu", "gradients", "fc2", 0.0, 0.2],
    ]
    assert found["Where errors start"].text[1:] == [
        "Against the baseline: the error starts in no layer; the gradient error starts in no layer.",
        "Against the cpu: the error starts in fc1; the gradient error starts in fc2.",
    ]
    assert found["Per layer"].rows == [["fc1", None, None, None, 0.5, None, None]]
    timing = found["Timing (forward, loss, backward)"].rows
    assert timing == [["this run", "cpu", 0.5, 1.0, 2.0, 10], ["baseline", "cuda", 0.1, 0.3, 0.4, 5]]


def test_the_tensor_table_leaves_out_activations_and_shows_the_worst_first() -> None:
    table = {s.title: s for s in sections.build_sections(_compare_data())}["Per tensor"]
    assert [r[0] for r in table.rows] == ["grad/fc1.weight", "loss"]  # activations and their gradients: JSON only
    assert table.rows[0][1:] == ["2x3", 0.0, 0.5, 0.0, "device", "FAIL"]
    assert table.rows[1][1] == "scalar" and table.rows[1][-1] == "ok"
    many = _compare_data()
    many["tensors"] = [_row(f"grad/w{i}", i / 1000, None) for i in range(sections.MAX_TENSOR_ROWS + 5)]
    rows = {s.title: s for s in sections.build_sections(many)}["Per tensor"].rows
    assert len(rows) == sections.MAX_TENSOR_ROWS and rows[0][0] == f"grad/w{sections.MAX_TENSOR_ROWS + 4}"


def test_readiness_lists_every_finding_or_says_nothing_was_found() -> None:
    clean = {s.title: s for s in sections.build_sections(_scan_data())}["Readiness"]
    assert "Nothing found." in clean.text and clean.headers == [] and clean.rows == []
    assert "CPU fallback is not tracked on cpu; run on the neuron device." in clean.text
    assert any("pass --shapes" in t for t in clean.text)
    r = _readiness(
        unsupported=[{"area": "fft", "op": "aten::fft_rfft", "module": "spec", "calls": 2}],
        float64=[{"what": "buffer", "name": "scale", "module": "(root)"}],
        fallback=[{"op": "aten::gelu", "module": "act", "calls": 3}],
        fallback_tracked=True,
        compile_tried=True,
        compile_failure={"error": "RuntimeError: no lowering", "ops": {"aten::fft_rfft": ["spec", "head"]}},
        untied=["b.weight was untied from a.weight"],
    )
    found = {s.title: s for s in sections.build_sections(_scan_data(readiness=r))}
    section = found["Readiness"]
    assert section.rows == [
        ["unsupported area: fft", "aten::fft_rfft", "spec", 2],
        ["float64 runs as float32", "buffer scale", "(root)", None],
        ["fell back to CPU", "aten::gelu", "act", 3],
        ["tied weights untied by .to(device)", "b.weight was untied from a.weight", None, None],
    ]
    assert section.text == ["torch.compile failed: RuntimeError: no lowering (aten::fft_rfft in spec, head)."]
    assert "Fallback ops by module" in found  # a plot of the fallback rows follows


def _sweep() -> dict[str, Any]:
    row = {"compiled_graphs": 2, "graph_breaks": 1, "p95_ms": 0.3, "items_per_s": 10.0}
    reason = {"reason": "graph_break()", "where": "m.py:3"}
    rows = [
        row | {"shape": "1x8", "first_call_s": 2.0, "compile_s": 1.9, "p50_ms": 0.1, "break_reasons": [reason]},
        row | {"shape": "2x8", "first_call_s": 1.0, "compile_s": 0.9, "p50_ms": 0.2, "break_reasons": [reason]},
    ]
    return {
        "shapes": rows,
        "step": "forward, loss, backward",
        "steps": 5,
        "compiles": 4,
        "recompiles": 1,
        "graph_breaks": 1,
        "distinct_shapes": 2,
        "device_graphs": None,
        "failed_at": "4x8",
        "failed_in": "backward",
        "buckets": buckets.suggest([(1, 8), (2, 8), (3, 8)]) | {"note": "padding to buckets would save 1 compile"},
    }


def test_the_sweep_section_tells_recompiles_graph_breaks_spread_and_buckets() -> None:
    section = {s.title: s for s in sections.build_sections(_scan_data(sweep=_sweep()))}[
        "Shape sweep (torch.compile, dynamic=False)"
    ]
    assert section.text[0] == "torch.compile failed at shape 4x8 in the backward; see Readiness."
    assert section.text[1].startswith(
        "The compiled training step (forward, loss, backward), 5 timed step(s) a shape after the first: 4 graph(s) "
        "compiled for 2 distinct shape(s) (1 recompile(s), 1 graph break(s)); device compile cache: not reported"
    )
    assert section.text[1].endswith("padding to buckets would save 1 compile.")
    assert section.text[2:] == [
        "graph break at m.py:3: graph_break() (shapes 1x8, 2x8)",
        "bucket 1x8 covers 1x8: 0% padding",
        "bucket 2x8 covers 2x8: 0% padding",
        "bucket 4x8 covers 3x8: 25% padding",
    ]
    assert section.headers[-3:] == ["p50 (ms)", "p95 (ms)", "items/s"]
    assert section.rows == [
        [r["shape"], 2, 1, r["first_call_s"], r["compile_s"], r["p50_ms"], 0.3, 10.0] for r in _sweep()["shapes"]
    ]


def test_the_inventory_sums_calls_per_op_across_modules_most_called_first() -> None:
    data = _scan_data()
    data["inventory"] += [
        {"op": "aten::addmm.default", "module": f"m{i}", "calls": 1, "dtypes": ["float64"]} for i in range(4)
    ]
    section = sections.build_sections(data)[-1]
    assert section.text == ["2 distinct ops, 8 calls; per module in the JSON (`inventory`)."]
    assert section.rows == [
        ["aten::addmm.default", 7, "float32, float64", "fc1, fc2, m0, m1 (+2)"],
        ["aten::gelu.default", 1, "bfloat16", "act"],
    ]


@pytest.mark.parametrize("available", [True, False])
def test_plots_are_attached_when_matplotlib_is_there(available: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if available:
        pytest.importorskip("matplotlib")
    monkeypatch.setattr(plots, "available", lambda: available)
    data = _compare_data()
    data["sweep"] = _sweep()
    data["readiness"] = _readiness(fallback=[{"op": "aten::gelu", "module": "act", "calls": 3}])
    found = {s.title: s for s in sections.build_sections(data)}
    images = {title: s.image[0] for title, s in found.items() if s.image is not None}
    if available:
        assert images == {
            "Per layer": "report-layers.png",
            "Fallback ops by module": "report-fallback.png",
            "Shape sweep (torch.compile, dynamic=False)": "report-sweep.png",
        }
        assert all(s.image[1].startswith(b"\x89PNG") for s in found.values() if s.image is not None)
    else:
        assert images == {}
        assert any("Plots omitted: matplotlib is not installed" in t for t in found["Summary"].text)


def _parity(diverged_at: int | None) -> dict[str, Any]:
    device, base = [2.0, 1.8, 1.9], [2.0, 1.8, 1.6]
    rows = [{"step": i + 1, "device": d, "baseline": b, "cpu": None, "vs_baseline": abs(d - b) / b, "vs_cpu": None,
             "ok": i + 1 != diverged_at} for i, (d, b) in enumerate(zip(device, base, strict=True))]  # fmt: skip
    return {
        "steps": 3,
        "optimizer": "SGD(lr=0.1, momentum=0.9; the default)",
        "precision": "fp32",
        "rtol": 1e-3,
        "loss": {"device": device, "baseline": base, "cpu": None},
        "rows": rows,
        "diverged_at": diverged_at,
        "finding": "the loss leaves the baseline's curve at step 3 of 3" if diverged_at else None,
    }


@pytest.mark.parametrize("diverged_at", [None, 3])
def test_the_loss_section_plots_both_curves_and_tabulates_each_step(
    diverged_at: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = lambda curves, at: f"{sorted(k for k, v in curves.items() if v)} {at}".encode()  # noqa: E731
    monkeypatch.setattr(plots, "loss_curves", drawn)
    built = sections.build_sections(_compare_data() | {"parity": _parity(diverged_at)})
    section = {s.title: s for s in built}["Loss over 3 steps"]
    assert section.text[0].startswith("Optimizer SGD(lr=0.1, momentum=0.9; the default), precision fp32;")
    assert section.text[1] == ("the loss leaves the baseline's curve at step 3 of 3" if diverged_at else
                               "The curves agree at every step.")  # fmt: skip
    assert section.image == ("report-loss.png", f"['baseline', 'device'] {diverged_at}".encode())
    assert [r[0] for r in section.rows] == [1, 2, 3] and section.rows[2][-1] == ("FAIL" if diverged_at else "ok")
    assert section.rows[2][1:4] == ["1.9", "1.6", None]


def test_a_curve_with_nothing_beside_it_says_so_and_keeps_six_digits() -> None:
    alone = _parity(None) | {"loss": {"device": [2.29344, 2.2808902], "baseline": None, "cpu": None}}
    alone["rows"] = [{"step": 1, "device": 2.2934443950653076, "baseline": None, "cpu": None, "vs_baseline": None,
                      "vs_cpu": None, "ok": True}]  # fmt: skip
    section = sections._parity(alone)
    assert section.text[1] == "Nothing to compare it with." and section.rows[0][1] == "2.29344"
