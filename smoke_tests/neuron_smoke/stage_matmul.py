"""Stage 3: device matmuls (`mm`, `addmm`, `linear`) against a float64 CPU reference, several shapes and dtypes.

float32 cases also tell which precision the device computed at: full float32, or float32 with inputs rounded to
bfloat16 (neuronx-cc documents `--auto-cast matmult --auto-cast-type bf16` as its default). The latter passes with a
note unless `--strict-fp32`; an error beyond both bounds is wrong, whatever the precision, and so is one within a
bound that leans one way (numerics.bias_bound): rounding scatters around zero.

Each case runs twice, and the two results must be bitwise equal: one op on the same inputs runs the same
instructions. The Neuron sources we could read document no run-to-run variation; the one nondeterminism they name,
Adaptive Eager fusion (which `torch.use_deterministic_algorithms()` turns off, NEURON-FACTS section 10), fuses
sequences of eager ops, and each case here is one op, synchronised and copied back before the next [inferred].
Turning it on costs about 5 s of imports (torch's decompositions) in a fresh process, so the stage does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    @property
    def label(self) -> str:
        m, k, n = self.shape
        return f"{self.dtype_name} {self.op} {m}x{k}x{n}"


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
    """float32, bfloat16 (inputs rounded, float32 accumulation), biased (within a bound but leaning one way) or
    wrong, from the error's magnitude and sign."""
    if err.biased:
        return "biased"
    if err.ok:
        return "float32"
    if err.worst_ratio_bf16_inputs is not None and err.worst_ratio_bf16_inputs <= 1.0:
        return "bfloat16"
    return "wrong"


def repeat_difference(first: torch.Tensor, second: torch.Tensor) -> float | None:
    """None when the two results are bitwise equal, else their largest difference relative to max |first| (inf
    where one holds a NaN the other has not)."""
    if first.shape == second.shape and torch.equal(first.view(_bits(first)), second.view(_bits(second))):
        return None
    diff = float(torch.nan_to_num((first.double() - second.double()).abs(), nan=math.inf).max())
    scale = float(first.double().abs().max())
    return diff / scale if scale > 0 else diff


def _bits(t: torch.Tensor) -> torch.dtype:
    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]


def check_case(ctx: Context, case: Case) -> tuple[dict[str, Any], list[str]]:
    """One case, run twice: its numbers and its failures."""
    a, b, bias = make_inputs(case)
    result = device_result(ctx, case, a, b, bias)
    again = device_result(ctx, case, a, b, bias)
    err = matmul_error(result, a, b, ctx.options.matmul_tolerance_scale, bias)
    precision = precision_of(err)
    if case.dtype != torch.float32 and precision in ("float32", "bfloat16"):
        precision = case.dtype_name
    ok = precision not in ("wrong", "biased") and (
        case.dtype != torch.float32 or precision == "float32" or not ctx.options.strict_fp32
    )
    failures = [] if ok else [_failure(case, err, precision)]
    repeat = repeat_difference(result, again)
    if repeat is not None:
        failures.append(
            f"{case.label}: not repeatable: the same inputs twice gave results {repeat:.3g} apart (relative to the "
            "largest |result|); one op on the same inputs must give the same bits"
        )
    numbers = {
        "max_abs_err": err.max_abs,
        "max_rel_err": err.max_rel,
        "worst_error_to_bound": err.worst_ratio,
        "worst_error_to_bf16_input_bound": err.worst_ratio_bf16_inputs,
        "bias": err.bias,
        "bias_allowed": err.bias_allowed,
        "repeat_difference": repeat or 0.0,
        "computed_at": precision,
        "rtol": err.tol_rtol,
        "acc_coefficient": err.tol_acc,
        "ok": not failures,
    }
    return numbers, failures


def run(ctx: Context, log: StageLog) -> None:
    results: dict[str, dict[str, Any]] = {}
    for case in cases():
        results[case.label], failures = check_case(ctx, case)
        for failure in failures:
            log.fail(failure)
    worst = max(r["worst_error_to_bound"] for r in results.values())
    fp32 = {r["computed_at"] if not r["repeat_difference"] else "unrepeatable" for label, r in results.items()
            if label.startswith("float32 ")}  # fmt: skip
    # Widened only when every float32 case fits a precision, repeatably: any other keeps the model stage at float32.
    fp32_at = "bfloat16" if "bfloat16" in fp32 and fp32 <= {"float32", "bfloat16"} else "float32"
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
    if precision == "biased":
        assert err.bias_allowed is not None
        return (
            f"{case.label}: systematically {100 * err.bias:+.3g} % off (the mean signed relative error; rounding at "
            f"the precision it fits allows {100 * err.bias_allowed:.2g} %): rounding scatters, this leans one way; "
            f"{numbers}"
        )
    if precision == "bfloat16" and case.dtype == torch.float32:
        return f"{case.label}: computed at bfloat16 input precision, not float32 (--strict-fp32): {numbers}"
    extra = ""
    if err.worst_ratio_bf16_inputs is not None:
        extra = f" ({err.worst_ratio_bf16_inputs:.3g}x even the bfloat16-input bound)"
    return f"{case.label}: {numbers}{extra}"
