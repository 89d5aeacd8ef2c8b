"""Safe side by side: test processes (scripts/test.sh's pytest-xdist workers, a second pytest) share this checkout's
test bed, so its build is one at a time and rewrites no file a reader may hold.

Kept apart from cache.py on purpose: every cache key hashes cache.py, and the Ubuntu twins are keyed on it, so an
edit there would rebuild the base images that every worktree of a machine shares.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive flock on lock_file: a second builder waits, then finds every stage fresh."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write data to path unless it already holds it, through a sibling and a rename: a reader (a test in another
    process, the server) sees the old file or the new one, never a truncated one. True when it wrote."""
    if path.is_file() and path.read_bytes() == data:
        return False
    staged = path.with_name(f".{path.name}.{os.getpid()}.partial")
    staged.write_bytes(data)
    staged.replace(path)
    return True
