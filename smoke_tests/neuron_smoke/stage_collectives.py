"""Stage 8: `torchrun --nproc_per_node=N` all_reduce over the backend's process group; sum = N(N+1)/2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch.distributed as dist

from neuron_smoke.collective_worker import MARKER
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import Skip

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def run(ctx: Context, log: StageLog) -> None:
    nproc = ctx.options.nproc
    backend = ctx.backend
    if not dist.is_available():
        raise Skip("torch.distributed is not available in this torch build")
    if backend.device_type != "cpu" and backend.device_count() < nproc:
        raise Skip(f"{backend.device_count()} {backend.name} device(s) visible, {nproc} needed for all_reduce")
    backend.import_module()
    pg = backend.process_group
    if pg not in dist.Backend.backend_list:
        log.fail(f"process-group backend {pg!r} is not registered (import {backend.module or 'torch'} registers it)")
        return
    # Leave the workers a margin inside the stage deadline so their own timeout reports first.
    budget = max(5.0, ctx.options.timeout_s - 5.0)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "neuron_smoke.collective_worker",
        "--device",
        backend.name,
        "--process-group",
        pg,
        "--timeout",
        str(budget),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    log.numbers = {"nproc": nproc, "process_group": pg, "command": " ".join(cmd)}
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        log.fail(f"torchrun all_reduce timed out after {budget:g}s")
        return
    _check(log, output, proc.returncode, nproc)


def _check(log: StageLog, output: str, returncode: int, nproc: int) -> None:
    results = [json.loads(line[len(MARKER) :]) for line in output.splitlines() if line.startswith(MARKER)]
    expected = nproc * (nproc + 1) / 2
    log.numbers["expected_sum"] = expected
    log.numbers["results"] = sorted(results, key=lambda r: r["rank"])
    if returncode != 0 or len(results) != nproc:
        tail = "\n".join(output.strip().splitlines()[-15:])
        log.fail(f"torchrun exited {returncode} with {len(results)}/{nproc} rank results: {tail}")
        return
    wrong = [r for r in results if r["value"] != expected]
    for r in wrong:
        log.fail(f"rank {r['rank']}: all_reduce sum {r['value']} != {expected}")
    log.summary = f"all_reduce over {nproc} ranks = {expected:g} on every rank" if not wrong else ""
