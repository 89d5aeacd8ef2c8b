"""verify.yml's multi-node run (-e neuron_verify_cluster=true): one node per host, its rank its place among the targeted
hosts, node 0 the master, every node's report fetched into the run's own folder and judged by `neuron-torch
cluster-report` on the controller, each host's verdict its node's.

Two fleets:
- Three hosts of the Ubuntu 24.04 twin over SSH (test_fleet.py's hosts: systemd, sshd with host keys, the `ubuntu`
  user with sudo, a file system each), with the node options beside a user's -e neuron_verify_extra_args: a clean
  run passes, each node its own rank. The twin's Python (Debian trixie's 3.13) can get no torch with gloo here (the
  only CPU torch wheel is for Python 3.11), so each host is lent this checkout and its .venv read-only.
- Four inventory hosts over Ansible's local connection, each on its own loopback address (127.0.0.2-5 as in
  tests/integration/smoke/test_cluster.py), for the hosts that do not pass: the third's vars have a typo (an unknown
  stage: verify-device exits 2 and writes no report), and the fourth never answers (SSH to a closed port). Neither
  node joins; the third must fail with its own error, the fourth be named unreachable, and neither be passed, while
  the two that ran pass on their own nodes' verdicts. With too few forks the run is refused before any host starts.
The cluster stages themselves, and the six faults, are test_cluster.py's.
"""

from __future__ import annotations

import json
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuron_torch.matrix import load_matrix
from tests.integration.smoke.conftest import make_base_env
from tests.integration.test_ansible import ANSIBLE, REPO, docker_ready, run, tool
from tests.simdevice.environment import test_release_facts as release_facts  # (not a test: pytest would collect it)
from tests.testbed.hosts import Fleet, HostError, lent_checkout

pytestmark = pytest.mark.skipif(
    shutil.which("fi_info") is None,
    reason="fi_info not on PATH: install Debian's libfabric-bin (its tcp provider is the test fabric)",
)
NODES = ("n0", "n1", "typo", "gone")
STAGES = "fabric,consistency,allreduce"
SMALL = ["--allreduce-max-bytes", "65536"]
CELL = load_matrix(REPO / "constraints" / "matrix.toml").cells[0].record_path  # a committed cell record


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        return int(probe.getsockname()[1])


def cluster_vars(summary: Path, join_timeout: int) -> dict[str, Any]:
    """The extra vars of a multi-node run on --device cpu with this checkout's .venv, on a free master port."""
    return {
        "neuron_verify_cluster": True,
        "neuron_verify_device": "cpu",
        "neuron_verify_master_port": free_port(),
        "neuron_verify_join_timeout": join_timeout,
        "neuron_verify_venv": str(REPO / ".venv"),
        "neuron_verify_summary": str(summary),
    }


def inventory(folder: Path, python: str) -> Path:
    """The inventory, as YAML (written as JSON, which YAML reads): the hosts in rank order."""
    hosts: dict[str, dict[str, Any]] = {}
    for rank, name in enumerate(NODES):
        addr = f"127.0.0.{rank + 2}"
        if name == "gone":  # nothing listens on port 1: the connection is refused at once
            hosts[name] = {"ansible_host": addr, "ansible_port": 1, "ansible_connection": "ssh", "ansible_user": "x"}
            continue
        stages = f"{STAGES},nosuch" if name == "typo" else STAGES  # a typo in one host's vars: exit 2, no report
        hosts[name] = {
            "ansible_host": addr,
            "ansible_connection": "local",
            "ansible_become": False,
            "ansible_python_interpreter": python,
            "neuron_verify_command_link": str(REPO / "scripts" / "verify-device.sh"),
            "neuron_verify_cell_file": str(CELL),
            "neuron_verify_report": str(folder / name / "report.json"),
            "neuron_verify_extra_args": [*["--local-addr", addr, "--stages", stages, "--timeout", "90"], *SMALL],
        }
    path = folder / "inventory.yml"
    path.write_text(json.dumps({"nodes": {"hosts": hosts}}, indent=2))
    return path


def test_a_multi_node_fleet_run_gives_each_host_its_node_verdict_and_never_passes_a_missing_one(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    python = str(tool("python"))
    summary = tmp_path / "summary"
    env = make_base_env(tmp_path)
    env.update(
        NEURON_SMOKE_INSTANCE_FACTS=str(release_facts(tmp_path)),  # the test release's fabric provider: tcp
        NEURON_TORCH_PYTHON=str(REPO / ".venv" / "bin" / "python"),
        ANSIBLE_HOST_KEY_CHECKING="True",
    )
    extra = cluster_vars(summary, join_timeout=20)
    argv = [tool("ansible-playbook"), "-i", inventory(tmp_path, python), "playbooks/verify.yml"]
    argv += ["-e", json.dumps(extra)]
    result = run(argv, cwd=ANSIBLE, timeout=600, env=env)
    print(result.stdout[-8000:], result.stderr[-3000:])
    assert result.returncode != 0, "a host is missing: the play must fail"
    data = json.loads(summary.with_suffix(".json").read_text())
    hosts = {h["host"]: h for h in data["hosts"]}
    assert [h["host"] for h in data["hosts"]] == list(NODES), "every targeted host, once, in rank order"
    assert (data["passed"], data["total"]) == (2, 4)
    assert {name: hosts[name]["verdict"] for name in NODES} == {"n0": "pass", "n1": "pass", "typo": "fail",
                                                               "gone": "unreachable"}  # fmt: skip
    assert hosts["typo"]["exit_code"] == 2 and "unknown stage(s) nosuch" in hosts["typo"]["message"], hosts["typo"]
    reports = Path(data["cluster_reports"])  # the run's own folder under the checkout's .neuron-torch/cluster/
    request.addfinalizer(lambda: shutil.rmtree(reports, ignore_errors=True))
    assert reports.parent == REPO / ".neuron-torch" / "cluster"
    assert sorted(p.name for p in reports.glob("node-*.json")) == ["node-0.json", "node-1.json"]
    verdict = json.loads((reports / "cluster-report.json").read_text())
    nodes = {n["rank"]: n for n in verdict["nodes"]}
    assert verdict["passed"] is False and nodes[2]["verdict"] == nodes[3]["verdict"] == "MISSING"
    assert nodes[0]["verdict"] == nodes[1]["verdict"] == "PASS", verdict
    for rank in (0, 1):  # each node was started as its own rank of four, with node 0 as the master
        cluster = json.loads((reports / f"node-{rank}.json").read_text())["cluster"]
        assert (cluster["nnodes"], cluster["node_rank"], cluster["missing"]) == (4, rank, [2, 3]), cluster
        assert cluster["master"] == f"127.0.0.2:{extra['neuron_verify_master_port']}"
    text = summary.with_suffix(".txt").read_text()
    assert "2 passed, 1 failed, 1 unreachable" in text and "gone: unreachable" in text


def test_a_multi_node_run_whose_hosts_cannot_start_together_is_refused_before_any_runs(tmp_path: Path) -> None:
    summary = tmp_path / "summary"
    extra = {"neuron_verify_cluster": True, "neuron_verify_summary": str(summary)}
    argv = [tool("ansible-playbook"), "-i", inventory(tmp_path, str(tool("python"))), "playbooks/verify.yml"]
    result = run([*argv, "--forks", "2", "-e", json.dumps(extra)], cwd=ANSIBLE, timeout=300)
    print(result.stdout[-4000:])
    assert result.returncode != 0
    assert "needs its 4 hosts to start together, but Ansible runs at most 2 at once: run with --forks 4" in " ".join(
        result.stdout.split()
    )
    assert not list(tmp_path.glob("n*/report.json")), "no node ran"
    assert not summary.with_suffix(".json").exists(), "no summary that would call the hosts unreachable"


# Over SSH on the Ubuntu 24.04 twin's hosts (systemd, sshd with host keys, the `ubuntu` user and sudo: test_fleet.py's
# hosts), each with a file system of its own, so every node writes the role's default report path and the play tells
# the reports apart. No Python of the twin can get a torch with gloo here, so each host is lent this checkout and its
# .venv (Python 3.11 with the real CPU torch) read-only, at the same paths: the one thing the twin cannot carry.
# fi_info is not on the twin hosts: the cluster stages here are consistency and all_reduce (fabric is tested above).


@pytest.fixture(scope="module")
def ssh_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    docker_ready()
    folder = tmp_path_factory.mktemp("cluster-fleet")
    try:
        fleet = Fleet(folder, f"nt-cl-{uuid.uuid4().hex[:6]}")
    except HostError as error:
        pytest.fail(str(error))
    try:
        for name in ("node0", "node1", "node2"):
            fleet.start(name, volumes=lent_checkout())
        yield fleet
    finally:
        fleet.remove()


def test_a_multi_node_run_over_ssh_on_twin_hosts_passes_with_each_node_its_own_rank(
    ssh_fleet: Fleet, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    summary = tmp_path / "summary"
    extra = cluster_vars(summary, join_timeout=60) | {
        "neuron_verify_command_link": str(REPO / "scripts" / "verify-device.sh"),
        "neuron_verify_cell_file": str(CELL),
        "neuron_verify_extra_args": ["--stages", "consistency,allreduce", "--timeout", "90", *SMALL],
    }
    argv = [tool("ansible-playbook"), "-i", ssh_fleet.inventory(), "playbooks/verify.yml", "-e", json.dumps(extra)]
    result = run(argv, cwd=ANSIBLE, timeout=600)
    print(result.stdout[-8000:], result.stderr[-3000:])
    data = json.loads(summary.with_suffix(".json").read_text())
    reports = Path(data["cluster_reports"])
    request.addfinalizer(lambda: shutil.rmtree(reports, ignore_errors=True))
    assert result.returncode == 0, result.stdout[-6000:]
    assert [(h["host"], h["verdict"]) for h in data["hosts"]] == [("node0", "pass"), ("node1", "pass"),
                                                                   ("node2", "pass")]  # fmt: skip
    verdict = json.loads((reports / "cluster-report.json").read_text())
    assert verdict["passed"] is True, verdict
    hosts = set()
    for rank in (0, 1, 2):  # each host ran its own rank and wrote the role's default path on its own file system
        report = json.loads((reports / f"node-{rank}.json").read_text())
        assert (report["cluster"]["nnodes"], report["cluster"]["node_rank"]) == (3, rank)
        hosts.add(report["host"]["hostname"])
    assert hosts == {"node0", "node1", "node2"}
