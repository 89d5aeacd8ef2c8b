"""Stage 4: forward, loss, backward and one optimizer step on the device against the same on the CPU."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils import _pytree as pytree

from neuron_smoke.context import Context, StageLog
from neuron_smoke.models import ModelSpec
from neuron_smoke.numerics import normwise_error

LR = 0.1


def train_step(spec: ModelSpec, device: str, ctx: Context | None = None) -> dict[str, Any]:
    """One SGD step; everything it returns is on the CPU. SGD keeps the update linear in the gradient, unlike Adam,
    whose first step amplifies rounding differences in near-zero gradients into full-size updates."""
    model = copy.deepcopy(spec.model).to(device)
    inputs = tuple(x.to(device) for x in spec.inputs)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    optimizer.zero_grad()
    output = model(*inputs)
    loss = spec.loss_fn(output)
    torch.autograd.backward(loss)
    grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None}
    optimizer.step()
    if ctx is not None:
        ctx.backend.synchronize()
    return {
        "output": pytree.tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, output),
        "loss": loss.detach().cpu(),
        "grads": grads,
        "weights": {n: p.detach().cpu().clone() for n, p in model.named_parameters()},
    }


def compare(device_run: dict[str, Any], cpu_run: dict[str, Any], rtol: float) -> dict[str, Any]:
    """Worst normwise error per category, the tensor it came from, and what is missing on one side."""
    report: dict[str, Any] = {}
    pairs = {
        "output": dict(enumerate(_leaves(device_run["output"]))),
        "loss": {"loss": device_run["loss"]},
        "grads": device_run["grads"],
        "weights": device_run["weights"],
    }
    refs = {
        "output": dict(enumerate(_leaves(cpu_run["output"]))),
        "loss": {"loss": cpu_run["loss"]},
        "grads": cpu_run["grads"],
        "weights": cpu_run["weights"],
    }
    for category, values in pairs.items():
        ref = refs[category]
        missing = sorted(str(k) for k in set(ref) ^ set(values))
        errors = {str(k): normwise_error(values[k], ref[k]) for k in values if k in ref}
        worst = max(errors, key=lambda k: errors[k], default=None)
        report[category] = {
            "max_normwise_err": errors[worst] if worst is not None else 0.0,
            "worst_tensor": worst,
            "compared": len(errors),
            "missing": missing,
            "ok": not missing and all(e <= rtol for e in errors.values()),
        }
    return report


def _leaves(tree: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def run(ctx: Context, log: StageLog) -> None:
    spec: ModelSpec = ctx.shared["model_spec"]
    rtol = ctx.options.model_rtol
    device_run = train_step(spec, ctx.device, ctx)
    cpu_run = train_step(spec, "cpu")
    report = compare(device_run, cpu_run, rtol)
    log.numbers = {
        "model": spec.name,
        "rtol": rtol,
        "loss_device": float(device_run["loss"]),
        "loss_cpu": float(cpu_run["loss"]),
        **report,
    }
    for category, r in report.items():
        if r["missing"]:
            log.fail(f"{category}: present on only one side: {', '.join(r['missing'])}")
        elif not r["ok"]:
            log.fail(f"{category}: {r['worst_tensor']} differs from CPU by {r['max_normwise_err']:.3g} (rtol {rtol:g})")
    worst = max(r["max_normwise_err"] for r in report.values())
    losses = f"loss {float(device_run['loss']):.5g} vs CPU {float(cpu_run['loss']):.5g}"
    log.summary = f"{spec.name}: {losses}, worst normwise error {worst:.3g}"
