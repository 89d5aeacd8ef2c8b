"""launchers.py without a process group: the ranks' timeouts and arguments, the fork launcher's pipe protocol and
rank bookkeeping (ranks that are plain forked children standing in for collective_worker, no rendezvous), and the
torchrun launcher's command, environment and deadline (its process replaced by a stand-in). The real gloo runs over
loopback are tests/integration/smoke/test_launchers.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from neuron_smoke import collective_worker, launchers
from neuron_smoke.launchers import RankJob


def _job(tmp_path: Path, timeout_s: float = 20.0, cores: tuple[int, ...] = ()) -> RankJob:
    return RankJob(nproc=2, device="cpu", process_group="gloo", timeout_s=timeout_s, result_dir=tmp_path, cores=cores)


def _args(argv: list[str]) -> dict[str, str]:
    assert all(a.startswith("--") for a in argv[::2])
    return dict(zip(argv[::2], argv[1::2], strict=True))


def test_a_rank_gives_up_before_the_launcher_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert launchers.rank_timeout(_job(tmp_path, 20.0)) == 10.0
    assert launchers.rank_timeout(_job(tmp_path, 1.0)) == 1.0  # never under a second
    monkeypatch.setattr(launchers.time, "time", lambda: 1000.0)
    assert launchers.give_up_at(_job(tmp_path, 100.0)) == 1000.0 + 100.0 - 20.0  # 20 % of the budget before it
    assert launchers.give_up_at(_job(tmp_path, 5.0)) == 1000.0 + 5.0 - 2.0  # at least two seconds before it


def test_worker_args_carry_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launchers.time, "time", lambda: 50.0)
    job = _job(tmp_path, 30.0)
    args = _args(launchers.worker_args(job))
    assert args == {
        "--device": "cpu",
        "--process-group": "gloo",
        "--timeout": str(launchers.rank_timeout(job)),
        "--give-up-at": f"{launchers.give_up_at(job):.3f}",
        "--result-dir": str(tmp_path),
    }
    assert _args(launchers.worker_args(_job(tmp_path, cores=(4, 5))))["--cores"] == "4,5"


def test_unanswered_names_the_ranks_or_says_none_were_identified() -> None:
    assert launchers.unanswered([1, 3]).strip().endswith(": 1, 3")
    assert launchers.unanswered([]).strip().endswith("none identified")


def test_start_picks_the_launcher_by_name() -> None:
    assert isinstance(launchers.start("torchrun"), launchers.TorchrunLauncher)
    assert launchers.LAUNCHERS == ("fork", "torchrun")


def test_read_reply_a_line_eof_or_the_deadline() -> None:
    read, write = os.pipe()
    try:
        os.write(write, b'{"returncodes": [0')
        os.write(write, b", 1]}\n")
        assert launchers._read_reply(read, 1.0) == '{"returncodes": [0, 1]}\n'
        start = time.monotonic()
        assert launchers._read_reply(read, 0.1) is None  # nothing more: the deadline
        assert time.monotonic() - start < 2
        os.write(write, b"partial")
        os.close(write)
        write = -1
        assert launchers._read_reply(read, 1.0) == ""  # the writer died mid-line
    finally:
        os.close(read)
        if write != -1:
            os.close(write)


def test_rank_logs_prefix_every_line_with_its_rank(tmp_path: Path) -> None:
    (tmp_path / "rank-1.log").write_text("b1\n")
    (tmp_path / "rank-0.log").write_text("a1\na2\n")
    (tmp_path / "rank-0.json").write_text("{}")
    assert launchers._rank_logs(_job(tmp_path)) == "[rank-0] a1\n[rank-0] a2\n[rank-1] b1"


def test_job_cores_from_the_request() -> None:
    assert launchers._job_cores({"cores": [2, "3"]}) == (2, 3)
    assert launchers._job_cores({"cores": None}) == ()
    assert launchers._job_cores({}) == ()


def _child(code: int, delay: float = 0.0) -> int:
    pid = os.fork()
    if pid == 0:
        time.sleep(delay)
        os._exit(code)
    return pid


def test_wait_ranks_returns_codes_in_rank_order_and_records_each(tmp_path: Path) -> None:
    pids = [_child(3, delay=0.2), _child(0)]  # rank 1 exits first
    assert launchers._wait_ranks(pids, tmp_path) == [3, 0]
    assert (tmp_path / "rank-0.exit").read_text() == "3" and (tmp_path / "rank-1.exit").read_text() == "0"


def test_reaped_within_waits_for_a_child_or_gives_up() -> None:
    assert launchers._reaped_within(_child(0), 5.0)
    slow = _child(0, delay=30.0)
    try:
        assert not launchers._reaped_within(slow, 0.05)
    finally:
        os.kill(slow, signal.SIGKILL)
    assert launchers._reaped_within(slow, 5.0)


def test_descendants_and_their_rank(tmp_path: Path) -> None:
    env = {**os.environ, "RANK": "7"}
    proc = subprocess.Popen(["sleep", "30"], env=env)
    try:
        assert proc.pid in launchers._descendants(os.getpid())
        deadline = time.monotonic() + 5
        while launchers._rank_of(proc.pid) != 7 and time.monotonic() < deadline:  # exec'd: its environ is readable
            time.sleep(0.01)
        assert launchers._rank_of(proc.pid) == 7
    finally:
        proc.kill()
        proc.wait()
    assert launchers._rank_of(proc.pid) is None  # gone
    assert proc.pid not in launchers._descendants(os.getpid())


def test_the_fork_launcher_forks_the_ranks_once_and_reports_their_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inherited by the launcher forked below and so by its ranks: each rank checks its environment and writes a result;
    # rank 1 fails.
    def fake_rank(device: str, process_group: str, timeout_s: float, result_dir: Path, *args: Any, **kw: Any) -> None:
        rank = int(os.environ["RANK"])
        print(f"world {os.environ['WORLD_SIZE']} port {os.environ['MASTER_PORT']} device {device}")
        (result_dir / f"rank-{rank}.json").write_text(f'{{"rank": {rank}}}')
        if rank == 1:
            raise RuntimeError("rank one broke")

    monkeypatch.setattr(collective_worker, "run_rank", fake_rank)
    monkeypatch.setattr(launchers, "_free_port", lambda: 29999)  # no socket: nothing rendezvous
    launcher = launchers.ForkLauncher()
    try:
        result = launcher.launch(_job(tmp_path), deadline_s=20.0)
        again = launcher.launch(_job(tmp_path), deadline_s=20.0)
    finally:
        launcher.close()
    assert result.returncode == 1 and not result.timed_out, result.output
    assert "[rank-0] world 2 port 29999 device cpu" in result.output
    assert "[rank-1] RuntimeError: rank one broke" in result.output
    assert sorted(p.name for p in tmp_path.glob("rank-*.json")) == ["rank-0.json", "rank-1.json"]
    assert result.command.startswith("fork 2 ranks")
    assert again.returncode == 1 and "one launch" in again.output
    assert launchers._reaped_within(launcher.pid, 0.1)  # closed: the launcher is gone


class _FakeProc:
    """subprocess.Popen's stand-in for torchrun: records how it was started; times out once if asked."""

    started: ClassVar[list[tuple[list[str], dict[str, str]]]] = []

    def __init__(self, cmd: list[str], env: dict[str, str], **kwargs: Any) -> None:
        self.pid = -1
        self.returncode = 0
        self.calls = 0
        _FakeProc.started.append((cmd, env))

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.calls += 1
        if timeout is not None and timeout < 1 and self.calls == 1:
            raise subprocess.TimeoutExpired("torchrun", timeout)
        return "torchrun output\n", None


def test_torchrun_command_environment_and_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _FakeProc.started = []
    killed: list[int] = []
    monkeypatch.setattr(launchers.subprocess, "Popen", _FakeProc)
    monkeypatch.setattr(launchers, "_descendants", lambda pid: [101, 102])
    monkeypatch.setattr(launchers, "_rank_of", {101: 1, 102: None}.get)
    monkeypatch.setattr(launchers, "_kill", killed.append)
    monkeypatch.setattr(launchers, "_wait_gone", lambda pids, seconds: None)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    launcher = launchers.TorchrunLauncher()
    done = launcher.launch(_job(tmp_path), deadline_s=30.0)
    assert (done.returncode, done.output, done.timed_out) == (0, "torchrun output\n", False)
    cmd, env = _FakeProc.started[0]
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"] and "--nproc_per_node=2" in cmd
    assert cmd[cmd.index("-m", 3) + 1] == "neuron_smoke.collective_worker"
    assert done.command == " ".join(cmd)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(launchers.PACKAGE_ROOT), "/elsewhere"]
    assert env["OMP_NUM_THREADS"] == "1"
    late = launcher.launch(_job(tmp_path), deadline_s=0.5)
    assert late.timed_out and late.returncode == -signal.SIGKILL
    assert killed == [-1, 101, 102]  # torchrun and every worker below it
    assert late.output.startswith("torchrun output") and late.output.strip().endswith(": 1")


def test_the_fork_launcher_stops_the_ranks_it_started_when_it_cannot_start_them_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork refused (the host's process limit, EAGAIN) after some ranks are up: those ranks would wait for the
    missing ones until their timeout; the launcher kills them and says which rank could not start, and why."""
    real_fork_rank = launchers._fork_rank

    def fork_rank(rank: int, job: dict[str, object]) -> int:
        if rank == 2:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        pid = real_fork_rank(rank, job)  # in the launcher process: note the rank's pid
        (tmp_path / f"rank-{rank}.pid").write_text(str(pid))
        return pid

    def waiting_rank(device: str, process_group: str, timeout_s: float, result_dir: Path, *a: Any, **kw: Any) -> None:
        time.sleep(60)  # as a rank waiting at the rendezvous for the ranks that never came

    monkeypatch.setattr(launchers, "_fork_rank", fork_rank)
    monkeypatch.setattr(collective_worker, "run_rank", waiting_rank)
    monkeypatch.setattr(launchers, "_free_port", lambda: 29999)
    launcher = launchers.ForkLauncher()
    try:
        job = RankJob(nproc=4, device="cpu", process_group="gloo", timeout_s=20.0, result_dir=tmp_path)
        start = time.monotonic()
        result = launcher.launch(job, deadline_s=20.0)
    finally:
        launcher.close()
    assert time.monotonic() - start < 10
    assert result.returncode == 1 and not result.timed_out
    assert result.output == (
        "could not start rank 2 of 4: Resource temporarily unavailable (the host's limit on processes); give --nproc "
        "fewer ranks"
    )
    started = [int(p.read_text()) for p in sorted(tmp_path.glob("rank-*.pid"))]
    assert len(started) == 2
    for pid in started:  # killed and reaped by the launcher
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
