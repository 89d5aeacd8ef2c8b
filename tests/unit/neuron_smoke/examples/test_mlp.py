"""neuron_smoke.examples.mlp: the MLP's layers and output shape, and the seeded factory a baseline can rely on."""

from __future__ import annotations

import torch
from torch import nn

from neuron_smoke.examples import mlp
from neuron_smoke.models import load


def test_the_mlp_maps_width_features_to_class_logits_through_its_hidden_layers() -> None:
    model = mlp.MLP(width=5, hidden=7, classes=3)
    linears = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears == [(5, 7), (7, 7), (7, 3)]
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    out = model(x)
    assert out.shape == (4, 3)
    expected = model.head(torch.relu(model.fc2(nn.functional.gelu(model.fc1(x)))))
    assert torch.equal(out, expected)


def test_the_factory_is_seeded_and_its_loss_trains_every_parameter() -> None:
    model, (x,), loss_fn = mlp.factory()
    torch.manual_seed(99)
    again, (x2,), _ = mlp.factory()
    assert torch.equal(x, x2) and x.shape == (16, model.fc1.in_features)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))
    loss = loss_fn(model(x))
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())


def test_the_factory_meets_the_model_contract() -> None:
    spec = load("neuron_smoke.examples.mlp:factory")  # the loader runs one forward and loss on the CPU
    assert isinstance(spec.model, mlp.MLP) and spec.kwargs == {} and len(spec.args) == 1
