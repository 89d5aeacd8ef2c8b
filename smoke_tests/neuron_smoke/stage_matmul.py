"""Stage 3: device matmuls (`mm`, `addmm`, `linear`) against a float64 CPU reference, several shapes and dtypes.

float32 cases also tell which precision the device computed at: full float32, or float32 with inputs rounded to
bfloat16 (neuronx-cc documents `--auto-cast matmult --auto-cast-type bf16` as its default). The latter passes with a
note unless `--strict-fp32`; an error beyond both bounds is wrong, whatever the precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from neuron_smoke.context import Context, StageLog
from neuron_smoke.numerics import MatmulError, matmul_error

DTYPES = (torch.float32, torch.bfloat16)
AUTO_CAST_NOTE = (
    "float32 matmuls computed at bfloat16 input precision: neuronx-cc's documented default "
    "(--auto-cast matmult --auto-cast-type bf16); pass --strict-fp32 to require full float32"
)


@dataclass(frozen=True)
class Case:
    op: str  # mm (a @ b), addmm (bias + a @ b), linear (F.linear(a, b.T, bias): nn.Linear)
    shape: tuple[int, int, int]  # (M, K, N)
    dtype: torch.dtype
    seed: int

    @property
    def label(self) -> str:
        m, k, n = self.shape
        return f"{str(self.dtype).removeprefix('torch.')} {self.op} {m}x{k}x{n}"


# (op, M, K, N): square, odd sizes (no tile-multiple luck), one large, and K >= 4096 (long accumulations);
# addmm and linear with a bias, as every nn.Linear runs.
SHAPES = (
    ("mm", (128, 384, 96)),
    ("mm", (257, 511, 129)),
    ("mm", (1024, 1024, 1024)),
    ("mm", (256, 4096, 256)),
    ("addmm", (257, 511, 129)),
    ("linear", (128, 4096, 96)),
)


def cases() -> list[Case]:
    return [
        Case(op, shape, dtype, 1000 + 10 * i + j)
        for i, (op, shape) in enumerate(SHAPES)
        for j, dtype in enumerate(DTYPES)
    ]


def make_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    m, k, n = case.shape
    gen = torch.Generator().manual_seed(case.seed)
    a = torch.randn(m, k, generator=gen).to(case.dtype)
    b = torch.randn(k, n, generator=gen).to(case.dtype)
    bias = torch.randn(n, generator=gen).to(case.dtype) if case.op != "mm" else None
    return a, b, bias


def device_result(
    ctx: Context, case: Case, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    dev = ctx.device
    if case.op == "mm":
        out = a.to(dev) @ b.to(dev)
    elif case.op == "addmm":
        assert bias is not None
        out = torch.addmm(bias.to(dev), a.to(dev), b.to(dev))
    else:
        out = torch.nn.functional.linear(a.to(dev), b.t().contiguous().to(dev), None if bias is None else bias.to(dev))
    ctx.backend.synchronize()
    return out.cpu()


def run_cases(ctx: Context) -> None:
    """The device part only; the fallback stage repeats it under op tracking."""
    for case in cases():
        device_result(ctx, case, *make_inputs(case))


def precision_of(err: MatmulError) -> str:
    """float32, bfloat16 (inputs rounded, float32 accumulation) or wrong, from the error's magnitude."""
    if err.ok:
        return "float32"
    if err.worst_ratio_bf16_inputs is not None and err.worst_ratio_bf16_inputs <= 1.0:
        return "bfloat16"
    return "wrong"


def run(ctx: Context, log: StageLog) -> None:
    results = {}
    worst = 0.0
    fp32_precisions: set[str] = set()
    for case in cases():
        a, b, bias = make_inputs(case)
        err = matmul_error(device_result(ctx, case, a, b, bias), a, b, ctx.options.matmul_tolerance_scale, bias)
        precision = precision_of(err) if case.dtype == torch.float32 else ("bfloat16" if err.ok else "wrong")
        if case.dtype == torch.float32:
            fp32_precisions.add(precision)
        ok = precision != "wrong" and (
            case.dtype != torch.float32 or precision == "float32" or not ctx.options.strict_fp32
        )
        results[case.label] = {
            "max_abs_err": err.max_abs,
            "max_rel_err": err.max_rel,
            "worst_error_to_bound": err.worst_ratio,
            "worst_error_to_bf16_input_bound": err.worst_ratio_bf16_inputs,
            "computed_at": precision,
            "rtol": err.tol_rtol,
            "acc_coefficient": err.tol_acc,
            "ok": ok,
        }
        worst = max(worst, err.worst_ratio)
        if not ok:
            log.fail(_failure(case, err, precision))
    fp32_at = "bfloat16" if "bfloat16" in fp32_precisions else "float32"
    ctx.shared["fp32_matmul_precision"] = torch.bfloat16 if fp32_at == "bfloat16" else torch.float32
    log.numbers["cases"] = results
    log.numbers["worst_error_to_bound"] = worst
    log.numbers["float32_matmuls_computed_at"] = fp32_at
    if fp32_at == "bfloat16" and not ctx.options.strict_fp32:
        log.note(AUTO_CAST_NOTE)
    log.summary = f"{len(results)} cases, worst error {worst:.3g}x the float32/bfloat16 bound; float32 at {fp32_at}"


def _failure(case: Case, err: MatmulError, precision: str) -> str:
    numbers = (
        f"max abs err {err.max_abs:.3g}, max rel err {err.max_rel:.3g}, {err.worst_ratio:.3g}x the tolerance bound"
    )
    if precision == "bfloat16":
        return f"{case.label}: computed at bfloat16 input precision, not float32 (--strict-fp32): {numbers}"
    extra = ""
    if err.worst_ratio_bf16_inputs is not None:
        extra = f" ({err.worst_ratio_bf16_inputs:.3g}x even the bfloat16-input bound)"
    return f"{case.label}: {numbers}{extra}"
