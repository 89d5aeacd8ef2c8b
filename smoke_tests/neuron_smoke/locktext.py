"""Reading a neuron-torch hash lock (or any pip-tools lock) without the toolkit: standard library only.

The reader for the places that run without neuron_torch installed: verify-device's cell pins (cells.py), the
testinfra suite (smoke_tests/infra/conftest.py loads this file by path), the Ansible filter plugin
(ansible/filter_plugins/neuron_lock.py, likewise) and the one lock installer (lockinstall.py, beside it).

It parses nothing itself: lockgate.py beside it is the one lock parser and the one PEP 503 name normaliser
(`neuron-torch render` writes it, a copy of the toolkit's src/neuron_torch/lockgate.py), and this module gives its
result the shapes these consumers use (each call parses the lock once). Wherever this file is copied, lockgate.py
goes beside it.

A lock entry is `name==version \\` followed by `--hash=...` lines and comments, one of which is `# from INDEX_URL`:
the index the entry was locked from.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


def _lockgate() -> ModuleType:
    """lockgate.py beside this file, however this file was loaded (as neuron_smoke.locktext or by its path)."""
    name = "neuron_torch_lockgate"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).with_name("lockgate.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ImportError(f"{path} is missing: lockgate.py (the lock parser) must be copied beside locktext.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


_GATE = _lockgate()
canonical: Callable[[str], str] = _GATE.canonical_name  # runs of - _ . become one -, lowercase


def _parse(text: str) -> Any:
    """The lock as lockgate.py reads it (its Lock: indexes, packages with name, version, requirement, index_url)."""
    return _GATE.parse_lock(text, Path("lock"))


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
