"""A real Slurm cluster for the tests, on hosts of the Ubuntu 24.04 twin: slurmctld on one host (`ctld`), slurmd on
each of the others (`n1`, `n2`, ...), munge on all of them, every daemon run by the host's systemd from its Debian
unit, as ParallelCluster and HyperPod nodes run theirs.

The hosts are tests/testbed/hosts.py's (systemd as PID 1, sshd with host keys, the `ubuntu` user, a file system
each) from one image with Debian trixie's Slurm 24.11 (`slurmctld`, `slurmd`, `slurm-client`), `munge` and
`libfabric-bin` added (`build_slurm_image`): the cluster's own Slurm, as on a real cluster, where ParallelCluster or
HyperPod installs it, not the roles. What each host has of its own: its hostname, its address (NodeAddr
127.0.27.N+1, named in every host's /etc/hosts as a cluster's DNS names it; slurmctld at 127.0.27.1), its slurmd
port, its spool, logs and /etc/default/neuron-healthcheck, its `fi_info` (Debian's libfabric), and the
`/usr/local/bin/verify-device` link that the AMI installs. What the hosts share, as a cluster's nodes do over NFS or
FSx: the cluster's folder, at the same path on every host (the reports, the jobs' output, /etc/slurm with the one
slurm.conf bound from its `etc-slurm`), and the image's munge key. Every host is lent this checkout and its .venv
read-only (hosts.lent_checkout: no torch with gloo exists here for the twin's Python 3.13).

A fault is injected into one host only by replacing a file of its own file system (`Cluster.inject`), which its job
steps, its prolog and its health check see and no other host does; `Cluster.heal` puts the healthy file back.

What is real: the daemons under systemd, munge's credentials, sbatch/srun/scontrol/sinfo (run on the controller
host, as a user's login node runs them), Slurm's scheduling, prolog, epilog and node states. Not imitated: separate
kernels and network stacks (the hosts share this machine's network, so each reaches the others on its loopback
address), cgroups (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none: Docker here runs cgroup v1, which
Slurm's cgroup plugins would need delegated).
"""

from __future__ import annotations

import functools
import json
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from neuron_smoke.slurm_health import Node, parse_node
from tests.testbed import hosts

ROOT = Path(__file__).resolve().parents[2]
HEALTHCHECK = ROOT / "scripts" / "slurm" / "neuron-healthcheck"
SBATCH = ROOT / "scripts" / "slurm" / "verify-cluster.sbatch"
ADDRESS = "127.0.27.{}"  # node i (1-based) at .(i+1); slurmctld at .1
CONTROLLER = "ctld"
SLURM_PACKAGES = ("slurmd", "slurmctld", "slurm-client", "munge", "libfabric-bin")
SLURM_DOCKERFILE = """\
FROM {base}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {packages} \\
 && systemctl disable slurmd.service slurmctld.service \\
 && mkdir -p {node_site}
"""
# Each host's own verify-device (the AMI's /usr/local/bin link) and an empty folder on the jobs' PYTHONPATH: the two
# places a fault replaces on one host.
VERIFY_DEVICE = "/usr/local/bin/verify-device"
NODE_SITE = "/var/lib/neuron-torch-test/site"
START_TIMEOUT_S = 60.0
REGISTER_TIMEOUT_S = 90.0  # a node registers once its health check is done: Slurm kills one at 60 s
CHECK_DIR = "cluster-check"  # under a twin cluster's folder: the reports' folder its Epilog reads
BOOTED = ("running", "degraded")  # `systemctl is-system-running --wait` once a host's start-up is done
HEALTHY = ".neuron-torch-healthy"  # the suffix an injected fault keeps the healthy file under


def usable() -> str:
    """Why no cluster can start here ('' when one can): Docker, which runs the hosts."""
    if shutil.which(hosts.DOCKER) is None:
        return f"{hosts.DOCKER} not installed: apt-get install docker.io (scripts/ci-prereqs.sh)"
    if hosts.docker("info", check=False).returncode != 0:
        return "dockerd is not running: scripts/ci-prereqs.sh starts it"
    return ""


@functools.cache
def build_slurm_image(base: str = hosts.DEFAULT_BASE) -> str:
    """The Slurm hosts' image: the host image of `base` with the cluster's Slurm, munge and libfabric."""
    host = hosts.build_host_image(base)
    dockerfile = SLURM_DOCKERFILE.format(base=host, packages=" ".join(SLURM_PACKAGES), node_site=NODE_SITE)
    return hosts.build_keyed(host.replace("neuron-torch-host:", "neuron-torch-slurm:"), host, dockerfile)


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"})


@dataclass(frozen=True)
class Job:
    id: str
    state: str  # scontrol's JobState once the job ended: COMPLETED, FAILED, ...
    exit_code: int  # the batch script's exit status (ExitCode=N:signal)
    signal: int
    shown: str  # the whole `scontrol show job -o` line


@dataclass
class Cluster:
    folder: Path  # shared by every host, at the same path
    nodes: tuple[str, ...]
    conf: Path  # the one slurm.conf, every host's /etc/slurm/slurm.conf
    fleet: hosts.Fleet

    def run(
        self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """ARGV on HOST (its file system, its hostname), as root, with ENV added to the host's own environment."""
        options = [f"--env={k}={v}" for k, v in (env or {}).items()]
        container = self.fleet.hosts[host].container
        return subprocess.run(
            [hosts.DOCKER, "exec", *options, container, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def command(self, *argv: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm command on the controller host."""
        proc = self.run(CONTROLLER, argv, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip() or proc.stdout}")
        return proc

    def node(self, name: str) -> Node:
        """`scontrol show node -o NAME`, parsed as the health check parses it."""
        return parse_node(self.command("scontrol", "show", "node", "-o", name).stdout)

    def state(self, name: str) -> str:
        return "+".join(sorted(self.node(name).states))

    def run_job(self, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Job:
        """`sbatch --parsable ARGV` on the controller host with ENV (sbatch's --export=ALL hands it to the job), then
        its state read with scontrol until it ends (every half second: sbatch --wait polls with a backoff that adds up
        to half a minute to each job)."""
        proc = self.run(CONTROLLER, ["sbatch", "--parsable", *argv], env, timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"sbatch: exit {proc.returncode}: {proc.stderr.strip()}")
        job_id = proc.stdout.strip().split(";")[0]
        deadline = time.monotonic() + timeout
        while True:
            text = self.command("scontrol", "show", "job", "-o", job_id).stdout
            state = re.search(r"\bJobState=(\S+)", text)
            code = re.search(r"\bExitCode=(\d+):(\d+)", text)
            if state and code and state.group(1) in FINISHED:
                return Job(job_id, state.group(1), int(code.group(1)), int(code.group(2)), text)
            if time.monotonic() > deadline:
                self.command("scancel", job_id, check=False)
                raise TimeoutError(f"job {job_id} not done after {timeout:g}s: {text.strip()}\n{self.logs()}")
            time.sleep(0.5)

    def wait_idle(self, names: Sequence[str] = (), timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        wanted = names or self.nodes
        while True:
            states = {n: self.state(n) for n in wanted}
            if all(s == "IDLE" for s in states.values()):  # not DRAIN, not NOT_RESPONDING
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not idle after {timeout:g}s: {states}\n{self.logs()}")
            time.sleep(0.5)

    def inject(self, name: str, source: Path, target: str) -> None:
        """Put SOURCE (a file or a folder of this machine) in place of TARGET on host NAME only (a fault of that
        host); the healthy TARGET is kept beside it for `heal`."""
        moved = self.run(name, ["mv", "-T", target, target + HEALTHY])
        if moved.returncode != 0:
            raise RuntimeError(f"inject into {name}: {moved.stderr.strip()}")
        hosts.docker("cp", str(source), f"{self.fleet.hosts[name].container}:{target}")

    def heal(self, name: str, target: str) -> None:
        proc = self.run(name, ["sh", "-c", 'rm -rf "$0" && mv -T "$0$1" "$0"', target, HEALTHY])
        if proc.returncode != 0:
            raise RuntimeError(f"heal {name}: {proc.stderr.strip()}")

    def lose(self, name: str) -> None:
        """Host NAME is lost at once, everything on it with it (docker kill: no shutdown, no daemon says goodbye)."""
        hosts.docker("kill", self.fleet.hosts[name].container)

    def revive(self, name: str) -> None:
        """Boot host NAME again, its file system as it was lost, and start its slurmd (the unit is not enabled: the
        cluster starts each node's itself)."""
        hosts.docker("start", self.fleet.hosts[name].container)
        deadline = time.monotonic() + START_TIMEOUT_S
        # Booted: systemd's state once its start-up jobs are done ("degraded" when some unit failed: slurmd, which
        # matters here, is started below). Before its bus is up, systemctl cannot connect at all.
        while (booted := self.run(name, ["systemctl", "is-system-running", "--wait"])).stdout.strip() not in BOOTED:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not boot: {booted.stdout.strip()} {booted.stderr.strip()}")
            time.sleep(0.3)
        _start_service(self, name, "slurmd.service")

    def logs(self) -> str:
        parts = []
        for host in (CONTROLLER, *self.nodes):
            tail = self.run(host, ["sh", "-c", "tail -n 25 /var/log/slurm/*.log"], timeout=30)
            parts.append(f"---- {host}\n{tail.stdout}{tail.stderr}")
        return "\n".join(parts)

    def stop(self) -> None:
        self.fleet.remove()


def _slurm_conf(nodes: tuple[str, ...], ports: list[int], settings: Mapping[str, str], cluster_name: str) -> str:
    lines = [
        f"ClusterName={cluster_name}",
        f"SlurmctldHost={CONTROLLER}({ADDRESS.format(1)})",
        f"SlurmctldPort={ports[0]}",
        "SlurmUser=slurm",  # Debian's package makes the user, and its state folder under /var/lib/slurm
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/linear",
        "SchedulerType=sched/builtin",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "MessageTimeout=20",
        *(f"{k}={v}" for k, v in settings.items()),
    ]
    for i, (name, port) in enumerate(zip(nodes, ports[1:], strict=True), start=2):
        lines.append(
            f"NodeName={name} NodeAddr={ADDRESS.format(i)} NodeHostname={name} Port={port} CPUs=1 State=UNKNOWN"
        )
    lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _start_service(running: Cluster, host: str, unit: str) -> None:
    started = running.run(host, ["systemctl", "start", unit], timeout=START_TIMEOUT_S)
    if started.returncode != 0:
        status = running.run(host, ["systemctl", "status", "--no-pager", "--lines=30", unit])
        raise RuntimeError(f"{unit} on {host} did not start: {started.stderr.strip()}\n{status.stdout}")


def _wait_for_controller(running: Cluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while running.command("scontrol", "ping", check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"slurmctld not answering after {START_TIMEOUT_S:g}s\n{running.logs()}")
        time.sleep(0.3)


@contextmanager
def cluster(
    folder: Path,
    nodes: int = 4,
    settings: Mapping[str, str] | None = None,
    etc_default: Mapping[str, str] | None = None,
    cpus_per_node: float | None = None,
) -> Iterator[Cluster]:
    """A running cluster of NODES nodes (n1..nN, all idle) with the slurm.conf SETTINGS added, and ETC_DEFAULT's files
    in every node's /etc/default; its hosts removed on exit. FOLDER is shared by every host at the same path. (Slurm
    gives a prolog and a health check an environment of its own, not the daemons': a program's settings come from
    files, as on a real node.) CPUS_PER_NODE (benchmarks): each node's host, and so its slurmd and every job step and
    health check it starts, limited to that many CPUs of its own (docker --cpus)."""
    folder.mkdir(parents=True, exist_ok=True)
    names = tuple(f"n{i}" for i in range(1, nodes + 1))
    conf = folder / "etc-slurm" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text(_slurm_conf(names, free_ports(nodes + 1), settings or {}, f"nt{secrets.token_hex(3)}"))
    addresses = {CONTROLLER: ADDRESS.format(1)} | {n: ADDRESS.format(i) for i, n in enumerate(names, start=2)}
    volumes = (*hosts.lent_checkout(), f"{folder}:{folder}", f"{conf.parent}:/etc/slurm:ro")
    fleet = hosts.Fleet(folder / "hosts", f"nt-slurm-{uuid.uuid4().hex[:6]}", image=build_slurm_image())
    running = Cluster(folder, names, conf, fleet)
    flags = () if cpus_per_node is None else (f"--cpus={cpus_per_node:g}",)
    defaults = {f"/etc/default/{name}": (text.encode(), 0o644) for name, text in (etc_default or {}).items()}
    try:
        fleet.start(CONTROLLER, volumes=volumes, addresses=addresses)
        for name in names:
            fleet.start(name, volumes=volumes, addresses=addresses, flags=flags)
            fleet.put(name, defaults, {VERIFY_DEVICE: str(ROOT / "scripts" / "verify-device.sh")})
        _start_service(running, CONTROLLER, "slurmctld.service")
        _wait_for_controller(running)
        for name in names:  # one at a time: each runs the HealthCheckProgram as it starts (Slurm allows it 60 s)
            _start_service(running, name, "slurmd.service")
            running.wait_idle([name], REGISTER_TIMEOUT_S)
        yield running
    finally:
        running.stop()


# --- neuron-torch on the cluster: the health check and the cluster check job, as the tests and the bench run them ---


def twin_settings(folder: Path) -> dict[str, str]:
    """verify-device's settings on every node (--device cpu, the test release's fabric facts, no cell, no device
    files): the health check reads them from /etc/default/neuron-healthcheck, the job from sbatch's environment.
    FOLDER is the cluster's shared one."""
    from neuron_torch.matrix import load_matrix
    from neuron_torch.render import instance_facts

    facts = folder / "test-release-facts.json"
    facts.write_text(json.dumps(instance_facts(load_matrix(ROOT / "constraints" / "test-matrix.toml"))))
    return {
        "NEURON_TORCH_PYTHON": sys.executable,
        "NEURON_SMOKE_DEVICE": "cpu",
        "NEURON_SMOKE_IMDS": "0",
        "NEURON_SMOKE_INSTANCE_FACTS": str(facts),
        "NEURON_SMOKE_DEFAULT_CELL_FILE": str(folder / "no-cell.json"),
        "NEURON_SMOKE_DEV_GLOB": str(folder / "no-dev" / "neuron*"),
    }


def twin_cluster(
    folder: Path, nodes: int, settings: Mapping[str, str], cpus_per_node: float | None = None
) -> AbstractContextManager[Cluster]:
    """A cluster whose HealthCheckProgram and Epilog are neuron-healthcheck (slurmd runs it as each node starts,
    and after each job), its settings in every node's /etc/default/neuron-healthcheck, and NEURON_TORCH_CLUSTER_DIR
    there the site's cluster check folder, FOLDER/CHECK_DIR: its Epilog drains the nodes a job there failed."""
    conf = {
        "HealthCheckProgram": str(HEALTHCHECK),
        "HealthCheckInterval": "3600",  # the tests rerun it as slurmd does (run_healthcheck)
        "HealthCheckNodeState": "ANY",
        "Epilog": str(HEALTHCHECK),
    }
    own = {**settings, "NEURON_TORCH_CLUSTER_DIR": str(folder / CHECK_DIR)}
    etc_default = {"neuron-healthcheck": "".join(f"{k}={v}\n" for k, v in own.items())}
    return cluster(folder, nodes, conf, etc_default, cpus_per_node)


def run_healthcheck(running: Cluster, name: str) -> subprocess.CompletedProcess[str]:
    """neuron-healthcheck as slurmd runs it: alone, as root on host NAME, with SLURMD_NODENAME only."""
    return running.run(name, ["env", "-i", f"SLURMD_NODENAME={name}", str(HEALTHCHECK)])


def run_verify_cluster(
    running: Cluster,
    settings: Mapping[str, str],
    nodes: int,
    out: Path,
    reports: Path,
    timeout: float,
    args: Sequence[str] = (),
    **extra: str,
) -> Job:
    """`sbatch -N NODES verify-cluster.sbatch [ARGS]`, output to OUT, the reports into REPORTS (both in the shared
    folder), EXTRA in its environment; each node runs its own /usr/local/bin/verify-device."""
    env = {
        **settings,
        "NEURON_TORCH_CLUSTER_DIR": str(reports),
        "NEURON_TORCH_VERIFY_DEVICE": VERIFY_DEVICE,
        "NEURON_TORCH_CLI": str(Path(sys.executable).parent / "neuron-torch"),
        "NEURON_TORCH_CLUSTER_STAGES": "environment,device,fabric,consistency,allreduce",
        **extra,
    }
    argv = [
        "-N",
        str(nodes),
        f"--output={out}",
        f"--chdir={out.parent}",
        str(SBATCH),
        "--allreduce-max-bytes",
        "65536",
        *args,
    ]
    return running.run_job(argv, env, timeout)
