"""neuron_smoke.evaluate.parity: the optimizer a curve trains with (the factory's rebuilt over the copy, or the
default SGD), the loss per step at each precision, a step that raises, and the judgement of a curve against the
baseline's and the CPU's: the first step that leaves them, and its source."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch
from torch import nn

from neuron_smoke.evaluate import capture, failure, parity
from neuron_smoke.examples import mlp
from neuron_smoke.models import ModelSpec


def _spec(optimizer: Any = None) -> ModelSpec:
    model, args, loss_fn = mlp.factory()
    made = optimizer(model) if optimizer is not None else None
    return ModelSpec(model, tuple(args), {}, loss_fn, "mlp", optimizer=made)


def _by_hand(spec: ModelSpec, steps: int, make: Any) -> list[float]:
    model = copy.deepcopy(spec.model)
    optimizer = make(model)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = spec.loss_fn(model(*spec.args))
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def test_the_default_optimizer_is_the_captured_steps_sgd_over_the_copy() -> None:
    spec = _spec()
    copied = capture.move(spec.model, "cpu")[0]
    optimizer, described = parity.optimizer_for(spec, copied)
    assert isinstance(optimizer, torch.optim.SGD) and described == "SGD(lr=0.1, momentum=0.9; the default)"
    group = optimizer.param_groups[0]
    assert (group["lr"], group["momentum"]) == (capture.LR, 0.9)
    assert [id(p) for p in group["params"]] == [id(p) for p in copied.parameters()]


def _two_groups(model: nn.Module) -> torch.optim.Optimizer:
    head = list(model.head.parameters())  # type: ignore[union-attr]
    rest = [p for n, p in model.named_parameters() if not n.startswith("head.")]
    return torch.optim.Adam([{"params": rest}, {"params": head, "lr": 0.02}], lr=0.005, betas=(0.8, 0.9))


def test_the_factorys_optimizer_is_rebuilt_over_the_copy_and_trains_it_as_it_would_the_original() -> None:
    spec = _spec(_two_groups)
    original = [p.detach().clone() for p in spec.model.parameters()]
    losses, described = parity.curve(spec, "cpu", 4, "fp32")
    assert described == "Adam(lr=0.005; the factory's)"
    assert losses == _by_hand(spec, 4, _two_groups)  # the same groups, learning rates and betas, bit for bit
    assert all(torch.equal(p, q) for p, q in zip(spec.model.parameters(), original, strict=True))  # untouched
    assert spec.optimizer is not None and not spec.optimizer.state  # the factory's own never stepped
    rebuilt, _ = parity.optimizer_for(spec, capture.move(spec.model, "cpu")[0])
    assert [g["lr"] for g in rebuilt.param_groups] == [0.005, 0.02] and not rebuilt.state
    assert rebuilt.param_groups[0]["betas"] == (0.8, 0.9)


class CountingSGD(torch.optim.SGD):
    """A subclass with an attribute of its own and another constructor, as a team's optimizer may have."""

    def __init__(self, params: Any, tag: str) -> None:
        super().__init__(params, lr=0.05)
        self.tag, self.taken = tag, 0

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        self.taken += 1
        return super().step(closure)


def test_a_subclass_keeps_its_own_attributes_and_the_factorys_instance_is_not_stepped() -> None:
    spec = _spec(lambda m: CountingSGD(m.parameters(), tag="mine"))
    rebuilt, described = parity.optimizer_for(spec, capture.move(spec.model, "cpu")[0])
    assert isinstance(rebuilt, CountingSGD) and rebuilt.tag == "mine" and described.startswith("CountingSGD(lr=0.05")
    parity.curve(spec, "cpu", 3, "fp32")
    assert isinstance(spec.optimizer, CountingSGD) and spec.optimizer.taken == 0


def test_the_default_curve_is_sgd_with_momentum_step_by_step_and_falls() -> None:
    spec = _spec()
    losses, _ = parity.curve(spec, "cpu", 5, "fp32")
    expected = _by_hand(spec, 5, lambda m: torch.optim.SGD(m.parameters(), lr=capture.LR, momentum=0.9))
    assert losses == expected and losses[-1] < losses[0]
    assert losses[0] == float(capture.train_step(spec, "cpu", activations=False).tensors["loss"])


def test_bf16_autocast_trains_under_autocast_within_its_bound_of_float32() -> None:
    spec = _spec()
    fp32, _ = parity.curve(spec, "cpu", 3, "fp32")
    bf16, _ = parity.curve(spec, "cpu", 3, "bf16-autocast")
    errors = [parity.relative(b, f, 0.0) for b, f in zip(bf16, fp32, strict=True)]
    assert 0 < max(errors) <= parity.precision.bound("bf16-autocast", spec.model)


class BreaksOnSecondCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.calls = nn.Linear(4, 1), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("no kernel for step two")
        out: torch.Tensor = self.fc(x)
        return out


def test_a_step_that_raises_names_the_step() -> None:
    spec = ModelSpec(BreaksOnSecondCall(), (torch.ones(2, 4),), {}, lambda out: out.sum(), "breaks")
    with pytest.raises(failure.StepFailed) as raised:
        parity.curve(spec, "cpu", 3, "fp32")
    assert raised.value.finding["phase"] == "loss parity, step 2 of 3"
    assert raised.value.finding["error"] == "RuntimeError: no kernel for step two"
    assert raised.value.finding["where"].endswith(f"test_parity.py:{_line_of('no kernel for step two')}")


def _line_of(text: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "raise" in line)


def test_the_relative_error_of_a_loss() -> None:
    assert parity.relative(2.02, 2.0, 0.0) == pytest.approx(0.01)
    assert parity.relative(1e-6, 0.0, 1e-3) == pytest.approx(1e-3)  # a loss near zero: against the floor
    assert parity.relative(0.0, 0.0, 0.0) == 0.0 and parity.relative(1.0, 0.0, 0.0) == math.inf
    assert parity.relative(math.nan, math.nan, 0.0) == 0.0  # NaN on both sides: not the device's
    assert parity.relative(math.nan, 1.0, 0.0) == math.inf and parity.relative(1.0, math.inf, 0.0) == math.inf
    assert parity.relative(math.inf, math.inf, 0.0) == 0.0


def test_curves_that_agree_have_no_finding() -> None:
    judged = parity.judge([2.0, 1.5, 1.2], [2.0, 1.5001, 1.2], None, 1e-3)
    assert (judged["diverged_at"], judged["source"], judged["finding"]) == (None, None, None)
    assert [r["ok"] for r in judged["rows"]] == [True, True, True]
    assert judged["rows"][1] == {"step": 2, "device": 1.5, "baseline": 1.5001, "cpu": None, "vs_cpu": None,
                                 "vs_baseline": pytest.approx(1e-4 / 1.5001), "ok": True}  # fmt: skip


def test_the_first_step_beyond_the_bound_is_named_with_its_source() -> None:
    device, base = [2.0, 1.5, 1.3, 1.0], [2.0, 1.5, 1.2, 1.1]
    on_device = parity.judge(device, base, base, 1e-3)  # the device differs from its own CPU: the device
    assert (on_device["diverged_at"], on_device["source"]) == (3, "device")
    assert on_device["finding"] == (
        "the loss leaves the CPU run's curve at step 3 of 4: 1.3 vs 1.2 (relative error 0.0833 > rtol 0.001; "
        "source device)"
    )
    assert [r["ok"] for r in on_device["rows"]] == [True, True, False, False]
    elsewhere = parity.judge(device, base, device, 1e-3)  # the CPU here agrees with the device: the old environment
    assert (elsewhere["diverged_at"], elsewhere["source"]) == (3, "environment")
    assert "leaves the baseline's curve at step 3 of 4" in elsewhere["finding"]
    scanned = parity.judge([2.0, math.nan], None, [2.0, 1.9], 1e-3)  # no baseline: the CPU curve alone
    assert (scanned["diverged_at"], scanned["source"]) == (2, "device")


def test_a_recording_compares_nothing_and_keeps_its_curve_for_the_baseline() -> None:
    spec = _spec()
    measured = parity.measure(spec, "cpu", 3, "fp32", 1e-3, None)
    assert measured["loss"]["baseline"] is None and measured["loss"]["cpu"] is None
    assert measured["diverged_at"] is None and len(measured["rows"]) == 3
    assert parity.summary(measured).endswith("(nothing to compare it with)")
    kept = parity.for_baseline(measured)
    assert kept == {"parity": {"steps": 3, "optimizer": measured["optimizer"], "precision": "fp32",
                               "loss": measured["loss"]["device"]}}  # fmt: skip
    assert parity.for_baseline(None) == {}
    again = parity.measure(spec, "cpu", 3, "fp32", 1e-3, kept["parity"])
    assert again["loss"]["baseline"] == measured["loss"]["device"] and again["diverged_at"] is None
    assert parity.summary(again).endswith("within rtol 0.001 of the baseline at every step")
