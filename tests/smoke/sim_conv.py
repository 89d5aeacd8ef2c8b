"""Convolution for the simulated neuron device (tests only), until the simulated device provides it itself.

PrivateUse1 convolutions dispatch to aten::convolution_overrideable and convolution_backward_overrideable, which
have no kernel and which the simulated device's boxed CPU fallback never sees (it raises NotImplementedError). The
simulated device runs every op on host memory through the CPU kernels; this does the same for these two entries,
so ResNet runs there as it runs on a device with convolutions. The lead should move it into tests/simdevice.
"""

from __future__ import annotations

from typing import Any

import torch

_lib: Any = None


def _to(t: Any, device: torch.device) -> Any:
    return t.to(device) if isinstance(t, torch.Tensor) else t


def _conv(inp: torch.Tensor, weight: torch.Tensor, bias: Any, *rest: Any) -> torch.Tensor:
    cpu = torch.device("cpu")
    out = torch.ops.aten.convolution(_to(inp, cpu), _to(weight, cpu), _to(bias, cpu), *rest)
    return out.to(inp.device)


def _conv_backward(grad: torch.Tensor, inp: torch.Tensor, weight: torch.Tensor, *rest: Any) -> Any:
    cpu = torch.device("cpu")
    stride, padding, dilation, transposed, output_padding, groups, mask = rest
    bias_sizes = [weight.shape[1] if transposed else weight.shape[0]] if mask[2] else None
    grads = torch.ops.aten.convolution_backward(
        _to(grad, cpu), _to(inp, cpu), _to(weight, cpu), bias_sizes, stride, padding, dilation, transposed,
        output_padding, groups, mask,
    )  # fmt: skip
    return tuple(g.to(inp.device) if g is not None else None for g in grads)


def register() -> None:
    global _lib
    if _lib is not None:
        return
    try:
        import torch_neuronx  # noqa: F401  (the simulated one: registers the `neuron` device)
    except ImportError:
        return
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("convolution_overrideable", _conv, "PrivateUse1")
    _lib.impl("convolution_backward_overrideable", _conv_backward, "PrivateUse1")
