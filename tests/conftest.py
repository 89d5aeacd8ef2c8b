from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from neuron_torch.matrix import Matrix, load_matrix
from neuron_torch.render import rendered

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    return load_matrix(REPO / "constraints" / "matrix.toml")


@pytest.fixture
def release_copy(tmp_path: Path) -> Path:
    """A copy of the release (the matrix and every file rendered from it) to edit without touching the checkout."""
    shutil.copytree(REPO / "constraints", tmp_path / "constraints", ignore=shutil.ignore_patterns("locks"))
    for path in rendered(load_matrix(REPO / "constraints" / "matrix.toml")):
        target = tmp_path / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return tmp_path
