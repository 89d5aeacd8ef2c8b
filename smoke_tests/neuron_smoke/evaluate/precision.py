"""--precision: how the device computes float32, the bound a comparison at that precision allows, and the CPU
reference computed alike.

fp32           float32 throughout (no auto-cast).
bf16-matmul    float32 matmuls (mm, addmm, bmm, baddbmm) take bfloat16 inputs and accumulate in float32: neuronx-cc's
               documented default, `--auto-cast matmult --auto-cast-type bf16` (NEURON-FACTS section 13). On the
               neuron device the compiler does it; on the CPU (the same-machine reference, or a recording) a dispatch
               mode rounds those ops' inputs alike, so a difference from the CPU is the device's.
bf16-autocast  every side runs under torch.autocast(device, bfloat16), as a team training with autocast does.

The bound is numerics.model_rtol (the model stage's) for the dtype the precision computes matmuls at and the model's
longest reduction, never under EVAL_RTOL (1e-3, which covers two CPUs' float32 kernels); --model-rtol overrides it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from neuron_smoke.evaluate.stepmode import Rounding
from neuron_smoke.numerics import model_rtol

EVAL_RTOL = 1e-3
DTYPE = {"fp32": torch.float32, "bf16-matmul": torch.bfloat16, "bf16-autocast": torch.bfloat16}
NOTES = {
    "fp32": "float32 throughout: the device is taken to compute float32 matmuls in float32",
    "bf16-matmul": (
        "float32 matmuls at bfloat16 input precision, accumulated in float32 (neuronx-cc's "
        "--auto-cast matmult --auto-cast-type bf16); CPU runs round those inputs alike"
    ),
    "bf16-autocast": "every run under torch.autocast(bfloat16), the device's, the CPU reference and the recording",
}
A = torch.ops.aten
# op -> the positions of its inputs the matmul engine reads (bias and other operands are added in float32).
# Convolutions are left in float32: whether auto-cast reaches them is not documented in our sources, and rounding
# their inputs moves a small-batch BatchNorm ResNet's gradients by up to 0.67 (the matmuls alone: 0.004).
ROUNDED = {
    A.mm.default: (0, 1),
    A.bmm.default: (0, 1),
    A.addmm.default: (1, 2),
    A.baddbmm.default: (1, 2),
}


def _bf16(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype == torch.float32:
        return x.to(torch.bfloat16).to(torch.float32)
    return x


_PLACES = {id(op): places for op, places in ROUNDED.items()}  # by id: an op's own hash is a Python call


def rounded(func: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The op's arguments with the inputs the matmul engine reads rounded to bfloat16 (float32 matmuls only)."""
    places = _PLACES.get(id(func))
    if places is None:
        return args
    return tuple(_bf16(a) if i in places else a for i, a in enumerate(args))


def rounding(precision: str, device_type: str) -> Rounding | None:
    """What a captured step (forward and backward) at `precision` on `device_type` does to each op's inputs (a
    stepmode.StepMode's `rounding`); None where nothing is rounded (the neuron device's compiler does it there)."""
    return rounded if precision == "bf16-matmul" and device_type != "neuron" else None


def forward(precision: str, device_type: str) -> AbstractContextManager[Any]:
    """The context of a step's forward and loss (autocast covers the forward only, as torch advises), timed or not."""
    return torch.autocast(device_type, dtype=torch.bfloat16) if precision == "bf16-autocast" else nullcontext()


def bound(precision: str, model: nn.Module) -> float:
    from neuron_smoke.stage_model import reduction_size

    return max(EVAL_RTOL, model_rtol(DTYPE[precision], reduction_size(model)))
