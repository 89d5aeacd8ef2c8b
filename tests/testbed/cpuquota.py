"""A CPU quota per simulated node, so that the benchmarks' nodes each have CPUs of their own, as cluster nodes do.

On this machine the twin's nodes (processes on loopback addresses, or the Slurm hosts' containers) share its few
cores: 4 nodes on 2 cores take at least twice one node's time however well the cluster code scales, so a 4-node /
1-node ratio measures the machine. With `--cpus-per-node C` a benchmark puts each node in a cgroup v1 `cpu` group of
its own limited to C CPUs (cpu.cfs_quota_us = C x cpu.cfs_period_us, the kernel's CFS bandwidth control,
Documentation/scheduler/sched-bwc.rst); with C x nodes <= the cores, a node runs as fast alone as beside the others,
and the ratio measures what the cluster adds (rendezvous, collectives, the slowest node). Children stay in their
parent's group. Needs root and the cgroup v1 cpu hierarchy (Docker's here). bench-cluster makes the groups here;
bench-slurm's hosts get the same limit from `docker --cpus`, and `check` tells both whether one can be set. Only
benchmarks use it; no test depends on it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/cpu")
PREFIX = "neuron-torch-bench"


class QuotaError(Exception):
    """No quota can be set here; the message says why."""


def usable(root: Path = ROOT) -> str:
    """Why no quota can be set here ('' when one can)."""
    if not (root / "cpu.cfs_quota_us").is_file():
        return f"no cgroup v1 cpu hierarchy at {root} (cpu.cfs_quota_us)"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable: run as root"
    return ""


def make(name: str, cpus: float, root: Path = ROOT) -> Path:
    """A cpu group `neuron-torch-bench-NAME` limited to `cpus` CPUs (an old one of that name is removed first)."""
    if not cpus > 0:
        raise QuotaError(f"--cpus-per-node must be above 0, not {cpus}")
    if "/" in name or not name:
        raise QuotaError(f"{name!r} is not a node name for a cgroup")
    if why := usable(root):
        raise QuotaError(f"cannot limit each node's CPUs: {why}")
    group = root / f"{PREFIX}-{name}"
    remove(group)
    group.mkdir()
    period = int((group / "cpu.cfs_period_us").read_text())
    (group / "cpu.cfs_quota_us").write_text(f"{max(1000, round(cpus * period))}\n")
    return group


def check(cpus: float, root: Path = ROOT) -> str:
    """Why a group of `cpus` CPUs cannot be made here ('' when it can): one is made and removed, as a benchmark does
    before it starts anything."""
    try:
        remove(make("check", cpus, root))
    except QuotaError as err:
        return str(err)
    return ""


def joiner(group: Path) -> Callable[[], None]:
    """A subprocess preexec_fn that moves the new process into `group` before it runs the program."""
    procs = group / "cgroup.procs"

    def join() -> None:
        procs.write_text(f"{os.getpid()}\n")

    return join


def remove(group: Path, timeout: float = 10) -> None:
    """Remove the group once its processes are gone (an exited process leaves it a moment later)."""
    deadline = time.monotonic() + timeout
    while group.is_dir():
        try:
            group.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                raise QuotaError(f"{group} still has processes after {timeout:.0f} s") from None
            time.sleep(0.1)
