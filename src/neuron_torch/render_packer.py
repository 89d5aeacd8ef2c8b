"""Packer inputs rendered from the matrix: one variables file per cell and the cell-id validation.

For the real release (constraints/matrix.toml) they go into `images/`: `images/cells/<cell>.pkrvars.hcl` and
`images/cell-id.pkr.hcl` (the `cell_id` variable, whose validation lists the supported cells and the matrix's
reasons for what it refuses). For any other matrix (the test bed's) they go under its generated folder, in
`packer/`, where `neuron_torch.packer` stages a template folder from them. The output is `packer fmt`-clean.
"""

from __future__ import annotations

from pathlib import Path

from neuron_torch.cellinfo import relative
from neuron_torch.generated import banner, is_release_matrix
from neuron_torch.hcl import HclValue
from neuron_torch.matrix import Cell, Matrix
from neuron_torch.render_ansible import ansible_vars_path
from neuron_torch.templating import render_template

CELL_ID_FILE = "cell-id.pkr.hcl"


def packer_dir(matrix: Matrix) -> Path:
    """Where the matrix's Packer inputs are rendered."""
    return matrix.root / "images" if is_release_matrix(matrix) else matrix.generated_dir / "packer"


def var_file_path(matrix: Matrix, cell: Cell) -> Path:
    return packer_dir(matrix) / "cells" / f"{cell.id}.pkrvars.hcl"


def cell_variables(matrix: Matrix, cell: Cell) -> dict[str, HclValue]:
    """Every fact the Packer templates read about a cell (and nothing they do not), in file order."""
    apt = matrix.apt
    return {
        "cell_id": cell.id,
        "release": matrix.release.name,
        "python": cell.python,
        "os_id": cell.os.id,
        "base_image": cell.os.base_image,
        "source_ami_name": cell.os.source_ami_name,
        "source_ami_owner": cell.os.source_ami_owner,
        "pins": dict(cell.pins),
        "apt_pins": {p.name: p.version for p in apt.packages},
        "cell_file": relative(cell.record_path, matrix),
        "lock_file": relative(cell.lock_path, matrix),
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


def cell_id_declaration(matrix: Matrix) -> str:
    """The `cell_id` variable: building a cell the matrix does not support fails validation with its reasons."""
    cells = [cell.id for cell in matrix.cells]
    message = (
        f"The cell_id must be a cell of {matrix.release.name}: {', '.join(cells)}. "
        f"Not supported ({matrix.path.name}): {'; '.join(refusals(matrix))}. "
        f"Run `neuron-torch cell ID` for the reason a cell is refused."
    )
    return render_template(
        "cell-id.pkr.hcl.j2", banner=banner(matrix), release=matrix.release.name, cells=cells, message=message
    )


def packer_files(matrix: Matrix) -> dict[Path, str]:
    files = {var_file_path(matrix, cell): cell_var_file(matrix, cell) for cell in matrix.cells}
    files[packer_dir(matrix) / CELL_ID_FILE] = cell_id_declaration(matrix)
    return files
