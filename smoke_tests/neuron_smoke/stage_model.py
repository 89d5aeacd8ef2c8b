"""Stage 4: forward, loss, backward and one optimizer step on the device against the same on the CPU, eagerly at the
model's dtype, under bfloat16 autocast (the default model, as AWS documents mixed precision), and compiled.

Both sides run with dropout disabled and the same seed, so a healthy model compares like with like. The reference is
the CPU run of the model as given (float32 for the default model; a bfloat16 model against bfloat16 on the CPU, whose
own error to exact arithmetic is as large as the device's); each run's bound follows from the precision the device
computes at (numerics.model_rtol).
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from neuron_smoke.context import Context, StageLog
from neuron_smoke.models import ModelSpec
from neuron_smoke.numerics import model_rtol, nonfinite, normwise_error

LR = 0.1
SEED = 0
CATEGORIES = ("output", "loss", "grads", "weights")


@dataclass
class CompiledStep:
    """Stage 4's compiled model, kept for the compile stage, which times it instead of compiling another graph."""

    compiled: Any
    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    backend: str
    first_call_s: float  # forward, loss and backward: Dynamo and AOT Autograd trace and compile both graphs here


@dataclass(frozen=True)
class Mode:
    name: str
    autocast: torch.dtype | None = None
    compile_backend: str | None = None


def disable_dropout(model: nn.Module) -> int:
    """Dropout off in every module (nn.Dropout*, and attention modules' float `dropout` such as MultiheadAttention's),
    the model otherwise left in training mode. Returns how many modules had dropout."""
    count = 0
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            count += module.p > 0
            module.p = 0.0
        elif isinstance(getattr(module, "dropout", None), float):
            count += getattr(module, "dropout") > 0  # noqa: B009  (a float attribute, not a submodule)
            setattr(module, "dropout", 0.0)  # noqa: B010
    return count


def reduction_size(model: nn.Module) -> int:
    """The longest reduction a forward and backward step runs: the widest Linear/Embedding/conv input, at least 64."""
    sizes = [64]
    for m in model.modules():
        if isinstance(m, nn.Linear):
            sizes += [m.in_features, m.out_features]
        elif isinstance(m, nn.Embedding):
            sizes.append(m.embedding_dim)
        elif isinstance(m, nn.modules.conv._ConvNd):
            sizes.append(m.weight[0].numel())
    return max(sizes)


def model_dtype(model: nn.Module) -> torch.dtype:
    dtypes = [p.dtype for p in model.parameters() if p.is_floating_point()]
    return min(dtypes, key=lambda d: torch.finfo(d).bits) if dtypes else torch.float32


def sgd_step(model: nn.Module) -> None:
    """One step of plain SGD on the device, in place: p <- p - LR * p.grad (the first step of torch.optim.SGD, with or
    without momentum, is this update). Written out rather than through torch.optim, whose constructor imports
    torch._dynamo (about 3 CPU seconds) for the eager runs, and whose step adds nothing a device could get wrong
    beyond this one op per parameter. A skipped or wrong step shows in the updated weights the stage compares."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-LR)


def train_step(spec: ModelSpec, device: str, ctx: Context | None = None, mode: Mode = Mode("eager")) -> dict[str, Any]:
    """One SGD step; everything it returns is on the CPU. SGD keeps the update linear in the gradient, unlike Adam,
    whose first step amplifies rounding differences in near-zero gradients into full-size updates."""
    model = copy.deepcopy(spec.model).to(device)
    disable_dropout(model)
    args, kwargs = spec.inputs_on(device)
    fn = torch.compile(model, backend=mode.compile_backend, dynamic=False) if mode.compile_backend else model
    device_type = torch.device(device).type
    autocast = torch.autocast(device_type, dtype=mode.autocast) if mode.autocast else contextlib.nullcontext()
    torch.manual_seed(SEED)
    start = time.perf_counter()
    with autocast:
        output = fn(*args, **kwargs)
        loss = spec.loss_fn(output)
    torch.autograd.backward(loss)
    if ctx is not None and mode.compile_backend and "compiled_step" not in ctx.shared:
        ctx.backend.synchronize()
        first_s = time.perf_counter() - start
        ctx.shared["compiled_step"] = CompiledStep(fn, model, args, kwargs, mode.compile_backend, first_s)
    grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None}
    sgd_step(model)
    if ctx is not None:
        ctx.backend.synchronize()
    return {
        "output": pytree.tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, output),
        "loss": loss.detach().cpu(),
        "grads": grads,
        "weights": {n: p.detach().cpu().clone() for n, p in model.named_parameters()},
    }


def flatten(run: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Every tensor of a run, named category.key (output.0, loss, grads.head.weight, ...)."""
    paths, _ = pytree.tree_flatten_with_path(run["output"])
    out = {f"output{pytree.keystr(p)}" if p else "output": t for p, t in paths if isinstance(t, torch.Tensor)}
    out["loss"] = run["loss"]
    for category in ("grads", "weights"):
        out.update({f"{category}.{name}": t for name, t in run[category].items()})
    return out


def _leaves(tree: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def compare(device_run: dict[str, Any], cpu_run: dict[str, Any], rtol: float) -> dict[str, Any]:
    """Per tensor: normwise error (or NaN/Inf); every tensor out of bound, worst first; what one side lacks."""
    got, want = flatten(device_run), flatten(cpu_run)
    errors: dict[str, float] = {}
    bad: dict[str, str] = {}
    for name in sorted(set(got) & set(want)):
        errors[name] = normwise_error(got[name], want[name])
        kind = nonfinite(got[name], want[name])
        if kind or errors[name] > rtol:
            bad[name] = kind or f"{errors[name]:.3g}"
    worst_first = sorted(bad, key=lambda n: errors[n], reverse=True)
    return {
        "rtol": rtol,
        "compared": len(errors),
        "max_normwise_err": max(errors.values(), default=0.0),
        "worst_tensor": max(errors, key=lambda n: errors[n], default=None),
        "out_of_bound": [f"{n} {bad[n]}" for n in worst_first],
        "missing": sorted(set(got) ^ set(want)),
        "ok": not bad and set(got) == set(want),
    }


def modes(ctx: Context, spec: ModelSpec) -> list[Mode]:
    native = str(model_dtype(spec.model)).removeprefix("torch.")
    return [
        Mode(native),
        *(Mode(f"{str(d).removeprefix('torch.')} autocast", autocast=d) for d in spec.autocast),
        Mode(f"{native} compiled ({ctx.compile_backend()})", compile_backend=ctx.compile_backend()),
    ]


def bound_for(ctx: Context, spec: ModelSpec, mode: Mode) -> tuple[float, torch.dtype]:
    """The rtol of a run and the dtype it follows from: autocast's, the model's, or (float32 models) the precision
    the matmul stage found the device computing float32 matmuls at (unless --strict-fp32)."""
    dtype = mode.autocast or model_dtype(spec.model)
    if dtype == torch.float32 and not ctx.options.strict_fp32:
        dtype = ctx.shared.get("fp32_matmul_precision", torch.float32)
    if ctx.options.model_rtol is not None:
        return ctx.options.model_rtol, dtype
    native = mode.autocast is None and dtype in (torch.bfloat16, torch.float16) and dtype == model_dtype(spec.model)
    return model_rtol(dtype, reduction_size(spec.model), native=native), dtype


def run(ctx: Context, log: StageLog) -> None:
    spec: ModelSpec = ctx.shared["model_spec"]
    reference = train_step(spec, "cpu")
    dropouts = disable_dropout(copy.deepcopy(spec.model))
    log.note(f"both sides: dropout disabled ({dropouts} module(s) had dropout), torch.manual_seed({SEED}), SGD lr {LR}")
    log.numbers = {"model": spec.name, "reduction_size": reduction_size(spec.model), "runs": {}}
    summaries = []
    for mode in modes(ctx, spec):
        rtol, dtype = bound_for(ctx, spec, mode)
        ctx.shared.setdefault("model_rtol", rtol)  # the native run's: the compile stage's bound vs eager
        device_run = train_step(spec, ctx.device, ctx, mode)
        report = compare(device_run, reference, rtol)
        report["bound_dtype"] = str(dtype).removeprefix("torch.")
        report["loss_device"] = float(device_run["loss"])
        log.numbers["runs"][mode.name] = report
        if report["missing"]:
            log.fail(f"{mode.name}: present on only one side: {', '.join(report['missing'])}")
        if report["out_of_bound"]:
            listed = ", ".join(report["out_of_bound"])
            log.fail(
                f"{mode.name}: {len(report['out_of_bound'])} tensor(s) differ from the CPU reference beyond "
                f"rtol {rtol:.3g} ({report['bound_dtype']}), worst first: {listed}"
            )
        summaries.append(f"{mode.name} {report['max_normwise_err']:.2g}/{rtol:.2g}")
    log.numbers["loss_cpu"] = float(reference["loss"])
    log.summary = f"{spec.name}: loss {float(reference['loss']):.5g}; worst error/rtol: {'; '.join(summaries)}"
