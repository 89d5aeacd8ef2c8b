"""Filters that read a neuron-torch hash lock (the `neuron-torch lock` format) inside playbooks.

A lock entry is `name==version \\` followed by `--hash=...` lines and comments, one of which is `# from INDEX_URL`:
the index the entry was locked from. Installing each index's entries with `--index-url` of that index alone (and
`--no-deps`) keeps pip's index routing exactly as the lock recorded it. Installed versions are compared with the
locked ones by PEP 440 through the checkout's smoke_tests/neuron_smoke/pins.py (the standard-library copy of
neuron_torch.pins; the roles run from a checkout), never as strings; the lock is read by the checkout's
smoke_tests/neuron_smoke/locktext.py (the one reader of the smoke tests, the testinfra suite and these filters).
`neuron_cell_record` passes a cell record on
only when its `schema` version is the one the checkout's smoke_tests/neuron_smoke/cell.schema.json defines.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

_SMOKE = Path(__file__).resolve().parents[2] / "smoke_tests" / "neuron_smoke"

_INDEX = re.compile(r"^#\s*index\s+(?P<name>[^:\s]+):\s*(?P<url>\S+)")


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


def neuron_lock_indexes(text: str) -> dict[str, str]:
    """{index name: url} from the lock's header."""
    return {m["name"]: m["url"] for m in map(_INDEX.match, text.splitlines()) if m}


def neuron_lock_groups(text: str, overrides: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The lock split by the index each entry came from: [{name, url, requirements}] in the lock's index order.

    `overrides` maps an index name (from the lock header) to a mirror URL.
    """
    overrides = overrides or {}
    names = {url: name for name, url in neuron_lock_indexes(text).items()}
    unknown = sorted(set(overrides) - set(names.values()))
    if unknown:
        known = ", ".join(names.values())
        raise ValueError(f"index override(s) {', '.join(unknown)} name no index of the lock ({known})")
    groups: dict[str, list[str]] = {}
    for entry in _smoke_module("locktext").entries(text):
        url = entry.get("index_url")
        if not url:
            raise ValueError(f"lock entry {entry['name']} has no '# from INDEX_URL' line: regenerate the lock")
        lines = entry["lines"]
        lines = [line.rstrip(" \\") + " \\" for line in lines[:-1]] + [lines[-1].rstrip(" \\")]
        groups.setdefault(url, []).append("\n".join(lines))
    result = []
    for url, requirements in groups.items():
        name = names.get(url, url)
        result.append({"name": name, "url": overrides.get(name, url), "requirements": "\n".join(requirements) + "\n"})
    return result


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
            "neuron_lock_indexes": neuron_lock_indexes,
            "neuron_lock_groups": neuron_lock_groups,
            "neuron_lock_missing": neuron_lock_missing,
            "neuron_cell_record": neuron_cell_record,
        }
