"""Per-tensor and per-layer errors of a device run against the baseline and a same-machine CPU run.

Three errors per tensor: device vs baseline, device vs CPU, CPU vs baseline. Where the device agrees with its own
CPU but not with the baseline, the difference comes from the old environment; where it differs from its own CPU,
from the device. Tensors stored as a sketch in the baseline are compared through the same sketch.

Where an error starts: a module whose inputs agree with the reference (error <= rtol) while its output does not
(error > rtol) and is at least AMPLIFY times its inputs' error is where the error starts; of nested such modules
the innermost is named (its parents merely contain it). Modules after it inherit the error through their inputs and
are not named, including a normalization that lifts an inherited error just under rtol to just over it (seen with
Llama's final RMSNorm after a fault in the last MLP).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from neuron_smoke.evaluate import tensors
from neuron_smoke.evaluate.baseline import Baseline
from neuron_smoke.evaluate.capture import Capture

REFS = ("baseline", "cpu")
AMPLIFY = 10.0
# A gradient or updated weight is measured against at least this fraction of the largest reference value of its kind:
# a numerical zero, such as the gradient of a bias that a BatchNorm after it cancels (1e-9 where the other gradients
# are 1e-1), is rounding noise, not a value whose relative error means anything. Activations keep their own scale:
# an attention mask's finfo.min would make every other one look exact.
NEGLIGIBLE = 1e-3
FLOORED = ("grad", "weight")


def _kind(name: str) -> str:
    return name.split("/")[0]


def floors(reference: Capture) -> dict[str, float]:
    """NEGLIGIBLE times the largest |value| of each kind of tensor in the same-machine CPU run."""
    found: dict[str, float] = {}
    for name, t in reference.tensors.items():
        if _kind(name) in FLOORED and tensors.comparable(t) and t.numel():
            top = float(torch.nan_to_num(t.detach().abs().double(), nan=0.0, posinf=0.0).max())
            found[_kind(name)] = max(found.get(_kind(name), 0.0), top)
    return {kind: NEGLIGIBLE * top for kind, top in found.items()}


def _error(name: str, value: torch.Tensor, baseline: Baseline, floor: float) -> float | None:
    full = baseline.full(name)
    if full is not None:
        return tensors.normwise(value, full, floor)
    sk = baseline.sketch(name)
    if sk is not None:
        if list(value.shape) != baseline.index["tensors"][name]["shape"]:
            return math.inf
        return tensors.normwise(tensors.sketch(value), sk)
    return None


def per_tensor(device: Capture, cpu: Capture, baseline: Baseline | None, rtol: float) -> list[dict[str, Any]]:
    rows = []
    names = [n for n, t in device.tensors.items() if tensors.comparable(t)]
    floor_of = floors(cpu)
    for name in names:
        value = device.tensors[name]
        ref_cpu = cpu.tensors.get(name)
        floor = floor_of.get(_kind(name), 0.0)
        row: dict[str, Any] = {
            "tensor": name,
            "layer": device.layer_of.get(name),
            "shape": list(value.shape),
            "vs_cpu": tensors.normwise(value, ref_cpu, floor) if ref_cpu is not None else None,
            "vs_baseline": None,
            "cpu_vs_baseline": None,
        }
        if baseline is not None and name in baseline.index["tensors"]:
            row["vs_baseline"] = _error(name, value, baseline, floor)
            if ref_cpu is not None:
                row["cpu_vs_baseline"] = _error(name, ref_cpu, baseline, floor)
        row["ok"] = all(row[k] is None or row[k] <= rtol for k in ("vs_cpu", "vs_baseline"))
        row["source"] = _source(row, rtol)
        rows.append(row)
    return rows


def _source(row: dict[str, Any], rtol: float) -> str:
    dev_cpu, dev_base = row["vs_cpu"], row["vs_baseline"]
    if dev_cpu is not None and dev_cpu > rtol:
        return "device"
    if dev_base is not None and dev_base > rtol:
        return "environment"  # the device agrees with its own CPU, not with the old environment
    return "-"


def missing(device: Capture, cpu: Capture, baseline: Baseline | None) -> dict[str, list[str]]:
    out = {"only_in_cpu_run": sorted(set(cpu.tensors) - set(device.tensors))}
    if baseline is not None:
        out["only_in_baseline"] = sorted(set(baseline.names) - set(device.tensors))
        out["only_in_device_run"] = sorted(set(device.tensors) - set(baseline.names))
    return out


def per_layer(rows: list[dict[str, Any]], order: list[str]) -> list[dict[str, Any]]:
    """The worst error of each module's activations, gradients and weights, in forward order."""
    layers: dict[str, dict[str, Any]] = {}
    for row in rows:
        layer = row["layer"]
        if layer is None:
            continue
        entry = layers.setdefault(layer, {"layer": layer, "tensors": 0})
        entry["tensors"] += 1
        kind = row["tensor"].split("/")[0]
        if kind == "act":
            kind = "output" if "/out/" in row["tensor"] else "input"
        for ref in REFS:
            value = row[f"vs_{ref}"]
            if value is None:
                continue
            key = f"{kind}_vs_{ref}"
            entry[key] = max(entry.get(key, 0.0), value)
            entry[f"worst_vs_{ref}"] = max(entry.get(f"worst_vs_{ref}", 0.0), value)
    rank = {name.split("#")[0]: i for i, name in reversed(list(enumerate(order)))}
    return sorted(layers.values(), key=lambda e: (rank.get(e["layer"], len(rank)), e["layer"]))


def origins(rows: list[dict[str, Any]], order: list[str], ref: str, rtol: float) -> list[dict[str, Any]]:
    """Modules where the forward error against `ref` starts (see the module docstring)."""
    acts: dict[str, dict[str, float]] = {}
    for row in rows:
        value = row[f"vs_{ref}"]
        if not row["tensor"].startswith("act/") or value is None:
            continue
        _, call, side, _ = row["tensor"].split("/")
        worst = acts.setdefault(call, {"in": 0.0, "out": 0.0})
        worst[side] = max(worst[side], value)
    found: list[dict[str, Any]] = [
        {"layer": call.split("#")[0], "call": call, "input_error": e["in"], "output_error": e["out"]}
        for call in order
        if (e := acts.get(call)) is not None and e["out"] > rtol and e["in"] <= rtol and e["out"] >= AMPLIFY * e["in"]
    ]
    names = {str(f["layer"]) for f in found}
    return [f for f in found if not any(n.startswith(f"{f['layer']}.") for n in names)]
