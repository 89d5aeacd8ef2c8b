"""A Python-level fault injector for the evaluation tests: one named layer computes wrongly on the device.

Imitates a device kernel (or a compiled graph) that is wrong for one layer only, e.g. a miscompiled fusion; the
simulated device's own NEURON_SIM_FAULT=wrong_matmul is wrong for every matmul instead. The error is applied only
when the layer runs on the `neuron` device, so the same factory is correct on the CPU, as a real fault would be.

NEURON_EVAL_FAULT_MODEL=package.module:factory  the model to wrap (default: the MLP example)
NEURON_EVAL_FAULT_LAYER=name                    the module whose output is scaled on the device (none: no fault)
NEURON_EVAL_FAULT_SCALE=1.01                    the factor (a 1 % error by default)
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from neuron_smoke.models import resolve_factory


def _scale(value: Any, factor: float) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.device.type == "neuron":
        return value * factor
    if isinstance(value, tuple):
        return tuple(_scale(v, factor) for v in value)
    return value


def inject(model: nn.Module, layer: str, factor: float) -> None:
    def hook(_module: nn.Module, _args: Any, output: Any) -> Any:
        return _scale(output, factor)

    model.get_submodule(layer).register_forward_hook(hook)


def factory() -> Any:
    made = resolve_factory(os.environ.get("NEURON_EVAL_FAULT_MODEL", "neuron_smoke.examples.mlp:factory"))()
    layer = os.environ.get("NEURON_EVAL_FAULT_LAYER")
    if layer:
        inject(made[0], layer, float(os.environ.get("NEURON_EVAL_FAULT_SCALE", "1.01")))
    return made
