"""suite.py: the exit code from the results, the provisional report written before and after each stage, the stages
in the registry's order, and one short CPU run of the device-free stages through run_suite."""

from __future__ import annotations

import pytest

from neuron_smoke import EXIT_CHECK_FAILED, EXIT_DEVICE_MISSING, EXIT_OK, registry, stage_environment, suite
from neuron_smoke.context import Options
from neuron_smoke.results import FAIL, PASS, SCHEMA, SKIP, Report, StageResult
from neuron_smoke.runner import hard_grace


def _report() -> Report:
    return Report(SCHEMA, "t", {}, {}, {}, {})


def test_exit_code_a_missing_device_outranks_a_failure() -> None:
    passed, skipped = StageResult("a", "t", status=PASS), StageResult("b", "t", status=SKIP)
    failed = StageResult("c", "t", status=FAIL)
    missing = StageResult("d", "t", status=FAIL, device_missing=True)
    assert suite.exit_code([]) == EXIT_OK
    assert suite.exit_code([passed, skipped]) == EXIT_OK
    assert suite.exit_code([passed, failed, skipped]) == EXIT_CHECK_FAILED
    assert suite.exit_code([failed, missing]) == EXIT_DEVICE_MISSING


def test_the_stages_follow_the_registry() -> None:
    assert [(s.name, s.title, s.requires) for s in suite.STAGES] == [(e.name, e.title, e.after) for e in registry.TABLE]


def test_provisional_marks_the_running_stage_hung_and_the_rest_not_run() -> None:
    options = Options(device="cpu", timeout_s=40.0)
    first = suite.STAGES[0]
    running, rest = suite.STAGES[1], suite.STAGES[2:]
    done = [StageResult(first.name, first.title, status=PASS)]
    report = suite.provisional(_report(), done, running, options)
    assert [s.name for s in report.stages] == [s.name for s in suite.STAGES]
    hung = report.stage(running.name)
    assert hung.status == FAIL and hung.hung
    assert f"{options.timeout_s + hard_grace(options.timeout_s):g}s" in hung.failures[0]
    assert all(report.stage(s.name).status == SKIP and running.name in report.stage(s.name).reason for s in rest)
    assert report.exit_code == EXIT_CHECK_FAILED


def test_provisional_between_stages_has_nothing_hung() -> None:
    first = suite.STAGES[0]
    report = suite.provisional(_report(), [StageResult(first.name, first.title, status=PASS)], None, Options())
    assert report.stage(first.name).status == PASS
    later = report.stages[1:]
    assert later and all(s.status == SKIP and not s.hung for s in later)
    assert len({s.reason for s in later}) == 1 and report.exit_code == EXIT_OK


def test_no_launcher_without_a_stage_that_needs_it() -> None:
    stages = tuple(n for n in registry.NAMES if n not in registry.needing(registry.LAUNCHER))
    with suite.collectives_launcher(Options(device="cpu", stages=stages)) as launcher:
        assert launcher is None


def test_run_suite_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stage_environment, "PIP_CHECK", ("-c", "pass"))  # a quick stand-in for pip check
    selected = ("environment", "device", "dtype")
    options = Options(device="cpu", stages=selected, allow_fallback=frozenset({"b", "a"}))
    seen: list[str] = []
    progress: list[list[str]] = []

    def on_progress(report: Report) -> None:
        progress.append([s.status for s in report.stages])

    report = suite.run_suite(options, None, lambda r: seen.append(r.name), on_progress=on_progress)
    assert seen == list(registry.NAMES)
    assert [s.name for s in report.stages] == list(registry.NAMES)
    assert [report.stage(n).status for n in selected] == [PASS] * 3, [report.stage(n).message() for n in selected]
    assert all(s.status == SKIP for s in report.stages if s.name not in selected)
    assert report.exit_code == EXIT_OK
    assert report.device["backend"] == "cpu" and report.device["count"] == 1
    assert report.versions == report.stage("environment").numbers["versions"]
    assert report.options["allow_fallback"] == ["a", "b"] and report.options["stages"] == list(selected)
    assert len(progress) == 2 * len(registry.NAMES)  # before and after each stage
    assert progress[0][0] == FAIL  # the first stage, while it runs, is recorded as hung
