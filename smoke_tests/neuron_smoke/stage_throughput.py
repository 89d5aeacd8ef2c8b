"""Stage 9: steady-state matmul TFLOP/s, and the percentage of the device's peak where the peak is known."""

from __future__ import annotations

import statistics

import torch

from neuron_smoke.context import Context, StageLog
from neuron_smoke.stage_compile import steady_state


def device_name(ctx: Context) -> str:
    if ctx.backend.device_type == "cuda":
        return torch.cuda.get_device_name()
    return ctx.backend.name


def run(ctx: Context, log: StageLog) -> None:
    n = ctx.options.throughput_size or ctx.backend.throughput_size
    dtype = ctx.backend.throughput_dtype
    gen = torch.Generator().manual_seed(7)
    a = torch.randn(n, n, generator=gen).to(dtype).to(ctx.device)
    b = torch.randn(n, n, generator=gen).to(dtype).to(ctx.device)
    times = steady_state(ctx, lambda: a @ b)
    median = statistics.median(times)
    tflops = 2 * n**3 / median / 1e12
    name = device_name(ctx)
    peak = ctx.options.peak_tflops or ctx.backend.peak_for(name, dtype)
    log.numbers = {
        "size": n,
        "dtype": str(dtype).removeprefix("torch."),
        "median_s": median,
        "tflops": tflops,
        "device_name": name,
        "peak_tflops": peak,
        "percent_of_peak": 100 * tflops / peak if peak else None,
    }
    pct = f", {100 * tflops / peak:.1f}% of {peak:g} peak" if peak else ", peak unknown (--peak-tflops)"
    log.summary = f"{n}x{n}x{n} {log.numbers['dtype']}: {tflops:.3g} TFLOP/s{pct}"
