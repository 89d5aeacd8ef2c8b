"""The Slurm path on a real Slurm cluster (tests/testbed/slurm.py: slurmctld and four slurmd on hosts of the Ubuntu
24.04 twin, each under its host's systemd, with munge): the cluster check job (scripts/slurm/verify-cluster.sbatch,
submitted with the real sbatch) and the node health check (scripts/slurm/neuron-healthcheck, Slurm's
HealthCheckProgram, which slurmd runs as each node starts, and its Epilog, which drains the nodes a cluster check job
failed).

verify-device runs on --device cpu with the test release's fabric provider (`tcp`, constraints/test-matrix.toml, from
its rendered instance facts), as in tests/integration/smoke/test_cluster.py, against each host's own `fi_info`
(Debian's libfabric). The fault is that file's "no usable fabric provider", injected into one host only: an `fi_info`
answering -61, as libfabric does without the provider, put in place of that host's. Each check the test reruns runs
the way slurmd runs it: the program alone, as root on the node's host, with the one variable Slurm gives it
(SLURMD_NODENAME).

The cluster faults are test_cluster.py's too, with its injectors (cluster_site) and its second torch install
(fake_torch), put on one host by filling the empty folder on the job's PYTHONPATH (slurm.NODE_SITE) on that host
alone; the node that never joins has its own /usr/local/bin/verify-device replaced.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "smoke_tests"))
from tests.integration.smoke.conftest import processes_tagged
from tests.integration.smoke.test_cluster import SITE, fake_torch
from tests.testbed import slurm  # (it reads nodes with neuron_smoke.slurm_health's parser, on that path)

HEALTHCHECK = slurm.HEALTHCHECK
NODES = 4
FI_INFO = "/usr/bin/fi_info"  # the hosts' own, from Debian's libfabric-bin
WHY_NOT = slurm.usable()
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT)
JOB_TIMEOUT = 300.0  # a ceiling for a 4-node job on a busy 2-core machine, not a speed check


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slurm")


@pytest.fixture(scope="module")
def settings(folder: Path) -> dict[str, str]:
    return slurm.twin_settings(folder)


@pytest.fixture(scope="module")
def cluster(folder: Path, settings: dict[str, str]) -> Iterator[slurm.Cluster]:
    start = time.monotonic()
    with slurm.twin_cluster(folder, NODES, settings) as running:
        print(f"cluster up, every node's health check passed: {time.monotonic() - start:.1f}s")
        yield running


@pytest.fixture(autouse=True)
def undrained(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, a node still drained (a test that failed before its own resume) is resumed, so the tests after
    it keep their four nodes instead of each waiting out its job's timeout; every test resumes what it drains."""
    yield
    if WHY_NOT or "cluster" not in request.fixturenames:
        return
    cluster: slurm.Cluster = request.getfixturevalue("cluster")
    left = [n for n in cluster.nodes if cluster.node(n).drained]
    if left:
        print(f"resuming {', '.join(left)}, left drained by {request.node.name}")
        cluster.command("scontrol", "update", f"NodeName={','.join(left)}", "State=RESUME")


@pytest.fixture
def no_provider(folder: Path) -> Path:
    script = folder / "fi_info-no-provider"
    script.write_text("#!/bin/sh\necho 'fi_getinfo: -61' >&2\nexit 61\n")
    script.chmod(0o755)
    return script


def submit(
    cluster: slurm.Cluster,
    settings: dict[str, str],
    folder: Path,
    name: str,
    args: tuple[str, ...] = (),
    reports: Path | None = None,
    **extra: str,
) -> tuple[slurm.Job, str, Path]:
    """`sbatch -N 4 verify-cluster.sbatch ARGS`, waited for, EXTRA added to its environment: (the ended job, its
    output, the reports' folder: REPORTS, else one of its own, which the Epilog does not read)."""
    reports = reports or folder / f"reports-{name}"
    out = folder / f"job-{name}.out"
    start = time.monotonic()
    job = slurm.run_verify_cluster(cluster, settings, NODES, out, reports, JOB_TIMEOUT, args, **extra)
    print(f"job {name}: {job.state}, exit {job.exit_code} in {time.monotonic() - start:.1f}s")
    text = out.read_text() if out.exists() else ""
    print(text)
    return job, text, reports


def healthcheck(cluster: slurm.Cluster, *names: str) -> dict[str, subprocess.CompletedProcess[str]]:
    """The health check on each node in turn, as slurmd runs it (slurm.run_healthcheck)."""
    done = {}
    for name in names:
        start = time.monotonic()
        done[name] = slurm.run_healthcheck(cluster, name)
        took = time.monotonic() - start
        print(f"---- health check {name}: exit {done[name].returncode} in {took:.1f}s\n{done[name].stderr[-1500:]}")
    return done


def test_the_cluster_is_twin_hosts_each_daemon_run_by_its_hosts_systemd(cluster: slurm.Cluster) -> None:
    """Read back from each host: its own hostname and address, the twin's os-release, its Slurm daemon and munge as
    active systemd units (the daemon a child of PID 1), and one Slurm version across the cluster."""
    script = (
        'hostname; getent hosts "$(hostname)" | cut -d" " -f1; . /etc/os-release; echo "$PRETTY_NAME"; '
        'systemctl is-active "$0.service" munge.service; ps -o ppid= -p "$(systemctl show -p MainPID --value "$0")"; '
        '"$0" -V'
    )
    versions = set()
    for i, host in enumerate((slurm.CONTROLLER, *cluster.nodes), start=1):
        daemon = "slurmctld" if host == slurm.CONTROLLER else "slurmd"
        read = cluster.run(host, ["sh", "-c", script, daemon])
        lines = [line.strip() for line in read.stdout.splitlines()]
        assert lines[:6] == [host, slurm.ADDRESS.format(i), "Ubuntu 24.04 LTS", "active", "active", "1"], read
        versions.add(lines[6])
    for name in cluster.nodes:  # what each slurmd registered with the controller
        shown = cluster.command("scontrol", "show", "node", "-o", name).stdout
        versions.add("slurm-wlm " + re.search(r"\bVersion=(\S+)", shown).group(1))  # type: ignore[union-attr]
    assert len(versions) == 1 and versions.pop().startswith("slurm-wlm 24.11."), versions


def test_a_healthy_cluster_job_exits_0_and_every_node_stays_idle(
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path
) -> None:
    job, output, reports = submit(cluster, settings, folder, "healthy")
    assert (job.state, job.exit_code) == ("COMPLETED", 0), cluster.logs()
    assert f"cluster: PASS, all {NODES} node(s) passed" in output
    table = json.loads((reports / "cluster-report.json").read_text())
    assert table["passed"] is True
    assert sorted(n["host"] for n in table["nodes"]) == list(cluster.nodes)  # one task on each node, on its host
    cluster.wait_idle(timeout=30)  # none drained (a node that is not idle stays so, and this fails)


def test_a_node_without_its_fabric_fails_the_job_and_only_it_is_drained_then_resumed(
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path, no_provider: Path
) -> None:
    cluster.inject("n3", no_provider, FI_INFO)
    try:
        job, output, reports = submit(cluster, settings, folder, "no-fabric")
        assert (job.state, job.exit_code) == ("FAILED", 1)
        assert "failed: node 2" in output and re.search(r"^2 +n3 +FAIL ", output, re.M)  # n3: the third, rank 2
        table = json.loads((reports / "cluster-report.json").read_text())
        bad = [n for n in table["nodes"] if n["verdict"] != "PASS"]
        assert [(n["host"], n["stages"]["fabric"]) for n in bad] == [("n3", "fail")]

        checks = healthcheck(cluster, *cluster.nodes)
        assert {name: c.returncode for name, c in checks.items()} == {"n1": 0, "n2": 0, "n3": 1, "n4": 0}
        drained = cluster.node("n3")
        assert drained.drained and drained.reason.startswith("neuron-torch: fabric: `fi_info -p tcp` lists no tcp")
        assert len(drained.reason) <= 120
        assert not any(cluster.node(n).drained for n in ("n1", "n2", "n4"))
    finally:
        cluster.heal("n3", FI_INFO)
    assert healthcheck(cluster, "n3")["n3"].returncode == 0
    assert not cluster.node("n3").drained  # resumed: this check drained it
    cluster.wait_idle(timeout=30)


def injector_site(folder: Path, name: str) -> Path:
    """A PYTHONPATH folder whose sitecustomize turns test_cluster.py's injector NAME on (cluster_site)."""
    site = folder / f"{name}-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        f"import os, runpy\nos.environ['NEURON_CLUSTER_INJECT'] = {name!r}\n"
        f"runpy.run_path({str(SITE / 'sitecustomize.py')!r})\n"
    )
    return site


def never_starts(folder: Path) -> Path:
    """A verify-device that exits at once, before joining: the node never joins."""
    script = folder / "verify-device-never-joins"
    script.write_text("#!/bin/sh\necho 'verify-device: (injected) exits before joining' >&2\nexit 1\n")
    script.chmod(0o755)
    return script


def fault_env() -> tuple[str, dict[str, str]]:
    """A fault run's job environment: its stages, the hosts' own empty folder on PYTHONPATH (where a fault is put),
    and a tag of its own, by which the test finds the job's processes on any host: (the tag, the environment)."""
    tag = f"NEURON_SMOKE_TEST_TAG_{uuid.uuid4().hex}"
    stages = "device,fabric,consistency,allreduce"
    return tag, {"PYTHONPATH": slurm.NODE_SITE, "NEURON_TORCH_CLUSTER_STAGES": stages, tag: "1"}


# Per fault run: {node: (what is put on that node's host, in place of what)} with the drain reason each node must get,
# and the job's extra verify-device arguments. One run for the faults whose stages do not need each other (as
# test_cluster.py shares them), one for the node that never joins (a short join timeout: the others wait that long).
FAULTS = {
    "drift": (
        {"n2": "torch", "n3": "other_graph", "n4": "wrong_value"},
        {
            "n2": "neuron-torch: consistency: torch differs: this node (node 1) has 2.13.1",
            "n3": "neuron-torch: consistency: graph differs: this node (node 2)",
            "n4": "neuron-torch: allreduce: this node (node 3) contributed 104 instead of 4",
        },
        (),
    ),
    "never-joins": (
        {"n4": "never_starts"},
        {"n4": "neuron-torch: join: did not join the cluster check (job {job}) within 6s"},
        ("--join-timeout", "6"),
    ),
}


@pytest.mark.parametrize("run", list(FAULTS))
def test_a_cluster_fault_fails_the_job_and_the_epilog_drains_only_that_node_with_its_stage(
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path, run: str
) -> None:
    """Each fault on its own node of the 4-node job, reports in the site's folder (the Epilog's): the job fails naming
    those nodes; Slurm's Epilog (neuron-healthcheck) drains each with its stage's reason and no other node; nothing
    of the job is left running. The node health check cannot see a cluster stage, so it leaves such a drain alone
    even once the fault is gone; the operator resumes the fixed nodes and the rerun job passes, every node idle."""
    faults, reasons, args = FAULTS[run]
    placed = {}
    for name, fault in faults.items():
        if fault == "never_starts":
            placed[name] = (never_starts(folder), slurm.VERIFY_DEVICE)
        elif fault == "torch":
            placed[name] = (fake_torch(folder / run, "2.13.1"), slurm.NODE_SITE)
        else:
            placed[name] = (injector_site(folder, fault), slurm.NODE_SITE)
    reports = cluster.folder / slurm.CHECK_DIR
    tag, extra = fault_env()
    for name, (source, target) in placed.items():
        cluster.inject(name, source, target)
    try:
        job, output, _ = submit(cluster, settings, folder, run, args, reports, **extra)
        assert processes_tagged(tag) == []
    finally:
        for name, (_, target) in placed.items():
            cluster.heal(name, target)
    assert (job.state, job.exit_code) == ("FAILED", 1)
    table = json.loads((reports / "cluster-report.json").read_text())
    verdicts = {n: "PASS" for n in cluster.nodes} | {
        n: "MISSING" if f == "never_starts" else "FAIL" for n, f in faults.items()
    }
    assert {f"n{n['rank'] + 1}": n["verdict"] for n in table["nodes"]} == verdicts
    for name in faults:
        rank = cluster.nodes.index(name)
        assert re.search(rf"^{rank} +({name}|-) +(FAIL|MISSING) ", output, re.M), name
    for name in cluster.nodes:
        node = cluster.node(name)
        if name in reasons:
            assert node.drained and node.reason.startswith(reasons[name].format(job=job.id)), (name, node.reason)
            assert len(node.reason) <= 120
        else:
            assert not node.drained, (name, node.reason)

    for name, check in healthcheck(cluster, *faults).items():  # fixed; the node stages pass, the drain stays
        assert check.returncode == 0 and "drained for a stage this check does not run" in check.stderr
        assert cluster.node(name).drained
    cluster.command("scontrol", "update", f"NodeName={','.join(faults)}", "State=RESUME")
    job, output, _ = submit(cluster, settings, folder, f"{run}-fixed", args, reports, **extra)
    assert (job.state, job.exit_code) == ("COMPLETED", 0) and f"cluster: PASS, all {NODES} node(s) passed" in output
    cluster.wait_idle(timeout=30)  # the Epilog drained none


def test_a_node_drained_by_hand_is_never_resumed_by_the_check(cluster: slurm.Cluster) -> None:
    cluster.command("scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=replacing a DIMM")
    try:
        check = healthcheck(cluster, "n2")["n2"]
        assert check.returncode == 0 and "drained by someone else (replacing a DIMM): left" in check.stderr
        node = cluster.node("n2")
        assert node.drained and node.reason == "replacing a DIMM"
    finally:
        cluster.command("scontrol", "update", "NodeName=n2", "State=RESUME")


def test_a_node_that_dies_mid_job_fails_the_job_named_and_leaves_nothing_running(
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path
) -> None:
    """n3's verify-device SIGKILLs itself at its first all_reduce (test_cluster.py's die_in_allreduce, on its rank 2):
    the job's PYTHONPATH holds an empty folder of each host's own, and on n3 alone it is replaced by a folder whose
    sitecustomize turns the injector on. The job fails with n3 named, the others pass, and no process of the job is
    left on any host."""
    tag, extra = fault_env()
    cluster.inject("n3", injector_site(folder, "die_in_allreduce"), slurm.NODE_SITE)
    try:
        job, output, reports = submit(cluster, settings, folder, "dies", **extra)
    finally:
        cluster.heal("n3", slurm.NODE_SITE)
    assert (job.state, job.exit_code) == ("FAILED", 1)
    assert re.search(r"^2 +n3 +FAIL ", output, re.M) and "srun: error: n3: task 2: Killed" in output
    table = json.loads((reports / "cluster-report.json").read_text())
    assert [(n["host"], n["verdict"]) for n in table["nodes"]] == [
        ("n1", "PASS"),
        ("n2", "PASS"),
        ("n3", "FAIL"),
        ("n4", "PASS"),
    ]
    assert table["nodes"][2]["stages"]["allreduce"] == "hung"
    assert processes_tagged(tag) == []
    assert not any(cluster.node(n).drained for n in cluster.nodes)  # a lost process is not a sick node


def test_as_the_prolog_a_failing_node_is_drained_before_the_job_runs(
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path
) -> None:
    """The same program as Slurm's Prolog (PrologFlags=Alloc: on every node of the allocation): the faulty node's
    prolog drains it and fails, and Slurm cancels the job (verify-cluster.sbatch is --no-requeue; a requeueable job
    would go back to the queue, to run on nodes in service); the other nodes stay in service. n4's prolog is made the
    slowest (its fabric check waits before it fails), so Slurm has started the batch script on n1 and its step on the
    other nodes when it cancels the job: the job gives no verdict that would call nodes missing. (In CI the cancel
    once came before the step could start and the script ran on: test_verify_cluster_sbatch.py covers that case.)"""
    slow = folder / "fi_info-slow-no-provider"
    slow.write_text("#!/bin/sh\nsleep 8\necho 'fi_getinfo: -61' >&2\nexit 61\n")
    slow.chmod(0o755)
    plain = cluster.conf.read_text()
    cluster.conf.write_text(f"{plain}Prolog={HEALTHCHECK}\nPrologFlags=Alloc\n")
    cluster.command("scontrol", "reconfigure")
    cluster.inject("n4", slow, FI_INFO)
    try:
        job, text, reports = submit(cluster, settings, folder, "prolog")
        assert job.state == "CANCELLED"
        assert "verify-cluster: 4 node(s)" in text  # the batch script had started on n1
        assert not (reports / "cluster-report.json").exists()  # no verdict from a job Slurm cancelled
        node = cluster.node("n4")
        assert node.drained and node.reason.startswith("neuron-torch: fabric: `fi_info -p tcp` lists no tcp")
        assert not any(cluster.node(n).drained for n in ("n1", "n2", "n3"))
    finally:
        cluster.heal("n4", FI_INFO)
        cluster.conf.write_text(plain)
        cluster.command("scontrol", "reconfigure")
        resumed = healthcheck(cluster, "n4")["n4"]  # also after a failure above: the tests after this one need n4
    assert resumed.returncode == 0 and not cluster.node("n4").drained


def stopped(pids: list[int]) -> list[int]:
    """The processes of PIDS that are stopped (state T in /proc/PID/stat)."""
    found = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                found.append(pid)
        except (OSError, IndexError):
            continue
    return found


def test_a_host_lost_mid_job_fails_the_job_named_and_slurm_takes_it_back_once_it_boots(
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path
) -> None:
    """n3's host is lost in the middle of the all_reduce: its verify-device first freezes (test_cluster.py's
    hang_in_allreduce: SIGSTOP, silent with its sockets open, as a machine that stopped), then the test kills the whole
    host (docker kill: systemd, munge, slurmd and the task go at once). The others give up on n3 within seconds; Slurm
    sees n3's slurmd stop answering and marks it down; the job (--no-kill) still runs cluster-report, which fails
    naming n3. Nothing of the job is left on any host, no other node is drained, and once n3's host boots again and
    its slurmd starts, Slurm returns it to service (ReturnToService=2). Last in this file: it restarts a host."""
    tag, extra = fault_env()
    cluster.inject("n3", injector_site(folder, "hang_in_allreduce"), slurm.NODE_SITE)
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(submit, cluster, settings, folder, "host-lost", **extra)
            deadline = time.monotonic() + JOB_TIMEOUT
            while not stopped(processes_tagged(tag)) and not running.done() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not running.done(), "the job ended before n3 froze in its all_reduce"
            cluster.lose("n3")
            job, output, reports = running.result()
        assert (job.state, job.exit_code) == ("FAILED", 1), job.shown
        assert re.search(r"^2 +(n3|-) +FAIL ", output, re.M), output
        table = json.loads((reports / "cluster-report.json").read_text())
        assert [n["verdict"] for n in table["nodes"]] == ["PASS", "PASS", "FAIL", "PASS"]
        assert table["nodes"][2]["stages"]["allreduce"] == "hung"
        assert processes_tagged(tag) == []
        lost = cluster.node("n3")
        assert lost.states & {"DOWN", "NOT_RESPONDING"}, lost
        assert not any(cluster.node(n).drained for n in ("n1", "n2", "n4"))
    finally:
        if cluster.run("n3", ["true"]).returncode != 0:  # its host is down: boot it again
            cluster.revive("n3")
        cluster.heal("n3", slurm.NODE_SITE)
    cluster.wait_idle(timeout=slurm.REGISTER_TIMEOUT_S)
