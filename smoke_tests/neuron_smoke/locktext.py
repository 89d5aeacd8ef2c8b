"""Reading a neuron-torch hash lock (or any pip-tools lock) without the toolkit: standard library only.

The one reader for the places that run without neuron_torch installed: verify-device's cell pins (cells.py), the
testinfra suite (smoke_tests/infra/conftest.py loads this file by path) and the Ansible filter plugin
(ansible/filter_plugins/neuron_lock.py, likewise). The toolkit's own reader is neuron_torch.lockfile.

A lock entry is `name==version \\` followed by `--hash=...` lines and comments, one of which is `# from INDEX_URL`:
the index the entry was locked from.
"""

from __future__ import annotations

import re
from typing import Any

_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s\\;]+)")
_FROM = re.compile(r"^\s*#\s*from\s+(?P<url>\S+)")


def canonical(name: str) -> str:
    """The PEP 503 normalised name: runs of - _ . become one -, lowercase."""
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(text: str) -> list[dict[str, Any]]:
    """Each entry: {name (canonical), version, lines (the requirement and its --hash lines), index_url (if noted)}."""
    found: list[dict[str, Any]] = []
    for line in text.splitlines():
        match = _ENTRY.match(line)
        if match:
            found.append({"name": canonical(match["name"]), "version": match["version"], "lines": [line]})
            continue
        if not found or not line.startswith((" ", "\t")):
            continue
        source = _FROM.match(line)
        if source:
            found[-1]["index_url"] = source["url"]
        elif line.strip().startswith("--hash"):
            found[-1]["lines"].append(line)
    return found


def versions(text: str) -> dict[str, str]:
    """{canonical name: version} of every locked package."""
    return {entry["name"]: entry["version"] for entry in entries(text)}
