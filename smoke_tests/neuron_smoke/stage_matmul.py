"""Stage 3: device matmuls against a float64 CPU reference, for several shapes and dtypes."""

from __future__ import annotations

import torch

from neuron_smoke.context import Context, StageLog
from neuron_smoke.numerics import matmul_error

# (M, K, N): square, non-square with odd sizes (no tile-multiple luck), and one large.
SHAPES = ((128, 384, 96), (257, 511, 129), (1024, 1024, 1024))
DTYPES = (torch.float32, torch.bfloat16)


def make_inputs(m: int, k: int, n: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype)


def device_matmul(ctx: Context, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = a.to(ctx.device) @ b.to(ctx.device)
    ctx.backend.synchronize()
    return out.cpu()


def cases() -> list[tuple[str, tuple[int, int, int], torch.dtype, int]]:
    out = []
    for i, shape in enumerate(SHAPES):
        for j, dtype in enumerate(DTYPES):
            label = f"{str(dtype).removeprefix('torch.')} {shape[0]}x{shape[1]}x{shape[2]}"
            out.append((label, shape, dtype, 1000 + 10 * i + j))
    return out


def run_cases(ctx: Context) -> None:
    """The device part only; the fallback stage repeats it under op tracking."""
    for _, shape, dtype, seed in cases():
        device_matmul(ctx, *make_inputs(*shape, dtype, seed))


def run(ctx: Context, log: StageLog) -> None:
    results = {}
    worst = 0.0
    for label, shape, dtype, seed in cases():
        a, b = make_inputs(*shape, dtype, seed)
        result = device_matmul(ctx, a, b)
        err = matmul_error(result, a, b, ctx.options.matmul_tolerance_scale)
        results[label] = {
            "max_abs_err": err.max_abs,
            "max_rel_err": err.max_rel,
            "worst_error_to_bound": err.worst_ratio,
            "rtol": err.tol_rtol,
            "acc_coefficient": err.tol_acc,
            "ok": err.ok,
        }
        worst = max(worst, err.worst_ratio)
        if not err.ok:
            log.fail(
                f"{label}: max abs err {err.max_abs:.3g}, max rel err {err.max_rel:.3g}, "
                f"{err.worst_ratio:.3g}x the tolerance bound"
            )
    log.numbers["cases"] = results
    log.numbers["worst_error_to_bound"] = worst
    log.summary = f"{len(results)} cases, worst error {worst:.3g}x the bound"
