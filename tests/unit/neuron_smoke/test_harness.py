"""Unit tests of the harness parts that need no device: tolerances, pins, the runner's skip and timeout rules."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from neuron_smoke import cells
from neuron_smoke.backends import BACKENDS, CUDA
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.errors import Skip
from neuron_smoke.numerics import matmul_error, matmul_tolerance, normwise_error
from neuron_smoke.runner import Stage, run_stage
from neuron_smoke.stage_fallback import normalize_op


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_correct_matmul_passes_and_one_percent_off_fails(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(200, 700, generator=gen).to(dtype), torch.randn(700, 90, generator=gen).to(dtype)
    assert matmul_error(a @ b, a, b).ok
    assert not matmul_error((a.double() @ b.double() * 1.02).to(dtype), a, b).ok


def test_tolerance_grows_with_sqrt_k() -> None:
    _, acc_small = matmul_tolerance(torch.float32, 100)
    _, acc_large = matmul_tolerance(torch.float32, 10000)
    assert acc_large == pytest.approx(acc_small * 10)
    assert matmul_tolerance(torch.bfloat16, 100)[0] == 2 * 2.0**-8


def test_zero_rows_allow_only_exact_zeros() -> None:
    a, b = torch.zeros(2, 3), torch.ones(3, 2)
    assert matmul_error(torch.zeros(2, 2), a, b).ok
    assert not matmul_error(torch.full((2, 2), 1e-30), a, b).ok


def test_normwise_error_treats_nan_as_failure() -> None:
    assert normwise_error(torch.tensor([float("nan")]), torch.tensor([1.0])) == float("inf")
    assert normwise_error(torch.tensor([1.0, float("inf")]), torch.tensor([1.0, 2.0])) == float("inf")


def test_normwise_is_relative_to_the_reference_and_absolute_against_zero() -> None:
    ref = torch.tensor([1.0, -2.0, 4.0])
    assert normwise_error(ref + torch.tensor([0.0, 0.5, 0.0]), ref) == 0.5 / 4.0
    assert normwise_error(torch.tensor([0.25, 0.0]), torch.zeros(2)) == 0.25
    assert normwise_error(ref, ref.clone()) == 0.0
    assert normwise_error(torch.zeros(0), torch.zeros(0)) == 0.0


def _normwise_at_float64(value: torch.Tensor, reference: torch.Tensor) -> float:
    worst = float((value.double() - reference.double()).abs().max())
    return worst / float(reference.double().abs().max())


def test_normwise_on_float32_as_is_agrees_with_float64_within_float32_rounding() -> None:
    """float32 pairs are subtracted without widening (the comparison's speed): the result is float64's to 2^-24."""
    torch.manual_seed(0)
    for scale in (1e-3, 1e-7, 1.0):  # near-equal (exact by Sterbenz) to far apart
        ref = torch.randn(4096)
        value = ref + scale * torch.randn(4096)
        assert normwise_error(value, ref) == pytest.approx(_normwise_at_float64(value, ref), rel=2.0**-23)
    big = torch.tensor([3e38, 1.0])  # float32's largest is 3.4e38: the difference overflows there, not at float64
    assert normwise_error(-big, big) == 2.0


def test_normwise_widens_bfloat16_and_mixed_pairs() -> None:
    ref = torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)
    value = torch.tensor([1.0, 2.0, 3.015625], dtype=torch.bfloat16)
    assert normwise_error(value, ref) == _normwise_at_float64(value, ref) == 0.015625 / 3.0
    assert normwise_error(value.float(), ref) == 0.015625 / 3.0 and normwise_error(ref.double(), ref) == 0.0


def test_normwise_counts_a_shape_change_and_non_finite_values_as_infinite() -> None:
    ref = torch.tensor([1.0, 2.0])
    assert normwise_error(torch.tensor([1.0, 2.0, 3.0]), ref) == float("inf")
    assert normwise_error(ref.reshape(2, 1), ref) == float("inf")
    assert normwise_error(torch.tensor([1.0, float("inf")]), ref) == float("inf")
    assert normwise_error(torch.tensor([float("nan"), 2.0]), ref) == float("inf")
    # an infinite reference element does not make the scale infinite (which would hide every error)
    assert normwise_error(torch.tensor([1.5, 5.0]), torch.tensor([1.0, float("inf")])) == float("inf")
    assert normwise_error(torch.tensor([1.5]), torch.tensor([1.0])) == 0.5


def test_normwise_error_of_complex_tensors_and_against_a_floor() -> None:
    assert normwise_error(torch.tensor([0.1]), torch.tensor([0.0]), floor=0.5) == pytest.approx(0.2)
    assert normwise_error(torch.tensor([1 + 1j]), torch.tensor([1 + 0j])) == pytest.approx(1.0)  # not the real part


def test_expected_pins_include_named_and_locked_entries() -> None:
    cell = {"id": "x", "torch": "2.14.0+cpu", "torch_neuronx": "2.14.3.0.*", "locked": {"Torch_Neuronx": "2.14.3.0.9"}}
    assert cells.expected_pins(cell) == [  # the record's pins in neuron_cell.cellrecord.PINNED's order, then locked
        ("torch-neuronx", "2.14.3.0.*"),
        ("torch", "2.14.0+cpu"),
        ("torch-neuronx", "2.14.3.0.9"),
    ]


def test_fallback_op_names_normalize() -> None:
    assert {normalize_op(n) for n in ("aten::addmm.default", "addmm", "aten::addmm")} == {"addmm"}


def test_cuda_table() -> None:
    assert (CUDA.compile_backend, CUDA.process_group, CUDA.tracks_fallback) == ("inductor", "nccl", False)
    assert CUDA.peak_for("NVIDIA H200", torch.bfloat16) == 989.0
    assert CUDA.peak_for("NVIDIA H100 PCIe", torch.float32) == 51.0
    assert BACKENDS["neuron"].peak_for("neuron", torch.bfloat16) is None


def _ctx(**options: object) -> Context:
    return Context(options=Options(device="cpu", **options), backend=BACKENDS["cpu"])  # type: ignore[arg-type]


def test_stage_times_out_and_later_stages_skip() -> None:
    release = threading.Event()

    def wait_for_the_device(ctx: Context, log: StageLog) -> None:
        release.wait(30)

    ctx = _ctx(timeout_s=0.5)
    start = time.monotonic()
    result = run_stage(Stage("matmul", "t", wait_for_the_device), ctx)
    release.set()
    assert time.monotonic() - start < 5
    assert result.status == "fail" and result.failures == [
        "matmul: timed out after 0.5s (a device call did not return)"
    ]
    assert result.error is not None and result.error.startswith("stage thread 'stage-matmul' still running, at:")
    where = result.error  # outermost call first: the runner's thread, the stage, the wait it is stuck in
    assert where.index(", in target") < where.index(", in wait_for_the_device") < where.index("release.wait(30)")
    ctx.results["matmul"] = result
    later = run_stage(Stage("throughput", "t", lambda c, log: None, ("matmul",)), ctx)
    assert later.status == "skip" and "timed out" in later.reason


def test_failed_prerequisite_skips_and_exceptions_fail() -> None:
    ctx = _ctx()

    def boom(ctx: Context, log: StageLog) -> None:
        raise RuntimeError("device error 42")

    first = run_stage(Stage("matmul", "t", boom), ctx)
    assert first.status == "fail" and first.failures == ["RuntimeError: device error 42"]
    ctx.results["matmul"] = first
    assert run_stage(Stage("throughput", "t", lambda c, log: None, ("matmul",)), ctx).reason == (
        "skipped: stage matmul failed"
    )


def test_skip_carries_its_reason() -> None:
    def skip(ctx: Context, log: StageLog) -> None:
        raise Skip("needs 2 devices")

    result = run_stage(Stage("collectives", "t", skip), _ctx())
    assert (result.status, result.reason) == ("skip", "needs 2 devices")


def test_a_failed_collective_names_the_rank_without_a_result_not_the_one_that_gave_up() -> None:
    from neuron_smoke.stage_collectives import _check

    log = StageLog()
    gave_up = {"rank": 0, "world_size": 3, "phase": "all_reduce", "error": "DistBackendError: timed out"}
    answered = {"rank": 2, "world_size": 3, "value": 6.0}
    _check(log, "traceback...", 1, 3, [gave_up, answered], "torchrun")
    assert len(log.failures) == 1
    assert "2/3 rank results" not in log.failures[0] and "1/3 rank results" in log.failures[0]
    assert "(rank 1 did not answer; rank 0 gave up waiting); DistBackendError: timed out" in log.failures[0]
