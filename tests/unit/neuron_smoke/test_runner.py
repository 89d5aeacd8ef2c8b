"""runner.py beyond test_harness.py's timeout, failed-prerequisite and Skip cases: unselected stages, advisories that
fail the run without blocking later stages, a missing device, prerequisites that did not run or were skipped, a hung
stage stopping the rest, and run_all's callbacks."""

from __future__ import annotations

from typing import Any

from neuron_smoke.backends import CPU
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.errors import DeviceMissing
from neuron_smoke.results import FAIL, PASS, SKIP, StageResult
from neuron_smoke.runner import HARD_DEADLINE_GRACE_S, Stage, hard_grace, run_all, run_stage


def _ctx(**options: Any) -> Context:
    return Context(options=Options(device="cpu", **options), backend=CPU)


def _pass(ctx: Context, log: StageLog) -> None:
    log.numbers["n"] = 1
    log.summary = "fine"
    log.note("a note")


def test_a_passing_stage_keeps_what_it_logged() -> None:
    result = run_stage(Stage("matmul", "t", _pass), _ctx())
    assert (result.status, result.summary, result.numbers, result.notes) == (PASS, "fine", {"n": 1}, ["a note"])
    assert result.failures == [] and result.duration_s >= 0


def test_an_unselected_stage_is_skipped_without_running() -> None:
    ran: list[str] = []
    stage = Stage("dtype", "t", lambda c, log: ran.append("x"))
    result = run_stage(stage, _ctx(stages=("matmul",)))
    assert result.status == SKIP and "--stages" in result.reason and ran == []


def test_an_advisory_fails_the_stage_but_not_the_stages_after_it() -> None:
    def advisory(ctx: Context, log: StageLog) -> None:
        log.fail_nonblocking("pip check: conflict")

    ctx = _ctx()
    first = run_stage(Stage("environment", "t", advisory), ctx)
    assert first.status == FAIL and first.failures == ["pip check: conflict"] and not first.blocking
    ctx.results["environment"] = first
    assert run_stage(Stage("device", "t", _pass, ("environment",)), ctx).status == PASS


def test_a_logged_failure_blocks_the_stages_after_it() -> None:
    def failing(ctx: Context, log: StageLog) -> None:
        log.fail("wrong sum")
        log.fail_nonblocking("also this")

    ctx = _ctx()
    first = run_stage(Stage("matmul", "t", failing), ctx)
    assert first.status == FAIL and first.blocking and first.failures == ["wrong sum", "also this"]
    ctx.results["matmul"] = first
    later = run_stage(Stage("throughput", "t", _pass, ("matmul",)), ctx)
    assert later.status == SKIP and "matmul" in later.reason and "failed" in later.reason


def test_a_missing_device_fails_marked_as_such() -> None:
    def missing(ctx: Context, log: StageLog) -> None:
        log.fail("first")
        raise DeviceMissing("no neuron device: /dev/neuron* not found")

    result = run_stage(Stage("device", "t", missing), _ctx())
    assert result.status == FAIL and result.device_missing
    assert result.failures == ["first", "no neuron device: /dev/neuron* not found"]


def test_an_exception_keeps_its_traceback_and_its_first_line() -> None:
    def boom(ctx: Context, log: StageLog) -> None:
        raise ValueError("line one\nline two")

    result = run_stage(Stage("model", "t", boom), _ctx())
    assert result.failures == ["ValueError: line one"]
    assert result.error is not None and "Traceback" in result.error and "line two" in result.error


def test_prerequisites_not_run_or_skipped_skip_the_stage() -> None:
    ctx = _ctx()
    never = run_stage(Stage("throughput", "t", _pass, ("matmul",)), ctx)
    assert never.status == SKIP and "matmul" in never.reason and "not run" in never.reason
    ctx.results["matmul"] = StageResult("matmul", "t", status=SKIP, reason="x")
    skipped = run_stage(Stage("throughput", "t", _pass, ("matmul",)), ctx)
    assert skipped.status == SKIP and "matmul" in skipped.reason and "skipped" in skipped.reason


def test_after_a_hung_stage_every_later_stage_is_skipped() -> None:
    ctx = _ctx()
    ctx.shared["hung_stage"] = "matmul"
    result = run_stage(Stage("dtype", "t", _pass), ctx)  # no prerequisite: skipped all the same
    assert result.status == SKIP and "matmul" in result.reason and "timed out" in result.reason


def test_run_all_reports_each_result_in_order_and_records_it() -> None:
    events: list[str] = []
    stages = [Stage("matmul", "t", _pass), Stage("throughput", "t", _pass, ("matmul",))]
    ctx = _ctx()

    def before(stage: Stage) -> None:
        events.append(f"before {stage.name}")
        assert stage.name not in ctx.results

    results = run_all(stages, ctx, lambda r: events.append(f"result {r.name}"), before)
    assert events == ["before matmul", "result matmul", "before throughput", "result throughput"]
    assert [r.status for r in results] == [PASS, PASS]
    assert ctx.results == {"matmul": results[0], "throughput": results[1]}


def test_hard_grace_is_the_timeout_between_two_seconds_and_the_cap() -> None:
    assert hard_grace(0.5) == 2.0
    assert hard_grace(10.0) == 10.0
    assert hard_grace(10 * HARD_DEADLINE_GRACE_S) == HARD_DEADLINE_GRACE_S
