"""Per-tensor and per-layer errors of a device run against the baseline and a same-machine CPU run.

Three errors per tensor: device vs baseline, device vs CPU, CPU vs baseline. Where the device agrees with its own
CPU but not with the baseline, the difference comes from the old environment; where it differs from its own CPU,
from the device. Tensors stored as a sketch in the baseline are compared through the same sketch.

Where an error starts: a module whose inputs agree with the reference (error <= rtol) while its output does not
(error > rtol) and is at least AMPLIFY times its inputs' error is where the error starts; of nested such modules
the innermost is named (its parents merely contain it). Modules after it inherit the error through their inputs and
are not named, including a normalization that lifts an inherited error just under rtol to just over it (seen with
Llama's final RMSNorm after a fault in the last MLP). The root contains every module: it is named only where no
module inside it is. Gradients are placed by the same rule, run backward (grad_origins).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from neuron_smoke.evaluate import tensors
from neuron_smoke.evaluate.attribution import ROOT
from neuron_smoke.evaluate.baseline import Baseline
from neuron_smoke.evaluate.capture import Capture
from neuron_smoke.numerics import finite_absmax, normwise_error

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
    tops: dict[int, float] = {}  # a value kept under several names, measured once
    for name, t in reference.tensors.items():
        if _kind(name) in FLOORED and tensors.comparable(t) and t.numel():
            top = tops[id(t)] = tops[id(t)] if id(t) in tops else finite_absmax(t.detach())
            found[_kind(name)] = max(found.get(_kind(name), 0.0), top)
    return {kind: NEGLIGIBLE * top for kind, top in found.items()}


class _Errors:
    """normwise_error of value/reference pairs, each pair once: a capture keeps a value under several names as one
    tensor object (capture.Copies), and a baseline reads it back so (same_as), so their errors are the same too."""

    def __init__(self, baseline: Baseline | None) -> None:
        self.baseline = baseline
        self.known: dict[tuple[int, int, float], float] = {}  # the tensors are alive in the captures and baseline

    def __call__(self, value: torch.Tensor, reference: torch.Tensor, floor: float) -> float:
        key = (id(value), id(reference), floor)
        if key not in self.known:
            self.known[key] = normwise_error(value, reference, floor)
        return self.known[key]

    def to_baseline(self, name: str, value: torch.Tensor, floor: float) -> float | None:
        assert self.baseline is not None
        full = self.baseline.full(name)
        if full is not None:
            return self(value, full, floor)
        sk = self.baseline.sketch(name)
        if sk is not None:
            if list(value.shape) != self.baseline.index["tensors"][name]["shape"]:
                return math.inf
            return normwise_error(tensors.sketch(value), sk)
        return None


def per_tensor(device: Capture, cpu: Capture, baseline: Baseline | None, rtol: float) -> list[dict[str, Any]]:
    """Each tensor's errors against the same-machine CPU run and the baseline. When `cpu` is the device run itself (the
    device is the CPU) its errors are 0 and the CPU's against the baseline are the device's, so neither is computed
    twice."""
    rows = []
    names = [n for n, t in device.tensors.items() if tensors.comparable(t)]
    floor_of = floors(cpu)
    error = _Errors(baseline)
    for name in names:
        value = device.tensors[name]
        ref_cpu = cpu.tensors.get(name)
        floor = floor_of.get(_kind(name), 0.0)
        row: dict[str, Any] = {
            "tensor": name,
            "layer": device.layer_of.get(name),
            "shape": list(value.shape),
            "vs_cpu": None if ref_cpu is None else 0.0 if ref_cpu is value else error(value, ref_cpu, floor),
            "vs_baseline": None,
            "cpu_vs_baseline": None,
        }
        if baseline is not None and name in baseline.index["tensors"]:
            row["vs_baseline"] = error.to_baseline(name, value, floor)
            if ref_cpu is value:
                row["cpu_vs_baseline"] = row["vs_baseline"]
            elif ref_cpu is not None:
                row["cpu_vs_baseline"] = error.to_baseline(name, ref_cpu, floor)
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
    """Tensors on one side only. A value a capture lost (copies.py: changed by a write its step mode could not see) is
    named apart, as not compared, rather than as missing from the run."""
    lost = set(device.copy.lost) | set(cpu.copy.lost)
    out = {"only_in_cpu_run": sorted(set(cpu.tensors) - set(device.tensors) - lost)}
    if baseline is not None:
        out["only_in_baseline"] = sorted(set(baseline.names) - set(device.tensors) - lost)
        out["only_in_device_run"] = sorted(set(device.tensors) - set(baseline.names))
    if lost:
        out["changed_in_step"] = sorted(lost)
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
        elif kind == "actgrad":  # what the layer's backward passes on, or the gradient reaching its outputs
            kind = "grad" if "/in/" in row["tensor"] else "grad_at_output"
        for ref in REFS:
            value = row[f"vs_{ref}"]
            if value is None:
                continue
            key = f"{kind}_vs_{ref}"
            entry[key] = max(entry.get(key, 0.0), value)
            entry[f"worst_vs_{ref}"] = max(entry.get(f"worst_vs_{ref}", 0.0), value)
    rank = {name.split("#")[0]: i for i, name in reversed(list(enumerate(order)))}
    return sorted(layers.values(), key=lambda e: (rank.get(e["layer"], len(rank)), e["layer"]))


def _by_call(rows: list[dict[str, Any]], ref: str, kind: str) -> dict[str, dict[str, float]]:
    """The worst error against `ref` of each call's `kind` tensors (kind/<call>/<side>/<i>), per side (in, out)."""
    worst: dict[str, dict[str, float]] = {}
    for row in rows:
        value = row[f"vs_{ref}"]
        if not row["tensor"].startswith(f"{kind}/") or value is None:
            continue
        _, call, side, _ = row["tensor"].split("/")
        entry = worst.setdefault(call, {"in": 0.0, "out": 0.0})
        entry[side] = max(entry[side], value)
    return worst


def _inside(name: str, parent: str) -> bool:
    """Whether module `name` is nested in module `parent` (every module is in the root)."""
    return name != parent and (parent == ROOT or name.startswith(f"{parent}."))


def _starts(errors: dict[str, tuple[float, float]], calls: list[str], rtol: float) -> list[dict[str, Any]]:
    """The calls, in the order given, whose (input, output) error says the error starts there (see the module
    docstring), less those that merely contain another such call."""
    found: list[dict[str, Any]] = [
        {"layer": call.split("#")[0], "call": call, "input_error": e[0], "output_error": e[1]}
        for call in calls
        if (e := errors.get(call)) is not None and e[1] > rtol and e[0] <= rtol and e[1] >= AMPLIFY * e[0]
    ]
    names = {str(f["layer"]) for f in found}
    return [f for f in found if not any(_inside(n, f["layer"]) for n in names)]


def _beyond(rows: list[dict[str, Any]], ref: str, rtol: float) -> bool:
    """Whether any tensor's error against `ref` is past rtol. An origin's output error (forward) or computed gradient's
    error (backward) is the worst of some rows': with none past rtol there is none to find, as in a healthy run."""
    key = f"vs_{ref}"
    return any(row[key] is not None and row[key] > rtol for row in rows)


def origins(rows: list[dict[str, Any]], order: list[str], ref: str, rtol: float) -> list[dict[str, Any]]:
    """Modules where the forward error against `ref` starts: inputs agree, outputs do not."""
    if not _beyond(rows, ref, rtol):
        return []
    acts = _by_call(rows, ref, "act")
    return _starts({call: (e["in"], e["out"]) for call, e in acts.items()}, order, rtol)


def grad_origins(rows: list[dict[str, Any]], order: list[str], ref: str, rtol: float) -> list[dict[str, Any]]:
    """Modules where the gradient error against `ref` starts, in backward order: what the call's backward reads agrees
    (the gradient reaching its outputs; the forward inputs and outputs of the call and of the modules in it) while
    what it computes does not (the gradient it passes on to its inputs; the gradients of the parameters in it). An
    error that starts in forward reaches the forward values of the layers after it and the gradients of those
    before it (and a layer's own gradient, where the fault scales its output), so it is not named again here."""
    if not _beyond(rows, ref, rtol):
        return []
    acts, grads = _by_call(rows, ref, "act"), _by_call(rows, ref, "actgrad")
    forward, params = _worst_per_layer(rows, ref, "act/"), _worst_per_layer(rows, ref, "grad/")
    forward_inside, params_inside = _worst_inside(forward), _worst_inside(params)
    none = {"in": 0.0, "out": 0.0}
    errors = {}
    for call in order:
        layer, act, grad = call.split("#")[0], acts.get(call, none), grads.get(call, none)
        reads = max(grad["out"], act["in"], act["out"], forward_inside.get(layer, 0.0))
        errors[call] = (reads, max(grad["in"], params_inside.get(layer, 0.0), params.get(layer, 0.0)))
    return _starts(errors, order[::-1], rtol)


def _worst_per_layer(rows: list[dict[str, Any]], ref: str, prefix: str) -> dict[str, float]:
    worst: dict[str, float] = {}
    for row in rows:
        if row["tensor"].startswith(prefix) and row[f"vs_{ref}"] is not None:
            worst[row["layer"]] = max(worst.get(row["layer"], 0.0), row[f"vs_{ref}"])
    return worst


def _worst_inside(worst: dict[str, float]) -> dict[str, float]:
    """The worst of the modules nested in each module (_inside: its dotted descendants; every module is in the root),
    each module's error handed up to its ancestors once instead of every pair of modules compared."""
    inside: dict[str, float] = {}
    for name, error in worst.items():
        if name == ROOT:
            continue
        parts = name.split(".")
        for parent in (*(".".join(parts[:i]) for i in range(1, len(parts))), ROOT):
            inside[parent] = max(inside.get(parent, 0.0), error)
    return inside
