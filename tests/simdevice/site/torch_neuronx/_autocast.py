"""torch.autocast(device_type="neuron") for the simulated device.

AWS documents mixed precision on TorchNeuron as `torch.autocast(device_type="neuron")` (NEURON-FACTS section 9).
PyTorch registers no autocast rules for PrivateUse1, so an out-of-tree backend brings its own: ops without a rule
fall through, and the matmul family runs in the autocast dtype (PyTorch's CUDA `lower_precision_fp` list; the
exact list of torch_neuronx is not in the sources we could read). Ops such as softmax get no float32 rule here, so
they run in whatever dtype reaches them: no kinder than a device that keeps them in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

LOWER_PRECISION_OPS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear")
_KEY = torch._C.DispatchKey.AutocastPrivateUse1
_libraries: list[torch.library.Library] = []


def _lower(op: str) -> Callable[..., Any]:
    packet = getattr(torch.ops.aten, op)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = torch.get_autocast_dtype("neuron")

        def cast(x: Any) -> Any:
            return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            return packet.default(*[cast(a) for a in args], **{k: cast(v) for k, v in kwargs.items()})

    return kernel


def register() -> None:
    lib = torch.library.Library("_", "IMPL")
    lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    ops = torch.library.Library("aten", "IMPL")
    for op in LOWER_PRECISION_OPS:
        ops.impl(op, _lower(op), "AutocastPrivateUse1")
    _libraries.extend((lib, ops))
