"""A release bump touches no test (issue 17): a copy of the repository gets a new neuronx-cc build, a new apt
version and a new Python in a family (one edit each of constraints/matrix.toml and the test release), is rendered
(`render`) and locked against the test bed's fixture indexes (`lock`), and the matrix-derived tests then pass on the
copy, unedited.

The copy's tests run in a subprocess with the copy as their root: every test derives its expectations from the matrix
it loads (LEFT_OUT names the few slow cases not rerun on the copy).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_torch.cli import main
from neuron_torch.lockfile import read_lock
from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT
from tests.testbed.fixture_indexes import build_release_indexes

REPO = REPO_ROOT
DERIVED_TESTS = (
    *("unit/neuron_torch/test_matrix.py", "unit/neuron_torch/test_cli.py", "unit/neuron_torch/test_manifest.py"),
    *("unit/neuron_cell/test_pins.py", "unit/neuron_torch/test_cellrecord.py", "integration/test_lock.py"),
    *("integration/test_lock_gate.py", "integration/test_bad_inputs.py"),
)
# Left out on the copy, for time only (each still runs on the checkout): test_lock's lock of every cell (25 s) and
# the lock gate's Ansible runs (5 s each); their cells and versions come from the matrix like the rest.
LEFT_OUT = "not every_cell_locks and not ansible_provisioning_refuses"


def copy_repository(dest: Path) -> None:
    """The tracked files of the checkout (the working tree's versions), without build outputs or venvs."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout ({listed.stderr.decode().strip()}): the copy is made from `git ls-files`")
    for name in listed.stdout.decode().split("\0"):
        source = REPO / name
        if name and source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def next_build(version: str, position: int) -> str:
    parts = version.split(".")
    parts[position] = str(int(parts[position]) + 1)
    return ".".join(parts)


def bump(matrix_file: Path, release: Matrix) -> dict[str, str]:
    """One edit of the matrix, as a maintainer makes it for a new release; returns what changed."""
    text = matrix_file.read_text(encoding="utf-8")
    compiler = release.packages["neuronx-cc"]
    apt = release.apt.packages[-1]
    family = list(release.families.values())[-1]
    python = next_build(family.pythons[-1], 1)
    edits = {
        f'neuronx-cc = "{compiler}"': f'neuronx-cc = "{next_build(compiler, 2)}"',
        f'[apt.packages.{apt.name}]\nversion = "{apt.version}"': (
            f'[apt.packages.{apt.name}]\nversion = "{next_build(apt.version, 2)}"'
        ),
    }
    for old, new in edits.items():
        assert text.count(old) == 1, f"{old!r} is not once in {matrix_file}"
        text = text.replace(old, new)
    section = re.compile(rf'(\[families\."{re.escape(family.name)}"\]\n(?:[^\[\n][^\n]*\n)*?python = \[)([^\]]*)\]')
    text, count = section.subn(lambda m: f'{m[1]}{m[2]}, "{python}"]', text)
    assert count == 1, f'no python list under [families."{family.name}"] in {matrix_file}'
    matrix_file.write_text(text, encoding="utf-8")
    return {"neuronx-cc": next_build(compiler, 2), apt.name: next_build(apt.version, 2), "python": python}


def lock_against_fixture_indexes(matrix: Matrix, cell_id: str, root: Path) -> dict[str, str]:
    """Lock one cell against the test bed's fixture indexes of this (bumped) release; the locked versions."""
    indexes = build_release_indexes(matrix, root)
    index_args = [arg for name, url in indexes.items() for arg in ("--index", f"{name}={url}")]
    assert main(["--matrix", str(matrix.path), "lock", "--cell", cell_id, *index_args]) == 0
    return {p.name: p.version.split("+")[0] for p in read_lock(matrix.cell(cell_id).lock_path).packages}


def test_a_release_bump_needs_no_test_edit(tmp_path: Path, matrix: Matrix, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "repo"
    copy_repository(copy)
    added: dict[str, list[str]] = {}
    bumps: dict[str, dict[str, str]] = {}
    for name in ("matrix.toml", "test-matrix.toml"):  # the release and the test release, bumped alike
        before = load_matrix(REPO / "constraints" / name)
        bumps[name] = bumped = bump(copy / "constraints" / name, before)
        assert main(["--matrix", str(copy / "constraints" / name), "render"]) == 0
        after = load_matrix(copy / "constraints" / name)
        assert after.packages["neuronx-cc"] == bumped["neuronx-cc"] != before.packages["neuronx-cc"]
        assert list(after.families.values())[-1].pythons[-1] == bumped["python"]
        added[name] = sorted({cell.id for cell in after.cells} - {cell.id for cell in before.cells})
        assert all(f"-py{bumped['python']}-" in cell for cell in added[name])
        cell = added[name][-1] if added[name] else after.release.default_cell  # the test release's OSes list Pythons
        locked = lock_against_fixture_indexes(after, cell, tmp_path / f"indexes-{after.path.stem}")
        assert locked["neuronx-cc"] == bumped["neuronx-cc"]
        assert main(["--matrix", str(after.path), "render", "--check"]) == 0
    assert added["matrix.toml"], "the new Python made no cell of the release"
    apt = list(bumps["matrix.toml"].items())[1]
    assert f'"name": "{apt[0]}",\n          "version": "{apt[1]}"' in (copy / "ansible/vars/release.yml").read_text()
    capsys.readouterr()
    tests = [str(copy / "tests" / name) for name in DERIVED_TESTS]
    probe = "import tests.conftest as c; print(c.REPO, c.load_matrix(c.REPO / 'constraints/matrix.toml').packages)"
    seen = subprocess.run([sys.executable, "-c", probe], cwd=copy, capture_output=True, text=True, check=False)
    compiler = bumps["matrix.toml"]["neuronx-cc"]  # the copy's tests load the copy's (bumped) matrix
    assert seen.stdout.startswith(str(copy)) and compiler in seen.stdout, seen.stdout + seen.stderr
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, "-k", LEFT_OUT],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert re.search(r"\b\d{2,} passed", run.stdout), run.stdout[-2000:]
