"""The Ansible vars file rendered from the matrix: every version the roles install comes from here.

The real release renders to `ansible/vars/release.yml` (committed); any other matrix (the test bed's) renders next to
its generated files (`<generated>/ansible-release.yml`), so tests can point the playbooks at it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from neuron_torch.cellinfo import caveats, cell_record, relative
from neuron_torch.errors import NeuronTorchError
from neuron_torch.generated import header, is_release_matrix
from neuron_torch.matrix import Matrix


def ansible_vars_path(matrix: Matrix) -> Path:
    if is_release_matrix(matrix):
        return matrix.root / "ansible" / "vars" / "release.yml"
    return matrix.generated_dir / "ansible-release.yml"


def _refusal(check: Any, value: str) -> str:
    """The library's own message for an unsupported value (the same text `neuron-torch cell` prints)."""
    try:
        check(value)
    except NeuronTorchError as error:
        return str(error)
    raise AssertionError(f"{value} is listed as unsupported but the matrix accepts it")  # pragma: no cover


def ansible_data(matrix: Matrix) -> dict[str, Any]:
    apt = matrix.apt
    return {
        "neuron_release": {
            "name": matrix.release.name,
            "version": matrix.release.version,
            "matrix": relative(matrix.path, matrix),
            "default_cell": matrix.release.default_cell,
            "apt": {
                "url": apt.url,
                "key_url": apt.key_url,
                "key_fingerprint": apt.key_fingerprint,
                "keyring": apt.keyring,
                "component": apt.component,
                "packages": [
                    {"name": p.name, "version": p.version, "scope": p.scope, "pin": p.apt_pin} for p in apt.packages
                ],
            },
            "indexes": [{"name": i.name, "url": i.url, "serves": list(i.serves)} for i in matrix.indexes],
            "uv": matrix.python_install.uv,
            "uv_sha256": matrix.python_install.uv_sha256,
            "cells": {cell.id: cell_record(matrix, cell) for cell in matrix.cells},
            "caveats": {cell.id: caveats(matrix, cell) for cell in matrix.cells},
            "unsupported": {
                "python": {v: _refusal(matrix.require_python, v) for v in matrix.unsupported.python},
                "os": {v: _refusal(matrix.operating_system, v) for v in matrix.unsupported.os},
            },
            "supported_cells": [cell.id for cell in matrix.cells],
        }
    }


def ansible_vars(matrix: Matrix) -> dict[Path, str]:
    # JSON is YAML: the file stays exact (no YAML quoting surprises) and yamllint-clean via its config's ignore.
    body = json.dumps(ansible_data(matrix), indent=2)
    return {ansible_vars_path(matrix): "---\n" + header(matrix) + body + "\n"}
