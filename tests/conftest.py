from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from neuron_torch.matrix import Matrix, load_matrix

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    return load_matrix(REPO / "constraints" / "matrix.toml")


@pytest.fixture
def release_copy(tmp_path: Path) -> Path:
    """A copy of the release files (matrix, generated files, README) to edit without touching the checkout."""
    shutil.copytree(REPO / "constraints", tmp_path / "constraints", ignore=shutil.ignore_patterns("locks"))
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    for rendered_dir in ("images/docker", "ansible/vars"):  # other renderers' outputs, so a fresh copy is not stale
        if (REPO / rendered_dir).is_dir():
            shutil.copytree(REPO / rendered_dir, tmp_path / rendered_dir)
    return tmp_path
