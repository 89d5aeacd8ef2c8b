"""`neuron-torch check`: the matrix, the generated files and every lock, with each problem named."""

from __future__ import annotations

from neuron_torch.cellinfo import relative
from neuron_torch.cellrecord import read_cell_record
from neuron_torch.errors import NeuronTorchError
from neuron_torch.lockfile import lock_problems, read_lock, seal_problems
from neuron_torch.manifest import vendored_manifest
from neuron_torch.matrix import Matrix
from neuron_torch.render import stale_files


def problems(matrix: Matrix) -> list[str]:
    """Everything wrong with the release as checked in; the matrix itself was validated when it was loaded."""
    found = [
        f"{relative(path, matrix)}: stale or missing generated file; run `neuron-torch render`"
        for path in stale_files(matrix)
    ]
    for record in (c.record_path for c in matrix.cells):  # the consumers read these: of the schema they read?
        if record.is_file():
            try:
                read_cell_record(record)
            except NeuronTorchError as error:
                found.append(str(error))
    if matrix.manifest is not None:
        try:
            vendored_manifest(matrix)
        except NeuronTorchError as error:
            found.append(str(error))
    cells = {cell.lock_path: cell for cell in matrix.cells}
    if matrix.locks_dir.is_dir():
        for path in sorted(matrix.locks_dir.glob("*.txt")):
            cell = cells.get(path)
            if cell is None:
                found.append(f"{relative(path, matrix)}: a lock for no cell of {matrix.release.name}; remove it")
                continue
            try:
                lock = read_lock(path, cell.id)  # the consumers read these: each must be sealed
                found += seal_problems(lock, cell.id) + lock_problems(lock, matrix, cell)
            except NeuronTorchError as error:  # an unreadable lock is one problem; the others are still checked
                found.append(str(error))
    return found
