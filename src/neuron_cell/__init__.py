"""neuron_cell: the code that runs with a cell's own Python, standard library only.

The lock gate and the one lock parser (lockgate), the lock's reader (locktext) and its one installer (lockinstall),
the one version matching (pins, over packaging's versions or the copy vendored here), the cell record's one checked
loader (cellrecord), the one bounded reader of the files a user names (inputs), the error boundary (boundary),
the output-path checks (outputs) and the image's pin assertion (assertpins). The toolkit imports it; the image
build, the python_env role, the offline bundle and verify-device each take this folder whole (to
/opt/neuron-torch/lib on images and hosts) and check its digest against the toolkit's
(`python -m neuron_cell --expect DIGEST`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

HOME = Path(__file__).resolve().parent


def files(root: Path = HOME) -> list[Path]:
    """The package's files, relative to `root`, sorted: what a copy must hold (no bytecode)."""
    found = (p.relative_to(root) for p in root.rglob("*") if p.is_file())
    return sorted(p for p in found if "__pycache__" not in p.parts and p.suffix != ".pyc")


def digest(root: Path = HOME) -> str:
    """sha256 over each file's relative path and sha256: equal for two folders exactly when they hold the same
    files with the same contents."""
    lines = (f"{hashlib.sha256((root / p).read_bytes()).hexdigest()}  {p.as_posix()}\n" for p in files(root))
    return hashlib.sha256("".join(lines).encode()).hexdigest()
