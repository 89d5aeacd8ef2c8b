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
from neuron_smoke.model_contract import CONTRACT
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
