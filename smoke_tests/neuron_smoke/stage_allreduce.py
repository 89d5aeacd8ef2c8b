"""Cluster stage: all_reduce across the nodes (one rank per node) over the backend's process group (gloo on the CPU,
`neuron` on Neuron), the result checked on every node, then the bus bandwidth at a few sizes.

Round 1: node r contributes (r + 1) * ones; every node checks the sum. Round 2: all_gather of the same contributions,
so that every node checks each peer's and a wrong one is named by its node (that node fails; the others note it,
their wrong sum explained). A collective that fails while a peer's heartbeat has stopped (killed, hung) names that
peer and leaves this node's stage skipped, not failed: the peer's own report holds the failure. Nothing is waited on
blindly: the group is built in a thread of its own and each collective is polled, and when a peer's heartbeat stops
(a node stuck with its sockets still open, or one gone while the others still connect to it, which gloo would wait
its whole timeout for) the wait ends at once and the group, if built, is aborted.

Bus bandwidth: nccl-tests' convention, size * 2 (n - 1) / n / time, the median of a few timed calls per size. No
floor is documented for Trn2 or the CPU: the numbers are reported, not compared.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from neuron_smoke import rendezvous
from neuron_smoke.context import Context, StageLog
from neuron_smoke.errors import Skip
from neuron_smoke.stage_consistency import wait_s
from neuron_smoke.stage_fabric import SINGLE_HOST

if TYPE_CHECKING:
    import torch

SIZES = (8, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30)
MAX_BYTES = {"cpu": 64 << 20, "neuron": 1 << 30}
TIMED_CALLS = 3
ELEMENTS = 1024  # of the checked rounds
NO_FINITE_WAIT = "with finite timeout not implemented"  # torch's FutureWrappingWork::wait(timeout)


def run(ctx: Context, log: StageLog) -> None:
    spec = ctx.options.cluster
    if spec is None:
        raise Skip(SINGLE_HOST)
    session = rendezvous.joined(spec, log)
    if session is None:
        return
    ctx.backend.import_module()
    device = ctx.backend.device_type
    pg_name = ctx.backend.process_group
    log.numbers.update(process_group=pg_name, members=list(session.members), local_addr=session.local_addr)
    phase = "process group"
    try:
        watch = Watch(session, wait_s(ctx))
        watch.build(lambda: make_group(session, pg_name, wait_s(ctx)))
        phase = "all_reduce"
        summed = _all_reduce(watch, contribution(spec.node_rank, device))
        phase = "all_gather"
        gathered = _all_gather(watch, contribution(spec.node_rank, device), len(session.members))
        phase = "bandwidth"
        limit = ctx.options.allreduce_max_bytes or MAX_BYTES.get(device, MAX_BYTES["cpu"])
        log.numbers["bandwidth"] = bandwidth(watch, device, len(session.members), limit)
    except Exception as error:
        _peer_or_fail(log, session, phase, error)
        return
    _judge(log, session, summed, gathered)
    if not log.failures:
        sizes = log.numbers["bandwidth"]
        top = max(sizes, key=lambda s: s["bytes"])
        log.summary = (
            f"{pg_name} all_reduce over {len(session.members)} node(s) checked; busbw {top['busbw_gbps']:.3f} GB/s "
            f"at {top['bytes']} B (no documented floor: reported)"
        )


def contribution(rank: int, device: str) -> torch.Tensor:
    import torch

    return torch.full((ELEMENTS,), float(rank + 1), device=device)


def make_group(session: rendezvous.Session, pg_name: str, timeout_s: float) -> Any:
    """A process group of the members, over this node's own address (gloo), or the backend's default group."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import PrefixStore

    store = PrefixStore("allreduce/", session.connection(timeout_s))
    rank, size = session.group_rank, len(session.members)
    if pg_name == "gloo":
        gloo: Any = dist.ProcessGroupGloo  # its options' runtime names (_Options, _devices) are not in torch's stubs
        options = gloo._Options()
        options._devices = [gloo.create_device(hostname=session.local_addr)]
        options._timeout = timedelta(seconds=timeout_s)
        return gloo(store, rank, size, options)
    dist.init_process_group(pg_name, store=store, rank=rank, world_size=size, timeout=timedelta(seconds=timeout_s))
    return dist.group.WORLD


# Groups aborted with a peer stuck (or the holder of one still being built): kept referenced until verify-device's
# os._exit, since destroying one waits for the stuck peer's sockets to close (seen with gloo: the process would
# outlive its report by the peer's lifetime).
_abandoned: list[Any] = []


class PeerStopped(RuntimeError):
    """A collective given up on: a peer's heartbeat stopped while it ran (the group was aborted)."""


class Watch:
    """Waits for the group's construction and each collective while watching the other members' heartbeats: a
    stopped peer ends the wait (gloo would otherwise wait out its timeout), and the deadline bounds each wait whatever
    happens."""

    def __init__(self, session: rendezvous.Session, timeout_s: float) -> None:
        self.session, self.timeout_s = session, timeout_s
        self.group: Any = None
        self.others = tuple(r for r in session.members if r != session.rank)

    def build(self, make: Callable[[], Any]) -> None:
        """The group from `make`, called in a thread of its own: gloo's constructor connects to every member and
        waits its whole timeout for one that is gone (seen: a node still connecting when a peer that had connected
        died in the first collective). Given up on, the thread is left to gloo's timeout and os._exit."""
        built: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                built["group"] = make()
            except BaseException as error:  # (raised in the stage's thread below)
                built["error"] = error
            finally:
                done.set()

        threading.Thread(target=target, name="allreduce-group", daemon=True).start()
        self._until(done.wait, abandoned=built)
        if "error" in built:
            raise built["error"]
        self.group = built["group"]

    def wait(self, work: Any) -> None:
        """Return when `work` completes (Completion wakes the moment it does, so the bandwidth table's timed
        calls stay exact); between polls, a stopped peer or the deadline aborts the group."""
        self._until(Completion(work).within, abandoned=self.group)

    def _until(self, ready: Callable[[float], bool], abandoned: Any) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not ready(rendezvous.POLL_S):
            stopped = [r for r in self.others if self.session.stalled(r)]
            if stopped or time.monotonic() > deadline:
                abort = getattr(self.group, "abort", None)
                if abort is not None:
                    abort()
                _abandoned.append(abandoned)
                why = f"node {', '.join(map(str, stopped))}'s heartbeat stopped" if stopped else "it timed out"
                raise PeerStopped(
                    f"{'group construction' if self.group is None else 'collective'} aborted: {why} "
                    f"({self.timeout_s:g}s allowed)"
                )


class Completion:
    """Whether a collective's work has completed, waiting up to the seconds given and waking the moment it does:
    through `work.wait(timeout)`, or, for a work that cannot wait with a timeout (torch's works made from a future,
    which process groups written in Python return: `_create_work_from_future`), through its future. A failed
    collective raises its own error (such a work's wait() does not: its future holds the error as its value)."""

    def __init__(self, work: Any) -> None:
        self.work = work
        self.future: Any = None
        self.event: threading.Event | None = None

    def within(self, seconds: float) -> bool:
        if self.event is None:
            try:
                self.work.wait(timedelta(seconds=seconds))
                return True
            except RuntimeError as error:
                if NO_FINITE_WAIT not in str(error):
                    if not self.work.is_completed():
                        return False  # the poll's own "Operation timed out!": the collective goes on
                    # Completed: the collective's own error, or it completed just after the poll gave up (seen in
                    # CI: that "Operation timed out!" taken for the collective's). A wait on a completed work returns
                    # at once or raises the work's own error.
                    self.work.wait()
                    return True
            self.event = event = threading.Event()
            self.future = self.work.get_future()
            self.future.add_done_callback(lambda _: event.set())
        if not self.event.wait(seconds):
            return False
        value = self.future.value()
        if isinstance(value, BaseException):
            raise value
        return True


def _all_reduce(watch: Watch, tensor: torch.Tensor) -> torch.Tensor:
    watch.wait(watch.group.allreduce([tensor]))
    return tensor.cpu()


def _all_gather(watch: Watch, tensor: torch.Tensor, size: int) -> list[torch.Tensor]:
    import torch

    out = [torch.empty_like(tensor) for _ in range(size)]
    watch.wait(watch.group.allgather([out], [tensor]))
    return [t.cpu() for t in out]


def wrong_contributions(members: tuple[int, ...], gathered: list[torch.Tensor]) -> dict[int, float]:
    """The members whose gathered contribution is not (rank + 1) everywhere: rank -> the first wrong value."""
    wrong = {}
    for rank, tensor in zip(members, gathered, strict=True):
        off = tensor != float(rank + 1)
        if bool(off.any()):
            wrong[rank] = float(tensor[off][0])
    return wrong


def _judge(log: StageLog, session: rendezvous.Session, summed: torch.Tensor, gathered: list[torch.Tensor]) -> None:
    expected = float(sum(r + 1 for r in session.members))
    bad_sum = summed[summed != expected]
    wrong = wrong_contributions(session.members, gathered)
    log.numbers.update(expected_sum=expected, sum=float(summed[0]), wrong_contributions=wrong)
    me = session.rank
    if me in wrong:
        log.fail(f"this node (node {me}) contributed {wrong[me]:g} instead of {me + 1} (seen so by every node)")
    others = {r: v for r, v in wrong.items() if r != me}
    for rank, value in others.items():
        session.blame(rank, f"allreduce: contributed {value:g} instead of {rank + 1}")
    if others:
        named = ", ".join(f"node {r} ({v:g} instead of {r + 1})" for r, v in others.items())
        off = f": the sum here ({float(bad_sum[0]):g}, expected {expected:g}) is off by theirs" if len(bad_sum) else ""
        log.note(f"wrong contribution from {named}{off}")
    elif len(bad_sum) and me not in wrong:  # (a wrong sum from this node's own wrong contribution is said above)
        log.fail(
            f"all_reduce sum {float(bad_sum[0]):g} != {expected:g} on this node (node {me}) though every "
            "contribution arrived right: this node's reduction is wrong"
        )


def _peer_or_fail(log: StageLog, session: rendezvous.Session, phase: str, error: Exception) -> None:
    first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    silent = session.silent(session.members)
    if not silent:
        log.fail(f"{phase} failed with every node's heartbeat alive: {type(error).__name__}: {first}")
        return
    nodes = ", ".join(map(str, silent))
    for rank in silent:
        session.blame(rank, f"allreduce: stopped answering during the {phase} (heartbeat silent)")
    log.numbers["silent_nodes"] = silent
    raise Skip(
        f"node {nodes} stopped answering during the {phase} (its heartbeat is silent: killed or hung); not measured "
        f"here, node {nodes}'s own report holds the failure ({type(error).__name__}: {first})"
    )


def bandwidth(watch: Watch, device: str, nodes: int, limit: int) -> list[dict[str, Any]]:
    import torch

    out = []
    for size in (s for s in SIZES if s <= limit):
        tensor = torch.ones(max(2, size // 4), dtype=torch.float32, device=device)
        watch.wait(watch.group.allreduce([tensor]))  # warm-up
        times = []
        for _ in range(TIMED_CALLS):
            start = time.perf_counter()
            watch.wait(watch.group.allreduce([tensor]))
            if device != "cpu":
                torch.accelerator.synchronize()
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        algbw = size / seconds / 1e9
        out.append(
            {
                "bytes": size,
                "time_us": round(seconds * 1e6, 1),
                # 4 significant digits, not decimals: 8 bytes in a millisecond is 8e-06 GB/s, not 0
                "algbw_gbps": float(f"{algbw:.4g}"),
                "busbw_gbps": float(f"{algbw * 2 * (nodes - 1) / nodes:.4g}"),
            }
        )
    return out
