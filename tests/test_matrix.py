from __future__ import annotations

from pathlib import Path

import pytest

from neuron_torch.errors import MatrixError, NeuronTorchError, UnsupportedError
from neuron_torch.matrix import Matrix, load_matrix


def test_release_has_twelve_cells_with_paired_pins(matrix: Matrix) -> None:
    ids = [cell.id for cell in matrix.cells]
    assert len(ids) == len(set(ids)) == 12
    assert "2.14-py3.12-ubuntu24.04" in ids
    for cell in matrix.cells:
        assert cell.pins["torch"] == f"{cell.family.name}.0+cpu"
        assert cell.pins["torch-neuronx"] == f"{cell.family.name}.3.0.*"
        assert cell.pins["neuronx-cc"] == "2.28.7631.0"
        assert cell.pins["nki"] == "0.7.0"


def test_only_ubuntu_2604_ships_wheels(matrix: Matrix) -> None:
    assert {c.os.id for c in matrix.cells if c.os.wheels_available} == {"ubuntu26.04"}
    assert "DLAMI" in matrix.os["ubuntu24.04"].wheels_note


def test_index_routing(matrix: Matrix) -> None:
    assert matrix.index_for("torch_neuronx").name == "neuron"
    assert matrix.index_for("NKI").name == "neuron"
    assert matrix.index_for("torch").name == "pytorch-cpu"
    assert matrix.index_for("numpy").name == "pypi"


def test_forbidden_packages(matrix: Matrix) -> None:
    assert matrix.forbidden_reason("torch-neuronx", "1.0")
    assert matrix.forbidden_reason("nvidia_cublas_cu12", "12.4.5.8")
    assert matrix.forbidden_reason("torch-neuronx", "2.14.3.0.1871") is None


@pytest.mark.parametrize(
    ("cell_id", "expected"),
    [
        ("2.15-py3.12-ubuntu24.04", ["family '2.15'", "2.13", "2.14"]),
        ("2.14-py3.11-ubuntu24.04", ["Python 3.11", "3.12, 3.13, 3.14"]),
        ("2.14-py3.12-ubuntu22.04", ["ubuntu22.04", "end of support", "ubuntu24.04, ubuntu26.04"]),
        ("2.14-py3.12-debian12", ["'debian12'", "ubuntu24.04, ubuntu26.04"]),
        ("nonsense", ["FAMILY-pyPYTHON-OS", "2.14-py3.14-ubuntu26.04"]),
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
        matrix.cell("2.14-py3.13-ubuntu26.04-arm64")
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
        ('torch = "2.14.0"', 'torch = "2.13.0"', "families.2.14.torch", "does not belong to family 2.14"),
        ('torch_neuronx = "2.14.3.0.*"', 'torch_neuronx = "2.13.3.0.*"', "families.2.14.torch_neuronx", "built for"),
        ('nki = "0.7.0"', 'nki = "latest"', "packages.nki", "not an exact version"),
        ('codename = "noble"\n', "", "os.ubuntu24.04.codename", "missing value"),
        ("wheels_available = false", 'wheels_available = "no"', "os.ubuntu24.04.wheels_available", "true or false"),
        ('scope = "host"', 'scope = "everywhere"', "apt.packages.aws-neuronx-dkms.scope", "'host' or 'image'"),
        ('serves = ["torch"]', 'serves = ["nki"]', "indexes[1].serves", "already served"),
        ('default_cell = "2.14-py3.14-ubuntu26.04"', 'default_cell = "2.14-py3.11-ubuntu26.04"', "default_cell", ""),
        ("schema = 1", "schema = 7", "schema", "must be 1"),
        ('route_other = "uv-standalone"', 'route_other = "conda"', "python_install.route_other", "'distro' or 'uv-"),
        ('python = ["3.12", "3.13", "3.14"]', 'python = ["3.11"]', "families.2.13.python", "unsupported"),
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
