"""verify-device's multi-node mode across real processes, one per node, each on its own loopback address
(127.0.0.2 .. 127.0.0.5, the master on 127.0.0.2), on --device cpu, then `neuron-torch cluster-report` over their
reports. One clean 4-node run, then the six faults of issue 26 in three runs (faults in stages that do not need each
other share a run, each checked on its own node and stage, and no other node blamed):

- run "drift": node 1 has another torch version (a dist-info of torch 2.13.1 first on its PYTHONPATH, as a second
  install would be), node 2 has no usable fabric provider (a PATH whose `fi_info` answers -61, as libfabric does
  without the provider), node 3 compiles another graph (cluster_site's other_graph);
- run "lost": node 1 contributes a wrong value to the all_reduce (cluster_site's wrong_value), node 3 never starts;
- run "killed": node 2 is SIGKILLed in the middle of the all_reduce (cluster_site's die_in_allreduce);
- run "frozen": node 2 stops (SIGSTOP) in the all_reduce with its sockets open, which gloo alone would wait its
  whole timeout for; the others give up within seconds, and the test kills node 2 once they are done;
- run "lost while connecting": node 1 is SIGKILLed as it builds its gloo group (cluster_site's die_in_group), which
  the others' constructors would wait gloo's whole timeout for (seen in CI through Slurm: a node still connecting
  when a peer that had connected died in the first all_reduce); they give up within seconds.

The fabric provider is the test release's (`tcp`, constraints/test-matrix.toml), read from its rendered instance
facts (NEURON_SMOKE_INSTANCE_FACTS), never from a flag. test_cluster_sim.py runs the same on the simulated device.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests import REPO_ROOT
from tests.integration.smoke.conftest import make_base_env, processes_tagged
from tests.simdevice.environment import SIM_SITE, sim_environment
from tests.simdevice.environment import test_release_facts as release_facts  # (not a test: pytest would collect it)
from tests.unit.neuron_smoke.test_stage_nccom import records, write_fake

SITE = Path(__file__).with_name("cluster_site")
PYTHONPATH = [str(REPO_ROOT / "src"), str(REPO_ROOT / "smoke_tests")]
FI_INFO = shutil.which("fi_info")
pytestmark = pytest.mark.skipif(
    FI_INFO is None, reason="fi_info not on PATH: install Debian's libfabric-bin (its tcp provider is the test fabric)"
)
CLUSTER_STAGES = "fabric,consistency,allreduce"
NODE_TIMEOUT = 240.0  # a ceiling for one node's process on a busy 2-core machine, not a speed check


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return release_facts(tmp_path_factory.mktemp("facts"))


def node_env(
    folder: Path,
    facts: Path,
    tag: str,
    extra_path: tuple[str, ...] | list[str] = (),
    path_dir: Path | None = None,
    sim_host: Path | None = None,
) -> dict[str, str]:
    """A node's environment; with `sim_host`, that of a host of its own with the simulated device (its device nodes,
    runtime folder and so its cores, and compile cache in that folder: tests/simdevice/environment.py)."""
    if sim_host is None:
        env, sim_site = make_base_env(folder), []
    else:
        sim_host.mkdir(exist_ok=True)
        env, sim_site = sim_environment(make_base_env(sim_host), sim_host), [str(SIM_SITE)]
    env["PYTHONPATH"] = os.pathsep.join([*extra_path, *PYTHONPATH, *sim_site, str(SITE)])
    env["NEURON_SMOKE_INSTANCE_FACTS"] = str(facts)
    env[tag] = "1"
    if path_dir is not None:
        env["PATH"] = f"{path_dir}{os.pathsep}{env['PATH']}"
    return env


def run_cluster(
    folder: Path,
    facts: Path,
    stages: str,
    per_node: dict[int, dict[str, Any]] | None = None,
    absent: tuple[int, ...] = (),
    join_timeout: float = 30.0,
    nnodes: int = 4,
    device: str = "cpu",
    env_all: dict[str, str] | None = None,
) -> dict[str, Any]:
    """NNODES nodes (one verify-device process each, started together, each with `env_all` set); the ones in
    `absent` are never started.
    `per_node[rank]` may set `inject` (cluster_site), `pythonpath` (folders first on it) and `path` (a PATH folder);
    a node whose injector stops it (`hang_in_allreduce`) is killed once the others have exited. On `--device neuron`
    each node is a simulated host of its own, FOLDER/host-<rank> (node_env's sim_host)."""
    per_node = per_node or {}
    port, reports, tag = free_port(), folder / "reports", f"NEURON_SMOKE_TEST_TAG_{uuid.uuid4().hex}"
    procs = {}
    start = time.monotonic()
    for rank in (r for r in range(nnodes) if r not in absent):
        own = per_node.get(rank, {})
        host = folder / f"host-{rank}" if device == "neuron" else None
        env = {**node_env(folder, facts, tag, own.get("pythonpath", []), own.get("path"), host), **(env_all or {})}
        if own.get("inject"):
            env["NEURON_CLUSTER_INJECT"] = own["inject"]
        argv = [sys.executable, "-m", "neuron_smoke", "--device", device, "--stages", stages, "--timeout", "90"]
        argv += ["--nnodes", str(nnodes), "--node-rank", str(rank), "--master", f"127.0.0.2:{port}"]
        argv += ["--local-addr", f"127.0.0.{rank + 2}", "--join-timeout", str(join_timeout)]
        argv += ["--report-dir", str(reports), "--allreduce-max-bytes", "65536"]
        out = (folder / f"node-{rank}.out").open("w")
        procs[rank] = (subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT), out)
    codes, frozen = {}, [r for r in procs if "hang_in_allreduce" in per_node.get(r, {}).get("inject", "")]
    for rank, (proc, out) in sorted(procs.items(), key=lambda item: item[0] in frozen):
        if rank in frozen:
            proc.kill()
        codes[rank] = proc.wait(timeout=NODE_TIMEOUT)
        out.close()
    elapsed = time.monotonic() - start
    time.sleep(0.3)
    for rank in procs:
        print(f"---- node {rank} exit {codes[rank]}\n{(folder / f'node-{rank}.out').read_text()}")
    verdict = subprocess.run(
        [sys.executable, "-m", "neuron_torch", "cluster-report", str(reports), "--expect", str(nnodes)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(PYTHONPATH)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    print(verdict.stdout, verdict.stderr)
    nodes = {
        r: json.loads((reports / f"node-{r}.json").read_text()) for r in procs if (reports / f"node-{r}.json").exists()
    }
    return {
        "codes": codes,
        "reports": nodes,
        "elapsed": elapsed,
        "verdict": verdict,
        "table": json.loads((reports / "cluster-report.json").read_text()),
        "left_behind": processes_tagged(tag),
    }


def stage(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in report["stages"] if s["name"] == name)


def node(table: dict[str, Any], rank: int) -> dict[str, Any]:
    return next(n for n in table["nodes"] if n["rank"] == rank)


def test_four_nodes_pass_and_cluster_report_passes(tmp_path: Path, facts: Path) -> None:
    run = run_cluster(tmp_path, facts, f"environment,device,{CLUSTER_STAGES}")
    print(f"4-node pass: {run['elapsed']:.1f}s")
    assert run["codes"] == {0: 0, 1: 0, 2: 0, 3: 0}
    assert run["verdict"].returncode == 0 and "cluster: PASS, all 4 node(s) passed" in run["verdict"].stdout
    assert run["table"]["passed"] is True and (tmp_path / "reports" / "cluster-report.md").is_file()
    assert not run["left_behind"]
    for rank, report in run["reports"].items():
        assert report["cluster"]["members"] == [0, 1, 2, 3] and report["cluster"]["missing"] == []
        assert report["cluster"]["local_addr"] == f"127.0.0.{rank + 2}"  # its own address, not a shared one
        assert {h["local_addr"] for h in report["cluster"]["hosts"].values()} == {f"127.0.0.{r}" for r in range(2, 6)}
        assert stage(report, "fabric")["numbers"]["provider"] == "tcp"  # the test release's, not a flag
        allreduce = stage(report, "allreduce")
        assert allreduce["status"] == "pass" and allreduce["numbers"]["sum"] == 10.0
        assert [b["bytes"] for b in allreduce["numbers"]["bandwidth"]] == [8, 65536]
    graphs = {stage(r, "consistency")["numbers"]["facts"]["graph"] for r in run["reports"].values()}
    assert len(graphs) == 1


def fake_torch(folder: Path, version: str) -> Path:
    site = folder / "fake-torch"
    info = site / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return site


def no_provider(folder: Path) -> Path:
    bin_dir = folder / "no-provider-bin"
    bin_dir.mkdir()
    script = bin_dir / "fi_info"
    script.write_text("#!/bin/sh\necho 'fi_getinfo: -61' >&2\nexit 61\n")
    script.chmod(0o755)
    return bin_dir


def test_drift_a_torch_version_a_fabric_and_a_graph_each_named_on_its_node(tmp_path: Path, facts: Path) -> None:
    per_node = {
        1: {"pythonpath": [str(fake_torch(tmp_path, "2.13.1"))]},
        2: {"path": no_provider(tmp_path)},
        3: {"inject": "other_graph"},
    }
    run = run_cluster(tmp_path, facts, f"environment,device,{CLUSTER_STAGES}", per_node)
    assert run["codes"] == {0: 0, 1: 1, 2: 1, 3: 1} and run["verdict"].returncode == 1
    assert not run["left_behind"]
    reports, table = run["reports"], run["table"]
    one = stage(reports[1], "consistency")
    assert (
        one["status"] == "fail" and "torch differs: this node (node 1) has 2.13.1, node 0, 2, 3" in one["failures"][0]
    )
    assert stage(reports[1], "environment")["status"] == "fail"  # the second torch install, seen locally too
    two = stage(reports[2], "fabric")
    assert two["status"] == "fail" and "lists no tcp provider (fi_getinfo: -61)" in two["failures"][0]
    three = stage(reports[3], "consistency")
    assert three["status"] == "fail" and three["failures"][0].startswith("graph differs: this node (node 3)")
    for rank in (0, 2):
        assert stage(reports[rank], "consistency")["status"] == "pass"
    assert stage(reports[0], "fabric")["status"] == "pass"
    assert set(reports[0]["cluster"]["peer_faults"]) == {"1", "3"}
    assert [node(table, r)["verdict"] for r in range(4)] == ["PASS", "FAIL", "FAIL", "FAIL"]
    assert node(table, 2)["stages"]["fabric"] == "fail" and node(table, 3)["stages"]["consistency"] == "fail"
    assert all(stage(r, "allreduce")["status"] == "pass" for r in reports.values())


def test_a_wrong_contribution_and_a_node_that_never_joins(tmp_path: Path, facts: Path) -> None:
    run = run_cluster(tmp_path, facts, f"device,{CLUSTER_STAGES}", {1: {"inject": "wrong_value"}}, (3,), 6.0)
    assert run["codes"] == {0: 0, 1: 1, 2: 0} and run["verdict"].returncode == 1
    assert not run["left_behind"] and set(run["reports"]) == {0, 1, 2}
    bad = stage(run["reports"][1], "allreduce")
    assert (
        bad["status"] == "fail"
        and bad["failures"][0] == "this node (node 1) contributed 102 instead of 2 (seen so by every node)"
    )
    for rank in (0, 2):
        report = run["reports"][rank]
        ok = stage(report, "allreduce")
        assert ok["status"] == "pass" and ok["numbers"]["wrong_contributions"] == {"1": 102.0}
        assert report["cluster"]["missing"] == [3] and report["cluster"]["members"] == [0, 1, 2]
        assert any("node 3 did not join within 6s (missing)" in n for n in stage(report, "consistency")["notes"])
    table = run["table"]
    assert [node(table, r)["verdict"] for r in range(4)] == ["PASS", "FAIL", "PASS", "MISSING"]
    assert "missing: node 3" in run["verdict"].stdout and "failed: node 1" in run["verdict"].stdout


def test_a_node_killed_during_the_all_reduce(tmp_path: Path, facts: Path) -> None:
    run = run_cluster(tmp_path, facts, f"device,{CLUSTER_STAGES}", {2: {"inject": "die_in_allreduce"}})
    assert run["codes"][2] == -9 and [run["codes"][r] for r in (0, 1, 3)] == [0, 0, 0]
    assert run["verdict"].returncode == 1 and not run["left_behind"]
    killed = stage(run["reports"][2], "allreduce")  # the report it left: written before the stage, marked hung
    assert killed["hung"] is True and killed["status"] == "fail"
    for rank in (0, 1, 3):
        survivor = stage(run["reports"][rank], "allreduce")
        assert survivor["status"] == "skip" and survivor["reason"].startswith("node 2 stopped answering"), survivor
        faults = run["reports"][rank]["cluster"]["peer_faults"]
        assert faults == {"2": ["allreduce: stopped answering during the all_reduce (heartbeat silent)"]}
    table = run["table"]
    assert [node(table, r)["verdict"] for r in range(4)] == ["PASS", "PASS", "FAIL", "PASS"]
    assert node(table, 2)["stages"]["allreduce"] == "hung"


def test_a_frozen_node_is_given_up_on_within_seconds_not_the_collective_timeout(tmp_path: Path, facts: Path) -> None:
    run = run_cluster(tmp_path, facts, f"device,{CLUSTER_STAGES}", {2: {"inject": "hang_in_allreduce"}}, (), 60.0)
    assert [run["codes"][r] for r in (0, 1, 3)] == [0, 0, 0] and run["verdict"].returncode == 1
    assert not run["left_behind"]
    for rank in (0, 1, 3):
        survivor = stage(run["reports"][rank], "allreduce")
        assert survivor["status"] == "skip" and survivor["reason"].startswith("node 2 stopped answering"), survivor
        assert "heartbeat stopped" in survivor["reason"]
        # the collective allows 60 s (the join timeout); a stuck peer is seen in SILENT_S (2 s) and confirmed again
        assert survivor["duration_s"] < 30, survivor["duration_s"]
    assert [node(run["table"], r)["verdict"] for r in range(4)] == ["PASS", "PASS", "FAIL", "PASS"]
    assert node(run["table"], 2)["stages"]["allreduce"] == "hung"


def test_a_node_lost_while_the_group_is_built_is_given_up_on_within_seconds(tmp_path: Path, facts: Path) -> None:
    run = run_cluster(tmp_path, facts, f"device,{CLUSTER_STAGES}", {1: {"inject": "die_in_group"}}, (), 60.0)
    assert run["codes"][1] == -9 and [run["codes"][r] for r in (0, 2, 3)] == [0, 0, 0]
    assert run["verdict"].returncode == 1 and not run["left_behind"]
    for rank in (0, 2, 3):
        survivor = stage(run["reports"][rank], "allreduce")
        assert survivor["status"] == "skip", survivor
        assert survivor["reason"].startswith("node 1 stopped answering during the process group"), survivor
        assert "group construction aborted: node 1's heartbeat stopped" in survivor["reason"]
        # gloo's constructor allows 60 s (the join timeout); a gone peer is seen in SILENT_S (2 s), then confirmed
        assert survivor["duration_s"] < 30, survivor["duration_s"]
    assert [node(run["table"], r)["verdict"] for r in range(4)] == ["PASS", "FAIL", "PASS", "PASS"]
    assert node(run["table"], 1)["stages"]["allreduce"] == "hung"


def test_nccom_runs_once_on_node0_and_every_node_holds_its_verdict(tmp_path: Path, facts: Path) -> None:
    fake, record = write_fake(tmp_path / "neuron-bin"), tmp_path / "nccom-record.jsonl"
    env = {"FAKE_NCCOM_RECORD": str(record), "NEURON_RT_VISIBLE_CORES": "0-3"}  # 4 cores a node
    run = run_cluster(tmp_path, facts, "nccom", {0: {"path": fake}, 1: {"path": fake}}, nnodes=2, env_all=env)
    print(f"2-node nccom: {run['elapsed']:.1f}s")
    assert run["codes"] == {0: 0, 1: 0} and run["verdict"].returncode == 0 and not run["left_behind"]
    (seen,) = records(record)  # once, by node 0
    argv = seen["argv"]
    assert argv[1:5] == ["-r", "8", "-N", "2"]
    assert argv[argv.index("--hosts") + 1 : argv.index("--check")] == ["127.0.0.2", "127.0.0.3"]
    assert seen["env"] == {
        "NEURON_RT_ROOT_COMM_ID": "127.0.0.2:63182",
        "CCOM_SOCKET_IFNAME": "lo",
        "NEURON_RT_VISIBLE_CORES": "0-3",
    }
    ran, followed = (stage(run["reports"][r], "nccom") for r in (0, 1))
    assert ran["status"] == "pass" and ran["numbers"]["report"]["written by"] == "the fake nccom-test"
    assert (
        followed["status"] == "pass" and followed["numbers"]["ran_on_node"] == 0 and "report" not in followed["numbers"]
    )
    assert followed["summary"] == f"node 0 ran it for the cluster: {ran['summary']}"
    assert [node(run["table"], r)["stages"]["nccom"] for r in (0, 1)] == ["pass", "pass"]


def test_a_failing_nccom_fails_every_node(tmp_path: Path, facts: Path) -> None:
    fake = write_fake(tmp_path / "neuron-bin")
    env = {"FAKE_NCCOM_MODE": "fail", "NEURON_RT_VISIBLE_CORES": "0-3"}
    run = run_cluster(tmp_path, facts, "nccom", {0: {"path": fake}}, nnodes=2, env_all=env)  # node 1 has none
    assert run["codes"] == {0: 1, 1: 1} and run["verdict"].returncode == 1 and not run["left_behind"]
    ran, followed = (stage(run["reports"][r], "nccom") for r in (0, 1))
    assert ran["failures"][0].startswith("nccom-test exited 1: ") and "1 errors found" in ran["failures"][0]
    assert followed["failures"] == [f"node 0's nccom-test run: {ran['failures'][0]}"]
    assert [node(run["table"], r)["verdict"] for r in (0, 1)] == ["FAIL", "FAIL"]
