"""Unit tests of neuron_torch.render_packer: where each matrix's Packer inputs go, what a cell's variables file
assigns, and the cell_id / cell_file declarations (the supported cells, the refusals, the record's schema)."""

from __future__ import annotations

import json
import re

from neuron_torch.cellrecord import schema_version
from neuron_torch.matrix import Matrix
from neuron_torch.render_ansible import ansible_vars_path
from neuron_torch.render_packer import (
    CELL_FILE,
    cell_declarations,
    cell_var_file,
    cell_variables,
    packer_dir,
    packer_files,
    refusals,
    var_file_path,
)


def test_inputs_go_to_images_for_the_release_and_under_generated_otherwise(
    matrix: Matrix, test_release: Matrix
) -> None:
    assert packer_dir(matrix) == matrix.root / "images"
    assert packer_dir(test_release) == test_release.generated_dir / "packer"
    for m in (matrix, test_release):
        expected = {packer_dir(m) / "cells" / f"{cell.id}.pkrvars.hcl" for cell in m.cells} | {
            packer_dir(m) / CELL_FILE
        }
        assert set(packer_files(m)) == expected
        assert all(var_file_path(m, cell) in expected for cell in m.cells)


def test_a_var_file_assigns_the_cell_variables(test_release: Matrix) -> None:
    for cell in test_release.cells:
        variables = cell_variables(test_release, cell)
        assert variables["cell_id"] == cell.id
        assert test_release.root / str(variables["cell_file"]) == cell.record_path
        assert test_release.root / str(variables["ansible_vars_file"]) == ansible_vars_path(test_release)
        assert (variables["source_ami_name"], variables["source_ami_owner"]) == (
            cell.os.source_ami_name,
            cell.os.source_ami_owner,
        )
        text = cell_var_file(test_release, cell)
        assigned = dict(re.findall(r"^(\w+) += (\".*\")$", text, re.MULTILINE))
        assert {name: json.loads(value) for name, value in assigned.items()} == variables
        assert len({line.index("=") for line in text.splitlines() if not line.startswith("#")}) == 1  # aligned


def test_refusals_name_every_unsupported_item_with_its_reason(matrix: Matrix) -> None:
    phrases = refusals(matrix)
    unsupported = matrix.unsupported
    groups = (unsupported.os, unsupported.python, unsupported.instance_families, unsupported.arch)
    assert len(phrases) == sum(len(group) for group in groups)
    for group in groups:
        for key, reason in group.items():
            assert any(phrase.endswith(f" {key}: {reason}") for phrase in phrases), key


def test_the_declarations_list_the_cells_and_the_record_schema(test_release: Matrix) -> None:
    text = cell_declarations(test_release)
    condition = re.search(r"condition += contains\(\[(.*?)\], var\.cell_id\)", text, re.DOTALL)
    assert condition and json.loads(f"[{condition[1].rstrip().rstrip(',')}]") == [c.id for c in test_release.cells]
    heredoc = re.search(r"error_message = <<-EOT\n(.*?)\n *EOT\n", text, re.DOTALL)
    assert heredoc and all(len(line) <= 120 for line in text.splitlines())
    message = " ".join(heredoc[1].split())
    assert message.startswith(f"The cell_id must be a cell of {test_release.release.name}: ")
    assert f"Not supported ({test_release.path.name}): " + "; ".join(refusals(test_release)) in message
    assert f".schema == {schema_version()}, false)" in text
    assert f"({test_release.generated_dir.relative_to(test_release.root)}/<cell>.json" in text
