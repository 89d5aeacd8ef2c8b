"""--shapes 1x128,8x128: parsed (and bounded) without torch, so a bad list is refused before torch is imported."""

from __future__ import annotations

import math

from neuron_cell.boundary import quote
from neuron_smoke.errors import UsageError

# The most elements one swept input may have: 4 GiB at float32, past what a smoke sweep of one input should take
# (1x99999999999 would ask for 800 GB before failing).
MAX_ELEMENTS = 2**30
SWEEP_STEPS = 20  # --sweep-steps' default: timed steps per shape, enough for a p95 that is not the slowest step


def parse_shapes(text: str) -> list[tuple[int, ...]]:
    shapes = []
    for item in (s.strip() for s in text.split(",") if s.strip()):
        try:
            shape = tuple(int(d) for d in item.lower().split("x"))
        except ValueError:
            raise UsageError(f"--shapes: {quote(item)} is not a shape like 8x128 (dimensions joined by x)") from None
        if not shape or any(d <= 0 for d in shape):
            raise UsageError(f"--shapes: {quote(item)} has a dimension <= 0")
        if math.prod(shape) > MAX_ELEMENTS:
            raise UsageError(
                f"--shapes: {quote(item)} has more elements than the {MAX_ELEMENTS} (2^30) an input may have here; "
                "give the shapes the model runs at"
            )
        shapes.append(shape)
    if not shapes:
        raise UsageError("--shapes: give at least one shape, e.g. 1x128,8x128")
    return shapes
