"""Cluster stage: one version and one graph on every node. Each member sends its facts (the Python packages, the
torch it imported, the Neuron runtime, collectives and driver where readable, the cell id, and the graph fingerprint
below) through the rendezvous store; every node compares them all.

A field on which a strict majority of the nodes agree names the others: they fail, naming the field, their value and
the majority's; the majority passes, noting who differs. Without a majority, every node fails naming each group.

The graph fingerprint: sha256 of the FX graph (`torch.fx.symbolic_trace`) of a fixed tiny model's forward, its
parameters' shapes and dtypes, and the autograd graph of its loss (each backward node's type and saved attributes,
in a fixed walk). That is what torch hands a compiler for the same model, so a node whose torch, decompositions or
model code differ hashes differently; it is computed on the CPU and is not the NEFF neuronx-cc builds from it.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from neuron_smoke import rendezvous
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import Skip
from neuron_smoke.stage_environment import REPORTED, installed_version
from neuron_smoke.stage_fabric import SINGLE_HOST

NEURON_PACKAGES = {"neuron runtime": "aws-neuronx-runtime-lib", "neuron collectives": "aws-neuronx-collectives"}
DRIVER_VERSION = Path("/sys/module/neuron/version")


def run(ctx: Context, log: StageLog) -> None:
    spec = ctx.options.cluster
    if spec is None:
        raise Skip(SINGLE_HOST)
    mine = local_facts(ctx)
    log.numbers["facts"] = mine
    session = rendezvous.joined(spec, log)
    if session is None:
        return
    gathered = session.gather("consistency", mine, wait_s(ctx))
    silent = [r for r, f in gathered.items() if f is None]
    if silent:
        log.note(f"node {', '.join(map(str, silent))} sent no facts in time (stopped or stuck): compared without it")
    answered = {r: f for r, f in gathered.items() if f is not None}
    log.numbers["nodes_compared"] = sorted(answered)
    problems, others = compare(answered, session.rank)
    for line in problems:
        log.fail(line)
    for rank, lines in others.items():
        for line in lines:
            log.note(f"node {rank}: {line}")
            session.blame(rank, f"consistency: {line}")
    notes = bool(others)
    if not problems:
        log.summary = f"{len(mine)} fields equal on {len(answered)} node(s), graph {mine['graph'][:12]}"
        if notes:
            log.summary = f"this node agrees with the majority of {len(answered)} node(s); others differ (notes)"


def wait_s(ctx: Context) -> float:
    """How long a cluster stage waits for its peers: the join timeout, within the stage's own deadline."""
    assert ctx.options.cluster is not None
    return max(1.0, min(ctx.options.cluster.join_timeout_s, ctx.options.timeout_s - 5.0))


def local_facts(ctx: Context) -> dict[str, str]:
    import torch

    facts = {"python": platform.python_version()}
    facts.update({dist: installed_version(dist) or "not installed" for dist in REPORTED})
    facts["torch imported"] = torch.__version__
    facts.update({name: system_package(pkg) for name, pkg in NEURON_PACKAGES.items()})
    facts["neuron driver"] = DRIVER_VERSION.read_text().strip() if DRIVER_VERSION.is_file() else "not loaded"
    facts["cell"] = str((ctx.options.cell or {}).get("id") or "none")
    facts["graph"] = graph_fingerprint()
    return facts


def system_package(name: str) -> str:
    """The installed version of an apt (or rpm) package, or "not installed"."""
    for tool, args in (("dpkg-query", ["-W", "-f=${Version}", name]), ("rpm", ["-q", "--qf", "%{VERSION}", name])):
        exe = shutil.which(tool)
        if exe is None:
            continue
        try:
            proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return f"unreadable ({tool})"
        return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "not installed"
    return "unreadable (no dpkg-query or rpm)"


def graph_fingerprint() -> str:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    traced = torch.fx.symbolic_trace(model)
    out = traced(torch.randn(2, 8)).softmax(-1)
    loss = (out * out).mean()
    parts = [traced.code, *(f"{n}:{tuple(p.shape)}:{p.dtype}" for n, p in model.named_parameters())]
    parts += autograd_nodes(loss.grad_fn)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def autograd_nodes(root: Any) -> list[str]:
    """Each backward node reachable from `root`, breadth first in next_functions order: its type and saved
    attributes (tensors as shape and dtype)."""
    import torch

    lines, queue, seen = [], [root], set()
    while queue:
        node = queue.pop(0)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        saved = []
        for attr in sorted(a for a in dir(node) if a.startswith("_saved_")):
            value = getattr(node, attr)
            shown = f"{tuple(value.shape)}:{value.dtype}" if isinstance(value, torch.Tensor) else repr(value)
            saved.append(f"{attr}={shown}")
        lines.append(f"{node.name()}({', '.join(saved)})")
        queue += [child for child, _ in node.next_functions]
    return lines


def compare(facts: dict[int, dict[str, str]], me: int) -> tuple[list[str], dict[int, list[str]]]:
    """(this node's failures, what differs on each other node) from every answering node's facts."""
    problems: list[str] = []
    others: dict[int, list[str]] = {}
    fields = sorted({k for f in facts.values() for k in f})
    for name in fields:
        groups: dict[str, list[int]] = {}
        for rank, found in sorted(facts.items()):
            groups.setdefault(found.get(name, "(not sent)"), []).append(rank)
        if len(groups) < 2:
            continue
        counts = Counter({value: len(ranks) for value, ranks in groups.items()})
        value, count = counts.most_common(1)[0]
        if count * 2 > len(facts):
            majority = _ranks(groups[value])
            if me in groups[value]:
                for odd, ranks in groups.items():
                    for rank in ranks if odd != value else ():
                        others.setdefault(rank, []).append(f"{name} {odd}, node {majority} {value}")
            else:
                mine = next(v for v, r in groups.items() if me in r)
                problems.append(f"{name} differs: this node (node {me}) has {mine}, node {majority} {value}")
        else:
            described = "; ".join(f"node {_ranks(r)} has {v}" for v, r in groups.items())
            problems.append(f"{name} differs with no majority: {described}")
    return problems, others


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


__all__ = ["compare", "graph_fingerprint", "local_facts"]
