"""neuron_smoke.slurm_health: scontrol's node line parsed, the drain/resume decision, the reason, the command built;
and main() end to end against stand-in verify-device and scontrol programs (the real daemons: test_slurm.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from neuron_smoke import registry
from neuron_smoke.slurm_health import (
    MAX_REASON,
    Node,
    cluster_failure,
    decide,
    failure,
    main,
    parse_node,
    reason,
    stage_of,
)

# Lines as Slurm 22.05's `scontrol show node -o` prints them (taken from the test bed's cluster, shortened).
IDLE = (
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=2.19 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.27.2 NodeHostName=n1 Port=54471 "
    "Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1 State=IDLE ThreadsPerCore=1 "
    "Partitions=main  CfgTRES=cpu=1,mem=1M,billing=1 AllocTRES= CapWatts=n/a ExtSensorsTemp=n/s\n"
)
OURS = IDLE.replace("n1", "n2").replace("State=IDLE", "State=IDLE+DRAIN").rstrip("\n") + (
    " Reason=neuron-torch: fabric: `fi_info -p tcp` lists no tcp provider (fi_getinfo: -61) "
    "[root@2026-12-02T15:58:44]\n"
)
BY_HAND = IDLE.replace("State=IDLE", "State=DOWN+DRAIN").rstrip("\n") + " Reason=swap DIMM B2 [ops@2026-12-01T09:00:00]"


def test_a_node_line_parsed() -> None:
    node = parse_node(IDLE)
    assert node == Node("n1", frozenset({"IDLE"}), "")
    assert not node.drained and not node.ours


def test_a_drained_node_keeps_its_whole_reason_without_slurms_stamp() -> None:
    node = parse_node(OURS)
    assert node.name == "n2" and node.states == {"IDLE", "DRAIN"} and node.drained and node.ours
    assert node.reason == "neuron-torch: fabric: `fi_info -p tcp` lists no tcp provider (fi_getinfo: -61)"
    hand = parse_node(BY_HAND)
    assert hand.reason == "swap DIMM B2" and hand.drained and not hand.ours


def test_a_reason_holding_key_value_text_is_not_split() -> None:
    node = parse_node(IDLE.rstrip("\n") + " State=IDLE+DRAIN Reason=neuron-torch: environment: torch=2.13.1 x=1")
    assert node.reason == "neuron-torch: environment: torch=2.13.1 x=1"


def test_text_that_is_not_a_node_line_is_refused() -> None:
    with pytest.raises(ValueError, match="not a `scontrol show node -o` line"):
        parse_node("Node n9 not found\n")


def test_the_reason_is_one_short_line_with_the_prefix_and_the_stage() -> None:
    assert reason("fabric", "no provider\n  (exit 61)") == "neuron-torch: fabric: no provider (exit 61)"
    long = reason("environment", "x" * 500)
    assert len(long) == MAX_REASON and long.startswith("neuron-torch: environment: x") and long.endswith("...")


def test_the_first_failed_stage_is_named() -> None:
    report = {
        "stages": [
            {"name": "environment", "status": "pass", "failures": []},
            {"name": "device", "status": "fail", "failures": ["no /dev/neuron* files", "second"]},
            {"name": "fabric", "status": "fail", "failures": ["later"]},
        ]
    }
    assert failure(report, 1) == ("device", "no /dev/neuron* files")
    assert failure({"stages": [{"name": "device", "status": "pass"}]}, 0) is None
    assert failure(None, 2, "Python not found: /opt/neuron-torch/venv/bin/python") == (
        "verify-device",
        "Python not found: /opt/neuron-torch/venv/bin/python",
    )
    assert failure({"stages": []}, 3) == ("verify-device", "exit 3 without a failed stage")


def test_a_failing_node_is_drained_with_the_reason() -> None:
    action = decide(parse_node(IDLE), ("fabric", "no tcp provider"))
    assert action.argv == (
        "scontrol",
        "update",
        "NodeName=n1",
        "State=DRAIN",
        "Reason=neuron-torch: fabric: no tcp provider",
    )


def test_a_failing_node_drained_already_is_left_with_its_reason() -> None:
    assert decide(parse_node(BY_HAND), ("fabric", "no tcp provider")).argv == ()
    assert decide(parse_node(OURS), ("device", "other")).argv == ()


def test_a_passing_node_is_resumed_only_from_this_checks_drain() -> None:
    assert decide(parse_node(OURS), None, "/usr/bin/scontrol").argv == (
        "/usr/bin/scontrol",
        "update",
        "NodeName=n2",
        "State=RESUME",
    )
    hand = decide(parse_node(BY_HAND), None)
    assert hand.argv == () and "drained by someone else (swap DIMM B2)" in hand.says
    assert decide(parse_node(IDLE), None).argv == ()


def stand_ins(tmp_path: Path, node_line: str, stages: list[dict[str, object]], code: int) -> tuple[Path, Path, Path]:
    """A verify-device that writes --report with STAGES and exits CODE; an scontrol that prints NODE_LINE for show
    and logs each update's arguments to a file."""
    log = tmp_path / "updates.log"
    verify = tmp_path / "verify-device"
    verify.write_text(
        f"#!{sys.executable}\nimport json, sys\nargs = sys.argv\n"
        f"open(args[args.index('--report') + 1], 'w').write(json.dumps({{'stages': {stages!r}}}))\n"
        f"assert args[args.index('--stages') + 1] == 'environment,device,fabric' and '--nnodes' in args\n"
        f"sys.exit({code})\n"
    )
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        f"#!/bin/sh\nif [ \"$1\" = show ]; then printf '%s\\n' {json.dumps(node_line.strip())}; exit 0; fi\n"
        f"printf '%s|' \"$@\" >> {log}\n"
    )
    verify.chmod(0o755)
    scontrol.chmod(0o755)
    return verify, scontrol, log


def test_main_drains_the_failing_node_and_exits_1(tmp_path: Path) -> None:
    failed = [{"name": "fabric", "status": "fail", "failures": ["no tcp provider"]}]
    verify, scontrol, log = stand_ins(tmp_path, IDLE, failed, 1)
    assert main(["--node", "n1", "--verify-device", str(verify), "--scontrol", str(scontrol)]) == 1
    assert log.read_text() == "update|NodeName=n1|State=DRAIN|Reason=neuron-torch: fabric: no tcp provider|"


def test_main_resumes_its_own_drain_and_exits_0(tmp_path: Path) -> None:
    verify, scontrol, log = stand_ins(tmp_path, OURS, [{"name": "fabric", "status": "pass"}], 0)
    assert main(["--node", "n2", "--verify-device", str(verify), "--scontrol", str(scontrol)]) == 0
    assert log.read_text() == "update|NodeName=n2|State=RESUME|"


def test_main_drains_a_node_whose_verify_device_cannot_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, scontrol, log = stand_ins(tmp_path, IDLE, [], 0)
    assert main(["--node", "n1", "--verify-device", str(tmp_path / "absent"), "--scontrol", str(scontrol)]) == 1
    assert log.read_text().startswith("update|NodeName=n1|State=DRAIN|Reason=neuron-torch: verify-device: ")
    assert "No such file or directory" in log.read_text()


def test_main_says_so_when_scontrol_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verify, _, _ = stand_ins(tmp_path, IDLE, [], 0)
    assert main(["--node", "n1", "--verify-device", str(verify), "--scontrol", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("neuron-healthcheck: error: n1: ")


CLUSTER_DRAIN = OURS.replace(
    "Reason=neuron-torch: fabric: `fi_info -p tcp` lists no tcp provider (fi_getinfo: -61)",
    "Reason=neuron-torch: consistency: graph differs: this node (node 1) has 7ac5",
)


def test_the_stage_a_reason_names() -> None:
    assert stage_of("neuron-torch: consistency: graph differs: a: b") == "consistency"
    assert stage_of("neuron-torch: verify-device: exit 2") == "verify-device"
    assert stage_of("replacing a DIMM: consistency") == ""


def test_a_cluster_stage_drain_is_resumed_only_by_a_check_of_that_stage() -> None:
    node = parse_node(CLUSTER_DRAIN)
    left = decide(node, None)  # the node check: environment, device, fabric
    assert left.argv == () and "drained for a stage this check does not run" in left.says
    assert decide(node, None, checked=("consistency",)).argv[-1] == "State=RESUME"


def cluster_reports(folder: Path, job: str, nodes: list[dict[str, object]]) -> Path:
    """A verify-cluster.sbatch reports' folder of job JOB on n1..n3, with cluster-report.json's NODES."""
    folder.mkdir()
    (folder / "slurm-job").write_text(f"{job}\n")
    (folder / "slurm-nodes").write_text("n1\nn2\nn3\n")
    (folder / "cluster-report.json").write_text(json.dumps({"passed": False, "nodes": nodes}))
    note = {"stages": [{"name": "consistency", "notes": ["node 2 did not join within 6s (missing): checked among"]}]}
    (folder / "node-0.json").write_text(json.dumps(note))
    return folder


NODES = [
    {"rank": 0, "host": "n1", "verdict": "PASS", "problems": []},
    {"rank": 1, "host": "n2", "verdict": "FAIL", "problems": ["allreduce: this node (node 1) contributed 102"]},
    {"rank": 2, "host": "", "verdict": "MISSING", "problems": ["no report (node-2.json)"]},
]


def test_a_node_s_line_of_the_cluster_check_is_its_failure(tmp_path: Path) -> None:
    folder = cluster_reports(tmp_path / "r", "17", NODES)
    assert cluster_failure(folder, "n1", "17") is None
    assert cluster_failure(folder, "n2", "17") == ("allreduce", "this node (node 1) contributed 102")
    assert cluster_failure(folder, "n3", "17") == ("join", "did not join the cluster check (job 17) within 6s")
    with pytest.raises(ValueError, match="holds job 17's reports, not job 18's"):
        cluster_failure(folder, "n1", "18")
    with pytest.raises(ValueError, match="n9 is not a node of job 17"):
        cluster_failure(folder, "n9", "17")


def epilog_env(monkeypatch: pytest.MonkeyPatch, job: str) -> None:
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "epilog_slurmd")
    monkeypatch.setenv("SLURM_JOB_ID", job)


def test_as_the_epilog_the_check_job_s_failed_node_is_drained_with_its_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = cluster_reports(tmp_path / "r", "17", NODES)
    _, scontrol, log = stand_ins(tmp_path, IDLE.replace("n1", "n2"), [], 0)
    epilog_env(monkeypatch, "17")
    args = ["--node", "n2", "--verify-device", str(tmp_path / "absent"), "--scontrol", str(scontrol)]
    assert main([*args, "--cluster-report", str(folder)]) == 0  # an epilog exits 0: Slurm drains a failed one
    drain = "update|NodeName=n2|State=DRAIN|Reason=neuron-torch: allreduce: this node (node 1) contributed 102|"
    assert log.read_text() == drain


def test_as_the_epilog_of_another_job_the_check_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = cluster_reports(tmp_path / "r", "17", NODES)
    _, scontrol, log = stand_ins(tmp_path, IDLE.replace("n1", "n2"), [], 0)
    epilog_env(monkeypatch, "18")
    args = ["--node", "n2", "--verify-device", str(tmp_path / "absent"), "--scontrol", str(scontrol)]
    assert main([*args, "--cluster-report", str(folder)]) == 0
    assert main(args) == 0  # no folder configured
    assert not log.exists()


def test_as_the_epilog_of_a_check_job_without_a_verdict_it_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = cluster_reports(tmp_path / "r", "17", NODES)
    (folder / "cluster-report.json").unlink()  # cancelled before cluster-report ran
    _, scontrol, log = stand_ins(tmp_path, IDLE.replace("n1", "n2"), [], 0)
    epilog_env(monkeypatch, "17")
    args = ["--node", "n2", "--scontrol", str(scontrol), "--cluster-report", str(folder)]
    assert main(args) == 0 and not log.exists()
    assert "n2: no verdict of job 17, nothing done: cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("stage", [entry.name for entry in registry.TABLE if entry.title.startswith("cluster:")])
def test_as_the_epilog_a_passing_check_job_resumes_a_node_it_drained_for_any_cluster_stage(
    stage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every cluster stage of the registry (nccom too): the job that passes the node again is the one that may resume
    it, since no one-node check can run that stage."""
    passed = [{**node, "verdict": "PASS", "problems": []} for node in NODES]
    folder = cluster_reports(tmp_path / "r", "17", passed)
    drained = OURS.replace("neuron-torch: fabric:", f"neuron-torch: {stage}:")
    _, scontrol, log = stand_ins(tmp_path, drained, [], 0)
    epilog_env(monkeypatch, "17")
    assert main(["--node", "n2", "--scontrol", str(scontrol), "--cluster-report", str(folder)]) == 0
    assert log.read_text() == "update|NodeName=n2|State=RESUME|"


@pytest.mark.parametrize("option", ["--node", "--verify-device", "--scontrol", "--cluster-report"])
def test_an_empty_value_is_a_usage_error(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `--node ""` checked and drained the host under its own name instead
    verify, scontrol, log = stand_ins(tmp_path, IDLE, [], 0)
    with pytest.raises(SystemExit) as exited:
        main(["--node", "n1", "--verify-device", str(verify), "--scontrol", str(scontrol), option, " "])
    assert exited.value.code == 2 and f"argument {option}: is empty: give a value" in capsys.readouterr().err
    assert not log.exists()
