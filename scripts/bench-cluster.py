#!/usr/bin/env python3
"""Prints how long the multi-node verify-device takes for 1, 2 and 4 nodes on this machine, and the ratio 4 nodes /
1 node (issue 26's goal: at most 1.5x). Each node is its own `python -m neuron_smoke --device cpu` process on its
own loopback address (127.0.0.2 ..), the master on 127.0.0.2; a run's time is from starting the nodes to the last
one's exit. The fabric is the test release's (libfabric's tcp provider: needs `fi_info`, Debian's libfabric-bin).

Usage: scripts/bench-cluster.py [--repeat N] [--stages A,B] [--allreduce-max-bytes N]
Uses NEURON_TORCH_PYTHON (default: this interpreter). Prints numbers; it is not a pass/fail test. On 2 cores, 4
nodes share them: the ratio measures this machine's contention as much as the harness.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHONPATH = os.pathsep.join([str(ROOT / "src"), str(ROOT / "smoke_tests")])
sys.path.insert(0, str(ROOT / "src"))

from neuron_torch.matrix import load_matrix  # noqa: E402
from neuron_torch.render import instance_facts  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        return int(probe.getsockname()[1])


def run(nodes: int, args: argparse.Namespace, folder: Path, env: dict[str, str]) -> tuple[float, float]:
    """One run of `nodes` nodes: its wall seconds and the mean CPU seconds of one node."""
    port, python = free_port(), os.environ.get("NEURON_TORCH_PYTHON", sys.executable)
    reports = Path(tempfile.mkdtemp(dir=folder))
    start = time.perf_counter()
    procs = []
    for rank in range(nodes):
        cmd = [python, "-m", "neuron_smoke", "--device", "cpu", "--stages", args.stages, "--nnodes", str(nodes)]
        cmd += ["--node-rank", str(rank), "--master", f"127.0.0.2:{port}", "--local-addr", f"127.0.0.{rank + 2}"]
        cmd += ["--report-dir", str(reports), "--allreduce-max-bytes", str(args.allreduce_max_bytes)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    codes, cpu = [], 0.0
    for proc in procs:  # wait4: each node's own CPU seconds (user + system), children included
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        codes.append(proc.returncode)
        cpu += usage.ru_utime + usage.ru_stime
    elapsed = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"bench-cluster: a {nodes}-node run failed (exit codes {codes}); reports in {reports}")
    return elapsed, cpu / nodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--stages", default="environment,device,fabric,consistency,allreduce")
    parser.add_argument("--allreduce-max-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        folder = Path(tmp)
        facts = folder / "facts.json"
        facts.write_text(json.dumps(instance_facts(load_matrix(ROOT / "constraints" / "test-matrix.toml"))))
        env = {**os.environ, "PYTHONPATH": PYTHONPATH, "NEURON_SMOKE_INSTANCE_FACTS": str(facts)}
        env.update(NEURON_SMOKE_IMDS="0", NEURON_SMOKE_DEFAULT_CELL_FILE=str(folder / "no-cell.json"))
        medians, cpus = {}, {}
        for nodes in (1, 2, 4):
            runs = [run(nodes, args, folder, env) for _ in range(args.repeat)]
            medians[nodes] = statistics.median(wall for wall, _ in runs)
            cpus[nodes] = statistics.median(cpu for _, cpu in runs)
            each = ", ".join(f"{wall:.2f}" for wall, _ in runs)
            print(f"{nodes} node(s): {medians[nodes]:.2f}s (median of {args.repeat}: {each}); "
                  f"{cpus[nodes]:.2f} CPU-s per node")  # fmt: skip
    cores = os.cpu_count() or 1
    # Where N nodes share C cores, N * (one node's CPU seconds) / C is the least wall time any harness can reach.
    floor = max(1.0, 4 * cpus[4] / cores / medians[1])
    print(f"ratio 4 nodes / 1 node: {medians[4] / medians[1]:.2f}x (goal: at most 1.5x; {cores} CPU(s) here, where "
          f"4 nodes' CPU alone sets a floor of {floor:.2f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
