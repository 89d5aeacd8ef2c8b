"""Stage 4: forward, loss, backward and one optimizer step on the device against the same on the CPU, eagerly at the
model's dtype, under bfloat16 autocast (the default model, as AWS documents mixed precision), and compiled.

Both sides run with dropout disabled and the same seed, so a healthy model compares like with like. The reference is
the CPU run of the model as given (float32 for the default model; a bfloat16 model against bfloat16 on the CPU, whose
own error to exact arithmetic is as large as the device's); each run's bound follows from the precision the device
computes at and the longest reduction (numerics.model_rtol), for a bfloat16 model as for the default model under
autocast, except on a tensor whose CPU bfloat16 run is itself further from the float64 run (an ill-conditioned
gradient): C_COND times that distance. Beside the bound, a bias test: each tensor of at least MIN_BIAS_ELEMENTS
against the float64 CPU run of the same model, which may lean one way only as far as rounding at the precision
computed allows (numerics.model_bias_allowed).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from neuron_smoke.context import Context, StageLog
from neuron_smoke.modelcopy import deep_copy
from neuron_smoke.models import ModelSpec
from neuron_smoke.numerics import (
    C_COND,
    MIN_BIAS_ELEMENTS,
    bias_fit,
    model_bias_allowed,
    model_rtol,
    nonfinite,
    normwise_error,
)

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
    model = deep_copy(spec.model).to(device)
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


def compare(
    device_run: dict[str, Any], cpu_run: dict[str, Any], rtol: float, rtols: dict[str, float] | None = None
) -> dict[str, Any]:
    """Per tensor: normwise error (or NaN/Inf) against `rtol`, or the tensor's own bound in `rtols`; every tensor
    out of bound, worst first; what one side lacks."""
    got, want = flatten(device_run), flatten(cpu_run)
    errors: dict[str, float] = {}
    bad: dict[str, str] = {}
    for name in sorted(set(got) & set(want)):
        errors[name] = normwise_error(got[name], want[name])
        kind = nonfinite(got[name], want[name])
        if kind or errors[name] > (rtols or {}).get(name, rtol):
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


def bound_for(ctx: Context, spec: ModelSpec, mode: Mode, conditioned: bool = False) -> tuple[float, torch.dtype]:
    """The rtol of a run and the dtype it follows from: autocast's, the model's, or (float32 models) the precision
    the matmul stage found the device computing float32 matmuls at (unless --strict-fp32). A bfloat16/float16 model
    gets the default model's bound when its tensors' conditioning is `conditioned` (measured: tensor_bounds), and
    the bound of accumulating at its own precision when not."""
    dtype = mode.autocast or model_dtype(spec.model)
    if dtype == torch.float32 and not ctx.options.strict_fp32:
        dtype = ctx.shared.get("fp32_matmul_precision", torch.float32)
    if ctx.options.model_rtol is not None:
        return ctx.options.model_rtol, dtype
    native = mode.autocast is None and dtype in (torch.bfloat16, torch.float16) and dtype == model_dtype(spec.model)
    return model_rtol(dtype, reduction_size(spec.model), native=native and not conditioned), dtype


def exact_run(spec: ModelSpec) -> dict[str, Any] | None:
    """The same step on the CPU in float64 (parameters, buffers and floating inputs): the bias test's reference, and
    the measure of a low-precision model's conditioning. None where the model does not run in float64."""

    def up(t: Any) -> Any:
        return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    model = deep_copy(spec.model).double()
    args, kwargs = pytree.tree_map(up, spec.args), pytree.tree_map(up, spec.kwargs)
    try:
        return train_step(ModelSpec(model, args, kwargs, spec.loss_fn, spec.name), "cpu")
    except Exception:
        return None


def tensor_bounds(rtol: float, reference: dict[str, Any], exact: dict[str, Any]) -> dict[str, float]:
    """Per tensor: rtol, or C_COND times the CPU reference's own distance from the float64 run where larger."""
    want, best = flatten(reference), flatten(exact)
    return {n: max(rtol, C_COND * normwise_error(want[n], best[n])) for n in want if n in best}


def bias_failures(device_run: dict[str, Any], exact: dict[str, Any], dtype: torch.dtype) -> list[str]:
    """Each tensor of at least MIN_BIAS_ELEMENTS that leans one way further than rounding at `dtype` allows."""
    got, best = flatten(device_run), flatten(exact)
    found = []
    for name in sorted(set(got) & set(best)):
        if got[name].numel() < MIN_BIAS_ELEMENTS or not got[name].is_floating_point():
            continue
        beta, se = bias_fit(got[name], best[name])
        allowed = model_bias_allowed(dtype, se)
        if not abs(beta) <= allowed:
            found.append(f"{name} {100 * beta:+.3g} % (allowed {100 * allowed:.2g} %)")
    return found


def run(ctx: Context, log: StageLog) -> None:
    spec: ModelSpec = ctx.shared["model_spec"]
    reference = train_step(spec, "cpu")
    exact = exact_run(spec)
    dropouts = disable_dropout(deep_copy(spec.model))
    log.note(f"both sides: dropout disabled ({dropouts} module(s) had dropout), torch.manual_seed({SEED}), SGD lr {LR}")
    if exact is None:
        log.note("the model does not run in float64 on the CPU: no bias test, and a bfloat16 model's bound is that of "
                 "accumulating at bfloat16")  # fmt: skip
    log.numbers = {"model": spec.name, "reduction_size": reduction_size(spec.model), "runs": {}}
    summaries = []
    for mode in modes(ctx, spec):
        report = run_mode(ctx, spec, mode, reference, exact)
        log.numbers["runs"][mode.name] = report
        for failure in mode_failures(mode, report):
            log.fail(failure)
        summaries.append(f"{mode.name} {report['max_normwise_err']:.2g}/{report['rtol']:.2g}")
    log.numbers["loss_cpu"] = float(reference["loss"])
    log.summary = f"{spec.name}: loss {float(reference['loss']):.5g}; worst error/rtol: {'; '.join(summaries)}"


def run_mode(
    ctx: Context, spec: ModelSpec, mode: Mode, reference: dict[str, Any], exact: dict[str, Any] | None
) -> dict[str, Any]:
    """One run on the device against the references: the comparison's report, with the bias test's findings."""
    low = mode.autocast is None and model_dtype(spec.model) in (torch.bfloat16, torch.float16)
    conditioned = low and exact is not None and ctx.options.model_rtol is None
    rtol, dtype = bound_for(ctx, spec, mode, conditioned)
    rtols = tensor_bounds(rtol, reference, exact) if conditioned and exact is not None else None
    # The native run's (the largest of its tensors' bounds): the compile stage's bound vs eager.
    ctx.shared.setdefault("model_rtol", max((rtols or {}).values(), default=rtol))
    device_run = train_step(spec, ctx.device, ctx, mode)
    report = compare(device_run, reference, rtol, rtols)
    report["bound_dtype"] = str(dtype).removeprefix("torch.")
    report["loss_device"] = float(device_run["loss"])
    report["biased"] = bias_failures(device_run, exact, dtype) if exact is not None else []
    report["ok"] = report["ok"] and not report["biased"]
    if rtols:
        report["conditioned_bounds"] = {n: b for n, b in rtols.items() if b > rtol}
    return report


def mode_failures(mode: Mode, report: dict[str, Any]) -> list[str]:
    failures = []
    if report["missing"]:
        failures.append(f"{mode.name}: present on only one side: {', '.join(report['missing'])}")
    if report["out_of_bound"]:
        listed = ", ".join(report["out_of_bound"])
        failures.append(
            f"{mode.name}: {len(report['out_of_bound'])} tensor(s) differ from the CPU reference beyond "
            f"rtol {report['rtol']:.3g} ({report['bound_dtype']}), worst first: {listed}"
        )
    if report["biased"]:
        failures.append(
            f"{mode.name}: {len(report['biased'])} tensor(s) lean one way against the float64 CPU run (the mean "
            f"signed relative error; rounding at {report['bound_dtype']} scatters): {', '.join(report['biased'])}"
        )
    return failures
