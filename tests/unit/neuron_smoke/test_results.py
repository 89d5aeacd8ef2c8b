"""results.py: the one line a stage result reads as (skip reason, first failure and how many more, summary), and the
report's counts, lookup and JSON form."""

from __future__ import annotations

import json

import pytest

from neuron_smoke.results import FAIL, PASS, SCHEMA, SKIP, Report, StageResult, interrupted


def _report(*stages: StageResult) -> Report:
    return Report(SCHEMA, "2025-01-01T00:00:00+00:00", {"hostname": "h"}, {"torch": "x"}, {}, {}, list(stages))


def test_message_says_why_a_stage_did_not_pass_or_what_it_found() -> None:
    assert StageResult("a", "t", status=SKIP, reason="not selected").message() == "not selected"
    assert StageResult("a", "t", status=PASS, summary="3 cases").message() == "3 cases"
    one = StageResult("a", "t", status=FAIL, failures=["first"])
    assert one.message() == "first"
    three = StageResult("a", "t", status=FAIL, failures=["first", "second", "third"])
    assert three.message() == "first (+2 more)"


def test_a_failure_without_failures_falls_back_to_the_error_then_a_word() -> None:
    assert StageResult("a", "t", status=FAIL, error="Traceback...").message() == "Traceback..."
    assert StageResult("a", "t", status=FAIL).message() == "failed"


def test_a_new_result_is_a_blocking_skip() -> None:
    result = StageResult("a", "t")
    assert (result.status, result.blocking, result.hung, result.device_missing) == (SKIP, True, False, False)


def test_counts_stage_and_to_dict() -> None:
    stages = [
        StageResult("a", "t", status=PASS),
        StageResult("b", "t", status=FAIL, failures=["x"]),
        StageResult("c", "t", status=PASS),
        StageResult("d", "t"),
    ]
    report = _report(*stages)
    assert report.counts() == {PASS: 2, FAIL: 1, SKIP: 1}
    assert report.stage("b") is stages[1]
    with pytest.raises(StopIteration):
        report.stage("nope")
    data = json.loads(json.dumps(report.to_dict()))
    assert data["schema"] == SCHEMA
    assert data["summary"] == report.counts()
    assert [s["name"] for s in data["stages"]] == ["a", "b", "c", "d"]
    assert data["stages"][1]["failures"] == ["x"]


def _written(running: str) -> Report:
    """The report on disk while stage `running` of a, b, c runs: earlier ones passed, it marked hung, later not run."""
    names = ["a", "b", "c"]
    at = names.index(running)
    stages = [StageResult(n, "t", status=PASS) for n in names[:at]]
    stages.append(StageResult(running, "t", status=FAIL, failures=[f"{running}: did not finish"], hung=True))
    stages += [StageResult(n, "t", reason="not run yet") for n in names[at + 1 :]]
    return _report(*stages)


def test_ctrl_c_in_a_stage_marks_it_interrupted_and_the_rest_not_run() -> None:
    report = interrupted(_written("b"), [StageResult("a", "t", status=PASS)])
    assert (report.interrupted, report.exit_code) == (True, 130)
    b, c = report.stage("b"), report.stage("c")
    assert (b.hung, b.failures) == (False, ["b: interrupted (Ctrl-C) while it ran"])
    assert c.reason == "not run: the run was interrupted (Ctrl-C)"


def test_ctrl_c_after_a_stage_ended_but_before_the_next_write_keeps_its_result() -> None:
    """The stage finished (its result is in `finished`) but the report on disk still has it running: its result
    replaces the hung entry, and no stage is said to have been interrupted while it ran."""
    done = StageResult("b", "t", status=PASS, summary="ok")
    report = interrupted(_written("b"), [StageResult("a", "t", status=PASS), done])
    assert report.stage("b") is done and not any(s.hung for s in report.stages)
    assert not any("interrupted (Ctrl-C) while it ran" in f for s in report.stages for f in s.failures)
    assert report.stage("c").reason == "not run: the run was interrupted (Ctrl-C)"
