"""neuron_smoke.evaluate.precision (--precision): the default from the release data, the CPU reference computed as
the device is configured to, the bound each precision allows and the report's note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from neuron_smoke import release_facts
from neuron_smoke.evaluate import PRECISIONS, precision, run
from neuron_smoke.evaluate.stepmode import StepMode
from neuron_smoke.examples import mlp
from neuron_smoke.models import ModelSpec
from neuron_smoke.numerics import model_rtol
from neuron_smoke.stage_model import reduction_size
from neuron_torch.errors import MatrixError
from neuron_torch.matrix import load_matrix
from neuron_torch.model import PRECISIONS as MATRIX_PRECISIONS
from tests import REPO_ROOT


def _spec() -> ModelSpec:
    model, args, loss_fn = mlp.factory()
    return ModelSpec(model, tuple(args), {}, loss_fn, "mlp")


def test_the_default_is_the_release_compilers_and_the_names_are_the_matrix_schemas() -> None:
    assert PRECISIONS == MATRIX_PRECISIONS
    matrix = load_matrix(REPO_ROOT / "constraints" / "matrix.toml")
    assert release_facts.default_precision() == matrix.compiler.default_precision == "bf16-matmul"


def test_the_matrix_refuses_a_precision_the_evaluation_does_not_know(tmp_path: Path) -> None:
    text = (REPO_ROOT / "constraints" / "test-matrix.toml").read_text()
    (tmp_path / "constraints").mkdir()
    path = tmp_path / "constraints" / "matrix.toml"
    path.write_text(text.replace('default_precision = "bf16-matmul"', 'default_precision = "tf32"'))
    with pytest.raises(MatrixError, match=r"compiler\.default_precision: 'tf32' is not one of fp32, bf16-matmul"):
        load_matrix(path)


def test_facts_without_a_default_ask_for_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = json.loads(release_facts.PACKAGED.read_text())
    del facts["compiler"]
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    monkeypatch.setenv(release_facts.ENV, str(tmp_path / "facts.json"))
    release_facts.load.cache_clear()
    try:
        with pytest.raises(Exception, match="name no default compiler precision; pass --precision"):
            release_facts.default_precision()
    finally:
        monkeypatch.delenv(release_facts.ENV)
        release_facts.load.cache_clear()


def test_bf16_matmul_on_the_cpu_rounds_the_matmul_inputs_as_the_compiler_does() -> None:
    gen = torch.Generator().manual_seed(0)
    a, b, bias = (torch.randn(8, 64, generator=gen), torch.randn(64, 8, generator=gen), torch.randn(8, generator=gen))
    bf = [t.to(torch.bfloat16).float() for t in (a, b)]
    with StepMode(rounding=precision.rounding("bf16-matmul", "cpu")):
        got = (a @ b, torch.addmm(bias, a, b), torch.relu(a))
    assert torch.equal(got[0], bf[0] @ bf[1]) and torch.equal(got[1], torch.addmm(bias, *bf))  # bias in float32
    assert torch.equal(got[2], torch.relu(a)) and not torch.equal(got[0], a @ b)
    assert precision.rounding("bf16-matmul", "neuron") is None  # the device's compiler does it there
    assert precision.rounding("fp32", "cpu") is None
    with precision.forward("bf16-autocast", "cpu"):
        assert (a @ b).dtype == torch.bfloat16


def test_each_precision_has_its_bound_and_a_baseline_at_another_the_wider() -> None:
    model = _spec().model
    assert precision.bound("fp32", model) == precision.EVAL_RTOL
    assert precision.bound("bf16-matmul", model) == model_rtol(torch.bfloat16, reduction_size(model)) > 0.03


def test_the_report_says_the_precision_its_bound_and_a_baseline_recorded_at_another(tmp_path: Path) -> None:
    opts = {"device": "cpu", "iterations": 1, "warmup": 0}
    assert run.evaluate(run.EvalOptions(record=tmp_path / "b", precision="fp32", **opts), _spec()) == 0
    assert json.loads((tmp_path / "b" / "index.json").read_text())["precision"] == "fp32"
    assert run.evaluate(run.EvalOptions(baseline=tmp_path / "b", out_dir=tmp_path / "r", **opts), _spec()) == 0
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["precision"]["name"] == release_facts.default_precision() == "bf16-matmul"
    assert data["precision"]["baseline"] == "fp32" and data["rtol"] == precision.bound("bf16-matmul", _spec().model)
    assert not all(r["vs_baseline"] == 0.0 for r in data["tensors"])  # bfloat16 inputs on this side only
    assert all(r["ok"] for r in data["tensors"])
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "Precision bf16-matmul: float32 matmuls at bfloat16 input precision" in markdown
    assert "The baseline was recorded at fp32: the wider of the two bounds applies." in markdown
