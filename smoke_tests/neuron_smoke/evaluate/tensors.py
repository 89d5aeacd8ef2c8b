"""Tensor summaries for baselines: full tensors below a size limit, a fixed random projection above it.

The projection is a count sketch: every element goes, with a random sign, into one of SKETCH_WIDTH buckets; the
assignment depends only on the element count and a fixed seed, so two runs of the same model project alike and
every element contributes (a sample of elements could miss a localized error). Errors between sketches are
normwise like those between full tensors, so a projected tensor is compared on the same scale.
"""

from __future__ import annotations

from typing import Any

import torch

SKETCH_WIDTH = 256
SKETCH_SEED = 20260
DEFAULT_FULL_LIMIT = 1 << 20  # elements; larger tensors are stored as summaries with a sketch

_plans: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def _plan(numel: int) -> tuple[torch.Tensor, torch.Tensor]:
    plan = _plans.get(numel)
    if plan is None:
        gen = torch.Generator().manual_seed(SKETCH_SEED + numel)
        buckets = torch.randint(0, SKETCH_WIDTH, (numel,), generator=gen)
        signs = torch.randint(0, 2, (numel,), generator=gen, dtype=torch.int8).to(torch.float64) * 2 - 1
        plan = _plans[numel] = (buckets, signs)
    return plan


def sketch(tensor: torch.Tensor) -> torch.Tensor:
    """The fixed random projection (float64, SKETCH_WIDTH values) of a tensor's elements."""
    flat = tensor.detach().cpu().reshape(-1).to(torch.float64)
    buckets, signs = _plan(flat.numel())
    out = torch.zeros(SKETCH_WIDTH, dtype=torch.float64)
    return out.index_add_(0, buckets, flat * signs)


def summary(tensor: torch.Tensor) -> dict[str, Any]:
    t = tensor.detach().cpu()
    data: dict[str, Any] = {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "numel": t.numel()}
    if t.is_floating_point() and t.numel():
        d = t.to(torch.float64)
        data.update(
            mean=float(d.mean()),
            std=float(d.std()) if t.numel() > 1 else 0.0,
            absmax=float(d.abs().max()),
            l2=float(d.norm()),
            nonfinite=int((~torch.isfinite(d)).sum()),
        )
    return data


def comparable(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()
