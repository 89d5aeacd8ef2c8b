"""The cell record's schema version, read from cell.schema.json beside this file (rendered from the toolkit's).

Standard library only, no package imports: verify-device imports it, and the testinfra suite's conftest and the
Ansible filter plugin load it by path from the checkout. A record of another version is refused, never guessed at.
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_FILE = Path(__file__).with_name("cell.schema.json")


def schema_version() -> int:
    return int(json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))["properties"]["schema"]["const"])


def record_problem(record: object, source: str) -> str | None:
    """Why `record` (read from `source`) is not a cell record this checkout reads; None when it is."""
    if not isinstance(record, dict) or "id" not in record:
        return f"{source} is not a cell record (expected a JSON object with an 'id')"
    try:
        known = schema_version()
    except (OSError, ValueError, KeyError) as error:
        return f"cannot read the cell record schema {SCHEMA_FILE} ({error!r}): copy the smoke tests from a checkout"
    if record.get("schema") == known:
        return None
    found = f"schema {record['schema']!r}" if "schema" in record else "no 'schema' field (written before schema 1)"
    return (
        f"{source}: the cell record has {found}; these smoke tests read cell record schema {known} only: write it "
        "again with the neuron-torch of this checkout (`neuron-torch cell ID --json`, or rebuild the image or host)"
    )
