"""ResNet-18: torchvision's `resnet18(weights=None)` when torchvision imports, else the definition below.

The definition follows torchvision's (torchvision/models/resnet.py, BasicBlock, layers [2, 2, 2, 2]): the same
module names (conv1, bn1, layer1.0.conv1, ..., fc), shapes and initialisation (kaiming_normal_ fan_out for convs,
BatchNorm weight 1 and bias 0), so reports name layers as torchvision's model would. torchvision from PyPI does not
import beside this project's CPU torch 2.13.0 wheel, so the tests use whichever is present (`SOURCE` says which).
"""

from __future__ import annotations

import torch
from torch import nn

from neuron_smoke.models import LossFn


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = conv3x3(cin, cout, stride)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(cout, cout)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        result: torch.Tensor = self.relu(out + identity)
        return result


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        out: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return out


def build(num_classes: int = 1000) -> tuple[nn.Module, str]:
    try:
        from torchvision.models import resnet18
    except Exception:  # torchvision absent, or present but not importable beside this torch
        return ResNet18(num_classes), "neuron_smoke.examples.resnet.ResNet18"
    return resnet18(weights=None, num_classes=num_classes), "torchvision.models.resnet18"


SOURCE = ""


def factory() -> tuple[nn.Module, tuple[torch.Tensor, ...], LossFn]:
    """ResNet-18 (10 classes) on a 2x3x64x64 batch: small enough for a CPU test, every layer exercised."""
    global SOURCE
    torch.manual_seed(0)
    model, SOURCE = build(num_classes=10)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 64, 64, generator=gen)
    target = torch.randint(0, 10, (2,), generator=gen)

    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, target.to(out.device))

    return model, (x,), loss_fn
