"""Filters that read a neuron-torch hash lock (the `neuron-torch lock` format) inside playbooks.

The python_env role decides with them whether the lock needs installing; installing it is
smoke_tests/neuron_smoke/lockinstall.py's (the one lock installation, which the image and the bundle run too). Installed
versions are compared with the
locked ones by PEP 440 through the checkout's smoke_tests/neuron_smoke/pins.py (the standard-library copy of
neuron_torch.pins; the roles run from a checkout), never as strings; the lock is read by the checkout's
smoke_tests/neuron_smoke/locktext.py (the one reader of the smoke tests, the testinfra suite and these filters).
`neuron_cell_record` passes a cell record on
only when its `schema` version is the one the checkout's smoke_tests/neuron_smoke/cell.schema.json defines.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

_SMOKE = Path(__file__).resolve().parents[2] / "smoke_tests" / "neuron_smoke"


@functools.cache
def _smoke_module(name: str) -> ModuleType:
    """smoke_tests/neuron_smoke/NAME.py of the checkout (a standard-library module), loaded once per process."""
    path = _SMOKE / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"neuron_torch_{name}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run the playbooks from a neuron-torch checkout")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def neuron_lock_versions(text: str) -> dict[str, str]:
    """{canonical name: version} of every locked package."""
    versions: dict[str, str] = _smoke_module("locktext").versions(text)
    return versions


def neuron_lock_missing(text: str, installed: list[dict[str, str]]) -> list[str]:
    """The locked `name==version` entries that `installed` (pip list --format=json) lacks or holds at another
    version."""
    have = {_smoke_module("locktext").canonical(item["name"]): item["version"] for item in installed}
    satisfies = _smoke_module("pins").satisfies
    return [
        f"{name}=={version}"
        for name, version in neuron_lock_versions(text).items()
        if name not in have or satisfies(name, version, have[name])
    ]


def neuron_cell_record(record: Any, cell: str) -> dict[str, Any]:
    """The cell record unchanged, once its `schema` is the version this checkout reads; a clear error otherwise."""
    source = f"neuron_release.cells['{cell}'] (the release vars, ansible/vars/release.yml or neuron_release_vars)"
    problem = _smoke_module("cellschema").record_problem(record, source)
    if problem:
        raise ValueError(problem)
    checked: dict[str, Any] = record
    return checked


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "neuron_lock_versions": neuron_lock_versions,
            "neuron_lock_missing": neuron_lock_missing,
            "neuron_cell_record": neuron_cell_record,
        }
