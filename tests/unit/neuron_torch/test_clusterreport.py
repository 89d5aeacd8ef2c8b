"""neuron_torch.clusterreport: node by stage, and exit 0 only when every expected node passed unblamed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neuron_torch import clusterreport
from neuron_torch.errors import NeuronTorchError


def report(rank: int, nnodes: int = 3, failed: str = "", **cluster: Any) -> dict[str, Any]:
    stages = [
        {"name": "device", "status": "pass"},
        {"name": "matmul", "status": "skip", "reason": "not selected (--stages)"},
        {"name": "allreduce", "status": "fail" if failed else "pass", "failures": [failed] if failed else []},
    ]
    section = {"nnodes": nnodes, "node_rank": rank, "missing": [], "peer_faults": {}, **cluster}
    return {"host": {"hostname": f"trn{rank}"}, "stages": stages, "exit_code": 1 if failed else 0, "cluster": section}


def write(folder: Path, *reports: dict[str, Any]) -> Path:
    folder.mkdir(exist_ok=True)
    for data in reports:
        (folder / f"node-{data['cluster']['node_rank']}.json").write_text(json.dumps(data))
    return folder


def test_all_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write(tmp_path / "r", *(report(r) for r in range(3)))
    assert clusterreport.run(folder, 3, None) == 0
    out = capsys.readouterr().out
    assert "cluster: PASS, all 3 node(s) passed" in out and "matmul" not in out  # a stage no node ran is left out
    saved = json.loads((folder / "cluster-report.json").read_text())
    assert saved["passed"] is True and saved["stages"] == ["device", "allreduce"]
    assert "| 2 | trn2 | PASS | PASS | PASS |" in (folder / "cluster-report.md").read_text()


@pytest.mark.parametrize(
    ("reports", "verdicts", "problem"),
    [
        ([report(0), report(1)], ["PASS", "PASS", "MISSING"], "node 2: no report (node-2.json)"),
        ([report(0), report(1, failed="bad sum"), report(2)], ["PASS", "FAIL", "PASS"], "node 1: allreduce: bad sum"),
        (
            [report(0, peer_faults={"2": ["allreduce: contributed 103 instead of 3"]}), report(1), report(2)],
            ["PASS", "PASS", "FAIL"],
            "node 2: node 0 saw: allreduce: contributed 103 instead of 3",
        ),
        (
            [report(0, missing=[2]), report(1), report(2)],
            ["PASS", "PASS", "FAIL"],
            "saw it missing from the rendezvous",
        ),
        ([report(0), report(1), report(2, nnodes=4)], ["PASS", "PASS", "FAIL"], "ran with --nnodes 4, not 3"),
        ([report(0), report(1), report(2, node_rank=1)], ["PASS", "PASS", "FAIL"], "the report is node 1's"),
    ],
)
def test_never_exit_0_with_a_failed_missing_or_blamed_node(
    tmp_path: Path, reports: list[dict[str, Any]], verdicts: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "r"
    folder.mkdir()
    for rank, data in enumerate(reports):
        (folder / f"node-{rank}.json").write_text(json.dumps(data))
    assert clusterreport.run(folder, 3, tmp_path / "out") == 1
    assert problem in capsys.readouterr().out
    saved = json.loads((tmp_path / "out" / "cluster-report.json").read_text())
    assert [n["verdict"] for n in saved["nodes"]] == verdicts and saved["passed"] is False


def test_unreadable_unexpected_and_single_host_reports_fail(tmp_path: Path) -> None:
    folder = write(tmp_path / "r", report(0))
    (folder / "node-1.json").write_text("{half")
    single = report(2)
    single["cluster"] = None
    (folder / "node-2.json").write_text(json.dumps(single))
    (folder / "node-7.json").write_text(json.dumps(report(7)))
    verdict = clusterreport.collect(folder, 3)
    assert [n.verdict for n in verdict.nodes] == ["PASS", "FAIL", "FAIL", "FAIL"] and not verdict.passed
    problems = clusterreport.problems(verdict)
    assert any("node 1: unreadable report" in p for p in problems)
    assert "node 2: not a multi-node report (verify-device ran without --nnodes/--report-dir)" in problems
    assert "node 7: a report of node 7, but the run has 3 node(s) (0 to 2)" in problems


def test_bad_input_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(NeuronTorchError, match="no such folder of node reports") as raised:
        clusterreport.collect(tmp_path / "none", 2)
    assert raised.value.exit_code == 2
    with pytest.raises(NeuronTorchError, match="--expect must be at least 1"):
        clusterreport.collect(tmp_path, 0)


def test_each_nodes_compiled_and_loaded_graphs_are_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A node started on a shared cache after another compiled loads the graphs: the table shows it per node."""
    counts = [{"graphs_compiled": 2, "graphs_loaded": 0}, {"graphs_compiled": 0, "graphs_loaded": 2}, {}]
    reports = [report(r) for r in range(3)]
    for data, numbers in zip(reports, counts, strict=True):
        data["stages"].append({"name": "compile", "status": "pass", "numbers": numbers})
    folder = write(tmp_path / "r", *reports)
    assert clusterreport.run(folder, 3, None) == 0
    out = capsys.readouterr().out
    assert "graphs compiled/loaded" in out
    markdown = (folder / "cluster-report.md").read_text()
    assert "| 0 | trn0 | PASS | PASS | PASS | PASS | 2/0 |" in markdown
    assert "| 1 | trn1 | PASS | PASS | PASS | PASS | 0/2 |" in markdown
    assert "| 2 | trn2 | PASS | PASS | PASS | PASS | ?/? |" in markdown  # no counters (the real torch_neuronx)
    nodes = json.loads((folder / "cluster-report.json").read_text())["nodes"]
    assert [(n["graphs_compiled"], n["graphs_loaded"]) for n in nodes] == [(2, 0), (0, 2), (None, None)]


def test_the_graph_column_is_left_out_when_no_node_ran_the_compile_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write(tmp_path / "r", *(report(r) for r in range(3)))
    clusterreport.run(folder, 3, None)
    assert "graphs" not in capsys.readouterr().out
