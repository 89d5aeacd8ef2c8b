"""Reading a neuron-torch hash lock (or any pip-tools lock) without the toolkit: standard library only.

The one reader for the places that run without neuron_torch installed: verify-device's cell pins (cells.py), the
testinfra suite (smoke_tests/infra/conftest.py loads this file by path), the Ansible filter plugin
(ansible/filter_plugins/neuron_lock.py, likewise) and the one lock installer (lockinstall.py, beside it). The
toolkit's own reader is neuron_torch.lockfile.

A lock entry is `name==version \\` followed by `--hash=...` lines and comments, one of which is `# from INDEX_URL`:
the index the entry was locked from.
"""

from __future__ import annotations

import re
from typing import Any

_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s\\;]+)")
_FROM = re.compile(r"^\s*#\s*from\s+(?P<url>\S+)")
_INDEX = re.compile(r"^#\s*index\s+(?P<name>[^:\s]+):\s*(?P<url>\S+)")


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


def indexes(text: str) -> dict[str, str]:
    """{index name: url} from the lock's header (`# index NAME: URL`), in the lock's order."""
    return {m["name"]: m["url"] for m in map(_INDEX.match, text.splitlines()) if m}


def groups(text: str, overrides: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The lock split by the index each entry came from: [{name, url, requirements}] in the order entries appear.

    `overrides` maps an index name (from the lock header) to a mirror URL. Installing each group with `--index-url`
    of its index alone (and `--no-deps`) keeps pip's index routing exactly as the lock recorded it.
    """
    overrides = overrides or {}
    names = {url: name for name, url in indexes(text).items()}
    unknown = sorted(set(overrides) - set(names.values()))
    if unknown:
        known = ", ".join(names.values())
        raise ValueError(f"index override(s) {', '.join(unknown)} name no index of the lock ({known})")
    grouped: dict[str, list[str]] = {}
    for entry in entries(text):
        url = entry.get("index_url")
        if not url:
            raise ValueError(f"lock entry {entry['name']} has no '# from INDEX_URL' line: regenerate the lock")
        lines = entry["lines"]
        lines = [line.rstrip(" \\") + " \\" for line in lines[:-1]] + [lines[-1].rstrip(" \\")]
        grouped.setdefault(url, []).append("\n".join(lines))
    result = []
    for url, requirements in grouped.items():
        name = names.get(url, url)
        result.append({"name": name, "url": overrides.get(name, url), "requirements": "\n".join(requirements) + "\n"})
    return result
