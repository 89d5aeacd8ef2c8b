"""A model whose own optimizer goes wrong on one device from one step on, for the loss-parity tests (--steps).

The factory returns the MLP example with its own optimizer (the contract's fourth item), an SGD that, on the device
named by NEURON_PARITY_FAULT_DEVICE (neuron), makes its NEURON_PARITY_FAULT_STEP-th update wrong: every parameter
moves NEURON_PARITY_FAULT_SCALE (2) times as far as it should (its momentum stays right), as a miscompiled optimizer
kernel would move it. Losses up to that step match; the next step's is the first to differ. Without the step set it
is healthy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import torch

from neuron_smoke.examples.mlp import factory as mlp


class FaultySGD(torch.optim.SGD):
    def __init__(self, params: Iterable[Any], device: str, at_step: int | None, scale: float) -> None:
        super().__init__(params, lr=0.05, momentum=0.9)
        self.device, self.at_step, self.scale, self.taken = device, at_step, scale, 0

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        params = [p for group in self.param_groups for p in group["params"]]
        self.taken += 1
        wrong = self.taken == self.at_step and params[0].device.type == self.device
        before = [p.detach().clone() for p in params] if wrong else []
        loss = super().step(closure)
        with torch.no_grad():
            for p, old in zip(params, before, strict=False):
                p.copy_(old + self.scale * (p - old))
        return loss


def factory() -> Any:
    model, inputs, loss_fn = mlp()
    at = os.environ.get("NEURON_PARITY_FAULT_STEP")
    device = os.environ.get("NEURON_PARITY_FAULT_DEVICE", "neuron")
    scale = float(os.environ.get("NEURON_PARITY_FAULT_SCALE", "2"))
    return model, inputs, loss_fn, FaultySGD(model.parameters(), device, int(at) if at else None, scale)
