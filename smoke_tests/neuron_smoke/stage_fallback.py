"""Stage 5: repeat the matmul and model work (eager, autocast and compiled) under op tracking and list every op that
ran on the CPU. Fallback is read two ways: the tracking API (`get_fallback_ops`, `get_executed_ops`) and the
warnings eager fallback emits. An op named by a warning but not tracked, or no executed op at all while the work
ran, means the tracking cannot be trusted: the stage fails saying so."""

from __future__ import annotations

import re
import warnings
from collections import Counter
from typing import Any

from neuron_smoke import stage_matmul, stage_model
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import Skip

FALLBACK_WORDS = re.compile(r"fall(?:s|ing)?[ -]?back", re.IGNORECASE)
OP_NAME = re.compile(r"\baten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")


def normalize_op(name: str) -> str:
    """`aten::addmm.default` and `addmm` name the same op for --allow-fallback."""
    return name.removeprefix("aten::").split(".")[0]


def warned_ops(messages: list[str]) -> set[str]:
    """Ops named (aten::name) by warnings that speak of fallback."""
    return {normalize_op(op) for m in messages if FALLBACK_WORDS.search(m) for op in OP_NAME.findall(m)}


def run_tracked_work(ctx: Context) -> tuple[list[str], int]:
    """The matmul cases and every model run of stage 4, recording warnings; returns them and the work done."""
    spec = ctx.shared["model_spec"]
    runs = stage_model.modes(ctx, spec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stage_matmul.run_cases(ctx)
        for mode in runs:
            stage_model.train_step(spec, ctx.device, ctx, mode)
    return [str(w.message) for w in caught], len(stage_matmul.cases()) + len(runs)


def run(ctx: Context, log: StageLog) -> None:
    if not ctx.backend.tracks_fallback:
        raise Skip(f"{ctx.backend.name} has no CPU-fallback op tracking (ops run on the device or fail)")
    tracker: Any = ctx.backend.import_module()
    for needed in ("clear_op_tracking", "get_fallback_ops"):
        if not hasattr(tracker, needed):
            log.fail(f"{ctx.backend.module} has no {needed}(); cannot track CPU fallback")
            return
    tracker.clear_op_tracking()
    messages, work = run_tracked_work(ctx)
    fallen = Counter(str(op) for op in tracker.get_fallback_ops())
    executed = tracker.get_executed_ops() if hasattr(tracker, "get_executed_ops") else None
    allowed = {normalize_op(op) for op in ctx.options.allow_fallback}
    disallowed = sorted(op for op in fallen if normalize_op(op) not in allowed)
    warned = warned_ops(messages)
    tracked = {normalize_op(op) for op in fallen}
    log.numbers = {
        "fallback_ops": dict(sorted(fallen.items())),
        "allowed": sorted(allowed),
        "disallowed": disallowed,
        "executed_op_calls": len(executed) if executed is not None else None,
        "warned_fallback_ops": sorted(warned),
    }
    if disallowed:
        log.fail(f"ops ran on the CPU: {', '.join(disallowed)} (allow with --allow-fallback {','.join(disallowed)})")
    _check_tracking(ctx, log, executed, work, warned, tracked)
    log.summary = f"{sum(fallen.values())} fallback op call(s): {', '.join(sorted(fallen)) or 'none'}"


def _check_tracking(
    ctx: Context, log: StageLog, executed: list[Any] | None, work: int, warned: set[str], tracked: set[str]
) -> None:
    module = ctx.backend.module
    if executed is None:
        log.note(f"{module} has no get_executed_ops(): cannot confirm that op tracking sees the work")
    elif not executed:
        log.fail(
            f"op tracking is blind: {module}.get_executed_ops() reported 0 executed op calls while {work} matmul "
            "cases and model steps ran, so its empty fallback list proves nothing"
        )
    untracked = sorted(warned - tracked)
    if untracked:
        log.fail(
            f"fallback warnings name {', '.join(untracked)} but {module}.get_fallback_ops() does not: the two "
            "readings of CPU fallback disagree (ops ran on the host untracked)"
        )
    unwarned = sorted(tracked - warned)
    if unwarned:
        log.note(f"tracked as fallback but no fallback warning seen: {', '.join(unwarned)}")
