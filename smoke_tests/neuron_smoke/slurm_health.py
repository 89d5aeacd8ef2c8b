"""The Slurm node health check: verify-device's fast node stages, then drain the node that fails them, and resume
the node that passes again, but only one that this check drained.

`python -m neuron_smoke.slurm_health` (run by scripts/slurm/neuron-healthcheck, Slurm's HealthCheckProgram and
Prolog) runs `verify-device --stages environment,device,fabric` as a one-node cluster run (so that the fabric stage
checks the release's libfabric provider), reads its report, reads the node with `scontrol show node -o`, and runs
at most one `scontrol update`:

- the check failed, the node is not drained: drain it, Reason="neuron-torch: <stage>: <first failure>";
- the check failed, the node is drained already: leave it (an operator's reason is never overwritten);
- the check passed, the node is drained with a reason starting "neuron-torch: <stage>:" of a stage it ran: resume it;
- the check passed, the node is drained with any other reason (an operator's, or a cluster stage's): leave it drained.

As Slurm's Epilog (SLURM_SCRIPT_CONTEXT=epilog_slurmd) with `--cluster-report DIR`, it runs no stage itself: when
DIR holds the report of the job that just ended (verify-cluster.sbatch writes DIR/slurm-job and DIR/slurm-nodes), it
takes this node's line of DIR/cluster-report.json as the check, so that a node that failed a cluster stage
(consistency, allreduce) or never joined (join) is drained with that stage. A one-node check cannot see those again,
so only a cluster check job clears them: fix the node, `scontrol update NodeName=<node> State=RESUME`, rerun the job.
In any other job's epilog it does nothing; an epilog always exits 0 (Slurm drains a node whose epilog fails).

Exit 0 when the node passed, 1 when it failed (a Prolog that exits non-zero makes Slurm requeue the job onto other
nodes), 2 on bad usage. Torch-free, standard library only: any python3 on the node runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuron_smoke import registry

PREFIX = "neuron-torch:"
STAGES = ("environment", "device", "fabric")
VERIFY_DEVICE = "verify-device"  # the stage named when verify-device itself could not run
JOIN = "join"  # the stage named for a node that never joined the cluster check
EPILOG = "epilog_slurmd"  # SLURM_SCRIPT_CONTEXT in Slurm's Epilog
# What a cluster check job's verdict covers, so what its epilog may resume: every verify-device stage (the registry's),
# a node that never joined, and the verdict's own "cluster" line.
CLUSTER_JOB_STAGES = (*(entry.name for entry in registry.TABLE), JOIN, "cluster")
# Slurm stores a reason whole, and `sinfo -R` shows its first 20 characters: keep it one short line.
MAX_REASON = 120
EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
# slurmd kills a HealthCheckProgram still running after 60 s (Slurm 22.05, not configurable), before it could drain
# anything: verify-device gets 50 s, so that a node whose check hangs is drained saying so.
VERIFY_TIMEOUT_S = 50.0
STAGE_TIMEOUT_S = 40


@dataclass(frozen=True)
class Node:
    name: str
    states: frozenset[str]  # State's flags: IDLE+DRAIN is {"IDLE", "DRAIN"}
    reason: str  # without Slurm's trailing " [user@time]"; "" when none

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.states

    @property
    def ours(self) -> bool:
        """Drained by this check (its reason starts with the prefix), not by an operator."""
        return self.drained and self.reason.startswith(PREFIX)


@dataclass(frozen=True)
class Action:
    argv: tuple[str, ...]  # the scontrol command to run; () for none
    says: str  # one line for the log


def parse_show(text: str) -> dict[str, str]:
    """The KEY=VALUE fields of one `scontrol show node -o` line. A value runs to the next ` KEY=`: Reason holds
    spaces (and may hold '='), and it is the last field scontrol prints when set, so it runs to the line's end."""
    fields: dict[str, str] = {}
    key = None
    for word in text.strip().split(" "):
        name, eq, value = word.partition("=")
        if key != "Reason" and eq and name.isidentifier():
            key = name
            fields[key] = value
        elif key is not None:
            fields[key] += " " + word
    return fields


def parse_node(text: str) -> Node:
    fields = parse_show(text)
    if "NodeName" not in fields or "State" not in fields:
        raise ValueError(f"not a `scontrol show node -o` line: {text.strip()[:80]!r}")
    reason = fields.get("Reason", "").strip()
    if reason.endswith("]") and " [" in reason:  # "text [root@2026-12-02T15:58:44]"
        reason = reason[: reason.rindex(" [")]
    return Node(fields["NodeName"], frozenset(fields["State"].split("+")), reason)


def failure(report: dict[str, Any] | None, exit_code: int, error: str = "") -> tuple[str, str] | None:
    """(stage, message) of the first failed stage, in the run's order; None when the check passed. Without a failed
    stage (verify-device could not start, or stopped), the stage is "verify-device" and the message its last error."""
    if report is not None:
        for stage in report.get("stages", []):
            if stage.get("status") == "fail":
                failures = stage.get("failures") or [stage.get("summary") or "failed"]
                return str(stage["name"]), str(failures[0])
    if exit_code == 0 and report is not None:
        return None
    return VERIFY_DEVICE, error or f"exit {exit_code} without a failed stage"


def stage_of(text: str) -> str:
    """The stage a reason of this check names ("neuron-torch: <stage>: ..."); "" for any other reason."""
    if not text.startswith(PREFIX):
        return ""
    return text.removeprefix(PREFIX).strip().partition(":")[0].strip()


class OtherJob(ValueError):
    """The reports folder holds another job's reports (or none): the job that ended was not the cluster check."""


def cluster_failure(folder: Path, node_name: str, job_id: str) -> tuple[str, str] | None:
    """(stage, message) of NODE_NAME in the cluster check job JOB_ID's reports in FOLDER; None when it passed there.
    Raises OtherJob when FOLDER holds another job's reports (or none), ValueError when it lacks this node."""
    marker = folder / "slurm-job"
    job = _read_text(marker).strip() if marker.exists() else ""
    if job != job_id:
        raise OtherJob(f"{folder} holds job {job or '(none)'}'s reports, not job {job_id}'s")
    names = _read_text(folder / "slurm-nodes").split()
    if node_name not in names:
        raise ValueError(f"{node_name} is not a node of job {job_id} ({', '.join(names)})")
    rank = names.index(node_name)
    verdict = json.loads(_read_text(folder / "cluster-report.json"))
    node = next((n for n in verdict.get("nodes", []) if n.get("rank") == rank), None)
    if node is None or node.get("verdict") == "MISSING":
        return JOIN, f"did not join the cluster check (job {job_id}) {_join_timeout(folder, rank)}".rstrip()
    if node.get("verdict") == "PASS":
        return None
    stage, _, message = str((node.get("problems") or ["cluster: failed"])[0]).partition(": ")
    return (stage, message) if message else ("cluster", stage)


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from None


def _join_timeout(folder: Path, rank: int) -> str:
    """ "within Ns", as the nodes that waited for node RANK noted it; "" when none did."""
    for path in sorted(folder.glob("node-*.json")):
        found = re.search(rf"node {rank} did not join (within \S+s)", path.read_text(errors="replace"))
        if found:
            return found.group(1)
    return ""


def reason(stage: str, message: str) -> str:
    """`neuron-torch: <stage>: <message>` on one line, at most MAX_REASON characters."""
    text = " ".join(f"{PREFIX} {stage}: {message}".split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3].rstrip() + "..."


def decide(
    node: Node, failed: tuple[str, str] | None, scontrol: str = "scontrol", checked: Sequence[str] = STAGES
) -> Action:
    """The one scontrol update (or none) for NODE after a check of the stages CHECKED (None: all) that FAILED."""
    update = (scontrol, "update", f"NodeName={node.name}")
    if failed is not None:
        why = reason(*failed)
        if node.drained:
            return Action((), f"{node.name}: failed ({why}); drained already ({node.reason or 'no reason'}): left")
        return Action((*update, "State=DRAIN", f"Reason={why}"), f"{node.name}: failed; drained: {why}")
    if node.ours and stage_of(node.reason) in (*checked, VERIFY_DEVICE):
        return Action((*update, "State=RESUME"), f"{node.name}: passed; resumed (was {node.reason})")
    if node.ours:
        return Action(
            (),
            f"{node.name}: passed; drained for a stage this check does not run ({node.reason}): left until a "
            "cluster check job passes it (fix, scontrol update State=RESUME, rerun verify-cluster.sbatch)",
        )
    if node.drained:
        return Action((), f"{node.name}: passed; drained by someone else ({node.reason or 'no reason'}): left")
    return Action((), f"{node.name}: passed")


def run_check(verify: Sequence[str], folder: Path) -> tuple[dict[str, Any] | None, int, str]:
    """verify-device's node stages as a one-node cluster run: (its report or None, its exit code, its last error
    line). Its output passes through to this check's (Slurm's log of the prolog, or nothing)."""
    report = folder / "report.json"
    argv = [*verify, "--stages", ",".join(STAGES), "--timeout", str(STAGE_TIMEOUT_S), "--report", str(report)]
    argv += ["--nnodes", "1", "--node-rank", "0", "--master", "127.0.0.1"]
    try:
        proc = subprocess.run(argv, timeout=VERIFY_TIMEOUT_S, capture_output=True, text=True, check=False)
    except subprocess.TimeoutExpired:
        return None, 124, f"did not finish in {VERIFY_TIMEOUT_S:g}s"
    except OSError as error:
        return None, 127, f"{error.strerror}: {argv[0]}"
    sys.stderr.write(proc.stdout + proc.stderr)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    last = errors[-1].removeprefix("verify-device: error: ") if errors else ""
    try:
        return json.loads(report.read_text()), proc.returncode, last
    except (OSError, ValueError):
        return None, proc.returncode, last


def read_node(name: str, scontrol: str) -> Node:
    proc = subprocess.run(
        [scontrol, "show", "node", "-o", name], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"`{scontrol} show node -o {name}` exit {proc.returncode}: {proc.stderr.strip()}")
    return parse_node(proc.stdout)


def _given(value: str) -> str:
    """An option's value, refused when empty (`--node "$UNSET"` would check the host under another name)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("is empty: give a value, or leave the option out for its default")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="neuron-healthcheck", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--node", type=_given, help="the Slurm node name (default: $SLURMD_NODENAME, else the short hostname)"
    )
    p.add_argument(
        "--verify-device", type=_given, default="verify-device", help="the verify-device command (verify-device)"
    )
    p.add_argument("--scontrol", type=_given, default="scontrol", help="the scontrol command (scontrol)")
    p.add_argument(
        "--cluster-report",
        type=_given,
        metavar="DIR",
        help="as the Epilog: the cluster check job's reports' folder (its NEURON_TORCH_CLUSTER_DIR)",
    )
    args = p.parse_args(argv)
    node_name = args.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if os.environ.get("SLURM_SCRIPT_CONTEXT") == EPILOG:
        return epilog(node_name, args.cluster_report, os.environ.get("SLURM_JOB_ID", ""), args.scontrol)
    with tempfile.TemporaryDirectory(prefix="neuron-healthcheck.") as folder:
        report, code, error = run_check(args.verify_device.split(), Path(folder))
    failed = failure(report, code, error)
    if not act(node_name, failed, args.scontrol, STAGES):
        return EXIT_FAIL
    return EXIT_PASS if failed is None else EXIT_FAIL


def epilog(node_name: str, folder: str | None, job_id: str, scontrol: str) -> int:
    """The check as the Epilog: the cluster check job's verdict for this node, if the job that ended was one."""
    if not folder or not job_id:
        return EXIT_PASS
    try:
        failed = cluster_failure(Path(folder), node_name, job_id)
    except OtherJob:
        return EXIT_PASS  # this job was not the cluster check (or its reports went elsewhere)
    except (OSError, ValueError) as error:  # the check job's, without a verdict (cancelled before cluster-report)
        print(f"neuron-healthcheck: {node_name}: no verdict of job {job_id}, nothing done: {error}", file=sys.stderr)
        return EXIT_PASS
    act(node_name, failed, scontrol, CLUSTER_JOB_STAGES)
    return EXIT_PASS


def act(node_name: str, failed: tuple[str, str] | None, scontrol: str, checked: Sequence[str]) -> bool:
    """Read the node, run decide()'s update, say what was done; False (said why) when scontrol failed."""
    try:
        action = decide(read_node(node_name, scontrol), failed, scontrol, checked)
        if action.argv:
            proc = subprocess.run(action.argv, capture_output=True, text=True, timeout=60, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"`{' '.join(action.argv[:4])}` exit {proc.returncode}: {proc.stderr.strip()}")
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as error:
        print(f"neuron-healthcheck: error: {node_name}: {error}", file=sys.stderr)
        return False
    print(f"neuron-healthcheck: {action.says}", file=sys.stderr)
    return True


if __name__ == "__main__":
    sys.exit(main())
