#!/usr/bin/env python3
"""Prints the Slurm path's times on the test bed's real Slurm cluster (tests/testbed/slurm.py): the node health check
(scripts/slurm/neuron-healthcheck) per node, run as slurmd runs it, and the cluster check job
(scripts/slurm/verify-cluster.sbatch) on 1 node and on 4, with the ratio 4 nodes / 1 node (issue 27's goals: a
health check under 10 s on the CPU twin; the 4-node job at most 1.5x one node). A job's time is from sbatch to the
end scontrol reports (read every half second).

Usage: scripts/bench-slurm.py [--repeat N] [--cpus-per-node C]
Needs a running dockerd (the cluster's hosts are containers of the Ubuntu twin) and the test bed's base images
(scripts/testbed.sh build). Prints numbers; it is not a pass/fail test. On 2 cores, 4 nodes share them: the ratio
measures this machine's contention as much as the job. With --cpus-per-node C (docker --cpus, the kernel's CFS
bandwidth control, as tests/testbed/cpuquota.py sets for bench-cluster) each node's host, and so its slurmd and all
it starts, gets C CPUs of its own, the same in the 1-node job as in the 4-node one, as cluster nodes have; with 4 x C
at most the cores, the ratio measures what the cluster adds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src"), str(ROOT / "smoke_tests")]

from tests.testbed import cpuquota, slurm  # noqa: E402


def timed_job(cluster: slurm.Cluster, settings: dict[str, str], folder: Path, nodes: int, run: int) -> float:
    name = f"{nodes}-nodes-{run}"
    start = time.monotonic()
    job = slurm.run_verify_cluster(
        cluster, settings, nodes, folder / f"job-{name}.out", folder / f"reports-{name}", 600
    )
    took = time.monotonic() - start
    if job.exit_code != 0:
        raise SystemExit(f"bench-slurm: the {nodes}-node job ended {job.state}, exit {job.exit_code}")
    return took


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=1, help="jobs of each size (1)")
    p.add_argument("--cpus-per-node", type=float, help="each node's own CPU quota (e.g. 0.5 on 2 cores)")
    args = p.parse_args()
    why_not = slurm.usable() or (args.cpus_per_node is not None and cpuquota.check(args.cpus_per_node))
    if why_not:
        print(f"bench-slurm: error: {why_not}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-slurm.") as tmp:
        folder = Path(tmp)
        settings = slurm.twin_settings(folder)
        start = time.monotonic()
        with slurm.twin_cluster(folder, 4, settings, args.cpus_per_node) as cluster:
            print(f"4 nodes up (slurmd ran each one's health check as it started): {time.monotonic() - start:.1f}s")
            for name in cluster.nodes:
                start = time.monotonic()
                check = slurm.run_healthcheck(cluster, name)
                print(f"health check {name}: {time.monotonic() - start:.1f}s (exit {check.returncode})")
            one = [timed_job(cluster, settings, folder, 1, r) for r in range(args.repeat)]
            four = [timed_job(cluster, settings, folder, 4, r) for r in range(args.repeat)]
    m1, m4 = statistics.median(one), statistics.median(four)
    own = f"; {args.cpus_per_node:g} CPU(s) per node" if args.cpus_per_node else ""
    print(f"verify-cluster job, 1 node: {m1:.1f}s; 4 nodes: {m4:.1f}s; 4 nodes / 1 node: {m4 / m1:.2f}x{own}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
