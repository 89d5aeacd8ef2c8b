"""The CI matrix, rendered from the release: a GitHub Actions workflow that locks every cell against the real
indexes and builds and smoke-tests the image of every cell whose wheels the release publishes.

The project's own CI (.ci/run) cannot reach those indexes; this workflow is for forks and users that can.
"""

from __future__ import annotations

from pathlib import Path

from neuron_torch.generated import banner, is_release_matrix
from neuron_torch.matrix import Matrix
from neuron_torch.templating import render_template

WORKFLOW = ".github/workflows/cells.yml"


def workflow_files(matrix: Matrix) -> dict[Path, str]:
    if not is_release_matrix(matrix):
        return {}
    left_out = sorted({cell.os.id for cell in matrix.cells if not cell.os.wheels_available})
    text = render_template(
        "cells.yml.j2",
        banner=banner(matrix),
        release=matrix.release.name,
        left_out=[(os_id, matrix.os[os_id].wheels_note) for os_id in left_out],
        setup="python3 -m venv .venv && .venv/bin/pip install .",
        lockable=[cell.id for cell in matrix.cells],
        buildable=[cell.id for cell in matrix.cells if cell.os.wheels_available],
    )
    return {matrix.root / WORKFLOW: text}
