"""`neuron-torch cluster-report DIR --expect N`: one verdict for a multi-node verify-device run, from the reports its
nodes wrote (`verify-device --report-dir DIR`: DIR/node-<rank>.json).

A table, node by stage, printed and written beside the reports (or to `--out DIR`) as cluster-report.json and
cluster-report.md. A node passes only when its report is there, readable, of a multi-node run of N nodes, exited 0
with no failed stage, and no other node's report blamed it (a wrong contribution, a version that differs, a node
that stopped answering, a node that did not join). The run passes only when all N nodes pass: a missing or failed
node can never give exit 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from neuron_torch.errors import EXIT_FAILED, EXIT_OK, NeuronTorchError
from neuron_torch.files import check_output_file, read_json, replace_text

SCHEMA = "neuron-cluster-report/1"
REPORT_NAME = re.compile(r"node-(\d+)\.json")
OUTPUTS = ("cluster-report.json", "cluster-report.md")
MISSING, PASS, FAIL = "MISSING", "PASS", "FAIL"
NOT_SELECTED = "not selected (--stages)"  # verify-device's reason: shown as "-", and a column no node ran is left out


@dataclass
class Node:
    rank: int
    verdict: str = MISSING
    host: str = ""
    stages: dict[str, str] = field(default_factory=dict)  # stage -> pass/fail/skip/hung
    problems: list[str] = field(default_factory=list)
    graphs_compiled: int | None = None  # the compile stage's counts (None: not run, or the device has no counters)
    graphs_loaded: int | None = None


@dataclass
class Verdict:
    expect: int
    folder: str
    stages: list[str]
    nodes: list[Node]

    @property
    def passed(self) -> bool:
        return len(self.nodes) == self.expect and all(n.verdict == PASS for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "passed": self.passed, **asdict(self)}


def collect(folder: Path, expect: int) -> Verdict:
    if expect < 1:
        raise NeuronTorchError(f"--expect must be at least 1 (the number of nodes of the run): {expect}")
    if not folder.is_dir():
        raise NeuronTorchError(f"{folder}: no such folder of node reports; pass the --report-dir the nodes wrote to")
    reports: dict[int, dict[str, Any] | str] = {}
    for path in sorted(folder.iterdir()):
        match = REPORT_NAME.fullmatch(path.name)
        if match:
            reports[int(match.group(1))] = _read(path)
    stages: list[str] = []
    for report in reports.values():
        if isinstance(report, dict):
            stages += [s["name"] for s in report.get("stages", []) if s.get("name") not in stages]
    nodes = [_node(rank, reports.get(rank), expect) for rank in range(expect)]
    nodes += [_unexpected(rank, expect) for rank in sorted(reports) if rank >= expect]
    stages = [s for s in stages if any(n.stages.get(s, "-") != "-" for n in nodes)]
    _blame(nodes, reports)
    return Verdict(expect, str(folder), stages, nodes)


def _read(path: Path) -> dict[str, Any] | str:
    try:
        data = read_json(path, "node report", "a node report is what verify-device --report-dir writes")
    except NeuronTorchError as error:
        return str(error)
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        return f"{path}: not a verify-device report"
    return data


def _node(rank: int, report: dict[str, Any] | str | None, expect: int) -> Node:
    node = Node(rank)
    if report is None:
        node.problems.append(f"no report (node-{rank}.json): the node did not run, or could not write its report")
        return node
    node.verdict = FAIL
    if isinstance(report, str):
        node.problems.append(f"unreadable report: {report}")
        return node
    node.host = str((report.get("host") or {}).get("hostname", ""))
    for stage in report["stages"]:
        selected = stage.get("reason") != NOT_SELECTED
        node.stages[stage["name"]] = "hung" if stage.get("hung") else (stage["status"] if selected else "-")
        if stage["status"] == "fail":
            first = (stage.get("failures") or [stage.get("error") or "failed"])[0]
            node.problems.append(f"{stage['name']}: {first}")
    node.graphs_compiled, node.graphs_loaded = _graphs(report)
    cluster = report.get("cluster") or {}
    if not cluster:
        node.problems.append("not a multi-node report (verify-device ran without --nnodes/--report-dir)")
    elif cluster.get("nnodes") != expect:
        node.problems.append(f"ran with --nnodes {cluster.get('nnodes')}, not {expect}")
    elif cluster.get("node_rank") != rank:
        node.problems.append(f"the report is node {cluster.get('node_rank')}'s, not node {rank}'s")
    if report.get("exit_code") != 0 and not node.problems:
        node.problems.append(f"exit code {report.get('exit_code')}")
    if not node.problems:
        node.verdict = PASS
    return node


def _graphs(report: dict[str, Any]) -> tuple[int | None, int | None]:
    """The graphs the node compiled and loaded from the compile cache (the compile stage's counters)."""
    numbers = next((s.get("numbers") or {} for s in report["stages"] if s.get("name") == "compile"), {})

    def count(key: str) -> int | None:
        value = numbers.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return count("graphs_compiled"), count("graphs_loaded")


def _unexpected(rank: int, expect: int) -> Node:
    return Node(rank, FAIL, problems=[f"a report of node {rank}, but the run has {expect} node(s) (0 to {expect - 1})"])


def _blame(nodes: list[Node], reports: dict[int, dict[str, Any] | str]) -> None:
    """What each report says of other nodes: faults it saw on them, and nodes that did not join."""
    by_rank = {n.rank: n for n in nodes}
    for rank, report in sorted(reports.items()):
        if not isinstance(report, dict):
            continue
        cluster = report.get("cluster") or {}
        for peer, faults in (cluster.get("peer_faults") or {}).items():
            target = by_rank.get(int(peer))
            if target is not None:
                target.problems += [f"node {rank} saw: {fault}" for fault in faults]
                target.verdict = FAIL if target.verdict == PASS else target.verdict
        for peer in cluster.get("missing") or []:
            target = by_rank.get(int(peer))
            if target is not None and target.verdict == PASS:
                target.verdict = FAIL
                target.problems.append(f"node {rank} saw it missing from the rendezvous")


def table(verdict: Verdict) -> list[list[str]]:
    graphs = "compile" in verdict.stages
    rows = [["node", "host", "verdict", *verdict.stages, *(["graphs compiled/loaded"] if graphs else [])]]
    for node in verdict.nodes:
        cells = [node.stages.get(s, "-").upper() if node.stages else MISSING for s in verdict.stages]
        counts = [f"{_count(node.graphs_compiled)}/{_count(node.graphs_loaded)}"] if graphs else []
        rows.append([str(node.rank), node.host or "-", node.verdict, *cells, *counts])
    return rows


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


def text(verdict: Verdict) -> str:
    rows = table(verdict)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += ["", *problems(verdict), summary(verdict)]
    return "\n".join(lines) + "\n"


def problems(verdict: Verdict) -> list[str]:
    return [f"node {n.rank}: {p}" for n in verdict.nodes for p in n.problems]


def summary(verdict: Verdict) -> str:
    failed = [n.rank for n in verdict.nodes if n.verdict == FAIL]
    missing = [n.rank for n in verdict.nodes if n.verdict == MISSING]
    if verdict.passed:
        return f"cluster: PASS, all {verdict.expect} node(s) passed"
    parts = [
        f"failed: node {', '.join(map(str, failed))}" if failed else "",
        f"missing: node {', '.join(map(str, missing))}" if missing else "",
    ]
    return f"cluster: FAIL ({'; '.join(p for p in parts if p)})"


def markdown(verdict: Verdict) -> str:
    rows = table(verdict)
    lines = [
        f"# Cluster verdict: {'PASS' if verdict.passed else 'FAIL'}",
        "",
        f"{summary(verdict)} ({verdict.folder})",
        "",
    ]
    lines += ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    found = problems(verdict)
    if found:
        lines += ["", "## Problems", "", *(f"- {p}" for p in found)]
    return "\n".join(lines) + "\n"


def write(verdict: Verdict, out: Path) -> list[Path]:
    written = []
    contents = (json.dumps(verdict.to_dict(), indent=2) + "\n", markdown(verdict))
    out.mkdir(parents=True, exist_ok=True)
    for name, content in zip(OUTPUTS, contents, strict=True):
        path = out / name
        replace_text(path, content)
        written.append(path)
    return written


def check_outputs(out: Path) -> None:
    for name in OUTPUTS:
        check_output_file(out / name, "--out")


def run(folder: Path, expect: int, out: Path | None) -> int:
    """Print the table, write it as JSON and Markdown (to `out`, default beside the reports); 0 only if all passed."""
    verdict = collect(folder, expect)
    target = out or folder
    check_outputs(target)
    written = write(verdict, target)
    print(text(verdict), end="")
    print(f"written: {', '.join(map(str, written))}")
    return EXIT_OK if verdict.passed else EXIT_FAILED
