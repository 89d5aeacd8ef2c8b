"""What a baseline was recorded from: the model's structure and initial values, and the input spec and values.

A baseline compared with another model, another input spec, or an unseeded factory (same structure, other random
values) would report meaningless errors, so loading refuses each with the reason and the fix.
"""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any

import torch

from neuron_smoke.errors import UsageError
from neuron_smoke.models import ModelSpec


def _digest(named: list[tuple[str, torch.Tensor]]) -> str:
    h = hashlib.sha256()
    for name, t in named:
        c = t.detach().cpu()
        c = (c.to_dense() if c.layout != torch.strided else c).contiguous()  # a sparse buffer: its values
        h.update(f"{name}|{list(c.shape)}|{c.dtype}|".encode())
        h.update(ctypes.string_at(c.data_ptr(), c.numel() * c.element_size()) if c.numel() else b"")
    return h.hexdigest()


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def fingerprint(spec: ModelSpec) -> dict[str, Any]:
    params = list(spec.model.named_parameters())
    buffers = list(spec.model.named_buffers())
    return {
        "name": spec.name,
        "class": f"{type(spec.model).__module__}.{type(spec.model).__qualname__}",
        "structure": [[n, list(p.shape), _dtype(p)] for n, p in params + buffers],
        "parameters": sum(p.numel() for _, p in params),
        "state_sha256": _digest(params + buffers),
        "inputs": [[list(x.shape), _dtype(x)] for x in spec.input_leaves()],
        "inputs_sha256": _digest([(str(i), x) for i, x in enumerate(spec.input_leaves())]),
    }


def check(recorded: dict[str, Any], current: dict[str, Any], where: str) -> None:
    """Raise UsageError naming the first difference that makes the comparison meaningless."""
    if recorded["structure"] != current["structure"] or recorded["class"] != current["class"]:
        theirs = {tuple(s[:1]) for s in recorded["structure"]}
        ours = {tuple(s[:1]) for s in current["structure"]}
        detail = _structure_diff(recorded["structure"], current["structure"], theirs, ours)
        raise UsageError(
            f"--baseline {where}: recorded from a different model ({recorded['class']}, "
            f"{recorded['parameters']} parameters) than --model {current['name']} ({current['class']}, "
            f"{current['parameters']} parameters): {detail}. Record a baseline of this model with --record."
        )
    if recorded["inputs"] != current["inputs"]:
        raise UsageError(
            f"--baseline {where}: recorded with inputs {_spec(recorded['inputs'])}, the factory gives "
            f"{_spec(current['inputs'])}. Use the factory the baseline was recorded with, or record a new baseline."
        )
    if recorded["state_sha256"] != current["state_sha256"]:
        raise UsageError(
            f"--baseline {where}: same model structure, but the initial weights differ from the recorded ones: "
            "the factory is not seeded. Call torch.manual_seed(...) in the factory before building the model, "
            "then record the baseline again."
        )
    if recorded["inputs_sha256"] != current["inputs_sha256"]:
        raise UsageError(
            f"--baseline {where}: same input spec, but the input values differ from the recorded ones: the "
            "factory's inputs are not seeded. Draw them from a seeded torch.Generator, then record again."
        )


def _spec(inputs: list[list[Any]]) -> str:
    return ", ".join(f"{dtype}[{'x'.join(str(d) for d in shape)}]" for shape, dtype in inputs) or "none"


def _structure_diff(
    recorded: list[list[Any]], current: list[list[Any]], theirs: set[tuple[Any, ...]], ours: set[tuple[Any, ...]]
) -> str:
    only_rec = sorted(n for (n,) in theirs - ours)
    only_cur = sorted(n for (n,) in ours - theirs)
    if only_rec or only_cur:
        parts = []
        if only_rec:
            parts.append(f"only in the baseline: {', '.join(only_rec[:5])}")
        if only_cur:
            parts.append(f"only in the model: {', '.join(only_cur[:5])}")
        return "; ".join(parts)
    rec = {r[0]: r for r in recorded}
    for row in current:
        if rec.get(row[0]) != row:
            return f"{row[0]} is {row[2]}{row[1]} here, {rec[row[0]][2]}{rec[row[0]][1]} in the baseline"
    return "the model class differs"
