"""Hash locks for the test cells: `neuron_torch.lock.lock_cell` against the loopback indexes, or (`sound_lock`, for
tests that need no resolver) one rendered straight from the cell's pins.

The test bed locks with the toolkit's own locker, so the locks exercise the real per-package index routing (the
traps on the pypi index must never be picked) and land where every consumer looks: `cell.lock_path`. uv's cache is
one folder per build of the indexes: the test bed rewrites its pages under the same URLs, which uv's HTTP cache
would otherwise answer from the previous build (observed: a lock that named a wheel no longer served).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from unittest import mock

from neuron_torch.lock import lock_cell
from neuron_torch.lockfile import LockedPackage, render_lock
from neuron_torch.matrix import Cell, Index, Matrix


def compile_lock(matrix: Matrix, cell: Cell, uv_cache: Path) -> Path:
    with mock.patch.dict(os.environ, {"UV_CACHE_DIR": str(uv_cache)}):
        return lock_cell(matrix, cell)


def sound_lock(matrix: Matrix, cell: Cell, indexes: tuple[Index, ...] | None = None) -> str:
    """A sealed lock of the cell's pins, each from its routed index among `indexes` (the release's unless given; a
    family pattern gets a build number)."""
    indexes = indexes or matrix.indexes
    urls = {index.name: index.url for index in indexes}
    packages = tuple(
        LockedPackage(
            name,
            version.replace("*", "1"),
            "==",
            (hashlib.sha256(name.encode()).hexdigest(),),
            urls[matrix.index_for(name).name],
        )
        for name, version in cell.pins.items()
    )
    return render_lock(matrix, cell, indexes, packages, resolver="uv")
