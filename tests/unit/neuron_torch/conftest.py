from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT


@pytest.fixture
def test_release(tmp_path: Path) -> Matrix:
    """The test release (constraints/test-matrix.toml) copied alone into a project of its own."""
    (tmp_path / "constraints").mkdir()
    shutil.copy(REPO_ROOT / "constraints" / "test-matrix.toml", tmp_path / "constraints")
    return load_matrix(tmp_path / "constraints" / "test-matrix.toml")
