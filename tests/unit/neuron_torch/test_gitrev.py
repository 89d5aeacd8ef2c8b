"""neuron_torch.gitrev: the commit an immutable tag names (12 digits; an edited checkout refused unless allowed,
then `-dirty`; an untracked file is no edit) and the image's revision label (the full sha, empty outside a
checkout)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from neuron_torch.errors import NeuronTorchError
from neuron_torch.gitrev import build_revision, git_revision


def git(root: Path, *args: str) -> str:
    command = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A checkout with one commit of constraints/test-matrix.toml."""
    (tmp_path / "constraints").mkdir()
    (tmp_path / "constraints" / "test-matrix.toml").write_text("# the release\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "release")
    return tmp_path


def test_the_immutable_tag_names_the_commit_and_an_edited_checkout_is_refused(root: Path) -> None:
    sha = git(root, "rev-parse", "HEAD")[:12]
    assert git_revision(root, allow_dirty=False) == sha
    (root / "untracked.txt").write_text("not part of any build\n")
    assert git_revision(root, allow_dirty=False) == sha, "an untracked file is no edit"
    with (root / "constraints" / "test-matrix.toml").open("a") as matrix_file:
        matrix_file.write("# edited\n")
    with pytest.raises(NeuronTorchError, match=r"1 uncommitted change.*constraints/test-matrix\.toml.*--allow-dirty"):
        git_revision(root, allow_dirty=False)
    assert git_revision(root, allow_dirty=True) == f"{sha}-dirty"


def test_a_folder_without_a_commit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NeuronTorchError, match="not a git checkout with a commit"):
        git_revision(tmp_path, allow_dirty=True)


def test_the_revision_label_is_the_full_commit_and_says_dirty(
    root: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert build_revision(tmp_path_factory.mktemp("export")) == "", "outside a checkout the image still builds"
    sha = git(root, "rev-parse", "HEAD")
    assert len(sha) == 40 and build_revision(root) == sha
    (root / "constraints" / "test-matrix.toml").write_text("# edited\n")
    assert build_revision(root) == f"{sha}-dirty"
