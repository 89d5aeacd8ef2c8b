"""The multi-node rendezvous: node 0 runs a `torch.distributed` TCPStore at the master address; every node writes
`join/<rank>` there, and node 0 admits the nodes that joined within `--join-timeout` (`members`, the one list every
node then works with; a node not in it is missing). Each member then beats (`beat/<rank>`, every 0.2 s, from a
connection of its own), so that a node waiting on a peer can tell a peer that is gone (killed, hung, stopped) from
one that is slow. Nothing here waits without a deadline.

One session per process (`session(spec)`, made when the first cluster stage needs it; `close()` at the end, where
node 0 keeps its store up until every member is done or silent).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from neuron_smoke.cluster import ClusterSpec

if TYPE_CHECKING:
    from torch._C._distributed_c10d import TCPStore

    from neuron_smoke.context import StageLog

BEAT_S = 0.2
SILENT_S = 2.0  # a heartbeat that has not moved for this long: the node is gone or stuck
POLL_S = 0.05


class JoinError(Exception):
    """This node could not join the others; the message says why and what to check."""


@dataclass
class Session:
    spec: ClusterSpec
    store: TCPStore
    local_addr: str
    members: tuple[int, ...] = ()
    hosts: dict[int, dict[str, Any]] = field(default_factory=dict)
    joined_s: float = 0.0
    # Faults this node saw on other nodes (rank -> what), in the report's cluster section: cluster-report fails a
    # run in which any node blamed another, even if that node's own report says it passed.
    peer_faults: dict[int, list[str]] = field(default_factory=dict)
    _beats: dict[int, tuple[int, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def rank(self) -> int:
        return self.spec.node_rank

    @property
    def missing(self) -> tuple[int, ...]:
        return tuple(r for r in range(self.spec.nnodes) if r not in self.members)

    @property
    def group_rank(self) -> int:
        return self.members.index(self.rank)

    def summary(self) -> dict[str, Any]:
        return {
            "nnodes": self.spec.nnodes,
            "node_rank": self.rank,
            "master": self.spec.master,
            "local_addr": self.local_addr,
            "members": list(self.members),
            "missing": list(self.missing),
            "hosts": {str(r): h for r, h in sorted(self.hosts.items())},
            "joined_s": round(self.joined_s, 3),
            "peer_faults": {str(r): f for r, f in sorted(self.peer_faults.items())},
        }

    def blame(self, rank: int, what: str) -> None:
        self.peer_faults.setdefault(rank, []).append(what)

    def missing_note(self) -> str:
        if not self.missing:
            return ""
        ranks = ", ".join(map(str, self.missing))
        return (
            f"node {ranks} did not join within {self.spec.join_timeout_s:g}s (missing): checked among nodes "
            f"{', '.join(map(str, self.members))}"
        )

    def silent(self, ranks: tuple[int, ...]) -> list[int]:
        """Of `ranks`, those whose heartbeat has not moved for SILENT_S (waits until that can be told)."""
        for rank in ranks:
            self._beat_of(rank)
        time.sleep(SILENT_S + BEAT_S)
        return [r for r in ranks if r != self.rank and self.stalled(r)]

    def _beat_of(self, rank: int) -> None:
        try:
            value = int(self.store.add(f"beat/{rank}", 0))
        except Exception:  # the store is gone: node 0 has stopped
            value = -1
        now = time.monotonic()
        if rank not in self._beats or self._beats[rank][0] != value:
            self._beats[rank] = (value, now)

    def stalled(self, rank: int) -> bool:
        """A member that said it is done (and may have exited since) is not silent; one whose beat stopped is."""
        try:
            if self.store.check([f"done/{rank}"]):
                return False
        except Exception:
            return True  # the store is gone: node 0 has stopped
        self._beat_of(rank)
        value, changed = self._beats[rank]
        return value < 0 or time.monotonic() - changed >= SILENT_S

    def gather(self, name: str, value: dict[str, Any], timeout_s: float) -> dict[int, dict[str, Any] | None]:
        """Every member's `value` for `name` (this node's included); None for a member that gave none in time or
        whose heartbeat stopped while we waited."""
        self.store.set(f"{name}/{self.rank}", json.dumps(value))
        found: dict[int, dict[str, Any] | None] = {}
        deadline = time.monotonic() + timeout_s
        while True:
            for rank in self.members:
                if rank not in found and self.store.check([f"{name}/{rank}"]):
                    found[rank] = json.loads(self.store.get(f"{name}/{rank}"))
            waiting = [r for r in self.members if r not in found]
            if not waiting or time.monotonic() > deadline or all(self.stalled(r) for r in waiting):
                return {r: found.get(r) for r in self.members}
            time.sleep(POLL_S)

    def connection(self, timeout_s: float) -> TCPStore:
        """A connection of its own to node 0's store, for a user that blocks in it (gloo's constructor waits there
        for its peers' keys): calls on one connection wait for each other, so on `store` it would hold up this
        node's watch of the heartbeats."""
        return _connect(self.spec, timeout_s)

    def close(self) -> None:
        """Say this node is done; node 0 keeps the store up until every member is done or silent (or the join
        timeout has passed again), so that no member loses the store while it still uses it."""
        try:
            self.store.set(f"done/{self.rank}", "1")
            if self.rank == 0:
                deadline = time.monotonic() + self.spec.join_timeout_s
                others = [r for r in self.members if r != 0]
                while time.monotonic() < deadline:
                    left = [r for r in others if not self.store.check([f"done/{r}"])]
                    if not left or all(self.stalled(r) for r in left):
                        break
                    time.sleep(POLL_S)
        except Exception:  # (the store went away: nothing left to wait for)
            pass
        finally:
            self._stop.set()


_current: list[Session] = []


def current() -> Session | None:
    return _current[0] if _current else None


def joined(spec: ClusterSpec, log: StageLog) -> Session | None:
    """This node's session for a cluster stage, with the nodes that did not join noted; None when this node could
    not join (the stage has failed, saying why)."""
    try:
        found = session(spec)
    except JoinError as error:
        log.fail(str(error))
        return None
    note = found.missing_note()
    if note:
        log.note(note)
    return found


def session(spec: ClusterSpec) -> Session:
    """This process's session, joined now on first use; JoinError when this node cannot join."""
    if not _current:
        _current.append(join(spec))
    return _current[0]


def close() -> None:
    if _current:
        _current[0].close()


def join(spec: ClusterSpec) -> Session:
    from torch._C._distributed_c10d import TCPStore

    started = time.monotonic()
    try:
        store = TCPStore(
            spec.master_addr,
            spec.master_port,
            is_master=spec.node_rank == 0,
            wait_for_workers=False,
            timeout=timedelta(seconds=spec.join_timeout_s),
        )
    except Exception as error:  # RuntimeError/DistStoreError/DistNetworkError: the master is not there
        raise JoinError(_unreachable(spec, error)) from None
    local = spec.local_addr or routed_address(spec.master_addr, spec.master_port)
    me = Session(spec, store, local)
    host = {"hostname": socket.gethostname(), "local_addr": local, "pid": os.getpid()}
    store.set(f"join/{spec.node_rank}", json.dumps(host))
    members = _admit(spec, store, started) if spec.node_rank == 0 else _admitted(spec, store)
    if spec.node_rank not in members:
        raise JoinError(
            f"node {spec.node_rank} joined after node 0 closed the rendezvous ({spec.join_timeout_s:g}s after it "
            f"started; admitted: {', '.join(map(str, members))}): start every node within --join-timeout"
        )
    me.members = members
    me.hosts = {r: json.loads(store.get(f"join/{r}")) for r in members}
    me.joined_s = time.monotonic() - started
    _start_heartbeat(me)
    return me


def _admit(spec: ClusterSpec, store: TCPStore, started: float) -> tuple[int, ...]:
    """Node 0: wait for every node's join key until the join timeout, then publish who is in."""
    deadline = started + spec.join_timeout_s
    joined = {0}
    while len(joined) < spec.nnodes and time.monotonic() < deadline:
        joined |= {r for r in range(spec.nnodes) if r not in joined and store.check([f"join/{r}"])}
        time.sleep(POLL_S)
    members = tuple(sorted(joined))
    store.set("members", json.dumps(members))
    return members


def _admitted(spec: ClusterSpec, store: TCPStore) -> tuple[int, ...]:
    # node 0 answers within its join timeout of its own start; give it that again from ours
    store.set_timeout(timedelta(seconds=spec.join_timeout_s + 10))
    try:
        store.wait(["members"])
    except Exception as error:
        raise JoinError(f"node 0 ({spec.master}) did not publish the members: {_first(error)}") from None
    return tuple(int(r) for r in json.loads(store.get("members")))


def _connect(spec: ClusterSpec, timeout_s: float) -> TCPStore:
    from torch._C._distributed_c10d import TCPStore

    return TCPStore(spec.master_addr, spec.master_port, is_master=False, timeout=timedelta(seconds=timeout_s))


def _start_heartbeat(me: Session) -> None:
    spec = me.spec
    beat = _connect(spec, 5.0)

    def run() -> None:
        try:
            while not me._stop.wait(BEAT_S):
                beat.add(f"beat/{spec.node_rank}", 1)
        except Exception:  # (node 0's store is gone: the run is over)
            pass

    beat.add(f"beat/{spec.node_rank}", 1)
    threading.Thread(target=run, name="cluster-heartbeat", daemon=True).start()


def routed_address(host: str, port: int) -> str:
    """The local address this node reaches `host` from (no packet is sent: a UDP socket is only connected)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostname()


def _unreachable(spec: ClusterSpec, error: BaseException) -> str:
    if spec.node_rank == 0:
        return (
            f"node 0 could not start the rendezvous store on port {spec.master_port}: {_first(error)} (is the port "
            "in use? choose another with --master ADDR:PORT)"
        )
    return (
        f"could not reach node 0's rendezvous store at {spec.master} within {spec.join_timeout_s:g}s: node 0 is "
        f"missing (not started, or stopped), or the address or port is wrong or blocked ({_first(error)})"
    )


def _first(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
