from __future__ import annotations

from pathlib import Path

import pytest

from neuron_torch.errors import MatrixError, NeuronTorchError, UnsupportedError
from neuron_torch.matrix import Matrix, load_matrix
from tests import REPO_ROOT

# The release these tests read: the values they edit and expect come from it, so a release bump edits no test.
RELEASE = load_matrix(REPO_ROOT / "constraints" / "matrix.toml")
FIRST, *_, LAST = RELEASE.families.values()
DEFAULT = RELEASE.cell(RELEASE.release.default_cell)
SYSTEM = next(iter(RELEASE.os.values()))
NO_WHEELS = next(system for system in RELEASE.os.values() if not system.wheels_available)
HOST = RELEASE.apt.scoped("host")[0]
NKI = RELEASE.packages["nki"]
FIRST_NEURONX = f'torch_neuronx = "{FIRST.torch_neuronx}"'
NO_SUCH_DEFAULT = DEFAULT.id.replace(f"-py{DEFAULT.python}-", "-py3.11-")
FIRST_PYTHONS = "python = [" + ", ".join(f'"{p}"' for p in FIRST.pythons) + "]"
PYTHONS = ", ".join(RELEASE.pythons)
SYSTEMS = ", ".join(RELEASE.os)


def test_release_has_every_cell_once_with_paired_pins(matrix: Matrix) -> None:
    ids = [cell.id for cell in matrix.cells]
    expected = [
        f"{family.name}-py{python}-{system.id}"
        for family in matrix.families.values()
        for python in family.pythons
        for system in matrix.os.values()
        if system.pythons is None or python in system.pythons
    ]
    assert ids == expected and len(set(ids)) == len(ids) > 1
    assert matrix.release.default_cell in ids
    for cell in matrix.cells:
        assert cell.pins["torch"] == f"{cell.family.torch}+cpu" and cell.family.torch.startswith(f"{cell.family.name}.")
        assert cell.pins["torch-neuronx"].startswith(f"{cell.family.name}.") and cell.pins["torch-neuronx"].endswith(
            "*"
        )
        assert {name: cell.pins[name] for name in matrix.packages} == dict(matrix.packages)


def test_some_os_releases_have_no_wheels_and_say_what_to_use(matrix: Matrix) -> None:
    without = [system for system in matrix.os.values() if not system.wheels_available]
    assert without and len(without) < len(matrix.os), "the release publishes wheels for some OS releases only"
    assert all("DLAMI" in system.wheels_note for system in without)


def test_index_routing(matrix: Matrix) -> None:
    assert matrix.index_for("torch_neuronx").name == "neuron"
    assert matrix.index_for("NKI").name == "neuron"
    assert matrix.index_for("torch").name == "pytorch-cpu"
    assert matrix.index_for("numpy").name == "pypi"


def test_forbidden_packages(matrix: Matrix) -> None:
    assert matrix.forbidden_reason("torch-neuronx", "1.0")
    assert matrix.forbidden_reason("nvidia_cublas_cu12", "12.4.5.8")
    for family in matrix.families.values():  # a build of each family's own torch-neuronx is allowed
        assert matrix.forbidden_reason("torch-neuronx", family.torch_neuronx.replace("*", "1871")) is None


@pytest.mark.parametrize(
    ("cell_id", "expected"),
    [
        (f"9.99-py{DEFAULT.python}-{SYSTEM.id}", ["family '9.99'", *RELEASE.families]),
        (f"{LAST.name}-py3.11-{SYSTEM.id}", ["Python 3.11", PYTHONS]),
        (f"{LAST.name}-py{DEFAULT.python}-ubuntu22.04", ["ubuntu22.04", "end of support", SYSTEMS]),
        (f"{LAST.name}-py{DEFAULT.python}-debian12", ["'debian12'", SYSTEMS]),
        ("nonsense", ["FAMILY-pyPYTHON-OS", DEFAULT.id]),
    ],
)
def test_unsupported_cells_name_the_reason_and_the_choices(matrix: Matrix, cell_id: str, expected: list[str]) -> None:
    with pytest.raises(NeuronTorchError) as raised:
        matrix.cell(cell_id)
    assert raised.value.exit_code == 2
    for text in expected:
        assert text in str(raised.value)


def test_instances(matrix: Matrix) -> None:
    assert matrix.instance("trn2.48xlarge").expected_devices == 64
    assert matrix.instance("trn2.3xlarge").expected_devices is None
    for bad, text in [("trn1.32xlarge", "Trn1"), ("inf2.xlarge", "Inf2"), ("p5.48xlarge", "not supported")]:
        with pytest.raises(UnsupportedError, match=text):
            matrix.instance(bad)
    # A size of a supported family that the release does not list: unknown where undocumented, not an error.
    unlisted = matrix.instance("trn3.3xlarge")
    assert (unlisted.family, unlisted.expected_devices) == ("trn3", None)
    assert "not listed" in unlisted.note
    with pytest.raises(UnsupportedError, match=r"arm64 is not supported: TorchNeuron in Neuron 2\.33 is Linux x86_64"):
        matrix.cell(f"{DEFAULT.id}-arm64")
    with pytest.raises(UnsupportedError, match="x86_64 only"):
        matrix.require_arch("aarch64")


def _write_variant(tmp_path: Path, repo: Path, old: str, new: str) -> Path:
    text = (repo / "constraints" / "matrix.toml").read_text()
    assert old in text, f"fixture text {old!r} not in matrix.toml"
    path = tmp_path / "constraints" / "matrix.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "key", "problem"),
    [
        (f'torch = "{LAST.torch}"', f'torch = "{FIRST.torch}"', f"families.{LAST.name}.torch", "does not belong"),
        (f'torch_neuronx = "{LAST.torch_neuronx}"', FIRST_NEURONX, f"families.{LAST.name}.torch_neuronx", "built for"),
        (f'nki = "{NKI}"', 'nki = "latest"', "packages.nki", "not an exact version"),
        (f'codename = "{SYSTEM.codename}"\n', "", f"os.{SYSTEM.id}.codename", "missing value"),
        ("wheels_available = false", 'wheels_available = "no"', f"os.{NO_WHEELS.id}.wheels_available", "true or false"),
        ('scope = "host"', 'scope = "everywhere"', f"apt.packages.{HOST.name}.scope", "'host' or 'image'"),
        ('serves = ["torch"]', 'serves = ["nki"]', "indexes[1].serves", "already served"),
        (f'default_cell = "{DEFAULT.id}"', f'default_cell = "{NO_SUCH_DEFAULT}"', "default_cell", ""),
        ("schema = 1", "schema = 7", "schema", "must be 1"),
        ('route_other = "uv-standalone"', 'route_other = "conda"', "python_install.route_other", "'distro' or 'uv-"),
        (FIRST_PYTHONS, 'python = ["3.11"]', f"families.{FIRST.name}.python", "unsupported"),
    ],
)
def test_malformed_matrix_names_file_key_and_problem(
    tmp_path: Path, repo: Path, old: str, new: str, key: str, problem: str
) -> None:
    path = _write_variant(tmp_path, repo, old, new)
    with pytest.raises(MatrixError) as raised:
        load_matrix(path)
    message = str(raised.value)
    assert str(path) in message
    assert key in message
    assert problem in message


def test_python_routes_come_from_python_install(tmp_path: Path, repo: Path, matrix: Matrix) -> None:
    """[python_install] route_default/route_other name the routes; no cell's route is typed in the code."""
    default = next(c for c in matrix.cells if c.python == c.os.default_python)
    other = next(c for c in matrix.cells if c.python != c.os.default_python)
    assert (default.python_route, other.python_route) == (
        matrix.python_install.route_default,
        matrix.python_install.route_other,
    )
    swapped = _write_variant(
        tmp_path, repo, 'route_default = "distro"\nroute_other = "uv-standalone"',
        'route_default = "uv-standalone"\nroute_other = "distro"',
    )  # fmt: skip
    routes = {c.id: c.python_route for c in load_matrix(swapped).cells}
    assert (routes[default.id], routes[other.id]) == ("uv-standalone", "distro")


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "matrix.toml"
    path.write_text("schema = = 1\n")
    with pytest.raises(MatrixError, match=r"matrix\.toml: \(syntax\)"):
        load_matrix(path)


def test_test_release_loads_like_any_release(repo: Path) -> None:
    test_matrix = load_matrix(repo / "constraints" / "test-matrix.toml")
    assert test_matrix.release.default_cell in {c.id for c in test_matrix.cells}
    assert all(c.python in (c.os.pythons or ()) for c in test_matrix.cells)
