"""Unit tests of neuron_torch.model: the records' derived values (pins, paths, routes, device counts) and the
Matrix's look-ups and refusals, on the release and on variants made with dataclasses.replace."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from neuron_torch.errors import NeuronTorchError, UnsupportedError
from neuron_torch.matrix import Matrix
from neuron_torch.model import AptPackage, AptRepo, AptScope, Family, Index, Instance, PythonRoute, apt_pin


def test_torch_pin_carries_the_local_label_only_when_there_is_one(matrix: Matrix) -> None:
    for family in matrix.families.values():
        assert family.torch_pin == f"{family.torch}+{family.torch_local}"
        assert replace(family, torch_local="").torch_pin == family.torch


def test_cell_paths_pins_and_routes_follow_its_id(matrix: Matrix) -> None:
    for cell in matrix.cells:
        assert cell.id == f"{cell.family.name}-py{cell.python}-{cell.os.id}"
        assert cell.constraints_path == matrix.generated_dir / f"{cell.id}.txt"
        assert cell.record_path == matrix.generated_dir / f"{cell.id}.json"
        assert cell.lock_path == matrix.locks_dir / f"{cell.id}.txt"
        assert list(cell.pins) == ["torch-neuronx", "torch", *matrix.packages]
        assert cell.pins["torch"] == cell.family.torch_pin
        default, other = matrix.python_install.route_default, matrix.python_install.route_other
        assert cell.python_route == (default if cell.python == cell.os.default_python else other)


def test_enums_compare_and_serialise_as_their_toml_spelling() -> None:
    distro: str = PythonRoute.DISTRO
    assert PythonRoute("uv-standalone") is PythonRoute.UV_STANDALONE and distro == "distro"
    assert json.dumps({"route": PythonRoute.UV_STANDALONE, "scope": AptScope.HOST}) == (
        '{"route": "uv-standalone", "scope": "host"}'
    )
    assert f"{AptScope.IMAGE}" == "image"


def test_apt_pins_and_scopes() -> None:
    assert apt_pin("aws-neuronx-tools", "2.1.0") == "aws-neuronx-tools=2.1.0*"
    host, image = AptPackage("dkms", "1.0", AptScope.HOST), AptPackage("runtime", "2.0", AptScope.IMAGE)
    assert image.apt_pin == "runtime=2.0*"
    repo = AptRepo("url", "key", "", "ring", "main", (host, image))
    assert repo.scoped(AptScope.HOST) == (host,) and repo.scoped(AptScope.IMAGE) == (image,)


def test_an_undocumented_device_count_is_none() -> None:
    assert Instance("trn2.x", "trn2", 16, 64, "").expected_devices == 64
    assert Instance("trn2.y", "trn2", 0, 0, "").expected_devices is None


def test_pythons_are_sorted_by_number_not_by_text(matrix: Matrix) -> None:
    family = Family("9.9", "9.9.0", "", "9.9.0.*", ("3.10", "3.9"))
    variant = replace(matrix, families={"9.9": family})
    assert variant.pythons == ("3.9", "3.10")


def test_lookups_of_unknown_names_say_what_is_supported(matrix: Matrix) -> None:
    family = next(iter(matrix.families.values()))
    assert matrix.family(family.name) is family
    with pytest.raises(UnsupportedError) as raised:
        matrix.family("0.1")
    assert "'0.1'" in str(raised.value) and all(
        f"torch {f.torch}" in str(raised.value) for f in matrix.families.values()
    )
    with pytest.raises(UnsupportedError, match=r"Python '3\.99' is not in") as raised:
        matrix.require_python("3.99")
    assert ", ".join(matrix.pythons) in str(raised.value)
    with pytest.raises(UnsupportedError, match="operating system 'plan9' is not in") as raised:
        matrix.operating_system("plan9")
    assert ", ".join(matrix.os) in str(raised.value)
    system = next(iter(matrix.os.values()))
    assert matrix.operating_system(system.id) is system
    arch = next(iter(matrix.instance_families.values())).arch
    assert matrix.require_arch(arch) == arch
    with pytest.raises(UnsupportedError, match=f"mips is not supported: {matrix.release.name} supports {arch}"):
        matrix.require_arch("mips")


def test_a_well_formed_id_of_supported_parts_that_is_no_cell(matrix: Matrix) -> None:
    """Every part is known, but the combination is not one of the cells (a system restricted to other Pythons)."""
    cell = matrix.cells[0]
    restricted = replace(cell.os, pythons=("0.0",))
    variant = replace(matrix, os={**matrix.os, cell.os.id: restricted}, cells=matrix.cells[1:])
    with pytest.raises(UnsupportedError, match=f"cell '{cell.id}' is not in {matrix.release.name}"):
        variant.cell(cell.id)
    assert matrix.cell(cell.id) is cell
    with pytest.raises(NeuronTorchError, match="FAMILY-pyPYTHON-OS"):
        matrix.cell("2.14_py3.12")


def test_index_for_matches_globs_and_canonical_names(matrix: Matrix) -> None:
    default = next(i for i in matrix.indexes if i.is_default)
    special = Index("special", "https://special/simple", ("Acme_*",))
    variant = replace(matrix, indexes=(special, *matrix.indexes))
    assert variant.index_for("acme-widgets") is special and variant.index_for("ACME.tools") is special
    assert variant.index_for("acmewidgets") is default
    for index in matrix.indexes:
        for name in index.serves:
            if name != "*":
                assert matrix.index_for(name.upper().replace("-", "_")) is index


def test_forbidden_reason_uses_the_matrix_rules(matrix: Matrix) -> None:
    variant = replace(matrix, forbidden={"bad_pkg==1.0": "the placeholder", "evil-*": "never"})
    assert variant.forbidden_reason("Bad-Pkg", "1.0") == "the placeholder"
    assert variant.forbidden_reason("bad-pkg", "1.1") is None
    assert variant.forbidden_reason("evil.thing", "9") == "never"
    assert variant.forbidden_reason("good", "1.0") is None
