"""neuron_smoke.examples.classification: a seeded model, inputs and targets, and cross entropy as the loss."""

from __future__ import annotations

import torch
from torch import nn

from neuron_smoke.examples.classification import classification


def _linear() -> nn.Module:
    return nn.Linear(6, 4)


def test_the_model_is_built_under_seed_0_and_the_batch_drawn_under_seed_1() -> None:
    model, (x,), _ = classification(_linear, batch=5, width=6, classes=4)
    torch.manual_seed(0)
    expected = _linear()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), expected.parameters(), strict=True))
    gen = torch.Generator().manual_seed(1)
    assert torch.equal(x, torch.randn(5, 6, generator=gen))


def test_two_calls_give_the_same_example_whatever_the_global_seed() -> None:
    first, (x1,), loss1 = classification(_linear, batch=5, width=6, classes=4)
    torch.manual_seed(1234)
    second, (x2,), loss2 = classification(_linear, batch=5, width=6, classes=4)
    assert torch.equal(x1, x2)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters(), strict=True))
    out = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))
    assert torch.equal(loss1(out), loss2(out))


def test_the_loss_is_cross_entropy_against_targets_drawn_after_the_inputs() -> None:
    classes = 4
    _, _, loss_fn = classification(_linear, batch=64, width=6, classes=classes)
    gen = torch.Generator().manual_seed(1)
    torch.randn(64, 6, generator=gen)  # the inputs come first from the same generator
    targets = torch.randint(0, classes, (64,), generator=gen)
    logits = torch.randn(64, classes, generator=torch.Generator().manual_seed(5))
    loss = loss_fn(logits)
    assert loss.shape == () and torch.allclose(loss, nn.functional.cross_entropy(logits, targets))
    confident = nn.functional.one_hot(targets, classes).float() * 100  # right on every target: no loss left
    assert float(loss_fn(confident)) < 1e-6 and float(loss_fn(-confident)) > 10
