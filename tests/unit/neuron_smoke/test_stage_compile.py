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


def _probe_answers(monkeypatch: pytest.MonkeyPatch, *answers: dict[str, Any]) -> list[dict[str, str]]:
    plan = cores.CorePlan(available=(0, 1, 2), process=(2,), ranks=(0, 1), user_restricted=False)
    monkeypatch.setattr(cores, "current", lambda: plan)
    envs: list[dict[str, str]] = []
    replies = iter(answers)

    def probe(ctx: Context, env: dict[str, str], backend: str) -> dict[str, Any]:
        envs.append(env)
        return next(replies)

    monkeypatch.setattr(stage_compile, "_probe", probe)
    return envs


def _entries(before: int, after: int, first_call_s: float, **counters: int) -> dict[str, Any]:
    counts = {"graphs_compiled": None, "graphs_loaded": None, **counters}
    return {"first_call_s": first_call_s, "entries_before": before, "entries_after": after, **counts}


@pytest.mark.parametrize(
    ("cold", "warm", "hit", "words"),
    [
        (_entries(3, 5, 9.0), _entries(5, 5, 1.0), True, "cache hit"),  # no counters: the graphs' new entries
        (_entries(3, 5, 9.0), _entries(5, 6, 1.0), False, "cache MISSED"),
        (_entries(3, 9, 9.0, graphs_compiled=2, graphs_loaded=0), _entries(9, 9, 1.0, graphs_compiled=0,
                                                                            graphs_loaded=2), True, "cache hit"),
        # counters win over entries: new eager kernels in the warm run are no graphs compiled again
        (_entries(3, 9, 9.0, graphs_compiled=2, graphs_loaded=0), _entries(9, 11, 1.0, graphs_compiled=0,
                                                                            graphs_loaded=2), True, "cache hit"),
        (_entries(3, 9, 9.0, graphs_compiled=2, graphs_loaded=0), _entries(9, 9, 1.0, graphs_compiled=0,
                                                                            graphs_loaded=0), False, "cache MISSED"),
    ],
)  # fmt: skip
def test_cold_and_warm_first_calls_tell_whether_the_cache_was_hit(
    cold: dict[str, Any], warm: dict[str, Any], hit: bool, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    envs = _probe_answers(monkeypatch, cold, warm)
    log = StageLog()
    words_out = stage_compile.fresh_process_first_calls(_neuron_ctx(), log, "neuron")
    assert words_out == f" (new process: cold 9.00s, warm 1.00s, {words})"
    assert log.numbers["warm_cache_hit"] is hit and log.numbers["cold_graphs_compiled"] == 2 and log.failures == []
    assert envs[0][cores.VISIBLE] == "0" and envs[0][CACHE_ENV] == envs[1][CACHE_ENV]  # a rank's core, one cache
    assert len(log.notes) == (0 if hit else 1)


@pytest.mark.parametrize(
    ("cold", "source"),
    [
        # eager kernels only (their entries came with the eager forward before the compiled call): no graph
        (_entries(4, 4, 2.0), f"new entries under {CACHE_ENV}: 0"),
        # counters at zero, whatever the entries: the eager kernels the graph ran op by op are no graphs
        (_entries(4, 6, 2.0, graphs_compiled=0, graphs_loaded=0), "the device's compile counters: 0"),
    ],
)
def test_a_backend_that_compiles_no_graph_in_a_fresh_process_fails(
    cold: dict[str, Any], source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _probe_answers(monkeypatch, cold, _entries(6, 6, 2.0))
    log = StageLog()
    words = stage_compile.fresh_process_first_calls(_neuron_ctx(), log, "neuron")
    assert words.endswith("NO GRAPH COMPILED)") and log.numbers["warm_cache_hit"] is None
    assert log.failures == [
        f"torch.compile(backend='neuron') compiled no graph in a fresh process with an empty compile cache ({source}):"
        " the backend ran the model eagerly, op by op"
    ]
    _probe_answers(monkeypatch, cold, _entries(6, 6, 2.0))
    other = StageLog()  # a backend of the user's (--compile-backend) need not compile for the device's cache
    stage_compile.fresh_process_first_calls(_neuron_ctx(), other, "my-backend")
    assert other.failures == [] and "whether it is reused is unknown" in other.notes[0]


class _Device:
    def __init__(self, stats: dict[str, int] | None) -> None:
        self.stats = stats

    def compile_cache_stats(self) -> dict[str, int] | None:
        return self.stats


def _device_ctx(monkeypatch: pytest.MonkeyPatch, stats: dict[str, int] | None) -> Context:
    ctx = _neuron_ctx()
    device = _Device(stats) if stats is not None else object()  # a module without counters
    monkeypatch.setattr(type(ctx.backend), "import_module", lambda self: device)  # a frozen dataclass: its class
    return ctx


def test_the_node_s_graphs_come_from_the_device_s_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "/fsx/neff")
    log = StageLog()
    stage_compile.node_graphs(_device_ctx(monkeypatch, {"compiles": 0, "hits": 2}), log, "neuron")
    assert (log.numbers["graphs_compiled"], log.numbers["graphs_loaded"]) == (0, 2) and log.failures == []
    assert log.numbers["compile_cache_dir"] == "/fsx/neff"
    monkeypatch.delenv(CACHE_ENV)
    unknown = StageLog()
    stage_compile.node_graphs(_device_ctx(monkeypatch, None), unknown, "neuron")
    assert (unknown.numbers["graphs_compiled"], unknown.numbers["compile_cache_dir"]) == (None, None)
    assert unknown.failures == [] and "no compile counters" in unknown.notes[0]


def test_a_step_compiled_with_no_graph_compiled_or_loaded_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    log = StageLog()
    stage_compile.node_graphs(_device_ctx(monkeypatch, {"compiles": 0, "hits": 0}), log, "neuron")
    assert log.failures == [
        "torch.compile(backend='neuron') compiled no graph and loaded none for stage 4's training step (the device's "
        "compile counters): the backend ran it eagerly, op by op"
    ]
    users = StageLog()  # --compile-backend of the user's: the device's counters need not move
    stage_compile.node_graphs(_device_ctx(monkeypatch, {"compiles": 0, "hits": 0}), users, "eager")
    assert users.failures == []


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
