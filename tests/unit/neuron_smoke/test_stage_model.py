"""stage_model.py on the CPU with a tiny model: dropout off, the reduction size and dtype read from the model, the SGD
step, one training step's CPU results, the comparison's verdicts, the runs and their bounds, and the stage itself,
passing and failing. torch.compile is stood in by the identity (Dynamo's first use costs seconds; the real compiled
run is the CPU run of tests/integration)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from neuron_smoke import stage_model
from neuron_smoke.backends import CPU
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.models import ModelSpec, default_factory, mean_square_loss
from neuron_smoke.numerics import model_rtol
from neuron_smoke.stage_model import LR, Mode


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 12), nn.Dropout(0.5), nn.GELU(), nn.Linear(12, 3))


def _spec(autocast: tuple[torch.dtype, ...] = ()) -> ModelSpec:
    gen = torch.Generator().manual_seed(1)
    return ModelSpec(_model(), (torch.randn(5, 6, generator=gen),), {}, mean_square_loss, "tiny", autocast)


def _ctx(**options: Any) -> Context:
    return Context(options=Options(device="cpu", compile_backend="stand-in", **options), backend=CPU)


@pytest.fixture
def no_dynamo(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    backends: list[str | None] = []

    def identity(model: nn.Module, backend: str | None = None, dynamic: bool | None = None) -> nn.Module:
        backends.append(backend)
        return model

    monkeypatch.setattr(torch, "compile", identity)
    return backends


def test_disable_dropout_counts_and_zeroes_every_kind() -> None:
    model = nn.Sequential(nn.Dropout(0.1), nn.Dropout2d(0.0), nn.MultiheadAttention(8, 2, dropout=0.2), nn.Linear(2, 2))
    assert stage_model.disable_dropout(model) == 2
    assert model[0].p == 0.0 and model[2].dropout == 0.0
    assert model.training  # otherwise left in training mode
    assert stage_model.disable_dropout(model) == 0


def test_reduction_size_and_dtype_are_read_from_the_model() -> None:
    assert stage_model.reduction_size(nn.Linear(3, 5)) == 64  # at least 64
    assert stage_model.reduction_size(nn.Sequential(nn.Embedding(10, 96), nn.Linear(96, 200))) == 200
    assert (
        stage_model.reduction_size(nn.Conv2d(4, 2, kernel_size=5)) == 4 * 5 * 5
    )  # a kernel sees in_channels x kernel elements
    assert stage_model.model_dtype(nn.Linear(2, 2)) == torch.float32
    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).bfloat16())
    assert stage_model.model_dtype(mixed) == torch.bfloat16
    assert stage_model.model_dtype(nn.ReLU()) == torch.float32


def test_sgd_step_moves_each_parameter_against_its_gradient() -> None:
    model = nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    stage_model.sgd_step(model)
    for name, p in model.named_parameters():
        assert torch.allclose(p, before[name] - LR * grads[name])


def test_a_training_step_returns_cpu_results_and_leaves_the_model_alone() -> None:
    spec = _spec()
    original = [p.detach().clone() for p in spec.model.parameters()]
    run = stage_model.train_step(spec, "cpu")
    assert set(run) == {"output", "loss", "grads", "weights"}
    assert run["output"].shape == (5, 3) and run["loss"].numel() == 1
    assert set(run["grads"]) == set(run["weights"]) == {n for n, _ in spec.model.named_parameters()}
    for name, p in spec.model.named_parameters():
        assert torch.allclose(run["weights"][name], p - LR * run["grads"][name])
    assert all(torch.equal(p, q) for p, q in zip(spec.model.parameters(), original, strict=True))
    again = stage_model.train_step(spec, "cpu")
    assert torch.equal(again["loss"], run["loss"])  # dropout off and seeded: the same step twice
    names = stage_model.flatten(run)
    assert set(names) == {
        "output",
        "loss",
        *(f"grads.{n}" for n in run["grads"]),
        *(f"weights.{n}" for n in run["weights"]),
    }


def test_compare_reports_what_one_side_lacks() -> None:
    run = stage_model.train_step(_spec(), "cpu")
    assert stage_model.compare(run, run, 1e-6)["ok"]
    fewer = {**run, "grads": dict(list(run["grads"].items())[1:])}
    report = stage_model.compare(fewer, run, 1e-6)
    assert not report["ok"] and report["out_of_bound"] == []
    assert report["missing"] == [f"grads.{next(iter(run['grads']))}"]


def test_modes_and_their_bounds() -> None:
    ctx = _ctx()
    spec = _spec(autocast=(torch.bfloat16,))
    modes = stage_model.modes(ctx, spec)
    assert [m.name for m in modes] == ["float32", "bfloat16 autocast", "float32 compiled (stand-in)"]
    assert [m.autocast for m in modes] == [None, torch.bfloat16, None]
    assert [m.compile_backend for m in modes] == [None, None, "stand-in"]
    k = stage_model.reduction_size(spec.model)
    assert stage_model.bound_for(ctx, spec, modes[0]) == (model_rtol(torch.float32, k), torch.float32)
    assert stage_model.bound_for(ctx, spec, modes[1]) == (model_rtol(torch.bfloat16, k), torch.bfloat16)
    ctx.shared["fp32_matmul_precision"] = torch.bfloat16  # the matmul stage found float32 at bfloat16 inputs
    assert stage_model.bound_for(ctx, spec, modes[0])[1] == torch.bfloat16
    strict = _ctx(strict_fp32=True)
    strict.shared["fp32_matmul_precision"] = torch.bfloat16
    assert stage_model.bound_for(strict, spec, modes[0])[1] == torch.float32
    assert stage_model.bound_for(_ctx(model_rtol=0.5), spec, modes[0])[0] == 0.5
    native = ModelSpec(_model().bfloat16(), (torch.randn(2, 6).bfloat16(),), {}, mean_square_loss, "bf16")
    assert stage_model.bound_for(ctx, native, Mode("bfloat16")) == (
        model_rtol(torch.bfloat16, k, native=True),
        torch.bfloat16,
    )
    # With its tensors' conditioning measured against float64: the default model's bound under autocast.
    conditioned = stage_model.bound_for(ctx, native, Mode("bfloat16"), conditioned=True)
    assert conditioned == (model_rtol(torch.bfloat16, k), torch.bfloat16) and conditioned[0] < 0.04


def test_the_stage_passes_on_the_cpu_and_keeps_the_compiled_step(no_dynamo: list[str | None]) -> None:
    ctx = _ctx()
    spec = _spec(autocast=(torch.bfloat16,))
    ctx.shared["model_spec"] = spec
    log = StageLog()
    stage_model.run(ctx, log)
    assert log.failures == [], log.failures
    assert list(log.numbers["runs"]) == [m.name for m in stage_model.modes(ctx, spec)]
    assert all(r["ok"] for r in log.numbers["runs"].values())
    assert no_dynamo == ["stand-in"]
    step = ctx.shared["compiled_step"]
    assert step.backend == "stand-in" and step.first_call_s >= 0
    assert ctx.shared["model_rtol"] == log.numbers["runs"]["float32"]["rtol"]  # the native run's bound
    assert "1 module(s) had dropout" in log.notes[0]
    assert math.isclose(log.numbers["loss_cpu"], log.numbers["runs"]["float32"]["loss_device"], rel_tol=1e-6)


def test_a_device_run_off_the_reference_fails_naming_the_run_and_tensors(
    no_dynamo: list[str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = stage_model.train_step

    def off_on_the_device(spec: ModelSpec, device: str, ctx: Context | None = None, mode: Mode | None = None) -> Any:
        run = real(spec, device, ctx, mode or Mode("eager"))
        if ctx is not None and mode is not None and mode.autocast is None and mode.compile_backend is None:
            run["loss"] = run["loss"] * 1.5  # the device's eager run
        return run

    monkeypatch.setattr(stage_model, "train_step", off_on_the_device)
    ctx = _ctx()
    ctx.shared["model_spec"] = _spec()
    log = StageLog()
    stage_model.run(ctx, log)
    (failure,) = log.failures
    assert failure.startswith("float32: 1 tensor(s) differ from the CPU reference") and failure.endswith("loss 0.5")
    assert not log.numbers["runs"]["float32"]["ok"] and log.numbers["runs"]["float32 compiled (stand-in)"]["ok"]


def _bf16_block() -> ModelSpec:
    """The default model in bfloat16: a user's bfloat16 model with layer norms and a softmax."""
    model, args, loss_fn = default_factory()
    return ModelSpec(model.bfloat16(), args, {}, loss_fn, "bf16 block")


def test_a_bf16_models_bounds_come_from_its_reduction_size_and_measured_conditioning() -> None:
    spec = _bf16_block()
    reference = stage_model.train_step(spec, "cpu")
    exact = stage_model.exact_run(spec)
    assert exact is not None and exact["loss"].dtype == torch.float32  # the loss function's own .float()
    assert exact["weights"]["head.weight"].dtype == torch.float64
    base = model_rtol(torch.bfloat16, stage_model.reduction_size(spec.model))
    bounds = stage_model.tensor_bounds(base, reference, exact)
    assert set(bounds) == set(stage_model.flatten(reference)) and min(bounds.values()) == base
    assert stage_model.compare(reference, reference, base, bounds)["ok"]
    assert stage_model.bias_failures(reference, exact, torch.bfloat16) == []  # the CPU's bfloat16 scatters


def test_a_2pct_softmax_error_in_a_bf16_model_leans_one_way(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _bf16_block()
    exact = stage_model.exact_run(spec)
    assert exact is not None
    softmax = torch.Tensor.softmax
    monkeypatch.setattr(torch.Tensor, "softmax", lambda t, *a, **k: softmax(t, *a, **k) * 1.02)
    found = stage_model.bias_failures(stage_model.train_step(spec, "cpu"), exact, torch.bfloat16)
    assert any(f.startswith("grads.qkv.weight +") for f in found), found


def test_no_float64_run_means_no_bias_test_and_the_native_bound(no_dynamo: list[str | None]) -> None:
    class NoFloat64(nn.Module):  # as a model calling a kernel without a float64 version
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.dtype == torch.float64:
                raise TypeError("no float64 kernel")
            out: torch.Tensor = self.lin(x)
            return out

    spec = ModelSpec(NoFloat64().bfloat16(), (torch.randn(3, 4).bfloat16(),), {}, mean_square_loss, "f32")
    assert stage_model.exact_run(spec) is None
    ctx = _ctx()
    ctx.shared["model_spec"] = spec
    log = StageLog()
    stage_model.run(ctx, log)
    assert any("does not run in float64" in n for n in log.notes)
    run = log.numbers["runs"]["bfloat16"]
    assert run["biased"] == [] and run["rtol"] == model_rtol(torch.bfloat16, 64, native=True)
