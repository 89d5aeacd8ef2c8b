"""Stage 8: all_reduce over the backend's process group across N ranks (forked or torchrun); sum = N(N+1)/2."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from neuron_smoke import cores, launchers
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import Skip


def run(ctx: Context, log: StageLog) -> None:
    nproc = ctx.options.nproc
    backend = ctx.backend
    # Imported here, not at the top: suite.py imports every stage, and a torch without torch.distributed must still
    # run the stages a user selected (e.g. `--stages environment` on a host whose torch is not yet the real one).
    try:
        import torch.distributed as dist
    except ImportError as exc:  # a broken install (a build without it has the module, and is_available() False)
        log.fail(f"torch.distributed cannot be imported: {exc}")
        return
    if not dist.is_available():
        raise Skip("torch.distributed is not available in this torch build")
    rank_cores = _rank_cores(backend.name, nproc)
    if backend.device_type not in ("cpu", "neuron") and backend.device_count() < nproc:
        raise Skip(f"{backend.device_count()} {backend.name} device(s) visible, {nproc} needed for all_reduce")
    backend.import_module()
    pg = backend.process_group
    if pg not in dist.Backend.backend_list:
        log.fail(f"process-group backend {pg!r} is not registered (import {backend.module or 'torch'} registers it)")
        return
    # Leave the workers a margin inside the stage deadline so their own timeout reports first.
    budget = max(5.0, ctx.options.timeout_s - 5.0)
    launcher = ctx.launcher or launchers.TorchrunLauncher()
    log.numbers = {"nproc": nproc, "process_group": pg, "launcher": launcher.name}
    if rank_cores:
        log.numbers["rank_cores"] = list(rank_cores)
    with tempfile.TemporaryDirectory(prefix="neuron-smoke-collectives-") as result_dir:
        job = launchers.RankJob(nproc, backend.name, pg, budget, Path(result_dir), rank_cores)
        launched = launcher.launch(job, budget)
        log.numbers["command"] = launched.command
        results = [json.loads(f.read_text()) for f in sorted(Path(result_dir).glob("rank-*.json"))]
        output, returncode = launched.output, launched.returncode
    if launched.timed_out:
        log.fail(
            f"{launcher.name} all_reduce timed out after {budget:g}s{_who(results, nproc)}: {_tail(launched.output)}"
        )
        return
    _check(log, output, returncode, nproc, results, launcher.name)


def _rank_cores(backend: str, nproc: int) -> tuple[int, ...]:
    """On neuron, the NeuronCore each rank owns (planned before this process touched the device; see cores.py)."""
    if backend != "neuron":
        return ()
    plan = cores.current()
    if plan is None or len(plan.ranks) < nproc:
        have = len(plan.available) if plan else 0
        raise Skip(
            f"{have} NeuronCore(s) visible: all_reduce over {nproc} ranks needs {nproc} besides this process's own "
            f"(NeuronCores belong to one process); give the run at least {nproc + 1} (NEURON_RT_VISIBLE_CORES, or "
            "more --device nodes in a container)"
        )
    return plan.ranks


def _who(results: list[dict[str, Any]], nproc: int) -> str:
    """Which ranks did not answer (no result: hung or killed) and which gave up waiting for them ('' if none)."""
    reported = {int(r["rank"]) for r in results}
    silent = [r for r in range(nproc) if r not in reported]
    waited = sorted(int(r["rank"]) for r in results if r.get("phase") == "all_reduce")
    words = []
    if silent:
        words.append(f"rank {', '.join(map(str, silent))} did not answer")
    if waited:
        words.append(f"rank {', '.join(map(str, waited))} gave up waiting")
    return f" ({'; '.join(words)})" if words else ""


def _check(
    log: StageLog, output: str, returncode: int, nproc: int, results: list[dict[str, Any]], launcher: str
) -> None:
    expected = nproc * (nproc + 1) / 2
    answered = [r for r in results if "value" in r]
    log.numbers["expected_sum"] = expected
    log.numbers["results"] = sorted(results, key=lambda r: r["rank"])
    if returncode != 0 or len(answered) != nproc:
        errors = sorted({r["error"] for r in results if "error" in r})
        why = f"; {errors[0]}" if errors else ""
        log.fail(
            f"ranks exited {returncode} with {len(answered)}/{nproc} rank results{_who(results, nproc)}{why}: "
            f"{_tail(output)}"
        )
        return
    wrong = [r for r in answered if r["value"] != expected]
    for r in wrong:
        log.fail(f"rank {r['rank']}: all_reduce sum {r['value']} != {expected}")
    log.summary = f"all_reduce over {nproc} ranks ({launcher}) = {expected:g} on every rank" if not wrong else ""


def _tail(output: str) -> str:
    return "\n".join(output.strip().splitlines()[-15:])
