#!/usr/bin/env python3
"""Benchmark: playbooks/verify.yml against 1 and against 8 SSH hosts (verify-device --device cpu); prints both times
and their ratio (goal: 8 hosts take at most 1.5x the time of one; Ansible's forks do the parallel work).

    .venv/bin/python scripts/bench-fleet.py [--image IMAGE] [--stages environment,matmul] [--hosts 8]

The hosts are tests/testbed/hosts.py's systemd + sshd containers of one converged image: --image reuses one (e.g. a
host image converged earlier); without it one host is converged first with provision.yml against the test bed
(scripts/testbed.sh build must have run), and that time is printed too. verify-device runs the given stages only:
on a small machine the full CPU run of eight hosts at once measures the CPU, not the fleet code.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.testbed.hosts import Fleet  # noqa: E402

PLAYBOOK = REPO / ".venv-ansible" / "bin" / "ansible-playbook"
CELL = "2.13-py3.11-debian12"


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
    extra = {
        "neuron_cell": CELL, "neuron_repo_root": str(REPO), "neuron_release_vars": str(ansible_vars_path(matrix)),
        "neuron_repo_key_fingerprint": fingerprint, "neuron_lock_file": str(testbed / "locks" / f"{CELL}.txt"),
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
    parser.add_argument("--stages", default="environment,matmul", help="verify-device --stages (environment,matmul)")
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
            one, rc_one = playbook(fleet, "verify.yml", {**extra, "neuron_hosts": "host0"})
            many, rc_many = playbook(fleet, "verify.yml", {**extra, "neuron_hosts": "all"})
        finally:
            fleet.remove()
            if not args.image:
                subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True)
    print(f"verify.yml, 1 host: {one:.1f} s (exit {rc_one})")
    print(f"verify.yml, {args.hosts} hosts: {many:.1f} s (exit {rc_many})")
    print(f"ratio {args.hosts}/1: {many / one:.2f} (goal <= 1.5; verify-device --stages {args.stages})")
    return 0 if rc_one == rc_many == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
