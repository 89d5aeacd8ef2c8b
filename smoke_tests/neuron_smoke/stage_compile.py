"""Stage 6: torch.compile(model, backend=..., dynamic=False): first call, steady state, compiled vs eager."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from neuron_smoke.context import Context, StageLog
from neuron_smoke.models import ModelSpec
from neuron_smoke.numerics import normwise_error
from neuron_smoke.stage_model import _leaves


def timed(ctx: Context, fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    ctx.backend.synchronize()
    return out, time.perf_counter() - start


def steady_state(ctx: Context, fn: Callable[[], Any]) -> list[float]:
    for _ in range(ctx.options.warmup):
        fn()
    ctx.backend.synchronize()
    return [timed(ctx, fn)[1] for _ in range(ctx.options.iterations)]


def run(ctx: Context, log: StageLog) -> None:
    spec: ModelSpec = ctx.shared["model_spec"]
    backend = ctx.compile_backend()
    model = copy.deepcopy(spec.model).to(ctx.device).eval()
    inputs = tuple(x.to(ctx.device) for x in spec.inputs)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    with torch.no_grad():
        first, first_s = timed(ctx, lambda: compiled(*inputs))
        eager = model(*inputs)
        compiled_times = steady_state(ctx, lambda: compiled(*inputs))
        eager_times = steady_state(ctx, lambda: model(*inputs))
    got, want = _leaves(first), _leaves(eager)
    errors = [normwise_error(g, w) for g, w in zip(got, want, strict=False)]
    worst = max(errors, default=0.0)
    log.numbers = {
        "backend": backend,
        "first_call_s": first_s,
        "steady_median_ms": statistics.median(compiled_times) * 1e3,
        "eager_median_ms": statistics.median(eager_times) * 1e3,
        "iterations": ctx.options.iterations,
        "max_normwise_err_vs_eager": worst,
    }
    if len(got) != len(want):
        log.fail(f"compiled model returned {len(got)} tensors, eager {len(want)}")
    if worst > ctx.options.model_rtol:
        log.fail(f"compiled output differs from eager by {worst:.3g} (rtol {ctx.options.model_rtol:g})")
    log.summary = (
        f"backend {backend}: first call {first_s:.2f}s, steady {log.numbers['steady_median_ms']:.3g} ms "
        f"(eager {log.numbers['eager_median_ms']:.3g} ms)"
    )
