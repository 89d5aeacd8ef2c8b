"""The bounds of numerics.py on known errors: what passes, what is bfloat16 precision, what leans one way (the bias
test), what is wrong."""

from __future__ import annotations

import math

import torch

from neuron_smoke import stage_model
from neuron_smoke.numerics import bias_fit, magnitude, matmul_error, model_bias_allowed, model_rtol, nonfinite
from neuron_smoke.stage_matmul import Case, make_inputs, precision_of


def _inputs(k: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return make_inputs(Case("addmm", (128, k, 96), dtype, 7))


def test_float32_matmul_precision_is_read_from_the_error() -> None:
    for k in (384, 4096):
        a, b, bias = _inputs(k)
        assert precision_of(matmul_error(torch.addmm(bias, a, b), a, b, bias=bias)) == "float32"
        cast = torch.addmm(bias, a.bfloat16().float(), b.bfloat16().float())  # neuronx-cc's auto-cast default
        assert precision_of(matmul_error(cast, a, b, bias=bias)) == "bfloat16"
        wrong = torch.addmm(bias, a, b) * 1.1
        err = matmul_error(wrong, a, b, bias=bias)
        assert precision_of(err) == "wrong"
        assert err.worst_ratio_bf16_inputs is not None and err.worst_ratio_bf16_inputs > 5


def test_bf16_matmul_10_percent_wrong_fails_at_large_k() -> None:
    a, b, bias = _inputs(4096, torch.bfloat16)
    good = torch.addmm(bias, a, b)
    assert matmul_error(good, a, b, bias=bias).ok
    assert matmul_error((good.float() * 1.1).bfloat16(), a, b, bias=bias).worst_ratio > 5


def test_float32_magnitude_is_never_below_the_float64_one() -> None:
    for k in (384, 4096):
        a, b, _ = _inputs(k)
        exact = a.double().abs() @ b.double().abs()
        mag = magnitude(a, b)
        assert mag.dtype == torch.float64 and bool((mag >= exact).all())
        assert float(((mag - exact) / exact).max()) <= 3 * k * 2.0**-24  # the factor 1 + 2Ku and the sum's own error
    huge = torch.full((2, 3), 3e38)  # float32 overflows: the float64 product, not an infinite (all-passing) bound
    assert bool(torch.isfinite(magnitude(huge, huge.t().contiguous())).all())


def test_model_bound_follows_the_dtype() -> None:
    assert model_rtol(torch.float32, 512) == 2.0**-13
    assert math.isclose(model_rtol(torch.bfloat16, 512), 8 * (2.0**-8 + math.sqrt(512) * 2.0**-24))
    assert model_rtol(torch.bfloat16, 64, native=True) > 8 * 2.0**-8 * 8


def test_nonfinite_is_named() -> None:
    ref = torch.ones(3)
    assert nonfinite(torch.tensor([1.0, math.nan, 1.0]), ref) == "NaN"
    assert nonfinite(torch.tensor([1.0, math.inf, 1.0]), ref) == "Inf"
    assert nonfinite(torch.ones(3), ref) is None


def test_a_failed_comparison_lists_every_tensor_out_of_bound_worst_first() -> None:
    ref = {"output": torch.ones(4), "loss": torch.tensor(1.0), "grads": {"a": torch.ones(2), "b": torch.ones(2)},
           "weights": {"a": torch.ones(2), "b": torch.ones(2)}}  # fmt: skip
    got = {"output": torch.full((4,), 1.5), "loss": torch.tensor(math.nan),
           "grads": {"a": torch.full((2,), 1.1), "b": torch.ones(2)},
           "weights": {"a": torch.ones(2), "b": torch.full((2,), 1.01)}}  # fmt: skip
    report = stage_model.compare(got, ref, 1e-3)
    assert report["out_of_bound"] == ["loss NaN", "output 0.5", "grads.a 0.1", "weights.b 0.01"]
    assert not report["ok"]


def test_a_systematic_float32_error_within_the_bf16_input_bound_is_biased_not_auto_cast() -> None:
    for k in (384, 4096):
        a, b, bias = _inputs(k)
        exact = torch.addmm(bias, a, b)
        cast = torch.addmm(bias, a.bfloat16().float(), b.bfloat16().float())  # rounds to nearest: scatters only
        assert not matmul_error(exact, a, b, bias=bias).biased
        assert not matmul_error(cast, a, b, bias=bias).biased
        for leaning in (exact * 1.005, cast * 1.005, cast * 0.995):
            err = matmul_error(leaning, a, b, bias=bias)
            assert err.worst_ratio_bf16_inputs is not None and err.worst_ratio_bf16_inputs <= 1.0  # the bound passes
            assert err.biased and precision_of(err) == "biased"
            assert err.bias_allowed is not None and abs(err.bias) > 2 * err.bias_allowed


def test_a_bfloat16_matmul_may_lean_by_its_output_rounding_only() -> None:
    a, b, bias = _inputs(384, torch.bfloat16)
    err = matmul_error(torch.addmm(bias, a, b), a, b, bias=bias)
    assert not err.biased and err.bias_allowed is not None
    assert 2 * 2.0**-8 < err.bias_allowed < 0.01  # rounding the output toward zero, and the scatter


def test_the_bias_fit_and_what_a_model_tensor_may_lean() -> None:
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(4096, generator=gen)
    beta, se = bias_fit(ref * 1.01, ref)
    assert math.isclose(beta, 0.01, rel_tol=1e-5) and se < 1e-9
    noisy = ref + 0.01 * torch.randn(4096, generator=gen) * ref.abs()  # scatters: beta within its standard errors
    beta, se = bias_fit(noisy, ref)
    assert abs(beta) < 4 * se and se > 0
    assert bias_fit(ref, torch.zeros(4096)) == (0.0, 0.0)
    assert bias_fit(torch.full((3,), math.nan), torch.ones(3))[0] == math.inf
    assert model_bias_allowed(torch.bfloat16, 0.0) == 2 * 2.0**-8
    assert model_bias_allowed(torch.float32, 0.001) == 2.0**-13 + 6 * 0.001  # float32 by the function floor
