"""stage_matmul.py: the case list (every shape in every dtype, distinct seeds), seeded inputs, the three ops on the
CPU against their definitions, and the stage's verdicts on small cases: the CPU passes, a wrong result fails naming
the case, float32 computed at bfloat16 input precision passes with a note unless --strict-fp32."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from neuron_smoke import stage_matmul
from neuron_smoke.backends import CPU
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.stage_matmul import AUTO_CAST_NOTE, DTYPES, SHAPES, Case

SMALL = [Case(op, (33, 70, 17), dtype, 5 + i) for i, op in enumerate(("mm", "addmm", "linear")) for dtype in DTYPES]


def _ctx(**options: Any) -> Context:
    return Context(options=Options(device="cpu", **options), backend=CPU)


def test_cases_cover_every_shape_in_every_dtype_with_distinct_seeds() -> None:
    cases = stage_matmul.cases()
    assert {(c.op, c.shape, c.dtype) for c in cases} == {(op, shape, d) for op, shape in SHAPES for d in DTYPES}
    assert len({c.seed for c in cases}) == len(cases) == len(SHAPES) * len(DTYPES)
    assert len({c.label for c in cases}) == len(set(SHAPES)) * len(DTYPES)
    assert Case("addmm", (2, 3, 4), torch.bfloat16, 0).label == "bfloat16 addmm 2x3x4"


def test_inputs_are_seeded_and_only_mm_has_no_bias() -> None:
    case = Case("addmm", (5, 7, 3), torch.bfloat16, 9)
    a, b, bias = stage_matmul.make_inputs(case)
    again = stage_matmul.make_inputs(case)
    assert (a.shape, b.shape, a.dtype) == ((5, 7), (7, 3), torch.bfloat16)
    assert bias is not None and bias.shape == (3,) and again[2] is not None
    assert torch.equal(a, again[0]) and torch.equal(b, again[1]) and torch.equal(bias, again[2])
    assert stage_matmul.make_inputs(Case("mm", (5, 7, 3), torch.float32, 9))[2] is None
    assert stage_matmul.make_inputs(Case("linear", (5, 7, 3), torch.float32, 9))[2] is not None  # as nn.Linear runs


@pytest.mark.parametrize("op", ["mm", "addmm", "linear"])
def test_each_op_computes_bias_plus_a_times_b(op: str) -> None:
    case = Case(op, (6, 5, 4), torch.float32, 3)
    a, b, bias = stage_matmul.make_inputs(case)
    expected = a @ b + (0 if bias is None else bias)
    assert torch.allclose(stage_matmul.device_result(_ctx(), case, a, b, bias), expected, atol=1e-5)


def test_the_cpu_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stage_matmul, "cases", lambda: SMALL)
    ctx = _ctx()
    log = StageLog()
    stage_matmul.run(ctx, log)
    assert log.failures == [] and log.notes == []
    assert list(log.numbers["cases"]) == [c.label for c in SMALL]
    assert all(r["ok"] for r in log.numbers["cases"].values()) and log.numbers["worst_error_to_bound"] <= 1
    assert log.numbers["float32_matmuls_computed_at"] == "float32"
    assert ctx.shared["fp32_matmul_precision"] == torch.float32
    assert log.summary.startswith(f"{len(SMALL)} cases")


def _device(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    real = stage_matmul.device_result

    def changed(ctx: Context, case: Case, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return change(case, a, b, bias, real(ctx, case, a, b, bias))

    monkeypatch.setattr(stage_matmul, "cases", lambda: SMALL)
    monkeypatch.setattr(stage_matmul, "device_result", changed)


def test_a_wrong_result_fails_naming_the_case(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = SMALL[3]  # bfloat16 addmm
    _device(monkeypatch, lambda case, a, b, bias, out: out * 1.1 if case == wrong else out)
    log = StageLog()
    stage_matmul.run(_ctx(), log)
    assert len(log.failures) == 1 and log.failures[0].startswith(f"{wrong.label}: max abs err")
    assert log.numbers["cases"][wrong.label]["computed_at"] == "wrong"
    assert not log.numbers["cases"][wrong.label]["ok"]


def _at_bf16_inputs(case: Case, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> Any:
    if case.dtype != torch.float32:
        return out
    product = a.bfloat16().float() @ b.bfloat16().float()  # neuronx-cc's auto-cast: inputs rounded to bfloat16
    return product if bias is None else product + bias


def test_float32_at_bfloat16_input_precision_passes_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    _device(monkeypatch, _at_bf16_inputs)
    ctx = _ctx()
    log = StageLog()
    stage_matmul.run(ctx, log)
    assert log.failures == [] and log.notes == [AUTO_CAST_NOTE]
    assert log.numbers["float32_matmuls_computed_at"] == "bfloat16"
    assert ctx.shared["fp32_matmul_precision"] == torch.bfloat16  # the model stage's bound follows it


def test_strict_fp32_fails_each_float32_case_at_bfloat16_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    _device(monkeypatch, _at_bf16_inputs)
    log = StageLog()
    stage_matmul.run(_ctx(strict_fp32=True), log)
    fp32 = [c.label for c in SMALL if c.dtype == torch.float32]
    assert [f.split(":")[0] for f in log.failures] == fp32
    assert all("bfloat16 input precision" in f and "--strict-fp32" in f for f in log.failures)
    assert log.notes == []


def test_repeat_difference_is_none_only_for_the_same_bits() -> None:
    t = torch.randn(4, 3)
    assert stage_matmul.repeat_difference(t, t.clone()) is None
    assert stage_matmul.repeat_difference(t.bfloat16(), t.bfloat16()) is None
    off = t.clone()
    off[1, 2] += 1e-3 * float(t.abs().max())
    assert stage_matmul.repeat_difference(t, off) == pytest.approx(1e-3, rel=1e-3)
    nan = t.clone()
    nan[0, 0] = float("nan")
    assert stage_matmul.repeat_difference(nan, nan.clone()) is None  # the same bits, NaN included
    assert stage_matmul.repeat_difference(t, nan) == float("inf")


def test_a_float32_matmul_that_leans_one_way_fails_and_keeps_the_model_at_float32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def lean(case: Case, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> Any:
        at_bf16 = _at_bf16_inputs(case, a, b, bias, out)  # auto-cast, and 0.5 % too large: within its bound
        return at_bf16 * 1.005 if case.dtype == torch.float32 else out

    _device(monkeypatch, lean)
    # The stage's two smallest shapes: SMALL's 561 elements average too few errors to tell 0.5 % from scatter.
    real = [Case(op, shape, dtype, 1) for op, shape in SHAPES[:2] for dtype in DTYPES]
    monkeypatch.setattr(stage_matmul, "cases", lambda: real)
    ctx, log = _ctx(), StageLog()
    stage_matmul.run(ctx, log)
    fp32 = [c.label for c in real if c.dtype == torch.float32]
    assert [label for label, r in log.numbers["cases"].items() if not r["ok"]] == fp32
    assert all("systematically +0.5" in f and "leans one way" in f for f in log.failures) and len(log.failures) == len(
        fp32
    )
    assert ctx.shared["fp32_matmul_precision"] == torch.float32 and log.notes == []


def test_results_that_differ_run_to_run_fail_as_not_repeatable(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Case] = []

    def noisy(case: Case, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> Any:
        calls.append(case)  # every second call of a case 1e-3 off
        return out if calls.count(case) % 2 else (out.float() * (1 + 1e-3 * torch.randn(out.shape))).to(out.dtype)

    _device(monkeypatch, noisy)
    ctx, log = _ctx(), StageLog()
    stage_matmul.run(ctx, log)
    assert len(log.failures) == len(SMALL) and all("not repeatable" in f for f in log.failures)
    assert all(r["repeat_difference"] > 0 and not r["ok"] for r in log.numbers["cases"].values())
