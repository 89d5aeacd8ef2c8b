"""The loopback file server of the test bed: `python3 -m http.server` on 127.0.0.1 in the background."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.testbed.processes import alive

HOST = "127.0.0.1"
PORT = 38080
# A token written into the served folder: the server answering on the port is this checkout's only if it serves it.
# Otherwise another test bed (another checkout, a CI run) holds the port, and its files would be taken for ours.
TOKEN_FILE = "testbed-server-token"


PORT_ENV = "NEURON_TORCH_TESTBED_PORT"  # another port, for a second bed beside this one (scripts/bench-testbed.sh)


def port() -> int:
    return int(os.environ.get(PORT_ENV) or PORT)


def base_url() -> str:
    return f"http://{HOST}:{port()}"


def _pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    return pid


def served_token() -> str | None:
    """The token of the test bed answering on the port; '' for a server without one; None when nothing answers."""
    try:
        with urllib.request.urlopen(f"{base_url()}/{TOKEN_FILE}", timeout=2) as response:
            return response.read().decode().strip()
    except urllib.error.HTTPError:
        return ""
    except OSError:
        return None


def _ours(www: Path) -> bool:
    token = www / TOKEN_FILE
    return token.is_file() and served_token() == token.read_text().strip()


def start(www: Path, pid_file: Path, log: Path) -> int:
    """Start the server unless ours already runs; return its pid."""
    pid = _pid(pid_file)
    if pid and _ours(www):
        return pid
    stop(pid_file)
    if served_token() is not None:
        raise SystemExit(
            f"another server already answers on {base_url()} (another checkout's test bed?): stop it there with "
            f"`scripts/testbed.sh stop`, or find it with `ss -ltnp | grep {port()}`"
        )
    (www / TOKEN_FILE).write_text(secrets.token_hex(16) + "\n")
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", HOST, "--directory", str(www), str(port())],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    pid_file.write_text(f"{process.pid}\n")
    for _ in range(50):
        if process.poll() is not None:
            break
        if _ours(www):
            return process.pid
        time.sleep(0.1)
    raise SystemExit(f"the test-bed server did not start on {base_url()}; see {log} (is the port taken?)")


def stop(pid_file: Path) -> bool:
    pid = _pid(pid_file)
    pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not alive(pid):
            break
        time.sleep(0.1)
    return True


def status(www: Path, pid_file: Path) -> int | None:
    pid = _pid(pid_file)
    return pid if pid and _ours(www) else None
