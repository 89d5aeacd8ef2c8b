"""A Python-level fault injector for the evaluation tests: one named layer computes wrongly on the device.

Imitates a device kernel (or a compiled graph) that is wrong for one layer only, e.g. a miscompiled fusion; the
simulated device's own NEURON_SIM_FAULT=wrong_matmul is wrong for every matmul instead. The error is applied only
when the layer runs on the `neuron` device, so the same factory is correct on the CPU, as a real fault would be.

NEURON_EVAL_FAULT_MODEL=package.module:factory  the model to wrap (default: the MLP example)
NEURON_EVAL_FAULT_LAYER=name                    the module whose output is scaled on the device (none: no fault)
NEURON_EVAL_FAULT_SCALE=1.01                    the factor (a 1 % error by default)
NEURON_EVAL_FAULT_PHASE=forward|backward        forward (default): the layer's output is scaled; backward: its
                                                output is right, the gradient its backward is given is scaled
                                                (so what it passes on, to its inputs and its weights, is wrong)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from neuron_smoke.models import resolve_factory

PHASES = ("forward", "backward")


class _GradScale(torch.autograd.Function):
    """The identity forward; backward, the gradient times `factor`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None


def _scale(value: Any, factor: float, phase: str, device: str) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.device.type == device:
        if phase == "forward":
            return value * factor
        return _GradScale.apply(value, factor) if value.requires_grad else value
    if isinstance(value, tuple):
        return tuple(_scale(v, factor, phase, device) for v in value)
    return value


def inject(model: nn.Module, layer: str, factor: float, phase: str = "forward", device: str = "neuron") -> None:
    """Make `layer` wrong by `factor` in `phase` whenever it runs on `device` (a forward hook: copies keep it)."""
    if phase not in PHASES:
        raise ValueError(f"fault phase {phase!r}: choose from {', '.join(PHASES)}")

    def hook(_module: nn.Module, _args: Any, output: Any) -> Any:
        return _scale(output, factor, phase, device)

    model.get_submodule(layer).register_forward_hook(hook)


def factory() -> Any:
    made = resolve_factory(os.environ.get("NEURON_EVAL_FAULT_MODEL", "neuron_smoke.examples.mlp:factory"))()
    layer = os.environ.get("NEURON_EVAL_FAULT_LAYER")
    if layer:
        factor = float(os.environ.get("NEURON_EVAL_FAULT_SCALE", "1.01"))
        inject(made[0], layer, factor, os.environ.get("NEURON_EVAL_FAULT_PHASE", "forward"))
    return made


# Test models a team could bring (issue 28): each factory is seeded, so a recording and a comparison see the same
# weights and inputs, and each is healthy: only the device may make it differ.


class Dropping(nn.Module):
    """An MLP with dropout between its layers, left in training mode."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(32, 64), nn.Dropout(0.3), nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.drop(torch.relu(self.fc1(x))))
        return out


def seeded(model: Callable[[], nn.Module], *shape: int) -> Any:
    """The model made under seed 0 and an input of `shape` drawn from its own generator (seed 1): every run the same."""
    torch.manual_seed(0)
    return model(), torch.randn(*shape, generator=torch.Generator().manual_seed(1))


def dropout() -> Any:
    return seeded(Dropping, 16, 32)


def batchnorm() -> Any:
    """A small convolutional net with BatchNorm, whose running statistics any forward in training mode updates."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
    return model, torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))


class SparseBuffer(nn.Module):
    """A linear layer whose weight mask is a sparse COO buffer, applied with torch.sparse.mm."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.eye(8).to_sparse())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.sparse.mm(self.mask, self.fc(x).t()).t()
        return out


def sparse() -> Any:
    return seeded(SparseBuffer, 4, 8)


class Ensemble(nn.Module):
    """torch.vmap over a submodule called through torch.func.functional_call with stacked weights."""

    def __init__(self) -> None:
        super().__init__()
        self.member = nn.Linear(8, 4)
        self.scale = nn.Parameter(torch.ones(3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = {n: p.unsqueeze(0).expand(3, *p.shape) for n, p in self.member.named_parameters()}
        out = torch.vmap(lambda p, xb: torch.func.functional_call(self.member, p, (xb,)), in_dims=(0, None))(params, x)
        return torch.sum(out * self.scale, dim=0)


def vmap() -> Any:
    return seeded(Ensemble, 4, 8)


class Fragile(nn.Module):
    """A layer whose op raises on the neuron device only (as an op a device does not implement would)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.odd, self.fc2 = nn.Linear(8, 8), nn.Identity(), nn.Linear(8, 2)
        self.odd.forward = self._odd  # type: ignore[method-assign]

    @staticmethod
    def _odd(h: torch.Tensor) -> torch.Tensor:
        if h.device.type == "neuron":
            raise RuntimeError("aten::special_odd: not implemented for the neuron device")
        return h * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.odd(self.fc1(x)))
        return out


def fragile() -> Any:
    return seeded(Fragile, 4, 8)


class Masked(nn.Module):
    """Token ids and an attention mask of one batch and length (two inputs a shape sweep must resize together), and
    a graph break in the forward (as a print or a .item() would make one)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 4)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids) * mask.unsqueeze(-1)
        torch._dynamo.graph_break()
        out: torch.Tensor = self.head(h.sum(1) / mask.sum(1, keepdim=True))
        return out


def masked() -> Any:
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (4, 12), generator=torch.Generator().manual_seed(1))
    return Masked(), {"ids": ids, "mask": torch.ones(4, 12, dtype=torch.long)}
