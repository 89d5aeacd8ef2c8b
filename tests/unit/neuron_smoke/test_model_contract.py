"""model_contract.py: the `--model` contract is stated without torch (so `--help` needs none), and it is the text a
broken factory's usage error ends with."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

from neuron_smoke import models
from neuron_smoke.errors import UsageError
from neuron_smoke.model_contract import CONTRACT, SHAPES
from tests import REPO_ROOT


def test_the_contract_imports_without_torch() -> None:
    code = "import sys; from neuron_smoke.model_contract import CONTRACT; print(bool(CONTRACT), 'torch' in sys.modules)"
    env = {"PYTHONPATH": str(REPO_ROOT / "smoke_tests"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False"]


@pytest.mark.parametrize(
    "made",
    [
        torch.nn.Linear(2, 2),  # not a tuple
        (torch.nn.Linear(2, 2),),  # one item
        ("not a module", torch.ones(2)),
        (torch.nn.Linear(2, 2), "not a tensor"),
        (torch.nn.Linear(2, 2), torch.ones(2), "not callable"),
    ],
)
def test_a_factory_that_breaks_the_contract_is_told_the_contract(made: object, monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("contract_factory")
    module.factory = lambda: made  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "contract_factory", module)
    with pytest.raises(UsageError) as raised:
        models.load("contract_factory:factory")
    assert str(raised.value).startswith("--model contract_factory:factory: ")
    assert str(raised.value).endswith(CONTRACT)


def test_a_factory_with_a_shape_keyword_is_kept_for_the_sweep_whose_rule_help_states(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from neuron_smoke import cli
    from neuron_smoke.evaluate import sweep

    module = types.ModuleType("shaped_factory")
    module.factory = lambda shape=None: (torch.nn.Linear(2, 2), torch.ones(shape or (1, 2)))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shaped_factory", module)
    spec = models.load("shaped_factory:factory")
    assert spec.factory is module.factory and sweep.takes_shape(spec.factory)
    (inputs, _), _ = sweep.example_at(spec, (3, 2), seed=0)
    assert inputs[0].shape == (3, 2)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert " ".join(SHAPES.split()) in " ".join(capsys.readouterr().out.split())
