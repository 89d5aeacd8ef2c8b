"""Error bounds for comparing device results with references (the rules are documented in the README).

A matmul element c_ij = sum_k a_ik b_kj computed with K-term accumulation in precision u_acc and rounded to the
output dtype (unit roundoff u_out) is accepted when

    |c_ij - ref_ij| <= 2 * u_out * |ref_ij| + scale * C * sqrt(K) * u_acc * (|A| @ |B|)_ij

where ref is the float64 product of the same (already rounded) inputs. sqrt(K) is the probabilistic error growth
of a K-term sum (Higham & Mary, SIAM J. Sci. Comput. 2019) rather than the worst case K; accumulation is assumed to be
float32 for every dtype, as on Trainium's and CPUs'/GPUs' matmul units. C = 4 leaves room for blocked summation.
The factor 2 on u_out admits rounding toward zero or stochastic rounding of the output (round-to-nearest needs 1).

Beside the bound, a bias test (`bias_bound`): rounding errors scatter around zero, a device's systematic error leans
one way. The least-squares relative error beta = sum((c - ref) * ref) / sum(ref^2) (bias_fit; c = (1 + beta) ref
fits best) may lean by what rounding in one direction allows (the bound's output-rounding and accumulation terms,
averaged as beta averages them) plus the scatter of the rest: independent zero-mean errors |e_ij| <= bound_ij
average to within Z_BIAS * sqrt(sum (bound_ij ref_ij)^2) / sum(ref^2) but with probability 2 exp(-Z_BIAS^2 / 2) =
3e-8 (Hoeffding).
Rounding float32 inputs to bfloat16 to nearest (neuronx-cc's auto-cast) only scatters, so it passes; a float32 matmul
0.5 % too large is 0.005 beyond every case's bias bound (at most 0.0018).
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
Z_BIAS = 6.0


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
    bias: float = 0.0  # the least-squares relative error beta (module docstring)
    # The bias the precision the error fits allows (float32's when within its bound, else bfloat16 inputs'); None
    # when neither bound holds (the result is wrong anyway) or the reference is all zeros.
    bias_allowed: float | None = None

    @property
    def ok(self) -> bool:
        return self.worst_ratio <= 1.0

    @property
    def biased(self) -> bool:
        return self.bias_allowed is not None and not abs(self.bias) <= self.bias_allowed


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


def bias_bound(ref: torch.Tensor, directional: torch.Tensor, bound: torch.Tensor) -> float | None:
    """The bias allowed (module docstring): `directional`'s average (the error that may lean one way) plus Z_BIAS
    times the scatter of errors within `bound`; None for an all-zero reference."""
    r = ref.flatten()
    norm = float(r.dot(r))
    if norm == 0:
        return None
    lean = float(directional.flatten().dot(r.abs())) / norm
    scatter = float(bound.flatten().mul(r).norm()) / norm
    return lean + Z_BIAS * scatter


def matmul_error(
    result: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float = 1.0, bias: torch.Tensor | None = None
) -> MatmulError:
    """Error of `result` = a @ b (+ bias) against the float64 product of the same inputs, as ratios to the bound,
    and its bias against what the precision it fits allows."""
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
    bound = ref.abs().mul_(u_out).add_(mag, alpha=acc)  # every term may lean one way (rounding toward zero)
    worst = _worst_ratio(err, bound.clone())
    bf16_inputs = None
    allowed = bias_bound(ref, bound, bound) if worst <= 1.0 else None
    if a.dtype == torch.float32 and worst > 1.0:  # the precision question, asked only beyond the float32 bound
        spread = ((a64 * a64) @ (b64 * b64)).sqrt_()
        bf16_bound = spread.mul_(scale * C_CAST * UNIT_ROUNDOFF[torch.bfloat16]).add_(bound)
        bf16_inputs = _worst_ratio(err, bf16_bound.clone())
        allowed = bias_bound(ref, bound, bf16_bound) if bf16_inputs <= 1.0 else None  # the cast only scatters
    max_abs = float(torch.nan_to_num(err, nan=math.inf).max())
    scale_ref = float(ref.abs().max())
    return MatmulError(
        max_abs=max_abs,
        max_rel=max_abs / scale_ref if scale_ref > 0 else max_abs,
        worst_ratio=worst,
        tol_rtol=u_out,
        tol_acc=acc,
        worst_ratio_bf16_inputs=bf16_inputs,
        bias=bias_fit(result, ref)[0],
        bias_allowed=allowed,
    )


_AS_IS = (torch.float32, torch.float64)  # dtypes normwise_error subtracts without widening


def _wide(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy (or the tensor itself) at float64, complex128 for complex tensors."""
    t = t.detach().cpu()
    return t.to(torch.complex128 if t.is_complex() else torch.float64)


def finite_absmax(t: torch.Tensor) -> float:
    """The largest |element| among the finite ones (0 for none)."""
    top = float(t.abs().max()) if t.numel() else 0.0
    if math.isfinite(top):  # the common case in one pass; NaN or inf fall back to the filtered one
        return top
    return float(torch.nan_to_num(t.abs(), nan=0.0, posinf=0.0).max())


def normwise_error(value: torch.Tensor, reference: torch.Tensor, floor: float = 0.0) -> float:
    """max |value - reference| / max(max |reference|, floor), the reference's finite elements setting the scale
    (absolute when it is 0); NaN or inf in the difference, or another shape, count as inf.

    Two float32 (or float64) tensors are subtracted as they are: the difference is then within that dtype's rounding
    (6e-8 relative for float32) of the exact one, and exact where the two are within 2x of each other (Sterbenz), so
    no tolerance can tell; only a difference that overflows is taken again at float64. Other dtypes (bfloat16, whose
    own rounding is 4e-3) are widened first, as is a pair of different dtypes."""
    v, r = value.detach().cpu(), reference.detach().cpu()
    if v.shape != r.shape:
        return math.inf
    if v.numel() == 0:
        return 0.0
    if v.dtype not in _AS_IS or r.dtype != v.dtype:
        v, r = _wide(v), _wide(r)
    # abs().max(), not vector_norm(ord=inf): the same value (NaN propagates: counted as inf below), some 9x faster on
    # the CPU (16384 elements: 5 against 45 us), and a comparison takes it for every tensor of a step.
    worst = float((v - r).abs().max())
    if math.isinf(worst) and v.dtype == torch.float32 and bool(v.isfinite().all() and r.isfinite().all()):
        worst = float((_wide(v) - _wide(r)).abs().max())
    worst = math.inf if math.isnan(worst) else worst
    scale = max(finite_absmax(r), floor)
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


# A model tensor's bias (its least-squares relative error against the float64 run of the same model) may lean by two
# roundings of a shared factor at the precision computed (2u; float32 by FUNC_FLOOR, the room left for a device's
# exp, tanh and erf), plus Z_BIAS standard errors of the fit: healthy bfloat16 runs of the test encoder and the default
# model lean at most 0.0084 (2u is 0.0078; that tensor's standard error 0.0072), a 2 % layer-norm error 0.039 (its
# standard error 0.001). Tensors under MIN_BIAS_ELEMENTS are left to the bound: their standard error is no estimate.
MIN_BIAS_ELEMENTS = 1024
C_COND = 3.0


def bias_fit(value: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(beta, its standard error) in float64: beta = sum((value - ref) * ref) / sum(ref^2), the relative error that
    leans with the reference's sign (value = (1 + beta) ref fits best), its error from the residuals
    (heteroskedasticity-robust); (0, 0) for an all-zero reference, (inf, 0) where NaN or Inf got in."""
    v, r = value.detach().cpu().double().flatten(), ref.detach().cpu().double().flatten()
    norm = float(r.dot(r))
    if norm == 0:
        return 0.0, 0.0
    beta = float((v - r).dot(r)) / norm
    residual = (v - r).sub_(r, alpha=beta).mul_(r)
    se = float(residual.norm()) / norm
    return (beta, se) if math.isfinite(beta) and math.isfinite(se) else (math.inf, 0.0)


def model_bias_allowed(dtype: torch.dtype, se: float, scale: float = 1.0) -> float:
    u = UNIT_ROUNDOFF.get(dtype, U_ACC)
    return scale * max(2 * u, FUNC_FLOOR) + Z_BIAS * se
