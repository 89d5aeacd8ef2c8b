"""Unit tests of neuron_torch.render_ansible: where each matrix's Ansible vars go, and that the rendered vars (a YAML
document whose body is JSON) hold the matrix's versions, cells, caveats and refusal messages."""

from __future__ import annotations

import json

import pytest

from neuron_torch.cellinfo import caveats, cell_record
from neuron_torch.errors import UnsupportedError
from neuron_torch.generated import header
from neuron_torch.matrix import Matrix
from neuron_torch.render_ansible import ansible_data, ansible_vars, ansible_vars_path


def test_the_release_renders_into_ansible_vars_and_others_beside_their_generated_files(
    matrix: Matrix, test_release: Matrix
) -> None:
    assert ansible_vars_path(matrix) == matrix.root / "ansible" / "vars" / "release.yml"
    assert ansible_vars_path(test_release) == test_release.generated_dir / "ansible-release.yml"
    assert list(ansible_vars(test_release)) == [test_release.generated_dir / "ansible-release.yml"]


def test_rendered_vars_are_a_yaml_document_holding_the_matrix(test_release: Matrix) -> None:
    [text] = ansible_vars(test_release).values()
    start = "---\n" + header(test_release)
    assert text.startswith(start) and text.endswith("}\n")
    data = json.loads(text.removeprefix(start))  # JSON is YAML: the body after the document marker and banner
    assert data == ansible_data(test_release)
    release = data["neuron_release"]
    assert release["matrix"] == "constraints/test-matrix.toml" and release["name"] == test_release.release.name
    assert release["supported_cells"] == [cell.id for cell in test_release.cells]
    assert release["cells"] == {cell.id: cell_record(test_release, cell) for cell in test_release.cells}
    assert release["caveats"] == {cell.id: caveats(test_release, cell) for cell in test_release.cells}
    assert [(p["name"], p["pin"], p["scope"]) for p in release["apt"]["packages"]] == [
        (p.name, p.apt_pin, p.scope.value) for p in test_release.apt.packages
    ]
    assert [i["serves"] for i in release["indexes"]] == [list(i.serves) for i in test_release.indexes]
    assert (release["uv"], release["uv_sha256"]) == (
        test_release.python_install.uv,
        test_release.python_install.uv_sha256,
    )


def test_refusals_are_the_library_messages(matrix: Matrix) -> None:
    unsupported = ansible_data(matrix)["neuron_release"]["unsupported"]
    assert set(unsupported["python"]) == set(matrix.unsupported.python)
    assert set(unsupported["os"]) == set(matrix.unsupported.os)
    for python, message in unsupported["python"].items():
        with pytest.raises(UnsupportedError) as raised:
            matrix.require_python(python)
        assert message == str(raised.value) and matrix.unsupported.python[python] in message
    for os_id, message in unsupported["os"].items():
        assert message.startswith(f"{os_id} is not supported: {matrix.unsupported.os[os_id]}")
