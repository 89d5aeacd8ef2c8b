#!/usr/bin/env python3
"""Prints the compile stage's numbers for the default model on the simulated neuron device: the cold first call
(fresh process, empty compile cache), the warm-cache first call (fresh process, the cache the cold run filled) and the
steady state, each run of verify-device with every runtime rule of tests/simdevice/README.md on.

Usage: scripts/bench-compile-sim.py [--repeat N] [extra verify-device options...]
The simulated device's compile latencies come from NEURON_SIM_COMPILE_MS (eager op, default 20),
NEURON_SIM_GRAPH_COMPILE_MS (torch.compile graph, default 300) and NEURON_SIM_CACHE_LOAD_MS (default 1).
Uses NEURON_TORCH_PYTHON (default: this interpreter). Prints numbers; it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "tests" / "simdevice" / "site"
LATENCY_ENV = ("NEURON_SIM_COMPILE_MS", "NEURON_SIM_GRAPH_COMPILE_MS", "NEURON_SIM_CACHE_LOAD_MS")


def build_simulated_device() -> None:
    spec = importlib.util.spec_from_file_location("neuron_sim_builder", SITE / "neuron_sim.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build()


def one_run(python: str, extra: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-compile-sim-") as tmp:
        work = Path(tmp)
        dev = work / "dev"
        dev.mkdir()
        for i in range(2):
            (dev / f"neuron{i}").touch()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_RT_", "TORCH_NEURONX_"))}
        env.update(
            NEURON_TORCH_PYTHON=python, NEURON_SMOKE_IMDS="0", PYTHONPATH=str(SITE),
            NEURON_SMOKE_DEV_GLOB=str(dev / "neuron*"), NEURON_SIM_DEV_DIR=str(dev),
            NEURON_SIM_RUNTIME_DIR=str(work / "runtime"), TORCH_NEURONX_NEFF_CACHE_DIR=str(work / "neff"),
            NEURON_SMOKE_DEFAULT_CELL_FILE=str(work / "no-cell.json"),
        )  # fmt: skip
        report = work / "report.json"
        cmd = [str(REPO / "scripts" / "verify-device.sh"), "--device", "neuron", "--stages",
               "environment,device,model,compile", "--report", str(report), *extra]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"verify-device exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        stage = next(s for s in json.loads(report.read_text())["stages"] if s["name"] == "compile")
        numbers: dict[str, float] = stage["numbers"]
        return numbers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args, extra = parser.parse_known_args()
    python = os.environ.get("NEURON_TORCH_PYTHON", sys.executable)
    build_simulated_device()
    runs = [one_run(python, extra) for _ in range(args.repeat)]
    latencies = {k: os.environ.get(k, "default") for k in LATENCY_ENV}
    print("simulated compile latencies (ms): " + ", ".join(f"{k}={v}" for k, v in latencies.items()))

    def line(label: str, key: str, unit: str) -> None:
        values = [r[key] for r in runs]
        shown = ", ".join(f"{v:.3g}" for v in values)
        print(f"{label:<46} median {statistics.median(values):8.3g} {unit}  runs {shown}")

    line("cold first call (new process, empty cache)", "cold_first_call_s", "s")
    line("warm-cache first call (new process)", "warm_first_call_s", "s")
    line("first call in verify-device (training step)", "first_call_s", "s")
    line("steady state (compiled forward, per call)", "steady_median_ms", "ms")
    line("eager (forward, per call)", "eager_median_ms", "ms")
    hits, stored = [r["warm_cache_hit"] for r in runs], [r["cold_graphs_compiled"] for r in runs]
    print(f"warm run hit the cache: {hits}; graphs the cold run compiled: {stored}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
