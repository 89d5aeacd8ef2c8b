"""Stage 5: repeat the matmul and model work under op tracking and list every op that ran on the CPU."""

from __future__ import annotations

from collections import Counter
from typing import Any

from neuron_smoke import stage_matmul, stage_model
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import Skip


def normalize_op(name: str) -> str:
    """`aten::addmm.default` and `addmm` name the same op for --allow-fallback."""
    return name.removeprefix("aten::").split(".")[0]


def run(ctx: Context, log: StageLog) -> None:
    if not ctx.backend.tracks_fallback:
        raise Skip(f"{ctx.backend.name} has no CPU-fallback op tracking (ops run on the device or fail)")
    tracker: Any = ctx.backend.import_module()
    for needed in ("clear_op_tracking", "get_fallback_ops"):
        if not hasattr(tracker, needed):
            log.fail(f"{ctx.backend.module} has no {needed}(); cannot track CPU fallback")
            return
    tracker.clear_op_tracking()
    stage_matmul.run_cases(ctx)
    stage_model.train_step(ctx.shared["model_spec"], ctx.device, ctx)
    fallen = Counter(str(op) for op in tracker.get_fallback_ops())
    executed = tracker.get_executed_ops() if hasattr(tracker, "get_executed_ops") else None
    allowed = {normalize_op(op) for op in ctx.options.allow_fallback}
    disallowed = sorted(op for op in fallen if normalize_op(op) not in allowed)
    log.numbers = {
        "fallback_ops": dict(sorted(fallen.items())),
        "allowed": sorted(allowed),
        "disallowed": disallowed,
        "executed_op_calls": len(executed) if executed is not None else None,
    }
    if disallowed:
        log.fail(f"ops ran on the CPU: {', '.join(disallowed)} (allow with --allow-fallback {','.join(disallowed)})")
    log.summary = f"{sum(fallen.values())} fallback op call(s): {', '.join(sorted(fallen)) or 'none'}"
