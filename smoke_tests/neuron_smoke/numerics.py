"""Error bounds for comparing device results with references (the rules are documented in the README).

A matmul element c_ij = sum_k a_ik b_kj computed with K-term accumulation in precision u_acc and rounded to the
output dtype (unit roundoff u_out) is accepted when

    |c_ij - ref_ij| <= 2 * u_out * |ref_ij| + scale * C * sqrt(K) * u_acc * (|A| @ |B|)_ij

where ref is the float64 product of the same (already rounded) inputs. sqrt(K) is the probabilistic error growth
of a K-term sum (Higham & Mary, SIAM J. Sci. Comput. 2019) rather than the worst case K; accumulation is assumed to be
float32 for every dtype, as on Trainium's and CPUs'/GPUs' matmul units. C = 4 leaves room for blocked summation.
The factor 2 on u_out admits rounding toward zero or stochastic rounding of the output (round-to-nearest needs 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

C_ACC = 4.0
# Rounding both float32 inputs to bfloat16 (unit roundoff u) perturbs each product a_ik b_kj by at most 2u, with
# random sign, so the sum is off by about u * sqrt(sum_k (a_ik b_kj)^2) (the probabilistic bound again, as the
# matmul bound's sqrt(K)); C_CAST = 8 covers the largest of a million such errors (about 5 standard deviations).
C_CAST = 8.0
C_MODEL = 8.0
FUNC_FLOOR = 2.0**-13
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float64: 2.0**-53}
U_ACC = 2.0**-24


@dataclass(frozen=True)
class MatmulError:
    max_abs: float
    max_rel: float  # max_abs / max |ref|: relative to the result's scale, so near-zero entries do not dominate
    worst_ratio: float  # max over elements of error / bound; <= 1 passes
    tol_rtol: float
    tol_acc: float
    # float32 inputs only: error / (bound + the error of rounding both inputs to bfloat16); <= 1 means the device
    # computed at bfloat16 input precision (neuronx-cc's auto-cast default), not wrongly.
    worst_ratio_bf16_inputs: float | None = None

    @property
    def ok(self) -> bool:
        return self.worst_ratio <= 1.0


def matmul_tolerance(dtype: torch.dtype, k: int, scale: float = 1.0) -> tuple[float, float]:
    """(relative coefficient 2 * u_out, accumulation coefficient) for the bound above."""
    return 2 * UNIT_ROUNDOFF[dtype], scale * C_ACC * math.sqrt(k) * U_ACC


def _worst_ratio(err: torch.Tensor, bound: torch.Tensor) -> float:
    """max over elements of err / bound; NaN counts as inf. Consumes `bound` (divided in place)."""
    # A zero bound (all-zero rows) must still allow exact zeros and reject anything else.
    zero = bound == 0
    ratio = err.div(bound.masked_fill_(zero, 1.0))
    ratio.masked_fill_(zero & (err > 0), math.inf)
    return float(torch.nan_to_num_(ratio, nan=math.inf).max())


def magnitude(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|A| @ |B| in float64, never below the exact value, computed in float32 at half the cost of a float64 matmul.
    A sum of K non-negative terms has a relative error of at most g = x / (1 - x), x = K * u32, in any order of
    summation (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., §3.1); (1 + 2x)(1 - g) >= 1 holds
    for x <= 1/4, so multiplying by 1 + 2x covers it. Beyond that, or if float32 overflowed, the float64 product."""
    x = a.shape[-1] * U_ACC
    if x <= 0.25:
        mag = (a.float().abs() @ b.float().abs()).double()
        if bool(torch.isfinite(mag).all()):
            return mag.mul_(1 + 2 * x)
    return a.double().abs() @ b.double().abs()


def matmul_error(
    result: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float = 1.0, bias: torch.Tensor | None = None
) -> MatmulError:
    """Error of `result` = a @ b (+ bias) against the float64 product of the same inputs, as ratios to the bound."""
    # Tensors move to the CPU first: .double() on the device would ask it for float64 (which Neuron runs as float32).
    a, b = a.cpu(), b.cpu()
    a64, b64 = a.double(), b.double()
    ref = a64 @ b64
    mag = magnitude(a, b)
    if bias is not None:
        bias64 = bias.cpu().double()
        ref += bias64
        mag += bias64.abs()
    err = result.cpu().double().sub_(ref).abs_()
    u_out, acc = matmul_tolerance(a.dtype, a.shape[-1], scale)
    bound = ref.abs().mul_(u_out).add_(mag, alpha=acc)
    bf16_bound = None
    if a.dtype == torch.float32:  # kept for the precision question, asked only when the float32 bound is exceeded
        bf16_bound = bound.clone()
    worst = _worst_ratio(err, bound)
    bf16_inputs = None
    if bf16_bound is not None and worst > 1.0:
        spread = ((a64 * a64) @ (b64 * b64)).sqrt_()
        bf16_inputs = _worst_ratio(err, bf16_bound.add_(spread, alpha=scale * C_CAST * UNIT_ROUNDOFF[torch.bfloat16]))
    max_abs = float(torch.nan_to_num(err, nan=math.inf).max())
    scale_ref = float(ref.abs().max())
    return MatmulError(
        max_abs=max_abs,
        max_rel=max_abs / scale_ref if scale_ref > 0 else max_abs,
        worst_ratio=worst,
        tol_rtol=u_out,
        tol_acc=acc,
        worst_ratio_bf16_inputs=bf16_inputs,
    )


def normwise_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    """max |value - reference| / max |reference| (absolute when the reference is all zeros); NaN counts as inf."""
    ref64 = reference.detach().cpu().double()
    diff = (value.detach().cpu().double() - ref64).abs()
    if diff.numel() == 0:
        return 0.0
    worst = float(torch.nan_to_num(diff, nan=math.inf).max())
    scale = float(ref64.abs().max())
    return worst / scale if scale > 0 else worst


def nonfinite(value: torch.Tensor, reference: torch.Tensor) -> str | None:
    """'NaN' or 'Inf' when the value holds one where the reference is finite, else None."""
    v, r = value.detach().cpu(), reference.detach().cpu()
    if not v.is_floating_point():
        return None
    finite_ref = torch.isfinite(r) if r.is_floating_point() else torch.ones_like(r, dtype=torch.bool)
    if bool((torch.isnan(v) & finite_ref).any()):
        return "NaN"
    if bool((torch.isinf(v) & finite_ref).any()):
        return "Inf"
    return None


def model_rtol(dtype: torch.dtype, reduction: int, scale: float = 1.0, native: bool = False) -> float:
    """Normwise bound for a model's outputs, loss, gradients and updated weights computed in `dtype` (the precision
    the device really computes at) against a float32 CPU reference:

        C_MODEL * (u_dtype + sqrt(K) * u_acc),  at least FUNC_FLOOR

    Rounding operands to `dtype` costs u_dtype per layer; float32 accumulation of the longest reduction K costs
    sqrt(K) * u_acc (the probabilistic bound of the matmul stage). C_MODEL covers the chain of layers forward and
    backward: the default model under bfloat16 autocast stays at 1.7 u on the CPU (0.21 of the bound).
    FUNC_FLOOR (2^-13) leaves float32 room for a device's approximations of exp, tanh and erf, whose accuracy on
    Trainium is not documented in the sources we could read. A `native` low-precision model (parameters in
    bfloat16/float16, not autocast) rounds every op's result, the reductions of its backward included, to `dtype`:
    its accumulation term uses u_dtype instead of u_acc (two healthy implementations of a bfloat16 encoder differ by
    0.18 in a gradient; the bound at K = 64 is 0.28)."""
    u = UNIT_ROUNDOFF.get(dtype, U_ACC)
    u_acc = u if native else U_ACC
    return scale * max(C_MODEL * (u + math.sqrt(max(reduction, 1)) * u_acc), FUNC_FLOOR)
