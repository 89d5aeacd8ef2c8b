"""The CI matrix, rendered from the release: a GitHub Actions workflow that locks every cell against the real
indexes and builds and smoke-tests the image of every cell whose wheels the release publishes.

The project's own CI (.ci/run) cannot reach those indexes; this workflow is for forks and users that can.
"""

from __future__ import annotations

import json
from pathlib import Path

from neuron_torch.matrix import Matrix

WORKFLOW = ".github/workflows/cells.yml"


def workflow_files(matrix: Matrix) -> dict[Path, str]:
    from neuron_torch.render import GENERATED

    if matrix.path.resolve() != (matrix.root / "constraints" / "matrix.toml").resolve():
        return {}
    lockable = [cell.id for cell in matrix.cells]
    buildable = [cell.id for cell in matrix.cells if cell.os.wheels_available]
    left_out = sorted({cell.os.id for cell in matrix.cells if not cell.os.wheels_available})
    setup = "python3 -m venv .venv && .venv/bin/pip install -e '.[lock]'"
    lines = [
        f"# {GENERATED.format(source=matrix.path.name)}",
        f"# {matrix.release.name}: lock every cell, then build and smoke-test the image of each cell with wheels.",
        *(f"# Not built: {os_id}: {matrix.os[os_id].wheels_note}" for os_id in left_out),
        "name: cells",
        "on:",
        "  workflow_dispatch:",
        "  schedule:",
        '    - cron: "0 6 * * 1"',
        "permissions:",
        "  contents: read",
        "jobs:",
        "  check:",
        "    runs-on: ubuntu-24.04",
        "    steps:",
        "      - uses: actions/checkout@v4",
        f"      - run: {setup}",
        "      - run: .venv/bin/neuron-torch render --check && .venv/bin/neuron-torch check",
        "  lock:",
        "    needs: check",
        "    runs-on: ubuntu-24.04",
        "    strategy:",
        "      fail-fast: false",
        "      matrix:",
        f"        cell: {json.dumps(lockable)}",
        "    steps:",
        "      - uses: actions/checkout@v4",
        f"      - run: {setup}",
        "      - run: .venv/bin/neuron-torch lock --cell ${{ matrix.cell }}",
        "      - run: .venv/bin/neuron-torch check",
        "      - uses: actions/upload-artifact@v4",
        "        with:",
        "          name: lock-${{ matrix.cell }}",
        "          path: constraints/locks/${{ matrix.cell }}.txt",
        "  image:",
        "    needs: lock",
        "    runs-on: ubuntu-24.04",
        "    strategy:",
        "      fail-fast: false",
        "      matrix:",
        f"        cell: {json.dumps(buildable)}",
        "    steps:",
        "      - uses: actions/checkout@v4",
        f"      - run: {setup}",
        "      - uses: actions/download-artifact@v4",
        "        with:",
        "          name: lock-${{ matrix.cell }}",
        "          path: constraints/locks",
        "      - run: .venv/bin/neuron-torch build image --cell ${{ matrix.cell }}",
        "      - run: docker run --rm neuron-torch:${{ matrix.cell }} --device cpu",
    ]
    return {matrix.root / WORKFLOW: "\n".join(lines) + "\n"}
