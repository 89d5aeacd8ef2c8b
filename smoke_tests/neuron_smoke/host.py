"""Host facts: the instance type from IMDS (v2, short timeouts) and the hardware summary for the report."""

from __future__ import annotations

import os
import platform
import socket
import sys
import urllib.request

IMDS = "http://169.254.169.254/latest"
IMDS_TIMEOUT_S = 1.0


def instance_type_from_imds() -> str | None:
    """None off EC2, when IMDS is unreachable, or when NEURON_SMOKE_IMDS=0 (tests, air-gapped hosts)."""
    if os.environ.get("NEURON_SMOKE_IMDS", "1") == "0":
        return None
    try:
        token_req = urllib.request.Request(
            f"{IMDS}/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
        )
        with urllib.request.urlopen(token_req, timeout=IMDS_TIMEOUT_S) as resp:
            token = resp.read().decode()
        req = urllib.request.Request(f"{IMDS}/meta-data/instance-type", headers={"X-aws-ec2-metadata-token": token})
        with urllib.request.urlopen(req, timeout=IMDS_TIMEOUT_S) as resp:
            return str(resp.read().decode().strip()) or None
    except (OSError, ValueError):
        return None


def in_container() -> bool:
    """Whether this runs in a container (NEURON_SMOKE_CONTAINER=1|0 overrides the detection, for tests)."""
    forced = os.environ.get("NEURON_SMOKE_CONTAINER", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")


def interpreter() -> str:
    """The running Python's version and the file it runs from, a venv's links resolved: the same version built
    another way runs Python code at another speed (pyenv's default build, without PGO or LTO, up to 1.5x slower than
    Ubuntu's or Debian's), so a benchmark names it beside its numbers."""
    return f"{platform.python_version()} at {os.path.realpath(sys.executable)}"


def host_facts() -> dict[str, str | int | None]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
