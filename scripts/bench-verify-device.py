#!/usr/bin/env python3
"""Prints how long a full `verify-device --device cpu` run takes against a baseline of `import torch` plus one
1024x1024x1024 float32 matmul, each in a fresh process (goal: the full run at most 2.5x the baseline).

With --clean-runs N (and --sim-runs M) it instead runs N full CPU runs (and M full runs on the simulated neuron
device of tests/simdevice, which must be built: `pytest tests/integration/smoke` builds it) and prints how many
failed (goal: 0: no false alarm), naming the failed stages of each failure. --autocast-runs K adds K simulated runs
computing float32 matmuls at bfloat16 input precision (NEURON_SIM_INJECT=fp32_as_bf16, neuronx-cc's default).

Usage: scripts/bench-verify-device.py [--repeat N | --clean-runs N [--sim-runs M] [--autocast-runs K]] [extra
verify-device options...]
Uses NEURON_TORCH_PYTHON (default: this interpreter). Prints numbers; it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = "import torch; a = torch.randn(1024, 1024); b = torch.randn(1024, 1024); (a @ b).sum().item()"
sys.path.insert(0, str(HERE.parent))  # the repository root: the simulated device's environment

from tests.simdevice.environment import sim_environment  # noqa: E402

# The simulated device computes on the host: a small throughput size (its peak is the test release's, in its env).
SIM_ARGS = ["--device", "neuron", "--throughput-size", "256", "--expected-devices", "8"]


def timed(cmd: list[str], env: dict[str, str], cpu: list[float] | None = None) -> tuple[float, int]:
    """Wall seconds and exit code; appends the CPU seconds (user + system, the process tree) to `cpu` if given."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return wall, proc.returncode


def failed_stages(cmd: list[str], env: dict[str, str]) -> tuple[float, list[str]]:
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
        report = Path(tmp) / "report.json"
        seconds, rc = timed([*cmd, "--report", str(report)], env)
        if rc == 0:
            return seconds, []
        stages = json.loads(report.read_text())["stages"] if report.exists() else []
        failed = [f"{s['name']}: {s['failures'][0][:200]}" for s in stages if s["status"] == "fail"]
        return seconds, failed or [f"exit {rc}, no report"]


def clean_runs(label: str, n: int, cmd: list[str], env: dict[str, str]) -> int:
    failures = 0
    times = []
    for i in range(n):
        seconds, failed = failed_stages(cmd, env)
        times.append(seconds)
        if failed:
            failures += 1
            print(f"  {label} run {i + 1}: FAILED: {'; '.join(failed)}", flush=True)
    if times:
        print(f"{label}: {failures} failed of {n} clean runs (median {statistics.median(times):.1f}s a run)")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clean-runs", type=int, help="count failures in N clean CPU runs instead of timing")
    parser.add_argument("--sim-runs", type=int, default=0, help="with --clean-runs: M runs on the simulated device")
    parser.add_argument("--autocast-runs", type=int, default=0, help="with --clean-runs: K of them with fp32_as_bf16")
    args, extra = parser.parse_known_args()
    python = os.environ.get("NEURON_TORCH_PYTHON", sys.executable)
    env = {**os.environ, "NEURON_TORCH_PYTHON": python, "NEURON_SMOKE_IMDS": os.environ.get("NEURON_SMOKE_IMDS", "0")}
    verify = [str(HERE / "verify-device.sh"), *extra]
    if args.clean_runs is not None:
        with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
            failures = clean_runs("cpu", args.clean_runs, [*verify, "--device", "cpu"], env)
            sim_env = sim_environment(env, Path(tmp))
            failures += clean_runs("simulated neuron", args.sim_runs, [*verify, *SIM_ARGS], sim_env)
            autocast = {**sim_env, "NEURON_SIM_INJECT": "fp32_as_bf16"}
            failures += clean_runs("simulated neuron, fp32_as_bf16", args.autocast_runs, [*verify, *SIM_ARGS], autocast)
        return 1 if failures else 0
    base: list[float] = []
    full: list[float] = []
    base_cpu: list[float] = []
    full_cpu: list[float] = []
    for _ in range(args.repeat):
        base.append(timed([python, "-c", BASELINE], env, base_cpu)[0])
        seconds, rc = timed([*verify, "--device", "cpu"], env, full_cpu)
        if rc != 0:
            print(f"verify-device exited {rc}; run it directly to see why", file=sys.stderr)
            return rc
        full.append(seconds)
    b, f = statistics.median(base), statistics.median(full)
    print(f"baseline (import torch + 1024^3 matmul): median {b:.2f}s  runs {', '.join(f'{x:.2f}' for x in base)}")
    print(f"verify-device --device cpu (all stages): median {f:.2f}s  runs {', '.join(f'{x:.2f}' for x in full)}")
    print(f"ratio: {f / b:.2f}x (goal <= 2.5x)")
    # CPU seconds (all threads and child processes): steadier than wall time on a machine others share.
    bc, fc = statistics.median(base_cpu), statistics.median(full_cpu)
    print(f"cpu seconds: baseline median {bc:.2f}s, verify-device median {fc:.2f}s, ratio {fc / bc:.2f}x")
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
