"""modelcopy.deep_copy: what copy.deepcopy would make, nothing shared with the original."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from neuron_smoke.modelcopy import deep_copy


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight  # tied, as GPT-2's lm_head and wte
        self.norm = nn.BatchNorm1d(4)
        self.cache: dict[str, Any] = {}  # the model's own empty container
        self.seen: list[torch.Tensor] = [torch.ones(2)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.embed(x)))


def _hook(_m: nn.Module, _args: Any, out: torch.Tensor) -> torch.Tensor:
    return out * 2


def test_the_copy_is_deepcopys_and_shares_nothing_with_the_original() -> None:
    model = Tied()
    model.norm.register_forward_hook(_hook)  # a hook the user registered is copied, as deepcopy copies it
    ours, theirs = deep_copy(model), copy.deepcopy(model)
    x = torch.tensor([1, 2, 3])
    assert torch.equal(ours(x), theirs(x)) and torch.equal(ours(x), model(x))
    assert ours.head.weight is ours.embed.weight and ours.embed.weight is not model.embed.weight
    assert [type(v) for v in vars(ours).values()] == [type(v) for v in vars(theirs).values()]
    for mine, original in zip(ours.modules(), model.modules(), strict=True):
        for name, value in vars(original).items():
            if isinstance(value, dict | set | list):
                assert vars(mine)[name] is not value, name  # every container is the copy's own
    ours.embed.register_forward_hook(_hook)
    ours.cache["k"] = 1
    ours.seen[0].add_(1)
    assert not model.embed._forward_hooks and model.cache == {} and float(model.seen[0][0]) == 1.0
    assert len(ours.norm._forward_hooks) == 1 and len(model.norm._forward_hooks) == 1
