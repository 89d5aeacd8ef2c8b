"""verify-device's multi-node mode: the options, and where each value comes from when a flag does not give it.

`--nnodes N --node-rank R --master ADDR[:PORT]` (torchrun's names; one verify-device process per node). A value not
given comes from Slurm (`SLURM_NNODES`, `SLURM_NODEID`, the first host of `SLURM_JOB_NODELIST`), else from torchrun's
environment (`WORLD_SIZE`, `RANK`, `MASTER_ADDR`, `MASTER_PORT`). Under torchrun, verify-device must be the node's only
worker (`--nproc-per-node 1`): `LOCAL_WORLD_SIZE` must then be 1, and `WORLD_SIZE`/`RANK` count nodes. Under Slurm,
one task per node (`SLURM_NTASKS` = `SLURM_NNODES`). Every environment value is checked as a flag is. Torch-free.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from neuron_cell.boundary import quote
from neuron_smoke import nodelist
from neuron_smoke.argtypes import seconds
from neuron_smoke.errors import UsageError

DEFAULT_PORT = 29500  # torchrun's MASTER_PORT default
DEFAULT_JOIN_TIMEOUT_S = 120.0
FLAGS = ("nnodes", "node_rank", "master", "report_dir")  # any of them turns the multi-node mode on
# Settings of the multi-node mode only: refused on one host, where they would be ignored.
NODE_OPTIONS = {
    "local_addr": "--local-addr",
    "join_timeout": "--join-timeout",
    "allreduce_max_bytes": "--allreduce-max-bytes",
}


@dataclass(frozen=True)
class ClusterSpec:
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S
    local_addr: str | None = None  # None: the address this node reaches the master from
    report_dir: str | None = None
    # Where each of nnodes, node_rank and master came from: "--flag", "slurm" or "torchrun".
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def master(self) -> str:
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"{host}:{self.master_port}"

    def report_file(self) -> Path | None:
        return None if self.report_dir is None else Path(self.report_dir) / report_name(self.node_rank)


def report_name(rank: int) -> str:
    return f"node-{rank}.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("multi-node mode (one process per node; values not given come from Slurm or torchrun)")
    group.add_argument("--nnodes", type=int, help="nodes in the run (default: $SLURM_NNODES, else $WORLD_SIZE)")
    group.add_argument("--node-rank", type=int, help="this node's rank (default: $SLURM_NODEID, else $RANK)")
    group.add_argument(
        "--master",
        metavar="ADDR[:PORT]",
        help=f"node 0's address, where the rendezvous store runs (default: the first host of $SLURM_JOB_NODELIST, "
        f"else $MASTER_ADDR:$MASTER_PORT; port {DEFAULT_PORT})",
    )
    group.add_argument(
        "--join-timeout",
        type=seconds,  # finite and bounded: no rendezvous store takes inf, nor 1e308, as its timeout
        metavar="SECONDS",
        help=f"how long the nodes wait for each other; a node not joined by then is named missing "
        f"({DEFAULT_JOIN_TIMEOUT_S:g})",
    )
    group.add_argument("--local-addr", help="this node's address for collective traffic (default: routed to master)")
    group.add_argument("--report-dir", metavar="DIR", help="write this node's report as DIR/node-<rank>.json")
    group.add_argument(
        "--allreduce-max-bytes",
        type=int,
        metavar="N",
        help="largest all_reduce of the bandwidth sizes (default 64 MiB on the CPU, 1 GiB on neuron)",
    )


def from_args(args: argparse.Namespace, env: Mapping[str, str]) -> ClusterSpec | None:
    """The multi-node settings, or None for a single-host run (no multi-node flag given)."""
    if all(getattr(args, name) is None for name in FLAGS):
        given = [option for name, option in NODE_OPTIONS.items() if getattr(args, name) is not None]
        if given:  # on one host it would be ignored
            raise UsageError(f"{given[0]} goes with the multi-node mode (--nnodes N, or under Slurm or torchrun); a "
                             "single-host run has no nodes to join")  # fmt: skip
        return None
    sources: dict[str, str] = {}
    nnodes = _value(args.nnodes, "--nnodes", ("SLURM_NNODES", "WORLD_SIZE"), env, sources, "nnodes")
    if nnodes is None:
        raise UsageError("multi-node mode needs --nnodes N (or Slurm's SLURM_NNODES, or torchrun's WORLD_SIZE)")
    if nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1: {nnodes}")
    _one_process_per_node(env, sources)
    rank = _value(args.node_rank, "--node-rank", ("SLURM_NODEID", "RANK"), env, sources, "node_rank")
    if rank is None and nnodes > 1:
        raise UsageError("multi-node mode needs --node-rank R (or Slurm's SLURM_NODEID, or torchrun's RANK)")
    rank = rank or 0
    if not 0 <= rank < nnodes:
        raise UsageError(f"--node-rank {rank} is not a rank of {nnodes} node(s): 0 to {nnodes - 1}")
    addr, port = _master(args.master, env, sources, nnodes)
    join_timeout = DEFAULT_JOIN_TIMEOUT_S if args.join_timeout is None else args.join_timeout
    return ClusterSpec(nnodes, rank, addr, port, join_timeout, args.local_addr, args.report_dir, sources)


def _value(
    flag: int | None, option: str, names: tuple[str, str], env: Mapping[str, str], sources: dict[str, str], key: str
) -> int | None:
    if flag is not None:
        sources[key] = option
        return flag
    for name, source in zip(names, ("slurm", "torchrun"), strict=True):
        text = env.get(name, "").strip()
        if text:
            sources[key] = source
            return _whole(text, name)
    return None


def _whole(text: str, name: str) -> int:
    if not text.isdigit():
        raise UsageError(f"{name}={quote(text)}: must be a whole number (or unset)")
    return int(text)


def _one_process_per_node(env: Mapping[str, str], sources: dict[str, str]) -> None:
    """verify-device is one process per node: a launcher that starts several per node would count them as nodes."""
    if sources.get("nnodes") == "slurm" and env.get("SLURM_NTASKS", "").strip():
        tasks, nodes = _whole(env["SLURM_NTASKS"], "SLURM_NTASKS"), _whole(env["SLURM_NNODES"], "SLURM_NNODES")
        if tasks != nodes:
            raise UsageError(
                f"SLURM_NTASKS={tasks} on {nodes} node(s): verify-device is one process per node; run it with "
                "`srun --ntasks-per-node=1`"
            )
    local = env.get("LOCAL_WORLD_SIZE", "").strip()
    if sources.get("nnodes") == "torchrun" and local and _whole(local, "LOCAL_WORLD_SIZE") != 1:
        raise UsageError(
            f"LOCAL_WORLD_SIZE={local}: verify-device is one process per node; start it with `torchrun "
            "--nproc-per-node 1` (WORLD_SIZE and RANK then count nodes)"
        )


def _master(flag: str | None, env: Mapping[str, str], sources: dict[str, str], nnodes: int) -> tuple[str, int]:
    if flag is not None:
        sources["master"] = "--master"
        return parse_master(flag, "--master")
    port_text = env.get("MASTER_PORT", "").strip()
    port = _port(port_text, "MASTER_PORT") if port_text else DEFAULT_PORT
    nodes = env.get("SLURM_JOB_NODELIST", "").strip() or env.get("SLURM_NODELIST", "").strip()
    if nodes:
        sources["master"] = "slurm"
        try:
            return nodelist.first_host(nodes), port
        except nodelist.NodelistError as error:
            raise UsageError(f"SLURM_JOB_NODELIST: {error}") from None
    addr = env.get("MASTER_ADDR", "").strip()
    if addr:
        sources["master"] = "torchrun"
        return addr, port
    if nnodes == 1:
        sources["master"] = "default (one node)"
        return "127.0.0.1", port
    raise UsageError(
        "multi-node mode needs --master ADDR[:PORT], node 0's address (or Slurm's SLURM_JOB_NODELIST, or torchrun's "
        "MASTER_ADDR)"
    )


def parse_master(text: str, option: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]:port` or `[v6]`."""
    value = text.strip()
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise UsageError(f"{option} {quote(text)}: write an IPv6 address as [ADDR]:PORT")
        port_text = rest[1:]
    elif value.count(":") > 1:
        raise UsageError(f"{option} {quote(text)}: write an IPv6 address as [ADDR]:PORT")
    else:
        host, _, port_text = value.partition(":")
    if not host or any(c.isspace() for c in host):
        raise UsageError(f"{option} {quote(text)}: needs a host name or address, e.g. trn1:{DEFAULT_PORT}")
    return host, (_port(port_text, option) if port_text else DEFAULT_PORT)


def _port(text: str, option: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise UsageError(f"{option}: port {quote(text)} must be a number from 1 to 65535")
    return int(text)
