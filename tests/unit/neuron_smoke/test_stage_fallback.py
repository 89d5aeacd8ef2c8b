"""stage_fallback.py: which warnings name fallback ops, the tracked work (a small matmul case list and one eager model
step), and the stage's verdicts with a stand-in tracking module: disallowed and allowed ops, blind tracking, and the
two readings (tracking, warnings) disagreeing. Off Neuron the stage is skipped."""

from __future__ import annotations

import dataclasses
import sys
import types
import warnings

import pytest
import torch
from torch import nn

from neuron_smoke import stage_fallback, stage_matmul, stage_model
from neuron_smoke.backends import CPU
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.errors import Skip
from neuron_smoke.models import ModelSpec, mean_square_loss
from neuron_smoke.stage_model import Mode

TRACKER = "unit_fallback_tracker"


def _tracker(
    monkeypatch: pytest.MonkeyPatch, fallback: list[str], executed: list[str] | None, **missing: bool
) -> types.ModuleType:
    module = types.ModuleType(TRACKER)
    module.cleared = 0  # type: ignore[attr-defined]

    def clear() -> None:
        module.cleared += 1  # type: ignore[attr-defined]

    module.clear_op_tracking = clear  # type: ignore[attr-defined]
    module.get_fallback_ops = lambda: list(fallback)  # type: ignore[attr-defined]
    if executed is not None:
        module.get_executed_ops = lambda: list(executed)  # type: ignore[attr-defined]
    for name in missing:
        delattr(module, name)
    monkeypatch.setitem(sys.modules, TRACKER, module)
    return module


def _ctx(allow: frozenset[str] = frozenset()) -> Context:
    backend = dataclasses.replace(CPU, module=TRACKER, tracks_fallback=True)
    return Context(options=Options(device="cpu", allow_fallback=allow), backend=backend)


def _work(monkeypatch: pytest.MonkeyPatch, messages: list[str], work: int = 5) -> None:
    monkeypatch.setattr(stage_fallback, "run_tracked_work", lambda ctx: (messages, work))


def test_warned_ops_reads_only_warnings_about_fallback() -> None:
    messages = [
        "aten::_foo.default is falling back to the CPU",
        "Op aten::bar falls back to the host",
        "aten::baz is deprecated",
        "fallback for aten::qux.out",
    ]
    assert stage_fallback.warned_ops(messages) == {"_foo", "bar", "qux"}
    assert stage_fallback.warned_ops([]) == set()


def test_off_neuron_the_stage_is_skipped() -> None:
    with pytest.raises(Skip, match="cpu has no CPU-fallback op tracking"):
        stage_fallback.run(Context(options=Options(device="cpu"), backend=CPU), StageLog())


def test_no_fallback_passes_and_tracking_is_cleared_first(monkeypatch: pytest.MonkeyPatch) -> None:
    tracker = _tracker(monkeypatch, [], ["aten::mm"] * 3)
    _work(monkeypatch, [])
    log = StageLog()
    stage_fallback.run(_ctx(), log)
    assert log.failures == [] and tracker.cleared == 1
    assert log.numbers["executed_op_calls"] == 3 and log.numbers["fallback_ops"] == {}
    assert log.summary == "0 fallback op call(s): none"


def test_an_op_on_the_cpu_fails_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    fallen = ["aten::_foo.default", "aten::_foo.default", "aten::bar"]
    warned = ["aten::_foo.default falling back to CPU", "aten::bar falls back to CPU"]
    _tracker(monkeypatch, fallen, ["x"])
    _work(monkeypatch, warned)
    log = StageLog()
    stage_fallback.run(_ctx(), log)
    assert len(log.failures) == 1 and "aten::_foo.default, aten::bar" in log.failures[0]
    assert "--allow-fallback aten::_foo.default,aten::bar" in log.failures[0]
    assert log.numbers["fallback_ops"] == {"aten::_foo.default": 2, "aten::bar": 1}
    assert log.summary.startswith("3 fallback op call(s)")
    allowed = StageLog()
    stage_fallback.run(_ctx(frozenset({"_foo", "aten::bar.out"})), allowed)  # any spelling of the op's name
    assert allowed.failures == [] and allowed.numbers["disallowed"] == []


def test_blind_tracking_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    _tracker(monkeypatch, [], [])
    _work(monkeypatch, [], work=7)
    log = StageLog()
    stage_fallback.run(_ctx(), log)
    assert len(log.failures) == 1 and "blind" in log.failures[0] and "7 matmul" in log.failures[0]


def test_without_executed_ops_the_tracking_is_unconfirmed(monkeypatch: pytest.MonkeyPatch) -> None:
    _tracker(monkeypatch, [], None)
    _work(monkeypatch, [])
    log = StageLog()
    stage_fallback.run(_ctx(), log)
    assert log.failures == [] and log.numbers["executed_op_calls"] is None
    assert any("get_executed_ops" in n for n in log.notes)


def test_a_warned_op_that_is_not_tracked_fails_and_the_reverse_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    _tracker(monkeypatch, ["aten::tracked"], ["x"])
    _work(monkeypatch, ["aten::untracked falls back to the CPU"])
    log = StageLog()
    stage_fallback.run(_ctx(frozenset({"tracked"})), log)
    assert len(log.failures) == 1 and "untracked" in log.failures[0] and "disagree" in log.failures[0]
    assert any("tracked" in n and "no fallback warning" in n for n in log.notes)


@pytest.mark.parametrize("missing", ["clear_op_tracking", "get_fallback_ops"])
def test_a_tracking_module_without_the_api_fails(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _tracker(monkeypatch, [], ["x"], **{missing: True})
    _work(monkeypatch, [])
    log = StageLog()
    stage_fallback.run(_ctx(), log)
    assert log.failures == [f"{TRACKER} has no {missing}(); cannot track CPU fallback"]


class Warns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        warnings.warn("aten::gelu falling back to the CPU", stacklevel=1)
        out: torch.Tensor = self.lin(x)
        return out


def test_the_tracked_work_repeats_the_matmuls_and_the_model_runs_recording_warnings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = [
        stage_matmul.Case("mm", (4, 8, 3), torch.float32, 1),
        stage_matmul.Case("linear", (4, 8, 3), torch.float32, 2),
    ]
    monkeypatch.setattr(stage_matmul, "cases", lambda: small)
    monkeypatch.setattr(stage_model, "modes", lambda ctx, spec: [Mode("float32")])  # no compiled run: no Dynamo here
    ctx = _ctx()
    ctx.shared["model_spec"] = ModelSpec(Warns(), (torch.ones(2, 4),), {}, mean_square_loss, "warns")
    messages, work = stage_fallback.run_tracked_work(ctx)
    assert work == len(small) + 1
    assert "aten::gelu falling back to the CPU" in messages
    assert stage_fallback.warned_ops(messages) == {"gelu"}
