"""A real Slurm cluster for the tests: Debian's slurmctld and slurmd (Slurm 22.05) and munge, run as root on this
machine, one munge key, every file under one folder of the test's own.

Each daemon runs in its own UTS and mount namespace (`unshare --uts --mount`): slurmctld as host `ctld`, each slurmd
as its node (`n1`, `n2`, ...) with its own hostname, its own address (NodeAddr 127.0.27.N+1, a loopback address of
its own), its own port and spool, and a file system view of its own. Into every namespace the cluster binds what a
configured node has: an /etc/hosts naming every node (as a cluster's DNS resolves them), /etc/slurm holding the
cluster's slurm.conf (so slurmd, and scontrol in a health check, find it where Slurm looks), and an /etc/default
holding the files the test gives (`etc_default`, e.g. the health check's settings). A fault is injected into one
node only by a bind mount inside that node's namespace (`Cluster.inject`), which its job steps, its prolog and its
health check (all forked from its slurmd) see and no other node does; `Cluster.heal` takes it out again.

What is real: the daemons, munge's credentials, sbatch/srun/scontrol/sinfo, Slurm's scheduling, prolog and node
states. Not imitated: separate kernels and network stacks (the namespaces share this machine's network, so every node
reaches the others on loopback addresses), cgroups (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none: Docker
here runs cgroup v1, which Slurm's cgroup plugins would need delegated).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from neuron_smoke.slurm_health import Node, parse_node
from tests.testbed import cpuquota

ROOT = Path(__file__).resolve().parents[2]
HEALTHCHECK = ROOT / "scripts" / "slurm" / "neuron-healthcheck"
SBATCH = ROOT / "scripts" / "slurm" / "verify-cluster.sbatch"
DAEMONS = ("slurmctld", "slurmd", "munged", "unshare", "nsenter")
ADDRESS = "127.0.27.{}"  # node i (1-based) at .(i+1); slurmctld at .1
START_TIMEOUT_S = 60.0
REGISTER_TIMEOUT_S = 90.0  # a node registers once its health check is done: Slurm kills one at 60 s
BOUND = ("hosts", "slurm", "default")  # of /etc, bound over in every namespace
CHECK_DIR = "cluster-check"  # under a twin cluster's folder: the reports' folder its Epilog reads


def missing() -> list[str]:
    """The programs a cluster needs that are not installed (Debian: slurm-wlm, munge, util-linux)."""
    found = {name: shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin") for name in DAEMONS}
    return [name for name, path in found.items() if path is None]


def usable() -> str:
    """Why no cluster can start here ('' when one can): the programs, and root (slurmd runs jobs as their user)."""
    absent = missing()
    if absent:
        return f"{', '.join(absent)} not installed: apt-get install slurm-wlm munge (scripts/ci-prereqs.sh)"
    if os.geteuid() != 0:
        return "the Slurm daemons run as root here (SlurmUser=root): run the tests as root"
    return ""


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
    folder: Path
    nodes: tuple[str, ...]
    conf: Path
    pids: dict[str, int] = field(default_factory=dict)  # daemon name -> the unshare'd process (its namespaces)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    cpu_groups: list[Path] = field(default_factory=list)  # each slurmd's CPU quota group (benchmarks only)

    @property
    def env(self) -> dict[str, str]:
        """This machine's environment with SLURM_CONF pointing the Slurm commands at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def command(self, *argv: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip() or proc.stdout}")
        return proc

    def node(self, name: str) -> Node:
        """`scontrol show node -o NAME`, parsed as the health check parses it."""
        return parse_node(self.command("scontrol", "show", "node", "-o", name).stdout)

    def state(self, name: str) -> str:
        return "+".join(sorted(self.node(name).states))

    def run_job(self, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Job:
        """`sbatch --parsable ARGV`, then its state read with scontrol until it ends (every half second: sbatch
        --wait polls with a backoff that adds up to half a minute to each job)."""
        proc = subprocess.run(
            ["sbatch", "--parsable", *argv], env=dict(env), capture_output=True, text=True, timeout=60, check=False
        )
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

    def in_node(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run ARGV inside node NAME's namespaces (its hostname, its file system view) with ENV."""
        enter = ["nsenter", "-t", str(self.pids[name]), "-u", "-m", "--"]
        return subprocess.run(
            [*enter, *argv], env=dict(env or self.env), capture_output=True, text=True, timeout=timeout, check=False
        )

    def inject(self, name: str, source: Path, target: str) -> None:
        """Bind SOURCE over TARGET in node NAME only (a fault of that node)."""
        proc = self.in_node(name, ["mount", "--bind", str(source), target])
        if proc.returncode != 0:
            raise RuntimeError(f"inject into {name}: {proc.stderr.strip()}")

    def heal(self, name: str, target: str) -> None:
        proc = self.in_node(name, ["umount", target])
        if proc.returncode != 0:
            raise RuntimeError(f"heal {name}: {proc.stderr.strip()}")

    def logs(self) -> str:
        parts = []
        for log in sorted(self.folder.glob("log/*")):
            lines = log.read_text(errors="replace").splitlines()[-25:]
            parts.append(f"---- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for group in self.cpu_groups:
            cpuquota.remove(group)


def _slurm_conf(
    folder: Path, nodes: tuple[str, ...], ports: list[int], settings: Mapping[str, str], cluster_name: str
) -> str:
    lines = [
        f"ClusterName={cluster_name}",
        f"SlurmctldHost=ctld({ADDRESS.format(1)})",
        f"SlurmctldPort={ports[0]}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={folder}/munge/munge.socket",
        f"StateSaveLocation={folder}/state",
        f"SlurmdSpoolDir={folder}/spool/%n",
        f"SlurmctldPidFile={folder}/run/slurmctld.pid",
        f"SlurmdPidFile={folder}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={folder}/log/slurmctld.log",
        f"SlurmdLogFile={folder}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/linear",
        "SchedulerType=sched/builtin",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none",
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


def _node_etc(folder: Path, nodes: tuple[str, ...], conf: str, etc_default: Mapping[str, str]) -> Path:
    """FOLDER/etc: hosts, slurm/ and default/ as the namespaces see them at /etc/hosts, /etc/slurm and /etc/default
    (this machine's own, with the cluster's names, its slurm.conf and the files of ETC_DEFAULT added)."""
    etc = folder / "etc"
    own = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else "127.0.0.1 localhost\n"
    names = [f"{ADDRESS.format(1)} ctld"] + [f"{ADDRESS.format(i)} {n}" for i, n in enumerate(nodes, start=2)]
    shutil.copytree("/etc/slurm", etc / "slurm", symlinks=True)
    shutil.copytree("/etc/default", etc / "default", symlinks=True)
    (etc / "hosts").write_text(own.rstrip("\n") + "\n" + "\n".join(names) + "\n")
    (etc / "slurm" / "slurm.conf").write_text(conf)
    for name, text in etc_default.items():
        (etc / "default" / name).write_text(text)
    return etc


def _namespaced(hostname: str, etc: Path, argv: Sequence[str]) -> list[str]:
    """ARGV as host HOSTNAME: its own UTS and mount namespace, with the cluster's files of ETC bound over /etc's."""
    binds = " && ".join(f'mount --bind "$0/{name}" /etc/{name}' for name in BOUND)
    inner = f'hostname {hostname} && {binds} && exec "$@"'
    return ["unshare", "--uts", "--mount", "--propagation", "private", "--", "sh", "-c", inner, str(etc), *argv]


def _start_munge(folder: Path) -> subprocess.Popen[bytes]:
    munge = folder / "munge"
    munge.mkdir(mode=0o700)
    (munge / "munge.key").write_bytes(secrets.token_bytes(128))
    (munge / "munge.key").chmod(0o400)
    argv = ["munged", "--foreground", "--force", f"--socket={munge}/munge.socket", f"--key-file={munge}/munge.key"]
    argv += [f"--pid-file={munge}/munged.pid", f"--log-file={folder}/log/munged.log", f"--seed-file={munge}/seed"]
    log = (folder / "log" / "munged.out").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    _wait_for(lambda: (munge / "munge.socket").exists() or proc.poll() is not None, "munged's socket")
    if proc.poll() is not None:
        raise RuntimeError(f"munged exited {proc.returncode}: {(folder / 'log' / 'munged.out').read_text()}")
    return proc


def _wait_for(ready: Callable[[], bool], what: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:g}s")
        time.sleep(0.2)


@contextmanager
def cluster(
    folder: Path,
    nodes: int = 4,
    settings: Mapping[str, str] | None = None,
    etc_default: Mapping[str, str] | None = None,
    cpus_per_node: float | None = None,
) -> Iterator[Cluster]:
    """A running cluster of NODES nodes (n1..nN, all idle) with the slurm.conf SETTINGS added, and ETC_DEFAULT's files
    in every node's /etc/default; stopped on exit. (Slurm gives a prolog and a health check an environment of its
    own, not the daemons': a program's settings come from files, as on a real node.) CPUS_PER_NODE (benchmarks):
    each slurmd, and so every job step and health check it starts, limited to that many CPUs of its own
    (tests/testbed/cpuquota.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("log", "run", "state", "spool"):
        (folder / sub).mkdir()
    names = tuple(f"n{i}" for i in range(1, nodes + 1))
    text = _slurm_conf(folder, names, free_ports(nodes + 1), settings or {}, f"nt{secrets.token_hex(3)}")
    etc = _node_etc(folder, names, text, etc_default or {})
    conf = etc / "slurm" / "slurm.conf"
    run = Cluster(folder, names, conf)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "NEURON_"))}
    try:
        run.procs.append(_start_munge(folder))
        ctld = subprocess.Popen(
            _namespaced("ctld", etc, ["slurmctld", "-D", "-i"]),
            env=env,
            stdout=(folder / "log" / "slurmctld.out").open("wb"),
            stderr=subprocess.STDOUT,
        )
        run.procs.append(ctld)
        run.pids["ctld"] = ctld.pid
        _wait_for(
            lambda: ctld.poll() is not None or run.command("scontrol", "ping", check=False).returncode == 0,
            "slurmctld",
        )
        if ctld.poll() is not None:
            raise RuntimeError(f"slurmctld exited {ctld.returncode}:\n{run.logs()}")
        for name in names:  # one at a time: each runs the HealthCheckProgram as it starts (Slurm allows it 60 s)
            (folder / "spool" / name).mkdir()
            join = None
            if cpus_per_node is not None:
                run.cpu_groups.append(cpuquota.make(f"slurmd-{name}", cpus_per_node))
                join = cpuquota.joiner(run.cpu_groups[-1])
            proc = subprocess.Popen(
                _namespaced(name, etc, ["slurmd", "-D", "-N", name]),
                env=env,
                preexec_fn=join,
                stdout=(folder / "log" / f"slurmd-{name}.out").open("wb"),
                stderr=subprocess.STDOUT,
            )
            run.procs.append(proc)
            run.pids[name] = proc.pid
            run.wait_idle([name], REGISTER_TIMEOUT_S)
        yield run
    finally:
        run.stop()


# --- neuron-torch on the cluster: the health check and the cluster check job, as the tests and the bench run them ---


def twin_settings(folder: Path) -> dict[str, str]:
    """verify-device's settings on every node (--device cpu, the test release's fabric facts, no cell, no device
    files): the health check reads them from /etc/default/neuron-healthcheck, the job from sbatch's environment."""
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
    """neuron-healthcheck as slurmd runs it: alone, in node NAME's namespaces, with SLURMD_NODENAME only."""
    return subprocess.run(
        ["nsenter", "-t", str(running.pids[name]), "-u", "-m", "--", str(HEALTHCHECK)],
        env={"SLURMD_NODENAME": name},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


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
    """`sbatch -N NODES verify-cluster.sbatch [ARGS]`, output to OUT, the reports into REPORTS, EXTRA in its
    environment."""
    env = {
        **running.env,
        **settings,
        "NEURON_TORCH_CLUSTER_DIR": str(reports),
        "NEURON_TORCH_VERIFY_DEVICE": str(ROOT / "scripts" / "verify-device.sh"),
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
