"""Unit tests of neuron_torch.render_ci: the CI workflow rendered from the release locks every cell, builds only the
cells whose OS has wheels, and names the OS releases it leaves out; other matrices render no workflow."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from neuron_torch.generated import banner
from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.render_ci import WORKFLOW, workflow_files


def _job_cells(text: str) -> list[list[str]]:
    """The `cell:` lists of the workflow's job matrices, in file order (lock, then image)."""
    return [json.loads(found) for found in re.findall(r"^\s+cell: (\[.*\])$", text, re.MULTILINE)]


def test_the_workflow_locks_every_cell_and_builds_those_with_wheels(matrix: Matrix) -> None:
    [(path, text)] = workflow_files(matrix).items()
    assert path == matrix.root / WORKFLOW
    assert text.startswith(f"# {banner(matrix)}\n# {matrix.release.name}: ")
    lock, image = _job_cells(text)
    assert lock == [cell.id for cell in matrix.cells]
    buildable = [cell.id for cell in matrix.cells if cell.os.wheels_available]
    assert buildable and image == buildable
    left_out = [line for line in text.splitlines() if line.startswith("# Not built: ")]
    without = sorted({cell.os.id for cell in matrix.cells if not cell.os.wheels_available})
    assert left_out == [f"# Not built: {os_id}: {matrix.os[os_id].wheels_note}" for os_id in without]
    assert "${{ matrix.cell }}" in text  # the Actions expression survives the Jinja2 rendering


def test_with_wheels_everywhere_nothing_is_left_out(matrix: Matrix) -> None:
    systems = {os_id: replace(system, wheels_available=True) for os_id, system in matrix.os.items()}
    cells = tuple(replace(cell, os=systems[cell.os.id]) for cell in matrix.cells)
    [text] = workflow_files(replace(matrix, os=systems, cells=cells)).values()
    assert "# Not built" not in text
    assert _job_cells(text)[1] == [cell.id for cell in cells]


def test_other_matrices_render_no_workflow(repo: Path) -> None:
    assert workflow_files(load_matrix(repo / "constraints" / "test-matrix.toml")) == {}
