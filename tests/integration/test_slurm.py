"""The Slurm path on a real Slurm cluster (tests/testbed/slurm.py: Debian's slurmctld, four slurmd, munge): the
cluster check job (scripts/slurm/verify-cluster.sbatch, submitted with the real sbatch) and the node health check
(scripts/slurm/neuron-healthcheck, Slurm's HealthCheckProgram, which slurmd runs as each node starts).

verify-device runs on --device cpu with the test release's fabric provider (`tcp`, constraints/test-matrix.toml, from
its rendered instance facts), as in tests/integration/smoke/test_cluster.py. The fault is that file's "no usable
fabric provider", injected into one node only: an `fi_info` answering -61, as libfabric does without the provider,
bound over the real one inside that node's mount namespace. Each check the test reruns runs the way slurmd runs it:
the program alone, in the node's namespaces, with the one variable Slurm gives it (SLURMD_NODENAME).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "smoke_tests"))
from tests.integration.smoke.conftest import processes_tagged
from tests.testbed import slurm  # (it reads nodes with neuron_smoke.slurm_health's parser, on that path)

HEALTHCHECK = slurm.HEALTHCHECK
NODES = 4
FI_INFO = shutil.which("fi_info")
WHY_NOT = slurm.usable() or ("" if FI_INFO else "fi_info not on PATH: install Debian's libfabric-bin")
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
    with slurm.twin_cluster(folder / "cluster", NODES, settings) as running:
        print(f"cluster up, every node's health check passed: {time.monotonic() - start:.1f}s")
        yield running


@pytest.fixture
def no_provider(folder: Path) -> Path:
    script = folder / "fi_info-no-provider"
    script.write_text("#!/bin/sh\necho 'fi_getinfo: -61' >&2\nexit 61\n")
    script.chmod(0o755)
    return script


def submit(
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path, name: str, **extra: str
) -> tuple[slurm.Job, str, Path]:
    """`sbatch -N 4 verify-cluster.sbatch`, waited for, EXTRA added to its environment: (the ended job, its output,
    the reports' folder)."""
    reports = folder / f"reports-{name}"
    out = folder / f"job-{name}.out"
    start = time.monotonic()
    job = slurm.run_verify_cluster(cluster, settings, NODES, out, reports, JOB_TIMEOUT, **extra)
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


def test_a_healthy_cluster_job_exits_0_and_every_node_stays_idle(
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path
) -> None:
    job, output, reports = submit(cluster, settings, folder, "healthy")
    assert (job.state, job.exit_code) == ("COMPLETED", 0), cluster.logs()
    assert f"cluster: PASS, all {NODES} node(s) passed" in output
    table = json.loads((reports / "cluster-report.json").read_text())
    assert table["passed"] is True
    assert sorted(n["host"] for n in table["nodes"]) == list(cluster.nodes)  # one task on each node, in its namespace
    cluster.wait_idle(timeout=30)  # none drained (a node that is not idle stays so, and this fails)


def test_a_node_without_its_fabric_fails_the_job_and_only_it_is_drained_then_resumed(
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path, no_provider: Path
) -> None:
    assert FI_INFO is not None
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
    the job's PYTHONPATH holds an empty folder, and in n3 alone a folder whose sitecustomize turns the injector on is
    bound over it. The job fails with n3 named, the others pass, and no process of the job is left on any node."""
    empty, dying = folder / "node-site", folder / "die-site"
    empty.mkdir()
    dying.mkdir()
    injector = REPO_ROOT / "tests" / "integration" / "smoke" / "cluster_site" / "sitecustomize.py"
    (dying / "sitecustomize.py").write_text(
        "import os, runpy\nos.environ['NEURON_CLUSTER_INJECT'] = 'die_in_allreduce'\n"
        f"runpy.run_path({str(injector)!r})\n"
    )
    tag = f"NEURON_SMOKE_TEST_TAG_{uuid.uuid4().hex}"
    cluster.inject("n3", dying, str(empty))
    try:
        stages = "device,fabric,consistency,allreduce"
        extra = {"PYTHONPATH": str(empty), "NEURON_TORCH_CLUSTER_STAGES": stages, tag: "1"}
        job, output, reports = submit(cluster, settings, folder, "dies", **extra)
    finally:
        cluster.heal("n3", str(empty))
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
    cluster: slurm.Cluster, settings: dict[str, str], folder: Path, no_provider: Path
) -> None:
    """The same program as Slurm's Prolog (PrologFlags=Alloc: on every node of the allocation): the faulty node's
    prolog drains it and fails, and Slurm cancels the job (verify-cluster.sbatch is --no-requeue; a requeueable job
    would go back to the queue, to run on nodes in service); the other nodes stay in service."""
    assert FI_INFO is not None
    plain = cluster.conf.read_text()
    cluster.conf.write_text(f"{plain}Prolog={HEALTHCHECK}\nPrologFlags=Alloc\n")
    cluster.command("scontrol", "reconfigure")
    cluster.inject("n4", no_provider, FI_INFO)
    try:
        job, _, reports = submit(cluster, settings, folder, "prolog")
        assert job.state == "CANCELLED"  # (the batch script may have started on n1, its srun never ran)
        assert not (reports / "cluster-report.json").exists()  # no verdict from a job Slurm cancelled
        node = cluster.node("n4")
        assert node.drained and node.reason.startswith("neuron-torch: fabric: `fi_info -p tcp` lists no tcp")
        assert not any(cluster.node(n).drained for n in ("n1", "n2", "n3"))
    finally:
        cluster.heal("n4", FI_INFO)
        cluster.conf.write_text(plain)
        cluster.command("scontrol", "reconfigure")
    assert healthcheck(cluster, "n4")["n4"].returncode == 0 and not cluster.node("n4").drained
