"""Whether a process, or a process group, is still there (signal 0 finds it without touching it)."""

from __future__ import annotations

import os


def alive(pid: int, *, group: bool = False) -> bool:
    """Whether process `pid` exists; with `group`, whether any process of the process group `pid` does."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    return True
