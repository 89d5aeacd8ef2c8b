"""A seeded classification example: the model, a batch of random features and class targets, cross entropy.

Shared by the MLP example and the smoke suite's default model (neuron_smoke.models); it imports neither, so both
can use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def classification(
    build: Callable[[], nn.Module], batch: int, width: int, classes: int = 10
) -> tuple[nn.Module, tuple[torch.Tensor, ...], Callable[[Any], torch.Tensor]]:
    """`build()` under seed 0, then `batch` x `width` inputs and targets under seed 1 (the same on every device)."""
    torch.manual_seed(0)
    model = build()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, width, generator=gen)
    target = torch.randint(0, classes, (batch,), generator=gen)

    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, target.to(out.device))

    return model, (x,), loss_fn
