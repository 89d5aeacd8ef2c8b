"""Hash locks for the test cells: `neuron_torch.lock.lock_cell` against the loopback indexes.

The test bed locks with the toolkit's own locker, so the locks exercise the real per-package index routing (the
traps on the pypi index must never be picked) and land where every consumer looks: `cell.lock_path`.
"""

from __future__ import annotations

from pathlib import Path

from neuron_torch.lock import lock_cell
from neuron_torch.matrix import Cell, Matrix


def compile_lock(matrix: Matrix, cell: Cell) -> Path:
    return lock_cell(matrix, cell)
