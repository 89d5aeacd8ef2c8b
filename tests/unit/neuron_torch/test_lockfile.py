"""neuron_torch.lockfile: a rendered lock reads back as what was rendered (metadata, pip options, sorted entries with
their sources, a seal the gate accepts); pip options can be swapped without touching pins or seal; lock_problems names
a missing or wrong pin and a package from the wrong index; gate_lock refuses with the fix; read_lock turns every
read or syntax problem into a usage error naming the lock."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from neuron_torch.errors import NeuronTorchError
from neuron_torch.lockfile import (
    HEADER,
    LockedPackage,
    gate_lock,
    lock_problems,
    pip_options,
    read_lock,
    render_lock,
    seal_problems,
    with_pip_options,
)
from neuron_torch.matrix import Cell, Matrix, canonical_name
from tests import written


def concrete(version: str) -> str:
    """A version that satisfies a pin: a family pattern (2.14.3.0.*) gets a build number."""
    return version.replace("*", "1871")


def cell_packages(matrix: Matrix, cell: Cell, extra: tuple[str, ...] = ("Jinja2", "filelock")) -> list[LockedPackage]:
    """The cell's pins (and a few dependencies), each with two hashes and its routed index as source."""
    wanted = {**{name: concrete(version) for name, version in cell.pins.items()}, **dict.fromkeys(extra, "3.1.0")}
    return [
        LockedPackage(
            name,
            version,
            "==",
            tuple(hashlib.sha256(f"{name}-{n}".encode()).hexdigest() for n in (2, 1)),
            matrix.index_for(name).url,
        )
        for name, version in wanted.items()
    ]


def write_lock(path: Path, matrix: Matrix, cell: Cell, packages: list[LockedPackage] | None = None) -> Path:
    packages = cell_packages(matrix, cell) if packages is None else packages
    path.write_text(render_lock(matrix, cell, matrix.indexes, tuple(packages), resolver="uv"))
    return path


@pytest.fixture
def cell(matrix: Matrix) -> Cell:
    return matrix.cell(matrix.release.default_cell)


def test_a_rendered_lock_reads_back(tmp_path: Path, matrix: Matrix, cell: Cell) -> None:
    packages = cell_packages(matrix, cell)
    lock = read_lock(write_lock(tmp_path / "lock.txt", matrix, cell, packages))
    text = (tmp_path / "lock.txt").read_text()
    assert text.splitlines()[0] == HEADER.format(cell=cell.id)
    assert (lock.release, lock.cell_id, lock.resolver, lock.offline) == (matrix.release.name, cell.id, "uv", None)
    assert lock.indexes == {i.name: i.url for i in matrix.indexes}
    assert [p.name for p in lock.packages] == sorted((p.name for p in packages), key=canonical_name)
    for package in packages:
        read = lock.package(package.name)
        assert read is not None
        assert (read.version, read.index_url) == (package.version, package.index_url)
        assert read.hashes == tuple(sorted(package.hashes))
        assert lock.seals[package.pin] == package.seal()
    assert seal_problems(lock, cell.id) == [] and lock_problems(lock, matrix, cell) == []
    assert gate_lock(matrix, cell, tmp_path / "lock.txt") == lock


def test_pip_options_online_and_offline(matrix: Matrix, tmp_path: Path) -> None:
    default = [i.url for i in matrix.indexes if i.is_default]
    extra = [i.url for i in matrix.indexes if not i.is_default]
    assert pip_options(matrix.indexes, None) == [f"--index-url {default[0]}"] + [
        f"--extra-index-url {u}" for u in extra
    ]
    assert pip_options(matrix.indexes, tmp_path) == ["--no-index", f"--find-links {tmp_path}"]


def test_an_offline_lock_records_its_folder_and_skips_routing(tmp_path: Path, matrix: Matrix, cell: Cell) -> None:
    wheels = tmp_path / "wheels"
    unrouted = [LockedPackage(p.name, p.version, "==", p.hashes, None) for p in cell_packages(matrix, cell)]
    text = render_lock(matrix, cell, matrix.indexes, tuple(unrouted), resolver="pip-tools", find_links=wheels)
    assert f"# offline: find-links {wheels}" in text.splitlines()
    assert "--no-index" in text.splitlines() and not any(line.startswith("--index-url") for line in text.splitlines())
    (tmp_path / "lock.txt").write_text(text)
    lock = read_lock(tmp_path / "lock.txt")
    assert lock.offline == f"find-links {wheels}" and lock.resolver == "pip-tools"
    assert lock_problems(lock, matrix, cell) == []  # sources from a find-links folder are not routed


def test_with_pip_options_swaps_only_the_options(tmp_path: Path, matrix: Matrix, cell: Cell) -> None:
    text = write_lock(tmp_path / "lock.txt", matrix, cell).read_text()
    swapped = with_pip_options(text, ["--no-index", "--find-links /bundle/wheels"])
    lines = swapped.splitlines()
    assert not any(line.startswith(("--index-url", "--extra-index-url")) for line in lines)
    first = next(n for n, line in enumerate(lines) if not line.startswith("#"))
    assert lines[first : first + 2] == ["--no-index", "--find-links /bundle/wheels"]
    assert [line for line in lines if not line.startswith("--")] == [
        line for line in text.splitlines() if not line.startswith("--")
    ]  # comments, pins, hashes, sources and seal as they were
    assert with_pip_options(swapped, pip_options(matrix.indexes, None)) == text


def test_a_wrong_or_missing_pin_is_named(tmp_path: Path, matrix: Matrix, cell: Cell) -> None:
    packages = [p for p in cell_packages(matrix, cell) if p.name != "nki"]
    nx = next(p for p in packages if p.name == "neuronx-cc")
    packages[packages.index(nx)] = LockedPackage(nx.name, "0.0.1", "==", nx.hashes, nx.index_url)
    lock = read_lock(write_lock(tmp_path / "lock.txt", matrix, cell, packages))
    problems = lock_problems(lock, matrix, cell)
    where = tmp_path / "lock.txt"
    assert f"{where}: nki is missing; the cell pins nki=={cell.pins['nki']}" in problems
    assert (
        f"{where}: neuronx-cc 0.0.1 does not satisfy the pin neuronx-cc=={cell.pins['neuronx-cc']} (the cell's pin)"
        in problems
    )
    assert len(problems) == 2


def test_a_package_from_another_index_is_named(tmp_path: Path, matrix: Matrix, cell: Cell) -> None:
    default = next(i for i in matrix.indexes if i.is_default)
    packages = cell_packages(matrix, cell)
    moved = next(p for p in packages if not matrix.index_for(p.name).is_default)
    packages[packages.index(moved)] = LockedPackage(moved.name, moved.version, "==", moved.hashes, default.url)
    unknown = packages[-1]
    packages[-1] = LockedPackage(unknown.name, unknown.version, "==", unknown.hashes, None)
    lock = read_lock(write_lock(tmp_path / "lock.txt", matrix, cell, packages))
    expected = matrix.index_for(moved.name).name
    assert sorted(lock_problems(lock, matrix, cell)) == sorted(
        [
            f"{lock.path}: {moved.name} {moved.version}: came from {default.name}, but the release routes it to the "
            f"'{expected}' index",
            f"{lock.path}: {unknown.name} {unknown.version}: came from an unrecorded source, but the release routes "
            f"it to the '{default.name}' index",
        ]
    )


def test_the_gate_refuses_naming_the_problems_and_the_fix(tmp_path: Path, matrix: Matrix, cell: Cell) -> None:
    text = write_lock(tmp_path / "lock.txt", matrix, cell).read_text()
    unsealed = tmp_path / "pip-compile.txt"
    unsealed.write_text("".join(line + "\n" for line in text.splitlines() if not line.startswith("#")))
    with pytest.raises(NeuronTorchError) as raised:
        gate_lock(matrix, cell, unsealed)
    message = str(raised.value)
    assert message.startswith(f"refusing the lock {unsealed} for {cell.id} (1 problem(s)):\n  {unsealed}: not sealed")
    assert f"`neuron-torch lock --cell {cell.id}` writes it" in message
    assert f"`neuron-torch lock --seal {unsealed} --cell {cell.id}` checks and seals it" in message
    other = next(c for c in matrix.cells if c.id != cell.id and c.family == cell.family)
    with pytest.raises(NeuronTorchError, match=f"the lock says it is for cell '{cell.id}', not {other.id}"):
        gate_lock(matrix, other, tmp_path / "lock.txt")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "no such lock; create it with `neuron-torch lock` with the cell's id"),
        ("\n", "the lock is empty"),
        ("torch==2.14.0 \\\n!!\n", "cannot read the requirement line '!!'"),
    ],
    ids=["missing", "empty", "syntax"],
)
def test_read_lock_refuses_with_a_usage_error(tmp_path: Path, content: str | None, problem: str) -> None:
    path = written(tmp_path / "lock.txt", content)
    with pytest.raises(NeuronTorchError) as raised:
        read_lock(path)
    assert str(raised.value).startswith(f"{path}: {problem}") and raised.value.exit_code == 2
    assert "CELL" not in str(raised.value)  # the hint never prints a placeholder


def test_the_missing_locks_hint_names_the_cell_when_known(tmp_path: Path) -> None:
    with pytest.raises(NeuronTorchError, match=r"create it with `neuron-torch lock --cell 2\.14-py3\.13-x`"):
        read_lock(tmp_path / "lock.txt", "2.14-py3.13-x")
