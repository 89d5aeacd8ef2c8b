"""neuron_smoke.examples.resnet: the ResNet-18 definition (torchvision's layout and initialisation), the choice
between it and torchvision's, and the seeded factory."""

from __future__ import annotations

import math
import sys
import types
from typing import Any

import pytest
import torch
from torch import nn

from neuron_smoke.examples import resnet

# torchvision's ResNet18_Weights.IMAGENET1K_V1.meta["num_params"]: the model resnet.py says it follows
TORCHVISION_RESNET18_PARAMETERS = 11_689_512


def test_the_definition_has_torchvision_resnet18s_layout_and_size() -> None:
    model = resnet.ResNet18()
    assert sum(p.numel() for p in model.parameters()) == TORCHVISION_RESNET18_PARAMETERS
    names = {n for n, _ in model.named_modules()}
    assert {"conv1", "bn1", "layer1.0.conv1", "layer4.1.bn2", "fc"} <= names
    downsampled = sorted(n.removesuffix(".downsample") for n in names if n.endswith(".downsample"))
    assert downsampled == ["layer2.0", "layer3.0", "layer4.0"]  # where the width doubles and the stride is 2
    assert (model.fc.in_features, model.fc.out_features) == (512, 1000)


def test_convolutions_are_initialised_as_torchvisions_kaiming_fan_out() -> None:
    torch.manual_seed(0)
    model = resnet.ResNet18(num_classes=10)
    conv = model.layer2[0].conv1  # 64 -> 128 channels: fan_out is twice fan_in, so the two modes differ
    fan_out = conv.out_channels * conv.kernel_size[0] * conv.kernel_size[1]
    assert float(conv.weight.detach().std()) == pytest.approx(math.sqrt(2.0 / fan_out), rel=0.02)


def test_a_basic_block_halves_the_map_on_stride_2_and_adds_the_shortcut() -> None:
    x = torch.randn(1, 8, 6, 6, generator=torch.Generator().manual_seed(0))
    down = resnet.BasicBlock(8, 16, stride=2).eval()
    assert down.downsample is not None and down(x).shape == (1, 16, 3, 3)
    strided = resnet.BasicBlock(8, 8, stride=2).eval()  # the same width, but the shortcut must be strided too
    assert strided.downsample is not None and strided(x).shape == (1, 8, 3, 3)
    same = resnet.BasicBlock(8, 8).eval()
    assert same.downsample is None
    with torch.no_grad():
        for p in same.conv2.parameters():
            p.zero_()  # the residual branch adds nothing: the block is relu(x)
    assert torch.equal(same(x), torch.relu(x))


def _fake_torchvision(monkeypatch: pytest.MonkeyPatch, models: types.ModuleType) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    monkeypatch.setitem(sys.modules, "torchvision.models", models)


def test_torchvisions_resnet18_is_used_when_it_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    models = types.ModuleType("torchvision.models")

    def resnet18(**kwargs: Any) -> nn.Module:
        calls.append(kwargs)
        return nn.Identity()

    models.resnet18 = resnet18  # type: ignore[attr-defined]
    _fake_torchvision(monkeypatch, models)
    model, source = resnet.build(num_classes=7)
    assert isinstance(model, nn.Identity) and source == "torchvision.models.resnet18"
    assert calls == [{"weights": None, "num_classes": 7}]  # random weights: nothing downloaded


def test_the_own_definition_is_used_when_torchvision_is_absent_or_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision raises ImportError
    model, source = resnet.build(num_classes=3)
    assert isinstance(model, resnet.ResNet18) and source == "neuron_smoke.examples.resnet.ResNet18"
    assert model.fc.out_features == 3
    broken = types.ModuleType("torchvision.models")

    def fail(name: str) -> Any:
        raise RuntimeError(f"operator torchvision::nms does not exist ({name})")

    broken.__getattr__ = fail  # type: ignore[method-assign]
    _fake_torchvision(monkeypatch, broken)
    assert isinstance(resnet.build()[0], resnet.ResNet18)


def test_the_factory_is_seeded_and_gives_class_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)  # the same model wherever torchvision is installed
    model, (x,), loss_fn = resnet.factory()
    assert resnet.SOURCE == "neuron_smoke.examples.resnet.ResNet18"
    torch.manual_seed(5)
    again, (x2,), _ = resnet.factory()
    assert torch.equal(x, x2) and x.shape[1] == 3
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))
    with torch.no_grad():
        out = model(x)
    assert out.shape == (x.shape[0], model.fc.out_features) and torch.isfinite(loss_fn(out))
