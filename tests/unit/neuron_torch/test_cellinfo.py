"""neuron_torch.cellinfo: a cell's record (every field from the matrix, paths relative to the project), its caveats
(the wheel gap, a DLAMI of another family, a standalone Python, a family-pinned torch-neuronx) and its install route
as a user types it; each derived from the release matrix and the test release."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from neuron_torch.cellinfo import caveats, cell_record, install_route, relative
from neuron_torch.cellrecord import check_record, schema_version
from neuron_torch.matrix import AptScope, Matrix, PythonRoute, load_matrix
from tests import REPO_ROOT

TEST_RELEASE = load_matrix(REPO_ROOT / "constraints" / "test-matrix.toml")


def test_relative_inside_and_outside_the_project(matrix: Matrix, tmp_path: Path) -> None:
    assert relative(matrix.root / "constraints" / "x.txt", matrix) == "constraints/x.txt"
    assert relative(tmp_path / "x.txt", matrix) == str(tmp_path / "x.txt")


@pytest.mark.parametrize("release", ["matrix.toml", "test-matrix.toml"])
def test_every_cells_record_comes_from_the_matrix(release: str) -> None:
    matrix = load_matrix(REPO_ROOT / "constraints" / release)
    for cell in matrix.cells:
        record = check_record(cell_record(matrix, cell), cell.id)  # of the schema every reader checks
        assert record["schema"] == schema_version()
        assert (record["id"], record["release"], record["family"], record["python"]) == (
            cell.id, matrix.release.name, cell.family.name, cell.python,
        )  # fmt: skip
        assert record["ubuntu"] == (cell.os.version if cell.os.distro == "ubuntu" else None)
        assert (record["torch"], record["torch_neuronx"]) == (cell.pins["torch"], cell.pins["torch-neuronx"])
        assert (record["neuronx_cc"], record["nki"]) == (cell.pins["neuronx-cc"], cell.pins["nki"])
        assert record["lock"] == str(cell.lock_path.relative_to(matrix.root))
        assert record["constraints"] == str(cell.constraints_path.relative_to(matrix.root))
        scoped = {scope: {p.name: p.version for p in matrix.apt.scoped(scope)} for scope in AptScope}
        assert (record["apt"], record["apt_host"]) == (scoped[AptScope.IMAGE], scoped[AptScope.HOST])
    assert any(cell_record(matrix, c)["ubuntu"] is None for c in matrix.cells) == (release == "test-matrix.toml")


def test_caveats_name_the_wheel_gap_the_python_route_and_the_family_pin(matrix: Matrix) -> None:
    for cell in matrix.cells:
        notes = caveats(matrix, cell)
        assert (cell.os.wheels_note in notes) == (not cell.os.wheels_available)
        standalone = [n for n in notes if "standalone CPython" in n]
        assert bool(standalone) == (cell.python_route != PythonRoute.DISTRO)
        if standalone:
            assert f"`uv python install {cell.python}`" in standalone[0] and matrix.python_install.uv in standalone[0]
        family_pin = [n for n in notes if "pinned to the family" in n]
        assert bool(family_pin) == ("*" in cell.family.torch_neuronx)
        if family_pin:
            assert str(cell.lock_path.relative_to(matrix.root)) in family_pin[0]


def test_a_dlami_of_another_family_is_called_out(matrix: Matrix) -> None:
    cell = next(c for c in matrix.cells if not c.os.wheels_available)
    other = 'use the DLAMI "Deep Learning AMI Neuron torch-neuronx 9.9.0" instead'
    mismatch = replace(cell, os=replace(cell.os, wheels_note=other))
    notes = caveats(matrix, mismatch)
    assert notes[0] == other
    assert notes[1].startswith(f"The DLAMI named above carries torch-neuronx 9.9, not this cell's {cell.family.name}")
    assert f"{cell.family.name}-py{cell.python}-<an OS with wheels>" in notes[1]
    same = replace(cell, os=replace(cell.os, wheels_note=other.replace("9.9", cell.family.name)))
    assert not any("The DLAMI named above" in n for n in caveats(matrix, same))
    no_dlami = replace(cell, os=replace(cell.os, wheels_note="no wheels yet"))
    assert not any("The DLAMI named above" in n for n in caveats(matrix, no_dlami))


def test_install_route(matrix: Matrix) -> None:
    extra = [i.url for i in matrix.indexes if not i.is_default]
    default = next(i.url for i in matrix.indexes if i.is_default)
    for route in PythonRoute:
        cell = next(c for c in matrix.cells if c.python_route == route)
        steps = install_route(matrix, cell)
        assert steps[0] == (
            f"apt repository: deb [signed-by={matrix.apt.keyring}] {matrix.apt.url} {cell.os.codename} "
            f"{matrix.apt.component}"
        )
        assert steps[1].split() == ["apt", "(host", "only):", "linux-headers-$(uname", "-r)"] + [
            p.apt_pin for p in matrix.apt.scoped(AptScope.HOST)
        ]
        assert steps[2].split()[4:] == [p.apt_pin for p in matrix.apt.scoped(AptScope.IMAGE)]
        python = f"python{cell.python}" if route == PythonRoute.DISTRO else f"uv python install {cell.python}"
        assert steps[3] == (
            f"python: {python}; venv; pip install --require-hashes -r {cell.lock_path.relative_to(matrix.root)}"
        )
        assert [w for w in steps[4].split() if w.startswith("http")] == extra
        assert default not in steps[4]
