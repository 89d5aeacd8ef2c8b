"""Runs the stages in order, each under a deadline, skipping those whose prerequisites did not pass."""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import DeviceMissing, Skip
from neuron_smoke.results import FAIL, PASS, SKIP, StageResult

# If a hung device call holds the GIL, the waiting thread cannot even notice the deadline; this C-level
# watchdog then ends the process (exit 1) after dumping every thread's stack, `hard_grace(timeout)` seconds after the
# stage's deadline. The report on disk then says so: it is written before each stage with that stage marked hung.
HARD_DEADLINE_GRACE_S = 30.0


def hard_grace(timeout_s: float) -> float:
    return min(HARD_DEADLINE_GRACE_S, max(2.0, timeout_s))


@dataclass(frozen=True)
class Stage:
    name: str
    title: str
    run: Callable[[Context, StageLog], None]
    requires: tuple[str, ...] = ()


def run_stage(stage: Stage, ctx: Context) -> StageResult:
    result = StageResult(name=stage.name, title=stage.title)
    blocked = _blocked_by(stage, ctx)
    if blocked:
        result.reason = blocked
        return result
    log = StageLog()
    outcome: dict[str, BaseException] = {}

    def target() -> None:
        try:
            stage.run(ctx, log)
        except BaseException as exc:
            outcome["error"] = exc
            outcome["trace"] = RuntimeError(traceback.format_exc())

    timeout = ctx.options.timeout_s
    worker = threading.Thread(target=target, name=f"stage-{stage.name}", daemon=True)
    start = time.perf_counter()
    faulthandler.dump_traceback_later(timeout + hard_grace(timeout), exit=True)
    try:
        worker.start()
        worker.join(timeout)
    finally:
        faulthandler.cancel_dump_traceback_later()
    result.duration_s = round(time.perf_counter() - start, 4)
    result.numbers, result.notes, result.summary = log.numbers, log.notes, log.summary
    if worker.is_alive():
        ctx.shared["hung_stage"] = stage.name
        result.status, result.hung = FAIL, True
        result.failures = [*log.failures, f"{stage.name}: timed out after {timeout:g}s (a device call did not return)"]
        result.error = stuck_at(worker)
        return result
    _apply_outcome(result, log, outcome)
    return result


def stuck_at(worker: threading.Thread) -> str | None:
    """Where a stage's thread is now, innermost call last (a traceback's order): what a hung stage was waiting in."""
    frame = sys._current_frames().get(worker.ident or -1)
    if frame is None:
        return None
    return f"stage thread {worker.name!r} still running, at:\n" + "".join(traceback.format_stack(frame))


def _apply_outcome(result: StageResult, log: StageLog, outcome: dict[str, BaseException]) -> None:
    error = outcome.get("error")
    if isinstance(error, Skip):
        result.status, result.reason = SKIP, str(error)
    elif isinstance(error, DeviceMissing):
        result.status, result.device_missing = FAIL, True
        result.failures = [*log.failures, *log.advisories, str(error)]
    elif error is not None:
        result.status = FAIL
        result.error = str(outcome["trace"])
        first = (str(error).strip().splitlines() or [""])[0]  # the whole message is in the traceback (`error`)
        result.failures = [*log.failures, *log.advisories, f"{type(error).__name__}: {first}"]
    else:
        result.status = FAIL if log.failures or log.advisories else PASS
        result.failures = [*log.failures, *log.advisories]
        result.blocking = bool(log.failures)


def _blocked_by(stage: Stage, ctx: Context) -> str:
    if stage.name not in ctx.options.stages:
        return "not selected (--stages)"
    hung = ctx.shared.get("hung_stage")
    if hung:
        return f"skipped: stage {hung} timed out, the device may be wedged"
    for name in stage.requires:
        prior = ctx.results.get(name)
        if prior is None or prior.status == SKIP or (prior.status == FAIL and prior.blocking):
            status = "was not run" if prior is None else ("failed" if prior.status == FAIL else "was skipped")
            return f"skipped: stage {name} {status}"
    return ""


def run_all(
    stages: list[Stage],
    ctx: Context,
    on_result: Callable[[StageResult], None],
    before: Callable[[Stage], None] | None = None,
) -> list[StageResult]:
    out = []
    for stage in stages:
        if before is not None:
            before(stage)
        result = run_stage(stage, ctx)
        ctx.results[stage.name] = result
        on_result(result)
        out.append(result)
    return out


__all__ = ["FAIL", "PASS", "SKIP", "Stage", "run_all", "run_stage"]
