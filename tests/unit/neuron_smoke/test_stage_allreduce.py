"""neuron_smoke.stage_allreduce: attribution of a wrong contribution, and a one-node gloo group's checks and
bandwidth table."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import torch

from neuron_smoke import rendezvous, stage_allreduce
from neuron_smoke.backends import CPU
from neuron_smoke.cluster import ClusterSpec
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.errors import Skip


def test_wrong_contributions_name_their_node() -> None:
    gathered = [torch.full((4,), 1.0), torch.full((4,), 102.0), torch.full((4,), 4.0)]
    assert stage_allreduce.wrong_contributions((0, 1, 3), gathered) == {1: 102.0}
    assert stage_allreduce.wrong_contributions((0, 1), [torch.full((4,), 1.0), torch.full((4,), 2.0)]) == {}


def test_a_single_host_skips() -> None:
    with pytest.raises(Skip, match="single host"):
        stage_allreduce.run(Context(options=Options(), backend=CPU), StageLog())


def test_one_node_runs_the_rounds_and_reports_bandwidth(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    spec = ClusterSpec(1, 0, "127.0.0.1", port, join_timeout_s=5.0, local_addr="127.0.0.1")
    monkeypatch.setattr(rendezvous, "_current", [])
    ctx = Context(options=Options(cluster=spec, allreduce_max_bytes=65536, timeout_s=30), backend=CPU)
    log = StageLog()
    try:
        stage_allreduce.run(ctx, log)
    finally:
        rendezvous.close()
    assert not log.failures, log.failures
    assert log.numbers["expected_sum"] == 1.0 and log.numbers["wrong_contributions"] == {}
    table = log.numbers["bandwidth"]
    assert [row["bytes"] for row in table] == [8, 65536]
    assert all(row["busbw_gbps"] == 0 and row["algbw_gbps"] > 0 for row in table)  # one node: no bus traffic


class Work:
    """A collective's work that never completes (a peer stuck with its sockets open), or one that does."""

    def __init__(self, done: bool = False, error: str = "") -> None:
        self.done, self.error, self.waited = done, error, False

    def is_completed(self) -> bool:
        return self.done

    def wait(self, timeout: object = None) -> bool:
        """As c10d's Work.wait(timeout): raises when the work is not done by then (it goes on), or failed."""
        self.waited = True
        if not self.done:
            raise RuntimeError("Operation timed out!")
        if self.error:
            raise RuntimeError(self.error)
        return True


@dataclass
class Group:
    aborted: int = 0  # how many times abort() was called

    def abort(self) -> None:
        self.aborted += 1


class Members:
    """A session of nodes 0-2 seen from node 0; `stopped` are the peers whose heartbeat stopped."""

    def __init__(self, stopped: tuple[int, ...] = ()) -> None:
        self.members, self.rank, self.stopped = (0, 1, 2), 0, stopped

    def stalled(self, rank: int) -> bool:
        return rank in self.stopped


def watching(group: Group, members: Members, timeout_s: float) -> stage_allreduce.Watch:
    """A Watch over a group already built."""
    watch = stage_allreduce.Watch(members, timeout_s)  # type: ignore[arg-type]
    watch.group = group
    return watch


def test_a_stuck_peer_aborts_the_collective_at_once_naming_it() -> None:
    group = Group()
    watch = watching(group, Members(stopped=(2,)), 60)
    with pytest.raises(stage_allreduce.PeerStopped, match=r"node 2's heartbeat stopped \(60s allowed\)"):
        watch.wait(Work())
    assert group.aborted == 1


def test_a_collective_that_never_ends_is_aborted_at_the_deadline() -> None:
    group = Group()
    watch = watching(group, Members(), 0.2)
    with pytest.raises(stage_allreduce.PeerStopped, match="it timed out"):
        watch.wait(Work())
    assert group.aborted == 1


def test_a_completed_collective_is_waited_on_for_its_own_error() -> None:
    group, work = Group(), Work(done=True)
    watching(group, Members(stopped=(1,)), 5).wait(work)
    assert work.waited and group.aborted == 0


class LateWork(Work):
    """A work that completes just after a poll's wait gave up on it: that wait raises "Operation timed out!"."""

    def wait(self, timeout: object = None) -> bool:
        if not self.done:
            self.done = True
            raise RuntimeError("Operation timed out!")
        return super().wait(timeout)


def test_a_collective_completing_as_a_poll_gives_up_is_not_failed_by_the_polls_timeout() -> None:
    group, work = Group(), LateWork()
    watching(group, Members(), 5).wait(work)
    assert work.waited and group.aborted == 0


def test_a_failed_collective_raises_its_own_error_not_a_stopped_peer() -> None:
    group = Group()
    watch = watching(group, Members(stopped=(1,)), 5)
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        watch.wait(Work(done=True, error="Connection closed by peer"))
    assert group.aborted == 0


def future_work() -> tuple[torch.futures.Future[Any], Any]:
    """A work torch makes from a future (as a process group written in Python returns): its wait(timeout) raises
    "not implemented"."""
    from torch._C._distributed_c10d import _create_work_from_future

    future: torch.futures.Future[Any] = torch.futures.Future()
    return future, _create_work_from_future(future)


def test_a_work_without_a_finite_wait_is_waited_on_through_its_future() -> None:
    future, work = future_work()
    with pytest.raises(RuntimeError, match=stage_allreduce.NO_FINITE_WAIT):
        work.wait(timedelta(seconds=0.01))  # what the Watch must not let through as the collective's error
    threading.Timer(0.3, future.set_result, ([],)).start()
    start = time.monotonic()
    watching(Group(), Members(), 5).wait(work)
    assert 0.25 < time.monotonic() - start < 0.3 + rendezvous.POLL_S + 0.2 and work.is_completed()


def test_a_work_without_a_finite_wait_raises_its_own_error_or_is_aborted() -> None:
    future, work = future_work()
    future.set_exception(RuntimeError("Connection closed by peer"))
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        watching(Group(), Members(), 5).wait(work)
    group = Group()
    watch = watching(group, Members(stopped=(2,)), 60)
    with pytest.raises(stage_allreduce.PeerStopped, match="node 2's heartbeat stopped"):
        watch.wait(future_work()[1])
    assert group.aborted == 1


def test_the_group_is_built_in_a_thread_of_its_own_and_kept() -> None:
    group, callers = Group(), []

    def make() -> Group:
        callers.append(threading.current_thread().name)
        return group

    watch = stage_allreduce.Watch(Members(stopped=(1,)), 5)  # type: ignore[arg-type]
    watch.build(make)
    assert watch.group is group and callers == ["allreduce-group"]


def test_a_group_that_fails_to_build_raises_its_own_error() -> None:
    def make() -> Group:
        raise RuntimeError("Gloo connectFullMesh failed with Connection refused")

    with pytest.raises(RuntimeError, match="connectFullMesh failed"):
        stage_allreduce.Watch(Members(), 5).build(make)  # type: ignore[arg-type]


def test_a_group_still_building_when_a_peer_stops_is_given_up_on_at_once_naming_it() -> None:
    """gloo's constructor waits its whole timeout for a member that is gone (seen in CI: a node still connecting when
    a peer that had connected died in the first all_reduce): the stage's thread stops waiting as soon as the
    peer's heartbeat has, and the constructor's thread is left to gloo's timeout."""
    release = threading.Event()
    start = time.monotonic()
    watch = stage_allreduce.Watch(Members(stopped=(2,)), 60)  # type: ignore[arg-type]
    with pytest.raises(stage_allreduce.PeerStopped, match=r"group construction aborted: node 2's heartbeat stopped"):
        watch.build(lambda: release.wait(60))
    assert time.monotonic() - start < 5 and watch.group is None
    release.set()


def test_a_group_that_never_builds_is_given_up_on_at_the_deadline() -> None:
    release = threading.Event()
    with pytest.raises(stage_allreduce.PeerStopped, match=r"group construction aborted: it timed out \(0.2s allowed\)"):
        stage_allreduce.Watch(Members(), 0.2).build(lambda: release.wait(60))  # type: ignore[arg-type]
    release.set()


@dataclass
class Judged:
    """What _judge reads of a session: the members, this node's rank, and the faults it blames on others."""

    members: tuple[int, ...]
    rank: int
    blamed: dict[int, list[str]]

    def blame(self, rank: int, what: str) -> None:
        self.blamed.setdefault(rank, []).append(what)


def test_a_wrong_contribution_fails_its_own_node_once_and_is_noted_by_the_others() -> None:
    sums = torch.full((4,), 103.0)  # node 1 sent 102, not 2: 1 + 102
    gathered = [torch.full((4,), 1.0), torch.full((4,), 102.0)]
    own, log = Judged((0, 1), 1, {}), StageLog()
    stage_allreduce._judge(log, own, sums, gathered)  # type: ignore[arg-type]
    assert log.failures == ["this node (node 1) contributed 102 instead of 2 (seen so by every node)"]
    other, log = Judged((0, 1), 0, {}), StageLog()
    stage_allreduce._judge(log, other, sums, gathered)  # type: ignore[arg-type]
    assert not log.failures and other.blamed == {1: ["allreduce: contributed 102 instead of 2"]}
    alone, log = Judged((0, 1), 0, {}), StageLog()
    stage_allreduce._judge(log, alone, sums, [torch.full((4,), 1.0), torch.full((4,), 2.0)])  # type: ignore[arg-type]
    assert log.failures[0].startswith("all_reduce sum 103 != 3 on this node (node 0) though every contribution")
