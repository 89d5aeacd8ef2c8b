"""neuron_smoke.evaluate.failure, through capture.train_step: a step that raises names its phase, module, op and the
user's line, and the evaluation writes its report instead of a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from neuron_smoke.evaluate import capture, failure, run
from neuron_smoke.models import ModelSpec, mean_square_loss


class Mismatched(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bad = nn.Linear(5, 2)  # the wrong width: its addmm raises

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.bad(self.fc(x))
        return out


class RootCode(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.fc(x)
        raise ValueError("the model's own code")  # LINE


def _spec(model: nn.Module) -> ModelSpec:
    return ModelSpec(model, (torch.ones(2, 4),), {}, mean_square_loss, "m")


def test_an_op_that_raises_is_named_with_its_module() -> None:
    with pytest.raises(failure.StepFailed) as raised:
        capture.train_step(_spec(Mismatched()), "cpu", with_inventory=True)
    found = raised.value.finding
    assert (found["phase"], found["module"], found["op"]) == ("forward", "bad", "aten::addmm.default")
    assert found["error"].startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")


def test_code_in_the_root_forward_is_located_at_its_line(tmp_path: Path) -> None:
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith("# LINE"))
    with pytest.raises(failure.StepFailed) as raised:
        capture.train_step(_spec(RootCode()), "cpu")
    assert raised.value.finding["module"] == "(root)" and raised.value.finding["where"] == f"{__file__}:{line}"
    opts = run.EvalOptions(device="cpu", record=tmp_path / "b", iterations=1, warmup=0)
    assert run.evaluate(opts, _spec(RootCode())) == 1
    data = json.loads((tmp_path / "b" / "report.json").read_text())
    assert data["failure"]["where"] == f"{__file__}:{line}" and not (tmp_path / "b" / "index.json").exists()
    assert "The step failed (forward): ValueError: the model's own code" in (tmp_path / "b" / "report.md").read_text()


class Exits(nn.Module):
    """A script's own guard: it stops the process on a NaN (here: on every step after the first)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 1:
            raise SystemExit("loss is nan, stopping")  # sys.exit(...)
        out: torch.Tensor = self.fc(x)
        return out


def test_a_model_that_exits_is_a_finding_and_the_report_is_written(tmp_path: Path) -> None:
    """sys.exit in a model's step ended verify-device with the model's exit code, its message and no report."""
    model = Exits()
    model.calls = 1  # its first call is past: this step's forward exits
    with pytest.raises(failure.StepFailed) as raised:
        capture.train_step(_spec(model), "cpu")
    assert raised.value.finding["error"] == "SystemExit: loss is nan, stopping"
    assert raised.value.finding["module"] == "(root)" and raised.value.finding["phase"] == "forward"
    opts = run.EvalOptions(device="cpu", record=tmp_path / "b", iterations=1, warmup=0)
    assert run.evaluate(opts, _spec(Exits())) == 1  # the bare first call passes, the next step exits
    data = json.loads((tmp_path / "b" / "report.json").read_text())
    assert data["failure"]["error"] == "SystemExit: loss is nan, stopping" and data["verdict"]["answer"] == "not ready"
