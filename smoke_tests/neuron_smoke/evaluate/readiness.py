"""Readiness scan: what in the model the release will not run as the team expects, each with its module.

Sources: the areas AWS names as unsupported in the TorchNeuron beta (torch.sparse, torch.func, torch.nested,
torch.distributions, most of torch.fft; see shared/NEURON-FACTS.md section 10, whose operator table was not
reachable, so the op patterns below are ours); float64 runs as float32 (pre-release QUICKSTART.md); eager ops
fall back to the CPU (`torch_neuronx.get_fallback_ops()`); a graph torch.compile cannot compile raises.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from neuron_smoke.evaluate.inventory import ROOT, Inventory, normalize

# aten ops by area. distributions: the sampling kernels torch.distributions calls (Gamma, Dirichlet, Beta, Poisson,
# Binomial); a Normal's rsample uses ordinary ops and is not flagged.
AREAS: dict[str, re.Pattern[str]] = {
    "sparse": re.compile(r"sparse|_coalesce|^_indices$|^_values$|^_nnz$|^indices$|^values$|^to_dense$"),
    "nested": re.compile(r"nested"),
    "fft": re.compile(r"fft"),
    "distributions": re.compile(r"^_standard_gamma|^_sample_dirichlet$|^_dirichlet_grad$|^poisson$|^binomial$"),
}


def unsupported_ops(inventory: Inventory) -> list[dict[str, Any]]:
    found: dict[tuple[str, str, str], int] = {}
    for r in inventory.records:
        name = normalize(r.op)
        areas = [area for area, pattern in AREAS.items() if pattern.search(name)]
        if r.layouts and "sparse" not in areas:
            areas.append("sparse")
        if r.nested and "nested" not in areas:
            areas.append("nested")
        if r.under_transform:
            areas.append("func")
        for area in areas:
            key = (area, r.op, r.module)
            found[key] = found.get(key, 0) + r.calls
    return [{"area": a, "op": op, "module": m, "calls": c} for (a, op, m), c in sorted(found.items())]


def float64_use(model: torch.nn.Module, inventory: Inventory | None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, t in named:
            if t.dtype in (torch.float64, torch.complex128):
                rows.append({"what": kind, "name": name, "module": name.rpartition(".")[0] or ROOT})
    if inventory is not None:
        seen: set[tuple[str, str]] = set()
        for r in inventory.records:
            if ("float64" in r.dtypes or "complex128" in r.dtypes) and (r.op, r.module) not in seen:
                seen.add((r.op, r.module))
                rows.append({"what": "op", "name": r.op, "module": r.module})
    return rows


def fallback_by_module(fallback_ops: list[str] | None, inventory: Inventory | None) -> list[dict[str, Any]]:
    """Each op that fell back, under every module that called it (from the inventory of the same run)."""
    rows: list[dict[str, Any]] = []
    records = inventory.records if inventory is not None else []
    for op in fallback_ops or []:
        calls: dict[str, int] = {}
        for r in records:
            if normalize(r.op) == normalize(op):
                calls[r.module] = calls.get(r.module, 0) + r.calls
        rows.extend({"op": op, "module": m, "calls": n} for m, n in sorted(calls.items()))
        if not calls:
            rows.append({"op": op, "module": None, "calls": None})
    return rows


def compile_failure(error: BaseException | None, inventory: Inventory | None) -> dict[str, Any] | None:
    """torch.compile's error, and the modules of any inventory op its message names."""
    if error is None:
        return None
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    modules: dict[str, list[str]] = {}
    if inventory is not None:
        for r in inventory.records:
            if normalize(r.op) and re.search(rf"\b{re.escape(normalize(r.op))}\b", str(error)):
                modules.setdefault(r.op, [])
                if r.module not in modules[r.op]:
                    modules[r.op].append(r.module)
    return {"error": f"{type(error).__name__}: {message}", "ops": modules}


def scan(
    model: torch.nn.Module,
    inventory: Inventory | None,
    fallback_ops: list[str] | None,
    compile_error: BaseException | None,
) -> dict[str, Any]:
    unsupported = unsupported_ops(inventory) if inventory is not None else []
    float64 = float64_use(model, inventory)
    fallback = fallback_by_module(fallback_ops, inventory)
    return {
        "unsupported": unsupported,
        "float64": float64,
        "fallback": fallback,
        "fallback_tracked": fallback_ops is not None,
        "compile_failure": compile_failure(compile_error, inventory),
        "findings": len(unsupported) + len(float64) + len(fallback) + (compile_error is not None),
    }
