"""neuron_smoke.rendezvous: a one-node rendezvous in this process (a TCPStore on loopback), a master that is not
there, and the silence of a heartbeat that stopped."""

from __future__ import annotations

import socket
import time

import pytest

from neuron_smoke import rendezvous
from neuron_smoke.cluster import ClusterSpec


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_one_node_joins_gathers_and_closes() -> None:
    spec = ClusterSpec(1, 0, "127.0.0.1", free_port(), join_timeout_s=5.0)
    me = rendezvous.join(spec)
    assert me.members == (0,) and me.missing == () and me.group_rank == 0 and me.missing_note() == ""
    assert me.gather("facts", {"x": "1"}, 2.0) == {0: {"x": "1"}}
    me.blame(3, "allreduce: wrong")
    assert me.summary()["peer_faults"] == {"3": ["allreduce: wrong"]}
    me.close()


def test_a_missing_node_is_named_and_a_silent_one_told() -> None:
    spec = ClusterSpec(2, 0, "127.0.0.1", free_port(), join_timeout_s=1.0)
    started = time.monotonic()
    me = rendezvous.join(spec)
    assert time.monotonic() - started < 5.0
    assert me.members == (0,) and me.missing == (1,)
    assert me.missing_note() == "node 1 did not join within 1s (missing): checked among nodes 0"
    me.members = (0, 1)  # as if node 1 had joined and then stopped beating
    assert me.silent((0, 1)) == [1]
    assert me.gather("late", {}, 30.0) == {0: {}, 1: None}  # given up once node 1 is silent, not after 30 s
    me.close()


def test_a_master_that_is_not_there() -> None:
    spec = ClusterSpec(2, 1, "127.0.0.1", free_port(), join_timeout_s=1.0)
    with pytest.raises(rendezvous.JoinError, match=r"could not reach node 0.s rendezvous store at 127\.0\.0\.1:"):
        rendezvous.join(spec)


def test_routed_address() -> None:
    assert rendezvous.routed_address("127.0.0.1", 9) == "127.0.0.1"
