"""Packer inputs rendered from the matrix: one variables file per cell and the cell declarations.

The templates read a cell's facts from its record (`constraints/generated/<cell>.json`, cell.schema.json) with
`jsondecode(file(var.cell_file))`; the variables file holds only what the record does not: the cell id, the record's
path, Canonical's source AMI and the release vars the playbook reads. For the real release (constraints/matrix.toml)
they go into `images/`: `images/cells/<cell>.pkrvars.hcl` and `images/cell.pkr.hcl` (the `cell_id` variable, whose
validation lists the supported cells and the matrix's reasons for what it refuses, and `cell_file`, whose validation
refuses a record of another schema version). For any other matrix (the test bed's) they go under its generated
folder, in `packer/`, where `neuron_torch.packer` stages a template folder from them. The output is
`packer fmt`-clean.
"""

from __future__ import annotations

from pathlib import Path

from neuron_torch.cellinfo import relative
from neuron_torch.cellrecord import schema_version
from neuron_torch.generated import banner, is_release_matrix
from neuron_torch.hcl import HclValue
from neuron_torch.matrix import Cell, Matrix
from neuron_torch.render_ansible import ansible_vars_path
from neuron_torch.templating import render_template

CELL_FILE = "cell.pkr.hcl"
SCHEMA_NAME = "src/neuron_cell/cell.schema.json"


def packer_dir(matrix: Matrix) -> Path:
    """Where the matrix's Packer inputs are rendered."""
    return matrix.root / "images" if is_release_matrix(matrix) else matrix.generated_dir / "packer"


def var_file_path(matrix: Matrix, cell: Cell) -> Path:
    return packer_dir(matrix) / "cells" / f"{cell.id}.pkrvars.hcl"


def cell_variables(matrix: Matrix, cell: Cell) -> dict[str, HclValue]:
    """What the Packer templates read about a cell besides its record (which they read themselves), in file order."""
    return {
        "cell_id": cell.id,
        "cell_file": relative(cell.record_path, matrix),
        "source_ami_name": cell.os.source_ami_name,
        "source_ami_owner": cell.os.source_ami_owner,
        "ansible_vars_file": relative(ansible_vars_path(matrix), matrix),
    }


def cell_var_file(matrix: Matrix, cell: Cell) -> str:
    variables = cell_variables(matrix, cell)
    return render_template(
        "cell.pkrvars.hcl.j2",
        banner=banner(matrix),
        release=matrix.release.name,
        cell_id=cell.id,
        variables=variables,
        width=max(len(name) for name in variables),
    )


def refusals(matrix: Matrix) -> list[str]:
    """The matrix's reasons for what it does not support, one phrase each."""
    groups = {"os": "OS", "python": "Python", "instance_families": "instance family", "arch": "architecture"}
    return [
        f"{label} {key}: {reason}"
        for group, label in groups.items()
        for key, reason in getattr(matrix.unsupported, group).items()
    ]


def cell_declarations(matrix: Matrix) -> str:
    """The `cell_id` variable (a cell the matrix does not support fails validation with its reasons) and
    `cell_file` (a record of a schema version this neuron-torch does not write fails validation)."""
    cells = [cell.id for cell in matrix.cells]
    message = (
        f"The cell_id must be a cell of {matrix.release.name}: {', '.join(cells)}. "
        f"Not supported ({matrix.path.name}): {'; '.join(refusals(matrix))}. "
        f"Run `neuron-torch cell ID` for the reason a cell is refused."
    )
    schema = schema_version()
    record_message = (
        f"The cell_file must be a cell record of schema {schema} ({SCHEMA_NAME}), readable from the folder packer "
        "runs in: one written by another neuron-torch, or a missing or unreadable file, is refused. Write it again "
        "with this checkout's `neuron-torch render` (or `neuron-torch cell ID --json`) and run packer from the "
        "checkout."
    )
    return render_template(
        "cell.pkr.hcl.j2",
        banner=banner(matrix),
        release=matrix.release.name,
        cells=cells,
        message=message,
        schema=schema,
        schema_file=SCHEMA_NAME,
        record_dir=relative(matrix.generated_dir, matrix),
        record_message=record_message,
    )


def packer_files(matrix: Matrix) -> dict[Path, str]:
    files = {var_file_path(matrix, cell): cell_var_file(matrix, cell) for cell in matrix.cells}
    files[packer_dir(matrix) / CELL_FILE] = cell_declarations(matrix)
    return files
