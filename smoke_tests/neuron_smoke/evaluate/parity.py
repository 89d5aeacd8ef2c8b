"""--steps N: the loss over N training steps with the model's own optimizer, on the device against the baseline's.

Each step is forward and loss (under torch.autocast(bfloat16) with --precision bf16-autocast), backward and the
optimizer's step, on one copy of the model, so the loss of step k is that of the weights after k - 1 updates: step 1
is the single step the rest of the evaluation compares, and a wrong update shows from the step after it. The optimizer
is the factory's (rebuilt over the copy: its class, hyperparameters and parameter groups, with a fresh state), else
the captured step's: SGD with lr 0.1 (capture.LR) and momentum 0.9, so step 1 updates the weights as it does. Random
ops draw as in the captured step (randomness.py), so dropout masks match on every side.

Per step the relative error of the device's loss against the baseline's (and, off the CPU, against this machine's CPU
run of the same steps, which tells the device from the environment the baseline came from) is held to the bound of
the precision (precision.bound, or --model-rtol); the first step beyond it is where the curves diverge.

Why that bound at every step, not one that widens with k: every side trains at the same precision (the CPU runs round
their matmul inputs as the device does, precision.rounding), so healthy curves part only by the order kernels accumulate
in, compounded over the steps. Measured on the CPU over 10 steps of the examples (lr 0.1, momentum 0.9), a float32
rounding of every initial weight moves the loss by at most 1.1e-7 (MLP, GPT-2), 2.0e-6 (Llama) and 5.4e-3 (ResNet-18,
whose loss falls from 3 to 1e-4 by step 3: within the bfloat16 bound, 3.1e-2, beyond the float32 one, 1e-3). A
training that amplifies rounding further within N steps is not a parity check of N steps: take fewer steps or
--model-rtol. A baseline of another precision gets the wider bound, and its curve is another training: bfloat16
against float32 matmuls parts the MLP's by 1.1e-4, GPT-2's by 3.1e-4, Llama's by 4.0e-2 (step 9). As for the single
step, a change of the loss under the bound (3 % at bfloat16) shows only at --precision fp32. Losses are measured
against at least NEGLIGIBLE of the reference curve's largest |loss|, as gradients are.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from neuron_smoke.evaluate import failure, precision, randomness
from neuron_smoke.evaluate.capture import LR, move
from neuron_smoke.evaluate.stepmode import StepMode
from neuron_smoke.models import ModelSpec

MOMENTUM = 0.9  # the captured step's (capture.train_step)
# A loss is measured against at least this fraction of the largest |loss| of the reference curve: a loss trained
# close to zero is rounding noise there, not a value whose relative error means anything.
NEGLIGIBLE = 1e-3


def optimizer_for(spec: ModelSpec, model: nn.Module) -> tuple[torch.optim.Optimizer, str]:
    """The optimizer that trains `model` (spec.model's copy) and its description for the report.

    The factory's optimizer is copied with every attribute of its own (a subclass keeps its own), its parameter
    groups pointed at the copy's parameters (matched by name: a move to the device may make new Parameter objects)
    and its state empty, so no constructor is called again."""
    given = spec.optimizer
    if given is None:
        default = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        return default, f"SGD(lr={LR:g}, momentum={MOMENTUM:g}; the default)"
    names = {id(p): n for n, p in spec.model.named_parameters(remove_duplicate=False)}
    rebuilt = object.__new__(type(given))
    rebuilt.__dict__.update(given.__dict__)
    rebuilt.param_groups = [
        {**group, "params": [model.get_parameter(names[id(p)]) for p in group["params"]]}
        for group in given.param_groups
    ]
    rebuilt.state = defaultdict(dict)
    return rebuilt, f"{type(given).__name__}(lr={given.param_groups[0].get('lr')}; the factory's)"


def curve(
    spec: ModelSpec, device: str, steps: int, at: str, synchronize: Callable[[], None] = lambda: None
) -> tuple[list[float], str]:
    """The loss of each of `steps` training steps on `device` at precision `at`, and the optimizer's description. A
    step that raises raises failure.StepFailed naming the step."""
    model = move(spec.model, device)[0]
    args, kwargs = spec.inputs_on(device)
    optimizer, described = optimizer_for(spec, model)
    kind = torch.device(device).type
    losses: list[float] = []
    with StepMode(drawer=randomness.SameRandom(), rounding=precision.rounding(at, kind)):
        for step in range(1, steps + 1):
            try:
                optimizer.zero_grad(set_to_none=True)
                with precision.forward(at, kind):
                    loss = spec.loss_fn(model(*args, **kwargs))
                torch.autograd.backward(loss)
                optimizer.step()
                synchronize()
            except failure.USER_ERRORS as exc:
                found = failure.finding(exc, f"loss parity, step {step} of {steps}", None, None)
                raise failure.StepFailed(found) from exc
            losses.append(float(loss.detach().float().cpu()))
    return losses, described


def relative(value: float, reference: float, floor: float) -> float:
    """|value - reference| / max(|reference|, floor); where either is not finite, 0 when both are alike (NaN on both
    sides: the training diverged everywhere, not on the device) and inf otherwise."""
    if not (math.isfinite(value) and math.isfinite(reference)):
        alike = value == reference or (math.isnan(value) and math.isnan(reference))
        return 0.0 if alike else math.inf
    scale = max(abs(reference), floor)
    return abs(value - reference) / scale if scale > 0 else (0.0 if value == reference else math.inf)


def _errors(values: list[float], reference: list[float]) -> list[float]:
    top = max((abs(x) for x in reference if math.isfinite(x)), default=0.0)
    return [relative(v, r, NEGLIGIBLE * top) for v, r in zip(values, reference, strict=True)]


def judge(device: list[float], baseline: list[float] | None, cpu: list[float] | None, rtol: float) -> dict[str, Any]:
    """Per step: each loss and the device's relative errors against the baseline and this machine's CPU (either may
    be absent); the first step beyond rtol against either, and its source as compare.py names it: `device` where the
    device differs from its own CPU, `environment` where it agrees with it and not with the baseline."""
    refs = {"baseline": baseline, "cpu": cpu}
    errors = {ref: _errors(device, values) if values is not None else None for ref, values in refs.items()}
    rows = []
    for i, value in enumerate(device):
        row: dict[str, Any] = {"step": i + 1, "device": value}
        for ref, values in refs.items():
            row[ref] = values[i] if values is not None else None
            row[f"vs_{ref}"] = errors[ref][i] if errors[ref] is not None else None  # type: ignore[index]
        row["ok"] = all(row[k] is None or row[k] <= rtol for k in ("vs_baseline", "vs_cpu"))
        rows.append(row)
    result: dict[str, Any] = {"rows": rows, "diverged_at": None, "source": None, "finding": None}
    first = next((r for r in rows if not r["ok"]), None)
    if first is not None:
        ref = "cpu" if first["vs_cpu"] is not None and first["vs_cpu"] > rtol else "baseline"
        source = "device" if ref == "cpu" else "environment"
        result.update(diverged_at=first["step"], source=source)
        result["finding"] = (
            f"the loss leaves the {'CPU run' if ref == 'cpu' else 'baseline'}'s curve at step {first['step']} of "
            f"{len(rows)}: {first['device']:.6g} vs {first[ref]:.6g} (relative error {first[f'vs_{ref}']:.3g} > rtol "
            f"{rtol:g}; source {source})"
        )
    return result


def measure(
    spec: ModelSpec,
    device: str,
    steps: int,
    at: str,
    rtol: float,
    recorded: dict[str, Any] | None,
    synchronize: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """The report's `parity`: the device's curve, the baseline's (`recorded`, a baseline's `parity`) and, off the
    CPU, this machine's CPU curve, judged per step."""
    loss, described = curve(spec, device, steps, at, synchronize)
    cpu = curve(spec, "cpu", steps, at)[0] if torch.device(device).type != "cpu" else None
    baseline = [float(x) for x in recorded["loss"]] if recorded else None
    curves = {"device": loss, "baseline": baseline, "cpu": cpu}
    judged = judge(loss, baseline, cpu, rtol)
    return {"steps": steps, "optimizer": described, "precision": at, "rtol": rtol, "loss": curves} | judged


def summary(parity: dict[str, Any]) -> str:
    """One console line: the curve's verdict."""
    head = f"loss over {parity['steps']} steps ({parity['optimizer']})"
    if parity["finding"]:
        return f"{head}: {parity['finding']}"
    compared = [ref for ref in ("baseline", "cpu") if parity["loss"][ref] is not None]
    loss = parity["loss"]["device"]
    seen = f"{head}: {loss[0]:.6g} -> {loss[-1]:.6g}"
    if not compared:
        return f"{seen} (nothing to compare it with)"
    return f"{seen}, within rtol {parity['rtol']:g} of the {' and the '.join(compared)} at every step"


def for_baseline(parity: dict[str, Any] | None) -> dict[str, Any]:
    """What a baseline keeps of a recording's loss curve (nothing without --steps): the steps, how they trained and
    the loss per step, read back by options.baseline_steps and this module's comparison."""
    if not parity:
        return {}
    keep = ("steps", "optimizer", "precision")
    return {"parity": {k: parity[k] for k in keep} | {"loss": parity["loss"]["device"]}}
