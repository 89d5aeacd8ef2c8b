"""Hash locks for the test cells, resolved against the loopback indexes with per-package index routing.

The toolkit's own locker (`neuron_torch.lock.lock_cell`) is used when present; until it lands this module runs the
same `uv pip compile` itself: the indexes in the matrix's order with uv's first-index strategy, so a package
listed by the neuron or pytorch-cpu index is never taken from pypi (where the traps live), and `# from URL`
annotations record where each package came from.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from neuron_torch.matrix import Cell, Matrix


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not found:
        raise SystemExit("uv is needed to lock the test cells: pip install -e '.[dev]'")
    return found


def requirements(cell: Cell) -> str:
    return "".join(f"{name}=={version}\n" for name, version in cell.pins.items())


def compile_lock(matrix: Matrix, cell: Cell, work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    source = work / f"{cell.id}.in"
    source.write_text(requirements(cell))
    # uv gives --extra-index-url priority over --index-url, in the order given: the routed indexes first.
    routed = [i for i in matrix.indexes if not i.is_default]
    default = next(i for i in matrix.indexes if i.is_default)
    indexes = [arg for index in routed for arg in ("--extra-index-url", index.url)]
    cell.lock_path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            uv(),
            "pip",
            "compile",
            "--quiet",
            "--no-config",
            "--generate-hashes",
            "--emit-index-annotation",
            "--index-strategy",
            "first-index",
            "--index-url",
            default.url,
            *indexes,
            "--python-version",
            cell.python,
            "--python-platform",
            cell.os.lock_platform,
            "--no-header",
            "--output-file",
            str(cell.lock_path),
            str(source),
        ],
        check=True,
    )
    return cell.lock_path
