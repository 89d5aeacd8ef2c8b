"""stage_compile.py on the CPU without Dynamo: stage 4's compiled step stood in by plain callables (the real compile
is the CPU run of tests/integration), compiled vs eager within and beyond the bound, the timing loops, and the
fresh-process cold/warm-cache probes with their process stood in."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from neuron_smoke import cores, stage_compile
from neuron_smoke.backends import CPU, NEURON
from neuron_smoke.compile_probe import CACHE_ENV
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.models import ModelSpec, mean_square_loss
from neuron_smoke.stage_model import CompiledStep


def _ctx(**options: Any) -> Context:
    return Context(options=Options(device="cpu", iterations=3, warmup=2, **options), backend=CPU)


def _step(compiled: Callable[..., Any] | None = None) -> CompiledStep:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    return CompiledStep(compiled or model, model, (torch.randn(2, 4),), {}, "stand-in", 1.25)


def test_steady_state_warms_up_then_times_each_iteration() -> None:
    calls: list[int] = []
    times = stage_compile.steady_state(_ctx(), lambda: calls.append(1))
    assert len(calls) == 2 + 3 and len(times) == 3 and all(t >= 0 for t in times)
    out, seconds = stage_compile.timed(_ctx(), lambda: "x")
    assert out == "x" and seconds >= 0


def test_compiled_equal_to_eager_passes() -> None:
    ctx = _ctx()
    ctx.shared["compiled_step"] = _step()
    log = StageLog()
    stage_compile.run(ctx, log)
    assert log.failures == []
    assert log.numbers["first_call_s"] == 1.25 and log.numbers["backend"] == "stand-in"
    assert log.numbers["max_normwise_err_vs_eager"] == 0.0 and log.numbers["iterations"] == 3
    assert log.summary.startswith("backend stand-in: first call (training step) 1.25s")


def test_compiled_off_eager_beyond_the_bound_fails() -> None:
    ctx = _ctx()
    step = _step()
    ctx.shared["model_rtol"] = 1e-3  # stage 4's float32 bound
    ctx.shared["compiled_step"] = CompiledStep(lambda x: step.model(x) * 1.002, step.model, step.args, {}, "s", 1.0)
    log = StageLog()
    stage_compile.run(ctx, log)
    assert len(log.failures) == 1 and "differs from eager" in log.failures[0] and "rtol 0.001" in log.failures[0]
    assert log.numbers["max_normwise_err_vs_eager"] == pytest.approx(0.002, rel=1e-2)  # twice the bound
    within = _ctx(model_rtol=0.005)  # --model-rtol widens the bound
    within.shared["compiled_step"] = ctx.shared["compiled_step"]
    again = StageLog()
    stage_compile.run(within, again)
    assert again.failures == []


def test_a_different_number_of_outputs_fails() -> None:
    ctx = _ctx()
    step = _step()
    ctx.shared["compiled_step"] = CompiledStep(lambda x: (step.model(x), x), step.model, step.args, {}, "s", 1.0)
    log = StageLog()
    stage_compile.run(ctx, log)
    assert any("returned 2 tensors, eager 1" in f for f in log.failures)


def test_without_stage_4_the_stage_compiles_the_step_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled_with: list[str | None] = []

    def fake_compile(model: nn.Module, backend: str | None = None, dynamic: bool | None = None) -> nn.Module:
        compiled_with.append(backend)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    torch.manual_seed(0)
    ctx = _ctx(compile_backend="my-backend")
    ctx.shared["model_spec"] = ModelSpec(nn.Linear(4, 2), (torch.randn(3, 4),), {}, mean_square_loss, "tiny")
    log = StageLog()
    stage_compile.run(ctx, log)
    assert compiled_with == ["my-backend"] and log.failures == []
    assert log.numbers["backend"] == "my-backend" and ctx.shared["compiled_step"].backend == "my-backend"


def _neuron_ctx() -> Context:
    return Context(options=Options(device="neuron", timeout_s=100.0), backend=NEURON)


def test_fresh_processes_without_a_free_core_are_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "current", lambda: None)
    log = StageLog()
    assert stage_compile.fresh_process_first_calls(_neuron_ctx(), log, "neuron") == ""
    assert len(log.notes) == 1 and "not measured" in log.notes[0]


@pytest.mark.parametrize(
    ("cold_stored", "warm_added", "hit", "words"),
    [(2, 0, True, "cache hit"), (2, 1, False, "cache MISSED"), (0, 0, None, "cache use unknown")],
)
def test_cold_and_warm_first_calls_tell_whether_the_cache_was_hit(
    cold_stored: int, warm_added: int, hit: bool | None, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = cores.CorePlan(available=(0, 1, 2), process=(2,), ranks=(0, 1), user_restricted=False)
    monkeypatch.setattr(cores, "current", lambda: plan)
    envs: list[dict[str, str]] = []
    answers = iter(
        [
            {"first_call_s": 9.0, "entries_before": 0, "entries_after": cold_stored},
            {"first_call_s": 1.0, "entries_before": cold_stored, "entries_after": cold_stored + warm_added},
        ]
    )

    def probe(ctx: Context, env: dict[str, str], backend: str) -> dict[str, float]:
        envs.append(env)
        return next(answers)

    monkeypatch.setattr(stage_compile, "_probe", probe)
    log = StageLog()
    words_out = stage_compile.fresh_process_first_calls(_neuron_ctx(), log, "neuron")
    assert words_out == f" (new process: cold 9.00s, warm 1.00s, {words})"
    assert log.numbers["warm_cache_hit"] is hit and log.numbers["cache_entries_stored"] == cold_stored
    assert envs[0][cores.VISIBLE] == "0" and envs[0][CACHE_ENV] == envs[1][CACHE_ENV]  # a rank's core, one cache
    assert len(log.notes) == (0 if hit else 1)


def test_a_failing_probe_raises_with_its_output_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 3, "out\n", "err1\nerr2\n")

    monkeypatch.setattr(stage_compile.subprocess, "run", fake_run)
    ctx = Context(options=Options(device="neuron", model="pkg.mod:make"), backend=NEURON)
    with pytest.raises(RuntimeError, match="exited 3: out\nerr1\nerr2"):
        stage_compile._probe(ctx, {}, "neuron")
    assert seen[0][-2:] == ["--model", "pkg.mod:make"] and "neuron_smoke.compile_probe" in seen[0]

    monkeypatch.setattr(
        stage_compile.subprocess,
        "run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, 'noise\n{"a": 1.5}\n', ""),
    )
    assert stage_compile._probe(ctx, {}, "neuron") == {"a": 1.5}
