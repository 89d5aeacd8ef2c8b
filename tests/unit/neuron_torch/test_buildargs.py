"""neuron_torch.buildargs: the image build arguments of a cell come from its record (checked for its schema first)
and, for what is release-wide, from the matrix; and the docker reference grammars (a tag to write, an image to build
FROM) accept what docker does and refuse what it would."""

from __future__ import annotations

import pytest

import neuron_cell
from neuron_cell.cellrecord import PINNED
from neuron_torch.buildargs import DOCKER_REFERENCE, DOCKER_TAG, build_args
from neuron_torch.cellinfo import cell_record
from neuron_torch.errors import NeuronTorchError
from neuron_torch.matrix import AptScope, Matrix, load_matrix
from tests import REPO_ROOT


@pytest.mark.parametrize("release", ["matrix.toml", "test-matrix.toml"])
def test_each_argument_comes_from_the_record_or_the_matrix(release: str) -> None:
    matrix = load_matrix(REPO_ROOT / "constraints" / release)
    for cell in matrix.cells:
        record = cell_record(matrix, cell)
        args = build_args(matrix, record)
        assert (args["CELL_ID"], args["BASE_IMAGE"], args["PYTHON"], args["PYTHON_ROUTE"]) == (
            cell.id, cell.os.base_image, cell.python, cell.python_route,
        )  # fmt: skip
        assert (args["RELEASE"], args["FAMILY"]) == (matrix.release.name, cell.family.name)
        assert (args["UV_VERSION"], args["UV_SHA256"]) == (matrix.python_install.uv, matrix.python_install.uv_sha256)
        assert (args["APT_URL"], args["APT_KEYRING"]) == (matrix.apt.url, matrix.apt.keyring)
        assert args["APT_PACKAGES"].split() == [p.apt_pin for p in matrix.apt.scoped(AptScope.IMAGE)]
        assert args["INDEX_ROUTES"].split() == [f"{i.name}={i.url}" for i in matrix.indexes]
        assert args["PYPI_INDEX_URL"] == next(i.url for i in matrix.indexes if i.is_default)
        assert args["PINS"].split() == [f"{dist}=={cell.pins[dist]}" for dist in PINNED.values()]
        assert args["NEURON_CELL_SHA256"] == neuron_cell.digest()


def test_the_record_decides_over_the_matrix(matrix: Matrix) -> None:
    """A staged record (with its locked versions) is what the build reads: its values win, an empty pin is left out."""
    cell = matrix.cells[0]
    record = {**cell_record(matrix, cell), "base_image": "registry.example/ubuntu:26.04", "nki": None}
    record["apt"] = {"aws-neuronx-tools": "9.9.9"}
    record["locked"] = {"torch": cell.pins["torch"]}
    args = build_args(matrix, record)
    assert args["BASE_IMAGE"] == args["BASE_REFERENCE"] == "registry.example/ubuntu:26.04"
    assert args["BASE_DIGEST"] == "", "an unpinned base: the digest is what the build resolves"
    pinned = "registry.example/ubuntu:26.04@sha256:" + "e" * 64
    assert build_args(matrix, {**record, "base_image": pinned})["BASE_DIGEST"] == "sha256:" + "e" * 64
    assert args["APT_PACKAGES"] == "aws-neuronx-tools=9.9.9*"
    assert "nki" not in args["PINS"] and f"torch=={cell.pins['torch']}" in args["PINS"].split()


@pytest.mark.parametrize(
    ("change", "problem"),
    [({"schema": 99}, "the cell record has schema 99"), ({"schema": None}, "the cell record has schema None")],
)
def test_a_record_of_another_schema_is_refused(matrix: Matrix, change: dict[str, object], problem: str) -> None:
    cell = matrix.cells[0]
    with pytest.raises(NeuronTorchError, match=f"the cell record of {cell.id}: {problem}"):
        build_args(matrix, {**cell_record(matrix, cell), **change})


def test_a_record_without_a_required_key_is_refused(matrix: Matrix) -> None:
    record = cell_record(matrix, matrix.cells[0])
    del record["base_image"]
    with pytest.raises(NeuronTorchError, match="without base_image"):
        build_args(matrix, record)


@pytest.mark.parametrize(
    "tag",
    [
        "neuron-torch:2.14-py3.14-ubuntu26.04",
        "nt",
        "registry.example:5000/ml/nt:1",
        "a__b/c-d.e:Tag_1.x",
        "localhost/x",
    ],
)
def test_docker_tags_docker_accepts(tag: str) -> None:
    assert DOCKER_TAG.fullmatch(tag)
    assert DOCKER_REFERENCE.fullmatch(tag)


@pytest.mark.parametrize(
    "tag", ["Neuron-Torch:1", "nt:", "nt:-x", "nt:a:b", "-nt", "nt/", "nt:" + "x" * 129, "nt tag", "nt@sha256:ab"]
)
def test_docker_tags_docker_refuses(tag: str) -> None:
    assert not DOCKER_TAG.fullmatch(tag)


def test_a_base_image_may_be_pinned_by_digest() -> None:
    pinned = "registry.example/ubuntu:26.04@sha256:" + "a" * 64
    assert DOCKER_REFERENCE.fullmatch(pinned) and not DOCKER_TAG.fullmatch(pinned)
    assert not DOCKER_REFERENCE.fullmatch("ubuntu@sha256:" + "a" * 63)
    assert not DOCKER_REFERENCE.fullmatch("ubuntu@sha256:" + "A" * 64)
