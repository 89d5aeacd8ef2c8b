"""Fresh Python processes on the simulated device without paying `import torch` in each (tests only).

A server process imports torch (and Dynamo) once; each request forks it, and the child sets the request's
environment (os.environ and PYTHONPATH's folders on sys.path), sends its stdout and stderr to files of its own, runs
the code as `__main__` and exits with its status (1 and a traceback on an exception, as `python -c` would).

The child is what `python -c "import torch, torch._dynamo; CODE"` is in a new process with that environment: the
simulated device (like torch_neuronx) reads its environment when torch_neuronx is imported, which each child does
itself, and nothing in the server has touched a device or started a Python thread. verify-device's fork launcher
relies on the same property (a process forked after `import torch`, before any device use). What differs is only
what torch itself read at import: the tests' environments differ in NEURON_*, TORCH_NEURONX_* and PYTHONPATH only.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

SERVER = r"""
import json, os, sys, traceback
import torch, torch._dynamo  # once, for every child

def child(request):
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:0] = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    for fd, path in ((0, os.devnull), (1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC if fd else os.O_RDONLY, 0o644)
        os.dup2(target, fd)
        os.close(target)
    status = 0
    try:
        exec(compile(request["code"], "<forkserver>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

print("ready", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class ForkServer:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.folder = Path(tempfile.mkdtemp(prefix="forkserver-"))
        self.count = 0
        assert self._line(300.0) == "ready"

    def _line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired("forkserver", timeout)
        return self.proc.stdout.readline().strip()

    def run(self, env: dict[str, str], code: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """As subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)."""
        assert self.proc.stdin is not None
        self.count += 1
        out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
        request = {"env": env, "code": code, "stdout": str(out), "stderr": str(err)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self._line(30.0))["pid"]
        try:
            returncode = json.loads(self._line(timeout))["returncode"]
        except subprocess.TimeoutExpired:
            os.kill(pid, 9)
            self._line(30.0)  # the killed child's status: the next request reads its own
            raise
        return subprocess.CompletedProcess(["forkserver", code], returncode, out.read_text(), err.read_text())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        for path in self.folder.iterdir():
            path.unlink()
        self.folder.rmdir()
