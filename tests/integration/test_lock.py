"""Locks against local fixture indexes: routing, traps, seals, and nothing half-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_torch.check import problems
from neuron_torch.cli import main
from neuron_torch.lockfile import lock_problems, read_lock
from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT
from tests.testbed.fixture_indexes import FIXTURE_BUILD, build_release_indexes
from tests.testbed.traits import labelled

# The release these tests lock: versions and cells come from it, so a release bump edits no test.
RELEASE = load_matrix(REPO_ROOT / "constraints" / "matrix.toml")
NKI = labelled("nki", RELEASE.packages["nki"])
COMPILER = RELEASE.packages["neuronx-cc"]
FAMILY, *_, LAST = RELEASE.families.values()
# Cells with wheels: the latest family's at its first and last Python, the first family's at its first Python.
WHEELS = next(system.id for system in RELEASE.os.values() if system.wheels_available)
CELL = f"{LAST.name}-py{LAST.pythons[0]}-{WHEELS}"
NEWEST = f"{LAST.name}-py{LAST.pythons[-1]}-{WHEELS}"
MIDDLE = f"{LAST.name}-py{LAST.pythons[1]}-{WHEELS}"
OLDER = f"{FAMILY.name}-py{FAMILY.pythons[0]}-{WHEELS}"


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory, matrix: Matrix) -> dict[str, str]:
    return build_release_indexes(matrix, tmp_path_factory.mktemp("indexes"))


def index_args(indexes: dict[str, str]) -> list[str]:
    return [arg for name, url in indexes.items() for arg in ("--index", f"{name}={url}")]


def locked(
    capsys: pytest.CaptureFixture[str], release_copy: Path, cell: str, indexes: dict[str, str]
) -> tuple[Path, Path]:
    """`lock --cell CELL` in the release copy against the fixture indexes, which must succeed: its matrix and lock."""
    matrix_path = release_copy / "constraints" / "matrix.toml"
    code = main(["--matrix", str(matrix_path), "lock", "--cell", cell, *index_args(indexes)])
    capsys.readouterr()
    assert code == 0
    return matrix_path, release_copy / "constraints" / "locks" / f"{cell}.txt"


def test_lock_routes_each_package_to_its_index(
    capsys: pytest.CaptureFixture[str], release_copy: Path, indexes: dict[str, str]
) -> None:
    matrix_path, lock_file = locked(capsys, release_copy, MIDDLE, indexes)
    parsed = read_lock(lock_file)
    versions = {p.name: p.version for p in parsed.packages}
    sources = {p.name: p.index_url for p in parsed.packages}
    assert versions["torch-neuronx"] == LAST.torch_neuronx.replace("*", FIXTURE_BUILD)
    assert versions["torch"] == LAST.torch_pin
    assert versions["neuronx-cc"] == labelled("neuronx-cc", COMPILER)  # the exact version AWS's wheel carries
    assert "+" in versions["neuronx-cc"]
    assert versions["nki"] == NKI
    assert {"sympy", "mpmath", "networkx", "jinja2", "markupsafe", "fsspec", "setuptools"} <= set(versions)
    assert sources["torch-neuronx"] == sources["nki"] == sources["neuronx-cc"] == indexes["neuron"]
    assert sources["torch"] == indexes["pytorch-cpu"]
    assert sources["numpy"] == sources["filelock"] == indexes["pypi"]
    assert not any(name.startswith("nvidia") for name in versions)
    assert all(p.hashes for p in parsed.packages)
    assert "--hash=sha256:" in lock_file.read_text()
    assert problems(load_matrix(matrix_path)) == []


def test_every_cell_locks_for_its_own_python(
    capsys: pytest.CaptureFixture[str], release_copy: Path, indexes: dict[str, str]
) -> None:
    matrix_path = release_copy / "constraints" / "matrix.toml"
    assert main(["--matrix", str(matrix_path), "lock", "--all", *index_args(indexes)]) == 0
    out = capsys.readouterr()
    assert out.out.count("locked ") == len(RELEASE.cells)
    for system in (s for s in RELEASE.os.values() if not s.wheels_available):  # where their wheels come from
        assert system.wheels_note in out.err
    assert problems(load_matrix(matrix_path)) == []


def test_edited_hash_makes_check_name_the_package(
    capsys: pytest.CaptureFixture[str], release_copy: Path, indexes: dict[str, str]
) -> None:
    matrix_path, lock_file = locked(capsys, release_copy, OLDER, indexes)
    text = lock_file.read_text()
    nki_hash = read_lock(lock_file).package("nki").hashes[0]  # type: ignore[union-attr]
    lock_file.write_text(text.replace(nki_hash, nki_hash[::-1]))
    assert main(["--matrix", str(matrix_path), "check"]) == 1
    err = capsys.readouterr().err
    assert f"nki {NKI}: its hashes do not match the lock's seal" in err
    assert "torch " not in err.split(f"nki {NKI}")[0].split("problem:")[-1]


def test_hand_added_package_and_missing_hash_are_named(
    capsys: pytest.CaptureFixture[str], release_copy: Path, indexes: dict[str, str]
) -> None:
    matrix_path, lock_file = locked(capsys, release_copy, OLDER, indexes)
    lock_file.write_text(lock_file.read_text() + "nvidia-cublas-cu12==12.4.5.8\n    # from " + indexes["pypi"] + "\n")
    found = problems(load_matrix(matrix_path))
    text = "\n".join(found)
    assert "nvidia-cublas-cu12 12.4.5.8: no --hash" in text
    assert "nvidia-cublas-cu12 12.4.5.8: forbidden: CUDA libraries" in text
    assert "nvidia-cublas-cu12 12.4.5.8: not in the lock's seal" in text


def test_lock_problems_catch_placeholder_cuda_torch_and_wrong_index(matrix: Matrix, tmp_path: Path) -> None:
    cell = matrix.cell(CELL)
    torch = LAST.torch
    lock_file = tmp_path / "lock.txt"
    digest = "a" * 64
    lock_file.write_text(
        "\n".join(
            [
                f"# cell: {cell.id}",
                "# index neuron: https://neuron.example/simple",
                "# index pytorch-cpu: https://cpu.example/simple",
                "# index pypi: https://pypi.example/simple",
                f"torch-neuronx==1.0 --hash=sha256:{digest}",
                "    # from https://pypi.example/simple",
                f"torch=={torch} --hash=sha256:{digest}",
                "    # from https://pypi.example/simple",
                "neuronx-cc>=2.28 \\",
                f"    --hash=sha256:{digest}",
                "    # from https://neuron.example/simple",
            ]
        )
        + "\n"
    )
    found = "\n".join(lock_problems(read_lock(lock_file), matrix, cell))
    assert "torch-neuronx 1.0: forbidden: the PyPI placeholder" in found
    assert "torch-neuronx 1.0: came from pypi, but the release routes it to the 'neuron' index" in found
    assert f"torch {torch}: came from pypi, but the release routes it to the 'pytorch-cpu' index" in found
    assert f"torch {torch} is not the CPU build (+cpu)" in found
    assert "neuronx-cc 2.28: pinned with '>='" in found
    assert "nki is missing" in found


def test_a_locked_version_other_than_the_pin_is_named_label_aside(matrix: Matrix, tmp_path: Path) -> None:
    cell = matrix.cell(CELL)
    digest = "b" * 64
    major, minor, build, patch = COMPILER.split(".")
    other = labelled("neuronx-cc", f"{major}.{minor}.{int(build) - 1}.{patch}")  # a build before the pin
    entries = {
        "torch-neuronx": (LAST.torch_neuronx.replace("*", "1871"), "neuron"),
        "torch": (LAST.torch_pin, "pytorch-cpu"),
        "neuronx-cc": (other, "neuron"),
        "nki": (NKI, "neuron"),
    }
    lines = [f"# cell: {cell.id}", *(f"# index {i.name}: https://{i.name}.example/simple" for i in matrix.indexes)]
    for name, (version, index) in entries.items():
        lines += [f"{name}=={version} --hash=sha256:{digest}", f"    # from https://{index}.example/simple"]
    lock_file = tmp_path / "lock.txt"
    lock_file.write_text("\n".join(lines) + "\n")
    found = [p for p in lock_problems(read_lock(lock_file), matrix, cell) if "seal" not in p]
    problem = f"neuronx-cc {other} does not satisfy the pin neuronx-cc=={COMPILER} (the cell's pin)"
    assert found == [f"{lock_file}: {problem}"]


def test_index_without_the_family_fails_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], release_copy: Path, indexes: dict[str, str]
) -> None:
    matrix_path = release_copy / "constraints" / "matrix.toml"
    wrong = {**indexes, "neuron": indexes["pypi"]}  # a "Neuron index" that only holds the PyPI placeholder
    code = main(["--matrix", str(matrix_path), "lock", "--cell", CELL, *index_args(wrong)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"could not lock {CELL}" in err
    assert "was not found in the package registry" in err
    assert not (release_copy / "constraints" / "locks").exists()


def test_offline_lock_from_find_links(
    capsys: pytest.CaptureFixture[str], release_copy: Path, indexes: dict[str, str], tmp_path: Path
) -> None:
    wheels = Path(indexes["neuron"].removeprefix("file://")).parent.parent / "wheels"
    folder = tmp_path / "offline"
    folder.mkdir()
    for source in ("neuron", "cpu"):
        for wheel in (wheels / source).iterdir():
            (folder / wheel.name).write_bytes(wheel.read_bytes())
    for wheel in (wheels / "pypi").iterdir():
        if not wheel.name.startswith(("torch", "nvidia")):  # the traps stay out of the offline folder
            (folder / wheel.name).write_bytes(wheel.read_bytes())
    matrix_path = release_copy / "constraints" / "matrix.toml"
    code = main(["--matrix", str(matrix_path), "lock", "--cell", NEWEST, "--find-links", str(folder)])
    assert code == 0, capsys.readouterr().err
    parsed = read_lock(release_copy / "constraints" / "locks" / f"{NEWEST}.txt")
    assert parsed.offline
    assert parsed.package("torch").version == LAST.torch_pin  # type: ignore[union-attr]


def test_missing_ca_bundle_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["lock", "--cell", CELL, "--ca-bundle", str(tmp_path / "none.pem")])
    assert code == 2
    assert "CA bundle" in capsys.readouterr().err
