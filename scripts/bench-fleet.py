#!/usr/bin/env python3
"""Benchmark: playbooks/verify.yml against 1 and against 8 SSH hosts (verify-device --device cpu); prints both times
and their ratio (goal: 8 hosts take at most 1.5x the time of one; Ansible's forks do the parallel work), and the
CPU-seconds each run cost, on the controller (ansible-playbook and its ssh clients) and in the hosts (their
containers' cgroups), so that the ratio can be judged against the machine's cores.

    .venv/bin/python scripts/bench-fleet.py [--image IMAGE] [--stages environment] [--hosts 8]

The hosts are tests/testbed/hosts.py's systemd + sshd containers (Ubuntu 24.04 twin) of one converged image: --image
reuses one (e.g. a host image converged earlier); without it one host is converged first with provision.yml to the
twin's cell against the test bed (scripts/testbed.sh build must have run), and that time is printed too. verify-device
runs the given stages only: the twin's torch is the test bed's fixture, so `environment` is the default (the compute
stages need real torch).
Reading the CPU: with C cores, N hosts cannot take less than (CPU-seconds of the N-host run) / C; when that floor
is above 1.5x the one-host time, the goal is out of reach of the machine, not of Ansible's parallelism.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.testbed.hosts import Fleet, fleet_cell  # noqa: E402

PLAYBOOK = REPO / ".venv-ansible" / "bin" / "ansible-playbook"
CPUACCT = Path("/sys/fs/cgroup/cpuacct/docker")  # cgroup v1 with docker's cgroupfs driver (this machine's)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def hosts_cpu(fleet: Fleet) -> float | None:
    """CPU-seconds the fleet's containers have used so far (None where their cgroups cannot be read)."""
    total = 0
    for host in fleet.hosts.values():
        full_id = subprocess.run(
            ["docker", "inspect", "--format", "{{.Id}}", host.container], capture_output=True, text=True
        ).stdout.strip()
        usage = CPUACCT / full_id / "cpuacct.usage"
        if not full_id or not usage.is_file():
            return None
        total += int(usage.read_text())
    return total / 1e9


@dataclass
class Run:
    wall: float
    rc: int
    controller_cpu: float
    hosts_cpu: float | None

    @property
    def cpu(self) -> float:
        return self.controller_cpu + (self.hosts_cpu or 0.0)

    def line(self, what: str) -> str:
        hosts = "n/a (no cgroup v1 cpuacct)" if self.hosts_cpu is None else f"{self.hosts_cpu:.1f} s"
        return (
            f"verify.yml, {what}: {self.wall:.1f} s (exit {self.rc}); CPU: controller {self.controller_cpu:.1f} s, "
            f"hosts {hosts}"
        )


def measured(fleet: Fleet, extra: dict[str, object]) -> Run:
    cpu_before, hosts_before = children_cpu(), hosts_cpu(fleet)
    wall, rc = playbook(fleet, "verify.yml", extra)
    hosts_after = hosts_cpu(fleet)
    on_hosts = None if hosts_before is None or hosts_after is None else hosts_after - hosts_before
    return Run(wall, rc, children_cpu() - cpu_before, on_hosts)


def playbook(fleet: Fleet, name: str, extra: dict[str, object]) -> tuple[float, int]:
    started = time.monotonic()
    result = subprocess.run(
        [str(PLAYBOOK), "-i", str(fleet.inventory()), f"playbooks/{name}", "-e", json.dumps(extra)],
        cwd=REPO / "ansible",
        capture_output=True,
        text=True,
        env={"PATH": f"{PLAYBOOK.parent}:/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1"},
    )
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-2000:], sep="\n", file=sys.stderr)
    return elapsed, result.returncode


def converge(folder: Path, prefix: str) -> str:
    from neuron_torch.matrix import load_matrix
    from neuron_torch.render import write_rendered
    from neuron_torch.render_ansible import ansible_vars_path

    matrix = load_matrix(REPO / "constraints" / "test-matrix.toml")
    write_rendered(matrix)
    testbed = REPO / ".testbed"
    fingerprint = tomllib.loads((testbed / "mirror.toml").read_text())["apt"]["key_fingerprint"]
    fleet = Fleet(folder / "converge", prefix)
    fleet.start("converge")
    cell = fleet_cell()
    extra = {
        "neuron_cell": cell, "neuron_repo_root": str(REPO), "neuron_release_vars": str(ansible_vars_path(matrix)),
        "neuron_repo_key_fingerprint": fingerprint, "neuron_lock_file": str(testbed / "locks" / f"{cell}.txt"),
        "neuron_verify_run": "never",
    }  # fmt: skip
    elapsed, rc = playbook(fleet, "provision.yml", extra)
    if rc != 0:
        fleet.remove()
        sys.exit(f"bench-fleet: the converge failed (exit {rc})")
    print(f"converge one host over SSH: {elapsed:.1f} s")
    image = fleet.commit("converge", f"neuron-torch-host-converged:{prefix}")
    fleet.remove()
    return image


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--image", help="a converged host image (default: converge one now)")
    parser.add_argument("--stages", default="environment", help="verify-device --stages (default: environment)")
    parser.add_argument("--hosts", type=int, default=8)
    args = parser.parse_args()
    prefix = f"nt-bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        image = args.image or converge(folder, prefix)
        fleet = Fleet(folder / "fleet", prefix, image=image)
        try:
            for index in range(args.hosts):
                fleet.start(f"host{index}")
            extra: dict[str, object] = {
                "neuron_verify_device": "cpu", "neuron_verify_extra_args": ["--stages", args.stages],
                "neuron_verify_summary": str(folder / "summary"), "neuron_verify_fetch_dir": str(folder / "reports"),
            }  # fmt: skip
            one = measured(fleet, {**extra, "neuron_hosts": "host0"})
            many = measured(fleet, {**extra, "neuron_hosts": "all"})
        finally:
            fleet.remove()
            if not args.image:
                subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True)
    print(one.line("1 host"))
    print(many.line(f"{args.hosts} hosts"))
    print(f"ratio {args.hosts}/1: {many.wall / one.wall:.2f} (goal <= 1.5; verify-device --stages {args.stages})")
    cores = len(os.sched_getaffinity(0))
    total, single = many.cpu, one.cpu
    print(
        f"CPU per host: {(total - single) / max(args.hosts - 1, 1):.1f} s more for each host after the "
        f"first; {args.hosts} hosts need {total:.1f} CPU-s: at least {total / cores:.1f} s on {cores} cores "
        f"({total / cores / one.wall:.2f}x one host's time)"
    )
    return 0 if one.rc == many.rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
