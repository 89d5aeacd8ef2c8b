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

import contextlib
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


def rank_timeout(job: RankJob) -> float:
    """A rank's own collective timeout: half the launch's, so that a rank waiting on a hung peer gives up and exits
    first, and the ranks still running at the deadline are the ones that did not answer."""
    return max(1.0, job.timeout_s / 2)


def give_up_at(job: RankJob) -> float:
    """The wall-clock time (epoch seconds) by which a rank gives up waiting, however slowly it started (a loaded
    host can take most of the budget to import torch): a margin before the launch's deadline, so that it still
    records why and exits before the launcher kills what is left."""
    return time.time() + job.timeout_s - max(2.0, job.timeout_s * 0.2)


def worker_args(job: RankJob) -> list[str]:
    cores = ["--cores", ",".join(map(str, job.cores))] if job.cores else []
    return [
        "--device", job.device, "--process-group", job.process_group,
        "--timeout", str(rank_timeout(job)), "--give-up-at", f"{give_up_at(job):.3f}",
        "--result-dir", str(job.result_dir), *cores,
    ]  # fmt: skip


def unanswered(ranks: list[int]) -> str:
    listed = ", ".join(str(r) for r in ranks) if ranks else "none identified"
    return f"\nranks that did not answer by the deadline (killed): {listed}"


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
            # torchrun starts each worker in a session of its own: killing torchrun's group would leave them running.
            tree = _descendants(proc.pid)
            hung = sorted({r for r in map(_rank_of, tree) if r is not None})
            for pid in (proc.pid, *tree):
                _kill(pid)
            output, _ = proc.communicate()
            _wait_gone(tree, KILL_GRACE_S)
            return LaunchResult(-signal.SIGKILL, output + unanswered(hung), " ".join(cmd), timed_out=True)
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
            "timeout_s": rank_timeout(job), "give_up_at": give_up_at(job), "result_dir": str(job.result_dir),
            "port": _free_port(),
            "cores": list(job.cores),
        }  # fmt: skip
        try:
            os.write(self._request, (json.dumps(payload) + "\n").encode())
        except BrokenPipeError:
            return LaunchResult(1, _launcher_died(self.pid), command)
        reply = _read_reply(self._reply, deadline_s)
        if reply is None:
            hung = [r for r in range(job.nproc) if not (job.result_dir / f"rank-{r}.exit").exists()]
            self._kill()
            return LaunchResult(-signal.SIGKILL, _rank_logs(job) + unanswered(hung), command, timed_out=True)
        if not reply:
            return LaunchResult(1, _launcher_died(self.pid), command)
        answer = json.loads(reply)
        if "error" in answer:  # the ranks could not all be started (those that were are gone)
            return LaunchResult(1, str(answer["error"]), command)
        codes: list[int] = answer["returncodes"]
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
                _kill_ranks(pids)
                os._exit(1)

            signal.signal(signal.SIGTERM, kill_ranks)
            try:
                for rank in range(job["nproc"]):
                    pids.append(_fork_rank(rank, job))
            except OSError as exc:  # the host's process limit: no rank is left behind waiting for the missing ones
                _kill_ranks(pids)
                error = (
                    f"could not start rank {len(pids)} of {job['nproc']}: {exc.strerror or exc} (the host's limit on "
                    "processes); give --nproc fewer ranks"
                )
                os.write(reply_fd, (json.dumps({"error": error}) + "\n").encode())
                return
            codes = _wait_ranks(pids, Path(str(job["result_dir"])))
            os.write(reply_fd, (json.dumps({"returncodes": codes}) + "\n").encode())
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _kill_ranks(pids: list[int]) -> None:
    """In the launcher process: SIGKILL the ranks it forked, and reap them."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _job_cores(job: dict[str, object]) -> tuple[int, ...]:
    cores = job.get("cores")
    return tuple(int(c) for c in cores) if isinstance(cores, list) else ()


def _wait_ranks(pids: list[int], result_dir: Path) -> list[int]:
    """Exit codes in rank order; each rank's is also written (rank-N.exit) as it exits, so that at a deadline the
    ranks still running, the ones that did not answer, can be named."""
    codes: dict[int, int] = {}
    while len(codes) < len(pids):
        pid, status = os.wait()
        if pid in pids:
            rank = pids.index(pid)
            codes[rank] = os.waitstatus_to_exitcode(status)
            (result_dir / f"rank-{rank}.exit").write_text(str(codes[rank]))
    return [codes[r] for r in range(len(pids))]


def _descendants(root: int) -> list[int]:
    """Every process below `root`, from /proc (Linux), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def _rank_of(pid: int) -> int | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in environ:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _wait_gone(pids: list[int], seconds: float) -> None:
    """Waits for processes that are not our children (reparented workers) to disappear (or become zombies)."""
    end = time.monotonic() + seconds
    for pid in pids:
        while time.monotonic() < end:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                break
            if state == "Z":
                break
            time.sleep(0.02)


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
            _job_cores(job), give_up_at=float(str(job["give_up_at"])),
        )  # fmt: skip
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
