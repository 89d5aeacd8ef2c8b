"""verify-device's multi-node mode on the simulated neuron device (`--device neuron`): 2 nodes, each its own process
on its own loopback address and its own simulated host (device nodes, runtime folder, so its own cores under the
core-ownership rule, and compile cache: test_cluster's run_cluster with device="neuron"), the cluster stages over the
`neuron` process group (the test-only torch_neuronx's, gloo beneath), then `neuron-torch cluster-report`. One clean
run, then faults on the device's group: node 1 contributes a wrong value (cluster_site's wrong_value, in the gloo
beneath the `neuron` group), and node 1 freezes (SIGSTOP) in the all_reduce, given up on by node 0 within seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.smoke.test_cluster import facts, node, pytestmark, run_cluster, stage

__all__ = ["facts", "pytestmark"]  # test_cluster's module fixture and its fi_info condition, used here too

STAGES = "device,fabric,consistency,allreduce"


@pytest.mark.usefixtures("sim_library")
def test_two_simulated_hosts_pass_over_the_neuron_group(tmp_path: Path, facts: Path) -> None:
    run = run_cluster(tmp_path, facts, STAGES, nnodes=2, device="neuron")
    print(f"2-node simulated-device pass: {run['elapsed']:.1f}s")
    assert run["codes"] == {0: 0, 1: 0} and not run["left_behind"]
    assert run["verdict"].returncode == 0 and "cluster: PASS, all 2 node(s) passed" in run["verdict"].stdout
    for rank, report in run["reports"].items():
        assert report["device"]["backend"] == "neuron" and report["cluster"]["local_addr"] == f"127.0.0.{rank + 2}"
        assert stage(report, "device")["status"] == "pass"  # its own host's 2 device nodes
        assert stage(report, "fabric")["numbers"]["provider"] == "tcp"
        allreduce = stage(report, "allreduce")["numbers"]
        assert allreduce["process_group"] == "neuron" and allreduce["sum"] == 3.0
        assert [b["bytes"] for b in allreduce["bandwidth"]] == [8, 65536]
        # the cores it took are its own host's: lock files of that host's device nodes, in that host's runtime
        locks = sorted(p.name for p in (tmp_path / f"host-{rank}" / "neuron-runtime").iterdir())
        assert locks and all(f"host-{rank}_dev_neuron" in name for name in locks), locks
    assert len({stage(r, "consistency")["numbers"]["facts"]["graph"] for r in run["reports"].values()}) == 1


@pytest.mark.usefixtures("sim_library")
def test_a_wrong_contribution_on_the_neuron_group_names_its_node(tmp_path: Path, facts: Path) -> None:
    run = run_cluster(tmp_path, facts, STAGES, {1: {"inject": "wrong_value"}}, nnodes=2, device="neuron")
    print(f"2-node simulated-device wrong value: {run['elapsed']:.1f}s")
    assert run["codes"] == {0: 0, 1: 1} and run["verdict"].returncode == 1 and not run["left_behind"]
    bad = stage(run["reports"][1], "allreduce")
    assert bad["failures"] == ["this node (node 1) contributed 102 instead of 2 (seen so by every node)"]
    ok = stage(run["reports"][0], "allreduce")
    assert ok["status"] == "pass" and ok["numbers"]["wrong_contributions"] == {"1": 102.0}
    assert run["reports"][0]["cluster"]["peer_faults"] == {"1": ["allreduce: contributed 102 instead of 2"]}
    assert [node(run["table"], r)["verdict"] for r in range(2)] == ["PASS", "FAIL"]
    assert node(run["table"], 1)["stages"]["allreduce"] == "fail" and "failed: node 1" in run["verdict"].stdout


@pytest.mark.usefixtures("sim_library")
def test_a_frozen_node_on_the_neuron_group_is_given_up_on_within_seconds(tmp_path: Path, facts: Path) -> None:
    run = run_cluster(
        tmp_path, facts, STAGES, {1: {"inject": "hang_in_allreduce"}}, (), 60.0, nnodes=2, device="neuron"
    )
    print(f"2-node simulated-device frozen node: {run['elapsed']:.1f}s")
    assert run["codes"][0] == 0 and run["verdict"].returncode == 1 and not run["left_behind"]
    survivor = stage(run["reports"][0], "allreduce")
    assert survivor["status"] == "skip" and survivor["reason"].startswith("node 1 stopped answering"), survivor
    assert "heartbeat stopped" in survivor["reason"] and survivor["duration_s"] < 30, survivor
    assert run["reports"][1]["cluster"]["node_rank"] == 1  # the report it wrote before the stage: marked hung
    assert [node(run["table"], r)["verdict"] for r in range(2)] == ["PASS", "FAIL"]
    assert node(run["table"], 1)["stages"]["allreduce"] == "hung"
