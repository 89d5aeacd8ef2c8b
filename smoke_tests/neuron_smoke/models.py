"""The default model for stages 4-6 and loading a user's model (`--model package.module:factory`).

A factory takes no arguments and returns `(model, example_inputs)` or `(model, example_inputs, loss_fn)`:
example_inputs is a tensor or a tuple of tensors (on the CPU); loss_fn maps the model's output to a scalar tensor.
Without loss_fn the loss is the mean square of every floating-point tensor in the output.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from neuron_smoke.errors import UsageError
from neuron_smoke.examples.classification import classification

LossFn = Callable[[Any], torch.Tensor]


@dataclass
class ModelSpec:
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    loss_fn: LossFn
    name: str


class TinyBlock(nn.Module):
    """A pre-norm transformer-style block (attention-free): LayerNorm, MLP with GELU, residual, classifier head."""

    def __init__(self, width: int = 64, hidden: int = 256, classes: int = 10) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.down(nn.functional.gelu(self.up(self.norm(x))))
        out: torch.Tensor = self.head(x)
        return out


def default_factory() -> tuple[nn.Module, tuple[torch.Tensor, ...], LossFn]:
    return classification(TinyBlock, batch=32, width=64)


def mean_square_loss(output: Any) -> torch.Tensor:
    leaves = [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise UsageError("the model's output has no floating-point tensor to build a loss from; return a loss_fn")
    total = leaves[0].float().pow(2).mean()
    for t in leaves[1:]:
        total = total + t.float().pow(2).mean()
    return total


def load(spec: str | None) -> ModelSpec:
    if spec is None:
        model, inputs, loss_fn = default_factory()
        return ModelSpec(model, inputs, loss_fn, "TinyBlock (default)")
    factory = resolve_factory(spec)
    made = factory()
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise UsageError(f"--model {spec}: the factory must return (model, inputs) or (model, inputs, loss_fn)")
    model, inputs = made[0], made[1]
    if not isinstance(model, nn.Module):
        raise UsageError(f"--model {spec}: the factory's first item is not a torch.nn.Module")
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    loss_fn = made[2] if len(made) == 3 else mean_square_loss
    return ModelSpec(model, inputs, loss_fn, spec)


def resolve_factory(spec: str) -> Callable[[], Any]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--model {spec!r}: expected package.module:factory")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--model {spec}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"--model {spec}: {module_name} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]
