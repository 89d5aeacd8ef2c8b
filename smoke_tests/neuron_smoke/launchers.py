"""How the collectives stage starts its ranks.

`fork` (default): a launcher process is forked at start-up, after `import torch` and before anything touches a device
or starts a thread; the collectives stage asks it to fork one worker per rank. The workers get the environment that
`torchrun --standalone` gives its workers (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
and rendezvous the same way (`init_method="env://"`, a TCPStore on 127.0.0.1). They import the device module and
initialise the device themselves, as spawned workers would, but do not pay for a fresh `import torch` each.

`torchrun`: `python -m torch.distributed.run --standalone --nproc_per_node=N`, the launcher of a real training job:
three fresh interpreters (the elastic agent and N workers), seconds more on a small machine.

Both return the exit status of the ranks and their output; the ranks write their results to `result_dir`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

LAUNCHERS = ("fork", "torchrun")
CLOSE_GRACE_S = 1.0
KILL_GRACE_S = 5.0
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class RankJob:
    nproc: int
    device: str
    process_group: str
    timeout_s: float
    result_dir: Path
    # NeuronCore per rank (rank i takes cores[i] through NEURON_RT_VISIBLE_CORES); empty off neuron.
    cores: tuple[int, ...] = ()


@dataclass(frozen=True)
class LaunchResult:
    returncode: int
    output: str
    command: str
    timed_out: bool = False


class Launcher(Protocol):
    name: str

    def launch(self, job: RankJob, deadline_s: float) -> LaunchResult: ...

    def close(self) -> None: ...


def worker_args(job: RankJob) -> list[str]:
    cores = ["--cores", ",".join(map(str, job.cores))] if job.cores else []
    return [
        "--device", job.device, "--process-group", job.process_group,
        "--timeout", str(job.timeout_s), "--result-dir", str(job.result_dir), *cores,
    ]  # fmt: skip


class TorchrunLauncher:
    name = "torchrun"

    def launch(self, job: RankJob, deadline_s: float) -> LaunchResult:
        # One node: rendezvous on loopback by address. `--standalone` alone advertises the hostname, which does not
        # resolve in a container without a network (`docker run --network none`), and the ranks then hang.
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--local-addr", "127.0.0.1",
            f"--nproc_per_node={job.nproc}", "-m", "neuron_smoke.collective_worker", *worker_args(job),
        ]  # fmt: skip
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
        env.setdefault("OMP_NUM_THREADS", "1")
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            output, _ = proc.communicate(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            return LaunchResult(-signal.SIGKILL, output, " ".join(cmd), timed_out=True)
        return LaunchResult(proc.returncode, output, " ".join(cmd))

    def close(self) -> None:
        pass


class ForkLauncher:
    """A single-threaded process, forked early, that forks the ranks on request (once) and reports their status."""

    name = "fork"

    def __init__(self) -> None:
        # Imported here, before the fork, so that every rank inherits it instead of importing it again.
        import neuron_smoke.collective_worker  # noqa: F401

        request_read, self._request = os.pipe()
        self._reply, reply_write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the launcher process
            os.close(self._request)
            os.close(self._reply)
            _serve(request_read, reply_write)  # never returns
        os.close(request_read)
        os.close(reply_write)
        self.pid = pid
        self._used = False
        self._closed = False

    def launch(self, job: RankJob, deadline_s: float) -> LaunchResult:
        command = f"fork {job.nproc} ranks ({' '.join(worker_args(job))})"
        if self._used:
            return LaunchResult(1, "the fork launcher serves one launch per run", command)
        self._used = True
        payload = {
            "nproc": job.nproc, "device": job.device, "process_group": job.process_group,
            "timeout_s": job.timeout_s, "result_dir": str(job.result_dir), "port": _free_port(),
            "cores": list(job.cores),
        }  # fmt: skip
        try:
            os.write(self._request, (json.dumps(payload) + "\n").encode())
        except BrokenPipeError:
            return LaunchResult(1, _launcher_died(self.pid), command)
        reply = _read_reply(self._reply, deadline_s)
        if reply is None:
            self._kill()
            return LaunchResult(-signal.SIGKILL, _rank_logs(job), command, timed_out=True)
        if not reply:
            return LaunchResult(1, _launcher_died(self.pid), command)
        codes: list[int] = json.loads(reply)["returncodes"]
        failed = [c for c in codes if c != 0]
        return LaunchResult(failed[0] if failed else 0, _rank_logs(job), command)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        os.close(self._request)
        os.close(self._reply)
        # The launcher exits on EOF; reap it, and make sure it is gone.
        if not _reaped_within(self.pid, CLOSE_GRACE_S):
            self._kill()

    def _kill(self) -> None:
        """SIGTERM: the launcher kills and reaps its ranks, then exits. If it does not, SIGKILL its process group."""
        try:
            os.kill(self.pid, signal.SIGTERM)
            if not _reaped_within(self.pid, KILL_GRACE_S):
                os.killpg(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def start(name: str) -> Launcher:
    return ForkLauncher() if name == "fork" else TorchrunLauncher()


def _reaped_within(pid: int, seconds: float) -> bool:
    """Waits up to `seconds` for the child `pid` to exit and reaps it; True once it is gone."""
    end = time.monotonic() + seconds
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_reply(fd: int, deadline_s: float) -> str | None:
    """The launcher's one-line reply; '' when it died; None at the deadline."""
    end = time.monotonic() + deadline_s
    data = b""
    while not data.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return ""
        data += chunk
    return data.decode()


def _rank_logs(job: RankJob) -> str:
    logs = sorted(job.result_dir.glob("rank-*.log"))
    return "\n".join(f"[{p.stem}] {line}" for p in logs for line in p.read_text(errors="replace").splitlines())


def _launcher_died(pid: int) -> str:
    return f"the fork launcher (pid {pid}) exited before the ranks reported; rerun with --launcher torchrun"


def _serve(request_fd: int, reply_fd: int) -> None:
    """In the launcher process: wait for one request (or EOF), fork the ranks, wait for them, reply, exit."""
    code = 0
    try:
        os.setsid()  # its own process group: a timeout kills it and every rank at once
        with os.fdopen(request_fd, "rb") as requests:
            line = requests.readline()
        if line:
            job = json.loads(line)
            pids: list[int] = []

            def kill_ranks(signum: int, frame: object) -> None:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                    except (ProcessLookupError, ChildProcessError):
                        pass
                os._exit(1)

            signal.signal(signal.SIGTERM, kill_ranks)
            pids.extend(_fork_rank(rank, job) for rank in range(job["nproc"]))
            codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
            os.write(reply_fd, (json.dumps({"returncodes": codes}) + "\n").encode())
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _job_cores(job: dict[str, object]) -> tuple[int, ...]:
    cores = job.get("cores")
    return tuple(int(c) for c in cores) if isinstance(cores, list) else ()


def _fork_rank(rank: int, job: dict[str, object]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the launcher's handler, which kills the other ranks
        log = os.open(Path(str(job["result_dir"])) / f"rank-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        sys.stdout = sys.stderr = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115  (lives until _exit)
        nproc = int(str(job["nproc"]))
        os.environ.update(
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
            GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]),
        )  # fmt: skip
        from neuron_smoke import collective_worker

        collective_worker.run_rank(
            str(job["device"]), str(job["process_group"]), float(str(job["timeout_s"])), Path(str(job["result_dir"])),
            _job_cores(job),
        )  # fmt: skip
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
