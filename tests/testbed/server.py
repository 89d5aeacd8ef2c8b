"""The loopback file server of the test bed: `python3 -m http.server` on 127.0.0.1 in the background."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
PORT = 38080


def base_url() -> str:
    return f"http://{HOST}:{PORT}"


def _pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    return pid


def responding() -> bool:
    try:
        with urllib.request.urlopen(f"{base_url()}/", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def start(www: Path, pid_file: Path, log: Path) -> int:
    """Start the server unless ours already runs; return its pid."""
    pid = _pid(pid_file)
    if pid and responding():
        return pid
    stop(pid_file)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", HOST, "--directory", str(www), str(PORT)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    pid_file.write_text(f"{process.pid}\n")
    for _ in range(50):
        if responding():
            return process.pid
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"the test-bed server did not start on {base_url()}; see {log} (is the port taken?)")


def stop(pid_file: Path) -> bool:
    pid = _pid(pid_file)
    pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if _pid_alive(pid) is False:
            break
        time.sleep(0.1)
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def status(pid_file: Path) -> int | None:
    pid = _pid(pid_file)
    return pid if pid and responding() else None
