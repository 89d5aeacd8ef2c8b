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
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float64: 2.0**-53}
U_ACC = 2.0**-24


@dataclass(frozen=True)
class MatmulError:
    max_abs: float
    max_rel: float  # max_abs / max |ref|: relative to the result's scale, so near-zero entries do not dominate
    worst_ratio: float  # max over elements of error / bound; <= 1 passes
    tol_rtol: float
    tol_acc: float

    @property
    def ok(self) -> bool:
        return self.worst_ratio <= 1.0


def matmul_tolerance(dtype: torch.dtype, k: int, scale: float = 1.0) -> tuple[float, float]:
    """(relative coefficient 2 * u_out, accumulation coefficient) for the bound above."""
    return 2 * UNIT_ROUNDOFF[dtype], scale * C_ACC * math.sqrt(k) * U_ACC


def matmul_error(result: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float = 1.0) -> MatmulError:
    a64, b64 = a.double(), b.double()
    ref = a64 @ b64
    magnitude = a64.abs() @ b64.abs()
    err = (result.double() - ref).abs()
    u_out, acc = matmul_tolerance(a.dtype, a.shape[-1], scale)
    bound = u_out * ref.abs() + acc * magnitude
    # A zero bound (all-zero rows) must still allow exact zeros and reject anything else.
    ratio = torch.where(bound > 0, err / bound.clamp_min(torch.finfo(torch.float64).tiny), err * math.inf)
    ratio = torch.nan_to_num(ratio, nan=math.inf)
    max_abs = float(err.max())
    scale_ref = float(ref.abs().max())
    return MatmulError(
        max_abs=max_abs,
        max_rel=max_abs / scale_ref if scale_ref > 0 else max_abs,
        worst_ratio=float(ratio.max()),
        tol_rtol=u_out,
        tol_acc=acc,
    )


def normwise_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    """max |value - reference| / max |reference| (absolute when the reference is all zeros); NaN counts as inf."""
    diff = (value.detach().double().cpu() - reference.detach().double().cpu()).abs()
    if diff.numel() == 0:
        return 0.0
    worst = float(torch.nan_to_num(diff, nan=math.inf).max())
    scale = float(reference.detach().double().abs().max())
    return worst / scale if scale > 0 else worst
