"""neuron_torch.check: `neuron-torch check`'s findings on a copy of the release: none when it is as rendered (with or
without sound locks); a stale or missing generated file, a cell record of another schema, an edited vendored
manifest, a lock of no cell, an unsealed, unsound or unreadable lock each named (and one never hides another)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_torch.check import problems
from neuron_torch.matrix import Cell, Matrix, load_matrix
from tests.testbed.locks import sound_lock


@pytest.fixture
def release(release_copy: Path) -> Matrix:
    return load_matrix(release_copy / "constraints" / "matrix.toml")


def write_lock(matrix: Matrix, cell: Cell, text: str, name: str | None = None) -> Path:
    path = cell.lock_path if name is None else matrix.locks_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def rel(path: Path, matrix: Matrix) -> str:
    return str(path.relative_to(matrix.root))


def test_a_release_as_rendered_has_no_problems(release: Matrix) -> None:
    assert not release.locks_dir.exists()
    assert problems(release) == []
    for cell in release.cells[:2]:
        write_lock(release, cell, sound_lock(release, cell))
    assert problems(release) == []


def test_a_stale_and_a_missing_generated_file_are_named(release: Matrix) -> None:
    first, second = release.cells[0], release.cells[1]
    first.constraints_path.write_text(first.constraints_path.read_text() + "nki==0.0.1\n")
    second.constraints_path.unlink()
    fix = "stale or missing generated file; run `neuron-torch render`"
    assert set(problems(release)) == {
        f"{rel(first.constraints_path, release)}: {fix}",
        f"{rel(second.constraints_path, release)}: {fix}",
    }


def test_a_cell_record_of_another_schema_is_named(release: Matrix) -> None:
    cell = release.cells[0]
    record = json.loads(cell.record_path.read_text())
    cell.record_path.write_text(json.dumps({**record, "schema": 2}))
    found = problems(release)
    assert f"{rel(cell.record_path, release)}: stale or missing generated file; run `neuron-torch render`" in found
    schema = f"{cell.record_path}: the cell record has schema 2; this checkout reads cell record schema 1 only"
    assert any(p.startswith(schema) for p in found), found


def test_an_edited_vendored_manifest_is_named(release: Matrix) -> None:
    assert release.manifest is not None
    release.manifest.path.write_text(release.manifest.path.read_text() + " ")
    assert any("the vendored manifest changed" in p for p in problems(release))


def test_each_bad_lock_is_named_and_none_hides_another(release: Matrix) -> None:
    good, unsealed, broken, empty = release.cells[:4]
    write_lock(release, good, sound_lock(release, good))
    plain = "".join(line + "\n" for line in sound_lock(release, unsealed).splitlines() if not line.startswith("#"))
    unsealed_path = write_lock(release, unsealed, plain)
    cuda = broken.pins["torch"].split("+")[0]
    broken_path = write_lock(release, broken, sound_lock(release, broken).replace(broken.pins["torch"], cuda))
    empty_path = write_lock(release, empty, "\n")
    orphan = write_lock(release, good, sound_lock(release, good), name="1.0-py3.9-ubuntu20.04.txt")
    found = problems(release)
    assert f"{rel(orphan, release)}: a lock for no cell of {release.release.name}; remove it" in found
    assert any(p.startswith(f"{unsealed_path}: not sealed (a plain pip-compile lock?)") for p in found), found
    assert f"{broken_path}: torch {cuda} is not the CPU build (+cpu): a CUDA torch would be installed" in found
    assert any(f"{broken_path}: torch {cuda} does not satisfy the pin" in p for p in found), found
    assert any(p.startswith(f"{empty_path}: the lock is empty; create it with `neuron-torch lock") for p in found)
    assert not any(str(good.lock_path) in p for p in found)
