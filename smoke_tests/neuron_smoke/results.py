"""Stage results and the run report; the JSON written by --report is `Report.to_dict()`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = "neuron-smoke/1"
PASS = "pass"
FAIL = "fail"
SKIP = "skip"


@dataclass
class StageResult:
    name: str
    title: str
    status: str = SKIP
    summary: str = ""
    reason: str = ""
    duration_s: float = 0.0
    numbers: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    device_missing: bool = False
    # False when the stage failed only in ways that do not stop the stages that need it (the run still fails).
    blocking: bool = True
    # The stage did not finish before its deadline (or the watchdog ended the process while it ran).
    hung: bool = False

    def message(self) -> str:
        """The one line that says why the stage did not pass (or what it found, when it did)."""
        if self.status == SKIP:
            return self.reason
        if self.status == FAIL:
            more = f" (+{len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
            return (self.failures[0] + more) if self.failures else (self.error or "failed")
        return self.summary


@dataclass
class Report:
    schema: str
    started: str
    host: dict[str, Any]
    versions: dict[str, Any]
    device: dict[str, Any]
    options: dict[str, Any]
    stages: list[StageResult] = field(default_factory=list)
    duration_s: float = 0.0
    exit_code: int = 0
    # Stopped by Ctrl-C: the stage that was running says so (not "hung"), and exit_code is 130.
    interrupted: bool = False
    # Multi-node mode: this node's rank, the members, the missing nodes, faults seen on peers (rendezvous.py).
    cluster: dict[str, Any] | None = None

    def stage(self, name: str) -> StageResult:
        return next(s for s in self.stages if s.name == name)

    def counts(self) -> dict[str, int]:
        out = {PASS: 0, FAIL: 0, SKIP: 0}
        for s in self.stages:
            out[s.status] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = self.counts()
        return data


def interrupted(report: Report, finished: list[StageResult]) -> Report:
    """The run stopped by Ctrl-C, from the last report written and the stages that ran to the end (`finished`, which
    may be one ahead of that report: Ctrl-C between a stage's end and the next write): the next one, written as hung
    (what the watchdog's exit would leave), was interrupted; the later ones were not run."""
    results = {stage.name: stage for stage in finished}
    report.stages = [results.get(stage.name, stage) for stage in report.stages]
    for stage in report.stages[len(finished) :]:
        if stage.hung:
            stage.hung = False
            stage.failures = [f"{stage.name}: interrupted (Ctrl-C) while it ran"]
        elif stage.status == SKIP:
            stage.reason = "not run: the run was interrupted (Ctrl-C)"
    report.interrupted = True
    report.exit_code = 130
    return report
