"""Reading a neuron-torch hash lock (or any pip-tools lock) in the shapes its consumers use: standard library only.

The reader for the places that run with the cell's Python, without neuron_torch: verify-device's cell pins
(neuron_smoke.cells), the testinfra suite (smoke_tests/infra/conftest.py), the Ansible filter plugin
(ansible/filter_plugins/neuron_lock.py) and the one lock installer (neuron_cell.lockinstall).

It parses nothing itself: neuron_cell.lockgate is the one lock parser and the one PEP 503 name normaliser, and this
module gives its result the shapes these consumers use (each call parses the lock once).

A lock entry is `name==version \\` followed by `--hash=...` lines and comments, one of which is `# from INDEX_URL`:
the index the entry was locked from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from neuron_cell.lockgate import Lock, canonical_name, parse_lock

canonical: Callable[[str], str] = canonical_name  # runs of - _ . become one -, lowercase


def _parse(text: str) -> Lock:
    """The lock as the one parser reads it (indexes, packages with name, version, requirement, index_url)."""
    return parse_lock(text, Path("lock"))


def versions(text: str) -> dict[str, str]:
    """{canonical name: version} of every locked package."""
    return {canonical(package.name): package.version for package in _parse(text).packages}


def indexes(text: str) -> dict[str, str]:
    """{index name: url} from the lock's header (`# index NAME: URL`), in the lock's order."""
    found: dict[str, str] = _parse(text).indexes
    return found


def groups(text: str, overrides: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The lock split by the index each entry came from: [{name, url, requirements}] in the order entries appear.

    `overrides` maps an index name (from the lock header) to a mirror URL. Installing each group with `--index-url`
    of its index alone (and `--no-deps`) keeps pip's index routing exactly as the lock recorded it.
    """
    overrides = overrides or {}
    lock = _parse(text)
    names = {url: name for name, url in lock.indexes.items()}
    unknown = sorted(set(overrides) - set(names.values()))
    if unknown:
        known = ", ".join(names.values())
        raise ValueError(f"index override(s) {', '.join(unknown)} name no index of the lock ({known})")
    grouped: dict[str, list[str]] = {}
    for package in lock.packages:
        if not package.index_url:
            name = canonical(package.name)
            raise ValueError(f"lock entry {name} has no '# from INDEX_URL' line: regenerate the lock")
        grouped.setdefault(package.index_url, []).append(package.requirement)
    result = []
    for url, requirements in grouped.items():
        name = names.get(url, url)
        result.append({"name": name, "url": overrides.get(name, url), "requirements": "\n".join(requirements) + "\n"})
    return result
