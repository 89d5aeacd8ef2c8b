"""models.py: the default model (seeded, causal), the default loss, and loading a `--model` factory: what each
accepted shape of inputs becomes, and the usage errors for factories that cannot be run."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from neuron_smoke import models
from neuron_smoke.errors import UsageError


def _factory(monkeypatch: pytest.MonkeyPatch, factory: Callable[[], Any], name: str = "unit_factory") -> str:
    module = types.ModuleType(name)
    module.make = factory  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)
    return f"{name}:make"


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> dict[str, Any]:
        y = self.lin(x) * (1 if scale is None else scale)
        return {"y": y, "count": torch.tensor(x.shape[0])}


def test_the_default_factory_is_seeded() -> None:
    model_a, inputs_a, loss_a = models.default_factory()
    model_b, inputs_b, _ = models.default_factory()
    assert torch.equal(inputs_a[0], inputs_b[0])
    assert all(torch.equal(p, q) for p, q in zip(model_a.parameters(), model_b.parameters(), strict=True))
    with torch.no_grad():
        loss = loss_a(model_a(*inputs_a))
    assert loss.numel() == 1 and bool(torch.isfinite(loss))


def test_the_default_model_is_causal() -> None:
    torch.manual_seed(0)
    model = models.TransformerBlock(vocab=16, width=8, heads=2, hidden=16, seq=6).eval()
    tokens = torch.randint(0, 16, (1, 6))
    changed = tokens.clone()
    changed[0, -1] = (tokens[0, -1] + 1) % 16
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert before.shape == (6, 16)
    assert torch.allclose(before[:5], after[:5])  # a later token does not reach earlier positions
    assert not torch.allclose(before[5], after[5])


def test_the_default_spec_also_runs_under_bfloat16_autocast() -> None:
    spec = models.load(None)
    assert spec.autocast == (torch.bfloat16,) and spec.kwargs == {}
    assert isinstance(spec.model, models.TransformerBlock)
    assert spec.input_leaves() == list(spec.args)


def test_mean_square_loss_sums_the_floating_point_outputs() -> None:
    a, b = torch.tensor([1.0, 3.0]), torch.tensor([[2.0]], dtype=torch.bfloat16)
    loss = models.mean_square_loss({"a": a, "ints": torch.tensor([100]), "nested": [b]})
    assert loss.dtype == torch.float32 and float(loss) == pytest.approx((1 + 9) / 2 + 4)
    with pytest.raises(UsageError, match="no floating-point tensor"):
        models.mean_square_loss((torch.tensor([1]), "text"))


def test_a_factory_with_keyword_inputs_and_the_default_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    x, scale = torch.ones(4, 3), torch.tensor(2.0)
    target = _factory(monkeypatch, lambda: (Pair(), {"x": x, "scale": scale}))
    spec = models.load(target)
    assert (spec.args, spec.name, spec.autocast) == ((), target, ())
    assert spec.kwargs == {"x": x, "scale": scale}
    assert spec.loss_fn is models.mean_square_loss
    assert spec.input_leaves() == [x, scale]
    args, kwargs = spec.inputs_on("cpu")
    assert args == () and torch.equal(kwargs["x"], x)


def test_positional_inputs_as_a_list_and_an_own_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.ones(2, 3)

    def loss_fn(out: dict[str, torch.Tensor]) -> torch.Tensor:
        return out["y"].sum()

    spec = models.load(_factory(monkeypatch, lambda: (Pair(), [x], loss_fn)))
    assert spec.args == (x,) and spec.kwargs == {} and spec.loss_fn is loss_fn


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("no_colon", "expected package.module:factory"),
        (":make", "expected package.module:factory"),
        ("no_such_module_anywhere:make", "No module named 'no_such_module_anywhere' (put the folder that holds it on"),
        # a path was a TypeError from importlib (an internal error) or "No module named 'mymodel.py'"
        ("./mymodel.py:build", "./mymodel.py is a path, not a module: name its module, e.g. --model mymodel:build"),
        ("mymodel.py:build", "mymodel.py is a path, not a module"),
        ("/srv/models/:build", "/srv/models/ is a path, not a module: name its module, e.g. --model models:build"),
        (".relative:build", ".relative is a path, not a module"),
        ("neuron_smoke.models:NO_SUCH", "no callable 'NO_SUCH'"),
        ("neuron_smoke.models:CONTRACT", "no callable 'CONTRACT'"),  # a string, not a factory
    ],
)
def test_a_factory_that_cannot_be_found_is_a_usage_error(target: str, problem: str) -> None:
    with pytest.raises(UsageError) as raised:
        models.load(target)
    assert str(raised.value).startswith("--model ") and problem in str(raised.value)


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ('raise RuntimeError("needs a GPU")', "importing user_model_nt raised RuntimeError: needs a GPU"),
        ("def build(:", "importing user_model_nt raised SyntaxError: "),
        ("import not_installed_dependency_nt", "No module named 'not_installed_dependency_nt'"),
        # a script calling sys.exit at import ended verify-device with its code, silently, and no report
        ("import sys\nsys.exit(3)", "importing user_model_nt exited (sys.exit(3)); a module named by --model must "
                                     "not exit when imported"),
        ("import argparse\nargparse.ArgumentParser().parse_args(['--epochs'])", "exited (sys.exit(2))"),
    ],
)  # fmt: skip
def test_a_module_that_fails_to_import_is_a_usage_error(
    source: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its own error at import was an internal error with a crash log
    (tmp_path / "user_model_nt.py").write_text(source + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_model_nt", raising=False)
    with pytest.raises(UsageError) as raised:
        models.load("user_model_nt:build")
    assert problem in str(raised.value) and "PYTHONPATH" not in str(raised.value)


class Exits(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sys.exit("done")


def _raises() -> Any:
    raise KeyError("weights.bin")


@pytest.mark.parametrize(
    ("factory", "problem"),
    [
        (_raises, "the factory raised KeyError"),
        (lambda: sys.exit(4), "the factory exited (sys.exit(4)); a factory returns (model, inputs)"),
        (lambda: (Exits(), torch.ones(1, 3)), "the model or loss_fn exited (sys.exit('done')) on the CPU"),
        (lambda: (Pair(), {1: torch.ones(1, 3)}), "inputs is a dict"),
        (lambda: (Pair(), ()), "no tensor"),
        (lambda: (Pair(), (torch.ones(1, 3), 2.0)), "non-tensor leaves (float)"),
        (lambda: (Pair(), torch.ones(1, 3, device="meta")), "inputs are on meta"),
        (lambda: (Pair(), torch.ones(1, 4)), "fails on the CPU: RuntimeError"),
        (lambda: (Pair(), torch.ones(1, 3), lambda out: out["y"]), "did not return a floating-point scalar"),
        (lambda: (Pair(), torch.ones(1, 3), lambda out: out["count"]), "did not return a floating-point scalar"),
    ],
)
def test_a_factory_whose_model_cannot_run_is_a_usage_error(
    factory: Callable[[], Any], problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _factory(monkeypatch, factory)
    with pytest.raises(UsageError) as raised:
        models.load(target)
    assert problem in str(raised.value) and target in str(raised.value)


def test_a_factory_may_return_its_optimizer_and_leave_the_loss_to_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    model = Pair()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    spec = models.load(_factory(monkeypatch, lambda: (model, torch.ones(2, 3), None, optimizer)))
    assert spec.optimizer is optimizer and spec.loss_fn is models.mean_square_loss
    assert models.load(_factory(monkeypatch, lambda: (Pair(), torch.ones(2, 3), None, None))).optimizer is None


@pytest.mark.parametrize(
    ("optimizer", "problem"),
    [
        (lambda model: "adam", "the optimizer is a str"),
        (lambda model: torch.optim.SGD(Pair().parameters(), lr=0.1), "tensors that are not the model's parameters"),
    ],
)
def test_an_optimizer_that_is_not_one_over_the_models_parameters_is_a_usage_error(
    optimizer: Callable[[nn.Module], Any], problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = Pair()
    target = _factory(monkeypatch, lambda: (model, torch.ones(2, 3), None, optimizer(model)))
    with pytest.raises(UsageError) as raised:
        models.load(target)
    assert problem in str(raised.value) and str(raised.value).endswith(models.CONTRACT)
