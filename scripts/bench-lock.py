#!/usr/bin/env python3
"""Time `neuron-torch lock --all` against local fixture indexes: cold (empty uv cache), then warm (goal: < 60 s).

Run from the checkout with the dev venv: .venv/bin/python scripts/bench-lock.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from neuron_torch.cli import main  # noqa: E402
from neuron_torch.matrix import load_matrix  # noqa: E402
from tests.testbed.fixture_indexes import build_release_indexes  # noqa: E402


def timed_lock_all(root: Path, indexes: dict[str, str]) -> float:
    args = ["--matrix", str(root / "constraints" / "matrix.toml"), "lock", "--all"]
    args += [arg for name, url in indexes.items() for arg in ("--index", f"{name}={url}")]
    start = time.perf_counter()
    code = main(args)
    elapsed = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"lock --all failed with exit code {code}")
    return elapsed


def run() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-lock-") as work_dir:
        work = Path(work_dir)
        shutil.copytree(REPO / "constraints", work / "constraints", ignore=shutil.ignore_patterns("locks"))
        shutil.copy(REPO / "README.md", work / "README.md")
        matrix = load_matrix(work / "constraints" / "matrix.toml")
        indexes = build_release_indexes(matrix, work / "indexes")
        os.environ["UV_CACHE_DIR"] = str(work / "uv-cache")
        cold = timed_lock_all(work, indexes)
        warm = timed_lock_all(work, indexes)
    cells = len(matrix.cells)
    print(f"lock --all ({cells} cells, local fixture indexes): cold {cold:.2f} s, warm {warm:.2f} s")
    print("goal: warm < 60 s")


if __name__ == "__main__":
    run()
