"""A small MLP classifier: the example that needs nothing but torch."""

from __future__ import annotations

import torch
from torch import nn

from neuron_smoke.examples.classification import classification
from neuron_smoke.models import LossFn


class MLP(nn.Module):
    def __init__(self, width: int = 32, hidden: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.act1 = nn.GELU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.ReLU()
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.act2(self.fc2(self.act1(self.fc1(x)))))
        return out


def factory() -> tuple[nn.Module, tuple[torch.Tensor, ...], LossFn]:
    return classification(MLP, batch=16, width=32)
