#!/usr/bin/env python3
"""Prints how long the multi-node verify-device takes for 1, 2 and 4 nodes on this machine, and the ratio 4 nodes /
1 node (issue 26's goal: at most 1.5x). Each node is its own `python -m neuron_smoke --device cpu` process on its
own loopback address (127.0.0.2 ..), the master on 127.0.0.2; a run's time is from starting the nodes to the last
one's exit. The fabric is the test release's (libfabric's tcp provider: needs `fi_info`, Debian's libfabric-bin).

Usage: scripts/bench-cluster.py [--repeat N] [--stages A,B] [--allreduce-max-bytes N] [--cpus-per-node C]
Uses NEURON_TORCH_PYTHON (default: this interpreter). Prints numbers; it is not a pass/fail test. On 2 cores, 4
nodes share them: the ratio measures this machine's contention as much as the harness. With --cpus-per-node C (root,
cgroup v1: tests/testbed/cpuquota.py) each node gets C CPUs of its own in every run, 1 node as 4, as cluster nodes
have; with 4 x C at most the cores, the ratio measures what the cluster adds.
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
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from neuron_torch.matrix import load_matrix  # noqa: E402
from neuron_torch.render import instance_facts  # noqa: E402
from tests.testbed import cpuquota  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        return int(probe.getsockname()[1])


def run(nodes: int, args: argparse.Namespace, folder: Path, env: dict[str, str]) -> tuple[float, float]:
    """One run of `nodes` nodes: its wall seconds and the mean CPU seconds of one node."""
    port, python = free_port(), os.environ.get("NEURON_TORCH_PYTHON", sys.executable)
    reports = Path(tempfile.mkdtemp(dir=folder))
    start = time.perf_counter()
    procs, groups = [], []
    for rank in range(nodes):
        cmd = [python, "-m", "neuron_smoke", "--device", "cpu", "--stages", args.stages, "--nnodes", str(nodes)]
        cmd += ["--node-rank", str(rank), "--master", f"127.0.0.2:{port}", "--local-addr", f"127.0.0.{rank + 2}"]
        cmd += ["--report-dir", str(reports), "--allreduce-max-bytes", str(args.allreduce_max_bytes)]
        join = None
        if args.cpus_per_node:
            groups.append(cpuquota.make(f"node{rank}", args.cpus_per_node))
            join = cpuquota.joiner(groups[-1])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      preexec_fn=join))  # fmt: skip
    codes, cpu = [], 0.0
    for proc in procs:  # wait4: each node's own CPU seconds (user + system), children included
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        codes.append(proc.returncode)
        cpu += usage.ru_utime + usage.ru_stime
    elapsed = time.perf_counter() - start
    for group in groups:
        cpuquota.remove(group)
    if any(codes):
        raise SystemExit(f"bench-cluster: a {nodes}-node run failed (exit codes {codes}); reports in {reports}")
    return elapsed, cpu / nodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--stages", default="environment,device,fabric,consistency,allreduce")
    parser.add_argument("--allreduce-max-bytes", type=int, default=1 << 20)
    parser.add_argument("--cpus-per-node", type=float, help="each node's own CPU quota (e.g. 0.5 on 2 cores)")
    args = parser.parse_args()
    if args.cpus_per_node is not None and (why_not := cpuquota.check(args.cpus_per_node)):
        raise SystemExit(f"bench-cluster: {why_not}")
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
    cores = args.cpus_per_node * 4 if args.cpus_per_node else os.cpu_count() or 1
    # Where N nodes share C cores, N * (one node's CPU seconds) / C is the least wall time any harness can reach.
    floor = max(1.0, 4 * cpus[4] / cores / medians[1])
    print(f"ratio 4 nodes / 1 node: {medians[4] / medians[1]:.2f}x (goal: at most 1.5x; {cores:g} CPU(s) for 4 "
          f"nodes, where 4 nodes' CPU alone sets a floor of {floor:.2f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
