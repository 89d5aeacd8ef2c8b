"""neuron_torch.generated: the banner every rendered file carries names the matrix it came from; the release check
tells the checkout's constraints/matrix.toml from the test release or a matrix elsewhere."""

from __future__ import annotations

import shutil
from pathlib import Path

from neuron_torch.generated import banner, header, is_release_matrix
from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT


def test_the_banner_names_the_matrix_file_and_the_fix(matrix: Matrix) -> None:
    test_release = load_matrix(REPO_ROOT / "constraints" / "test-matrix.toml")
    for loaded in (matrix, test_release):
        text = banner(loaded)
        assert f"from {loaded.path.name};" in text
        assert "do not edit" in text and text.endswith("Regenerate: neuron-torch render")
    assert banner(matrix) != banner(test_release)


def test_the_header_is_one_comment_line(matrix: Matrix) -> None:
    assert header(matrix) == f"# {banner(matrix)}\n"
    assert header(matrix, "//") == f"// {banner(matrix)}\n"


def test_only_the_checkouts_own_matrix_is_the_release(matrix: Matrix, release_copy: Path, tmp_path: Path) -> None:
    assert is_release_matrix(matrix)
    assert not is_release_matrix(load_matrix(REPO_ROOT / "constraints" / "test-matrix.toml"))
    assert is_release_matrix(load_matrix(release_copy / "constraints" / "matrix.toml"))  # a copy is its own checkout
    elsewhere = tmp_path / "elsewhere" / "release.toml"
    elsewhere.parent.mkdir()
    shutil.copy(REPO_ROOT / "constraints" / "matrix.toml", elsewhere)
    assert not is_release_matrix(load_matrix(elsewhere))
