"""A cgroup2 hierarchy for the hosts whose systemd refuses cgroup v1 (systemd >= 258: Ubuntu 26.04's, Debian forky's).

Docker here gives containers cgroup v1, on which systemd 258 and later refuse to boot ("Detected unsupported legacy
cgroup hierarchy, refusing execution"). As root, this machine can mount the unified hierarchy itself (`mount -t
cgroup2 none ROOT`); an unprivileged container given its own subfolder of it, bind-mounted read-write at
/sys/fs/cgroup, boots systemd to `running` (shared/NEURON-FACTS.md section 14). `mount()` mounts ROOT once (a no-op
when it is mounted; one process at a time, under a file lock, as test processes run side by side), `make(name)`
makes a host's subfolder, `remove(name)` removes it with every cgroup systemd made inside it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.testbed.filelock import exclusive

ROOT = Path("/run/neuron-torch-testbed/cgroup2")


class Cgroup2Error(Exception):
    """The hierarchy cannot be mounted or a subfolder made or removed; the message says why and what to do."""


def mounted(root: Path = ROOT) -> bool:
    """True when `root` is the mount point of a cgroup2 file system (/proc/self/mountinfo, proc(5))."""
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        for line in mountinfo:
            fields, _, after = line.partition(" - ")
            if fields.split()[4] == str(root) and after.split()[0] == "cgroup2":
                return True
    return False


def mount(root: Path = ROOT) -> Path:
    """Mount the cgroup2 hierarchy at `root` unless it is mounted there; returns `root`."""
    if mounted(root):
        return root
    why = f"the hosts of systemd >= 258 need a cgroup2 hierarchy at {root}"
    if "\tcgroup2\n" not in Path("/proc/filesystems").read_text():
        raise Cgroup2Error(f"{why}, and this kernel has no cgroup2 file system (/proc/filesystems)")
    if os.geteuid() != 0:
        raise Cgroup2Error(
            f"{why}, which only root can mount: run the tests as root (CI does), or once: "
            f"sudo mkdir -p {root} && sudo mount -t cgroup2 none {root} && sudo chown -R $USER {root}"
        )
    with exclusive(root.with_name(root.name + ".lock")):
        if mounted(root):  # another test process mounted it while this one waited
            return root
        root.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "cgroup2", "none", str(root)], capture_output=True, text=True)
        if done.returncode != 0:
            raise Cgroup2Error(f"{why}: mount -t cgroup2 none {root} failed: {done.stderr.strip()}")
    return root


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith("."):
        raise Cgroup2Error(f"{name!r} is not a host's cgroup name (a container name: no '/', no leading '.')")


def make(name: str, root: Path = ROOT) -> Path:
    """A new, empty subfolder `name` of the hierarchy (an old one of that name is removed first)."""
    _check_name(name)
    folder = mount(root) / name
    remove(name, root)
    folder.mkdir()
    return folder


def remove(name: str, root: Path = ROOT, timeout: float = 10) -> None:
    """Remove subfolder `name` and the cgroups inside it, deepest first, once its processes are gone (a container's
    processes leave their cgroups a moment after `docker rm -f` returns)."""
    _check_name(name)
    folder = root / name
    deadline = time.monotonic() + timeout
    while folder.is_dir():
        try:
            for path, _, _ in os.walk(folder, topdown=False):  # a cgroup's files go with its rmdir
                os.rmdir(path)
        except OSError as error:
            if time.monotonic() > deadline:
                raise Cgroup2Error(f"{folder} could not be removed in {timeout:.0f} s: {error}") from error
            time.sleep(0.2)
