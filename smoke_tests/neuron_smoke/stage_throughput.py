"""Stage 9: steady-state matmul TFLOP/s and the percentage of the device's peak where the peak is known.

On neuron the peak is the release's for the instance type (release_facts.device_peak: constraints/matrix.toml, rendered
into neuron_instances.json) unless --peak-tflops gives another, and throughput under --throughput-floor percent of it
fails: that is a device computing at host speed (ops silently running on the CPU), whatever the op tracking says."""

from __future__ import annotations

import statistics

import torch

from neuron_smoke import cores, release_facts
from neuron_smoke.context import Context, StageLog
from neuron_smoke.stage_compile import steady_state


def device_name(ctx: Context) -> str:
    if ctx.backend.device_type == "cuda":
        return torch.cuda.get_device_name()
    return ctx.backend.name


def peak_tflops(ctx: Context, name: str, dtype: torch.dtype) -> tuple[float | None, str]:
    if ctx.options.peak_tflops:
        return ctx.options.peak_tflops, "--peak-tflops"
    if ctx.backend.name == "neuron":
        return release_facts.device_peak(ctx.instance_type(), str(dtype).removeprefix("torch."), cores.lnc())
    return ctx.backend.peak_for(name, dtype), f"{name} datasheet"


def run(ctx: Context, log: StageLog) -> None:
    n = ctx.options.throughput_size or ctx.backend.throughput_size
    dtype: torch.dtype = getattr(torch, ctx.backend.throughput_dtype)
    gen = torch.Generator().manual_seed(7)
    try:
        a = torch.randn(n, n, generator=gen).to(dtype).to(ctx.device)
        b = torch.randn(n, n, generator=gen).to(dtype).to(ctx.device)
        times = steady_state(ctx, lambda: a @ b)
    except RuntimeError as exc:  # torch.OutOfMemoryError too
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "memory" not in message.lower() and "alloc" not in message.lower():
            raise
        log.fail(f"the {n}x{n}x{n} matmul does not fit in memory ({message}); give a smaller --throughput-size")
        return
    median = statistics.median(times)
    tflops = 2 * n**3 / median / 1e12
    name = device_name(ctx)
    peak, source = peak_tflops(ctx, name, dtype)
    percent = 100 * tflops / peak if peak else None
    floor = ctx.options.throughput_floor if ctx.backend.name == "neuron" else 0.0
    log.numbers = {
        "size": n,
        "dtype": str(dtype).removeprefix("torch."),
        "median_s": median,
        "tflops": tflops,
        "device_name": name,
        "peak_tflops": peak,
        "peak_source": source if peak else None,
        "percent_of_peak": percent,
        "floor_percent": floor or None,
    }
    pct = f", {percent:.2g}% of {peak:g} peak ({source})" if percent is not None else ", peak unknown (--peak-tflops)"
    log.summary = f"{n}x{n}x{n} {log.numbers['dtype']}: {tflops:.3g} TFLOP/s{pct}"
    if floor and percent is not None and percent < floor:
        log.fail(
            f"throughput {tflops:.3g} TFLOP/s is {percent:.2g}% of the {peak:g} TFLOP/s peak ({source}), under the "
            f"{floor:g}% floor: the device computes far below its documented speed (at host speed? is the work running "
            "on the CPU?); "
            "--throughput-floor sets the floor, --peak-tflops the peak"
        )
