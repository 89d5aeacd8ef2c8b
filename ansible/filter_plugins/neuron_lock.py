"""Filters that read a neuron-torch hash lock (the `neuron-torch lock` format) inside playbooks.

The python_env role decides with them whether the lock needs installing; installing it is neuron_cell.lockinstall's
(the one lock installation, which the image and the bundle run too). Everything here is the checkout's neuron_cell
(src/neuron_cell: the roles run from a checkout), imported as a package: the lock read by neuron_cell.locktext,
installed versions compared with the locked ones by PEP 440 (neuron_cell.pins, never as strings), a cell record
passed on only when neuron_cell.cellrecord finds it of the schema this checkout reads. `neuron_cell_kit` names the
controller's neuron_cell folder and its digest, for the roles that copy it to hosts. `neuron_checkout` names what the
roles and playbooks take from the controller's checkout (CHECKOUT_PATHS): no role default spells a path into it.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_CHECKOUT = Path(__file__).resolve().parents[2]
_CHECKOUT_SRC = _CHECKOUT / "src"
# What the roles and playbooks take from the controller's checkout, relative to it.
CHECKOUT_PATHS = {
    "src": "src",  # neuron_torch, which runs the lock gate on the controller (PYTHONPATH)
    "key_check": "src/neuron_torch/aptkey.sh",  # the one apt key fingerprint check (image, bundle, neuron_repo)
    "smoke_tests": "smoke_tests",  # verify-device's stages, copied to hosts by neuron_verify
    "verify_script": "scripts/verify-device.sh",
    "slurm_scripts": "scripts/slurm",  # the Slurm health check and cluster check job (docs/slurm.md)
    "state": ".neuron-torch",  # the controller's reports and fleet summaries
}


@functools.cache
def _cell_module(name: str) -> ModuleType:
    """neuron_cell.NAME of this checkout (standard library only), imported once per process."""
    if not (_CHECKOUT_SRC / "neuron_cell" / "__init__.py").is_file():
        raise FileNotFoundError(
            f"{_CHECKOUT_SRC}/neuron_cell is missing: run the playbooks from a neuron-torch checkout"
        )
    if str(_CHECKOUT_SRC) not in sys.path:
        sys.path.insert(0, str(_CHECKOUT_SRC))
    return importlib.import_module(f"neuron_cell.{name}" if name else "neuron_cell")


def neuron_lock_versions(text: str) -> dict[str, str]:
    """{canonical name: version} of every locked package."""
    versions: dict[str, str] = _cell_module("locktext").versions(text)
    return versions


def neuron_lock_missing(text: str, installed: list[dict[str, str]]) -> list[str]:
    """The locked `name==version` entries that `installed` (pip list --format=json) lacks or holds at another
    version."""
    have = {_cell_module("locktext").canonical(item["name"]): item["version"] for item in installed}
    satisfies = _cell_module("pins").satisfies
    return [
        f"{name}=={version}"
        for name, version in neuron_lock_versions(text).items()
        if name not in have or satisfies(name, version, have[name])
    ]


def neuron_cell_record(record: Any, cell: str) -> dict[str, Any]:
    """The cell record unchanged, once its `schema` is the version this checkout reads; a clear error otherwise."""
    source = f"neuron_release.cells['{cell}'] (the release vars, ansible/vars/release.yml or neuron_release_vars)"
    problem = _cell_module("cellrecord").problem(record, source)
    if problem:
        raise ValueError(problem)
    checked: dict[str, Any] = record
    return checked


def neuron_cell_kit(name: str) -> dict[str, str]:
    """{path, digest} of the controller's neuron_cell (`'neuron_cell' | neuron_cell_kit`): what the roles copy whole
    to a host and check there (`python -m neuron_cell --expect DIGEST`)."""
    if name != "neuron_cell":
        raise ValueError(f"neuron_cell_kit takes 'neuron_cell', not {name!r}")
    kit = _cell_module("")
    return {"path": str(kit.HOME), "digest": kit.digest()}


def neuron_checkout(root: str | None) -> dict[str, str]:
    """{root, and each CHECKOUT_PATHS name: its path} of the controller's checkout
    (`neuron_repo_root | default(none) | neuron_checkout`): `root` when given (neuron_repo_root, a user's override),
    else the checkout this plugin belongs to (wherever the playbook that loads it lives)."""
    base = str(root) if root else str(_CHECKOUT)
    return {"root": base, **{name: os.path.join(base, path) for name, path in CHECKOUT_PATHS.items()}}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "neuron_lock_versions": neuron_lock_versions,
            "neuron_lock_missing": neuron_lock_missing,
            "neuron_cell_record": neuron_cell_record,
            "neuron_cell_kit": neuron_cell_kit,
            "neuron_checkout": neuron_checkout,
        }
