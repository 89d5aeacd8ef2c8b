"""neuron_smoke.evaluate.run: the evaluation end to end in-process on the CPU (scan, record, compare), the
refusals before any step runs, and the exit code's rules."""

from __future__ import annotations

import json
import threading
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest
import torch

from neuron_smoke import EXIT_CHECK_FAILED, EXIT_DEVICE_MISSING, EXIT_OK, release_facts
from neuron_smoke.backends import CPU, Backend
from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import SCHEMA, capture, plots, run, verdict
from neuron_smoke.examples import mlp
from neuron_smoke.models import ModelSpec

pytest.importorskip("safetensors", reason="the baseline's default format needs the `eval` extra (safetensors)")


def _spec() -> ModelSpec:
    model, args, loss_fn = mlp.factory()
    return ModelSpec(model, tuple(args), {}, loss_fn, "mlp")


def _opts(**changes: Any) -> run.EvalOptions:
    return run.EvalOptions(device="cpu", iterations=1, warmup=0, **changes)


def test_a_scan_writes_only_the_json_report_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run.evaluate(_opts(report=tmp_path / "r.json"), _spec()) == EXIT_OK
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["schema"], data["mode"], data["exit_code"]) == (SCHEMA, "scan", EXIT_OK)
    assert data["device"] == {"requested": "cpu", "backend": "cpu", "compile_backend": CPU.compile_backend}
    assert (
        "tensors" not in data and "baseline_written" not in data
    )  # on the CPU, without a baseline: nothing to compare
    assert data["readiness"]["findings"] == 0 and data["readiness"]["compile_tried"] is False
    assert data["timing"]["iterations"] == 1 and data["inventory"]
    assert set(data["phases_s"]) >= {"load", "timed_steps", "instrumented_step"}
    assert (
        f"neuron-eval: mlp on cpu (scan, precision {release_facts.default_precision()}, rtol" in capsys.readouterr().out
    )
    run._write(data, _opts())
    assert "(no --report FILE or --eval-report DIR: nothing written)" in capsys.readouterr().out


def test_a_recorded_baseline_compares_equal_with_the_same_model(tmp_path: Path) -> None:
    assert run.evaluate(_opts(record=tmp_path / "b"), _spec()) == EXIT_OK
    files = {p.name for p in (tmp_path / "b").iterdir()}
    assert {"index.json", "tensors.safetensors", "report.json", "report.md", "report.html"} <= files
    index = json.loads((tmp_path / "b" / "index.json").read_text())
    modules = [n for n, _ in _spec().model.named_modules() if n]
    assert index["order"] == [*modules, "(root)"] and index["model"]["name"] == "mlp"
    assert run.evaluate(_opts(baseline=tmp_path / "b", out_dir=tmp_path / "r"), _spec()) == EXIT_OK
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["mode"] == "compare" and data["baseline"]["path"] == str(tmp_path / "b")
    assert set(index["tensors"]) == {r["tensor"] for r in data["tensors"]}
    assert all(r["ok"] and r["vs_baseline"] == 0.0 and r["vs_cpu"] == 0.0 for r in data["tensors"])
    assert not any(data["missing"].values()) and data["origins"] == {"baseline": [], "cpu": []}
    assert data["grad_origins"] == {"baseline": [], "cpu": []} and "actgrad/fc2/in/0" in index["tensors"]


def test_a_baseline_of_other_weights_is_refused_before_any_step(tmp_path: Path) -> None:
    assert run.evaluate(_opts(record=tmp_path / "b"), _spec()) == EXIT_OK
    other = _spec()
    with torch.no_grad():
        other.model.head.bias.add_(1.0)  # type: ignore[operator, union-attr]
    with pytest.raises(UsageError, match=f"--baseline {tmp_path / 'b'}: same model structure, but the initial weights"):
        run.evaluate(_opts(baseline=tmp_path / "b", out_dir=tmp_path / "r"), other)
    assert not (tmp_path / "r").exists()


def test_a_device_whose_module_does_not_import_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = Backend("neuron", "neuron", "neuron", module="neuron_smoke_no_such_module", missing_help="Install it.")
    monkeypatch.setattr(run, "resolve", lambda requested: absent)
    assert run.evaluate(_opts(report=tmp_path / "r.json"), _spec()) == EXIT_DEVICE_MISSING
    err = capsys.readouterr().err
    assert "verify-device: neuron: cannot import neuron_smoke_no_such_module: " in err and err.strip().endswith(
        "Install it."
    )
    assert not (tmp_path / "r.json").exists()


def test_a_device_without_device_files_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_nodes = Backend("cuda", "inductor", "nccl", dev_glob=str(tmp_path / "nvidia[0-9]*"), missing_help="Check it.")
    monkeypatch.setattr(run, "resolve", lambda requested: no_nodes)
    assert run._open_device(no_nodes) is None
    assert run.evaluate(_opts(), _spec()) == EXIT_DEVICE_MISSING
    assert "verify-device: no cuda device here. Check it." in capsys.readouterr().err
    assert run._open_device(CPU) is False  # present, without a module of its own


def _row(ok: bool) -> dict[str, Any]:
    return {"tensor": "t", "ok": ok}


@pytest.mark.parametrize(
    ("data", "failed"),
    [
        ({}, False),
        ({"tensors": [_row(True)], "missing": {"only_in_device_run": ["new"]}}, False),  # a new tensor is not a fault
        ({"tensors": [_row(True), _row(False)]}, True),
        ({"tensors": [_row(True)], "missing": {"only_in_baseline": ["gone"]}}, True),
        ({"tensors": [], "missing": {"only_in_cpu_run": ["x"]}}, True),
    ],
)
def test_a_tensor_beyond_rtol_or_one_gone_fails_the_run(data: dict[str, Any], failed: bool) -> None:
    assert (verdict.judge(data, verdict.DEFAULT_FAIL_ON)["answer"] == "not ready") is failed


def test_versions_name_every_distribution_or_say_it_is_not_installed() -> None:
    found = run.versions(CPU)
    assert found["torch"] == torch.__version__ and "cuda" not in found
    for dist in ("torch-neuronx", "neuronx-cc", "nki", "transformers", "safetensors"):
        try:
            expected = version(dist)
        except PackageNotFoundError:
            expected = "not installed"
        assert found[dist] == expected, dist


def test_phases_add_up_the_time_of_each_named_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([10.0, 10.5, 12.0, 12.25])
    monkeypatch.setattr(run.time, "perf_counter", lambda: next(clock))
    phases = run.Phases()
    phases.done("load")
    phases.done("step")
    phases.done("load")
    assert phases.seconds == {"load": 0.75, "step": 1.5}


def test_steps_are_recorded_compared_from_the_baseline_and_refused_when_they_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run.evaluate(_opts(record=tmp_path / "b", steps=3), _spec()) == EXIT_OK
    kept = json.loads((tmp_path / "b" / "index.json").read_text())["parity"]
    assert kept["steps"] == 3 and len(kept["loss"]) == 3 and kept["optimizer"].startswith("SGD(lr=0.1")
    assert (tmp_path / "b" / "report-loss.png").is_file() == plots.available()
    assert run.evaluate(_opts(baseline=tmp_path / "b", out_dir=tmp_path / "r"), _spec()) == EXIT_OK  # N from it
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["parity"]["loss"]["baseline"] == data["parity"]["loss"]["device"] == kept["loss"]
    assert data["parity"]["diverged_at"] is None and "parity" in data["phases_s"]
    assert "loss over 3 steps (SGD(lr=0.1, momentum=0.9; the default)): " in capsys.readouterr().out
    monkeypatch.setattr(capture, "time_steps", lambda *a, **k: pytest.fail("a step ran"))
    with pytest.raises(UsageError, match=r"--steps 2: the baseline .* was recorded with --steps 3"):
        run.evaluate(_opts(baseline=tmp_path / "b", steps=2), _spec())


def test_a_curve_that_leaves_the_baselines_is_not_ready_and_names_the_step(tmp_path: Path) -> None:
    assert run.evaluate(_opts(record=tmp_path / "b", steps=4, precision="fp32"), _spec()) == EXIT_OK
    index = tmp_path / "b" / "index.json"
    recorded = json.loads(index.read_text())
    recorded["parity"]["loss"][2] *= 1.01  # as if the baseline's third step had gone otherwise
    index.write_text(json.dumps(recorded))
    opts = _opts(baseline=tmp_path / "b", report=tmp_path / "r.json", precision="fp32")
    assert run.evaluate(opts, _spec()) == EXIT_CHECK_FAILED
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["parity"]["diverged_at"], data["parity"]["source"]) == (3, "environment")
    assert data["verdict"]["counts"]["numerics"] == 1 and all(r["ok"] for r in data["tensors"])


class WrittenElsewhere(torch.nn.Module):
    """Writes its first layer's output from another thread, where the step's dispatch mode does not see the write."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.fc(x)
        with torch.no_grad():
            worker = threading.Thread(target=lambda: hidden.mul_(2))
            worker.start()
            worker.join()
        out: torch.Tensor = self.head(hidden)
        return out


def test_a_value_written_where_the_capture_cannot_see_is_named_in_the_record_and_not_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.manual_seed(0)
    spec = ModelSpec(WrittenElsewhere(), (torch.randn(3, 4),), {}, lambda out: out.sum(), "written")
    assert run.evaluate(_opts(record=tmp_path / "b"), spec) == EXIT_OK
    index = json.loads((tmp_path / "b" / "index.json").read_text())
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    lost = ["act/fc/out/0"]  # as fc returned it; head's input is the value head read, and is kept
    assert index["changed_in_step"] == lost and report["missing"] == {"changed_in_step": lost}
    assert "act/head/in/0" in index["tensors"] and "act/fc/out/0" not in index["tensors"]
    assert report["verdict"]["answer"] == "ready"
    assert (
        "not kept (written during the step where the capture could not see it): act/fc/out/0" in capsys.readouterr().out
    )
