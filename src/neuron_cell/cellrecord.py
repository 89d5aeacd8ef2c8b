"""The cell record's one checked loader: cell.schema.json beside this file is its definition, and every Python reader
(the CLI, the image build's arguments, verify-device, the testinfra suite, the Ansible filter plugin) goes through
`check` or `load` here. A record of another schema version is refused, never guessed at.

Standard library only. The Packer template keeps HCL's own check, with the schema number rendered from this file.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from neuron_cell import inputs

SCHEMA_FILE = Path(__file__).with_name("cell.schema.json")
# A record's pins: its key -> the distribution it pins, in the order an image build asserts them.
PINNED = {"torch_neuronx": "torch-neuronx", "torch": "torch", "neuronx_cc": "neuronx-cc", "nki": "nki"}
_MAX_BYTES = 1 << 20  # a record is a few KB: a larger file is not one (and is never read whole)
LOAD_FIX = "pass a cell record (`neuron-torch cell ID --json` writes one)"


class RecordError(ValueError):
    """The record cannot be read, or is not a cell record of the schema this checkout reads."""


@cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return loaded


def schema_version() -> int:
    """The record version this checkout writes and reads."""
    return int(schema()["properties"]["schema"]["const"])


def problem(record: object, source: str, complete: bool = False) -> str | None:
    """Why `record` (read from `source`) is not a cell record this checkout reads; None when it is. `complete` also
    wants every key the schema requires (the toolkit's readers); the targets' readers need the schema and the id."""
    if not isinstance(record, dict) or "id" not in record:
        return f"{source} is not a cell record (expected a JSON object with an 'id')"
    try:
        known = schema_version()
    except (OSError, ValueError, KeyError) as error:
        return f"cannot read the cell record schema {SCHEMA_FILE} ({error!r}): copy neuron_cell whole from a checkout"
    if record.get("schema") != known:
        found = f"schema {record['schema']!r}" if "schema" in record else "no 'schema' field (written before schema 1)"
        return (
            f"{source}: the cell record has {found}; this checkout reads cell record schema {known} only: write it "
            "again with its neuron-torch (`neuron-torch cell ID --json`, `neuron-torch render`, or rebuild the image "
            "or host)"
        )
    missing = [key for key in schema()["required"] if key not in record] if complete else []
    if missing:
        return f"{source}: a cell record of schema {known} without {', '.join(missing)}: write it again"
    return None


def check(record: object, source: str, complete: bool = False) -> dict[str, Any]:
    """The record, once `problem` finds none; RecordError naming the problem otherwise."""
    found = problem(record, source, complete)
    if found:
        raise RecordError(found)
    checked: dict[str, Any] = record  # type: ignore[assignment]  # problem() proved it is a dict
    return checked


def load(path: Path, source: str | None = None, complete: bool = False, what: str = "cell file") -> dict[str, Any]:
    """The checked record in the JSON file `path`, read by neuron_cell.inputs (the one bounded reader); RecordError
    naming the file's problem (as `what`) or the record's (as `source`, by default `what` and the path)."""
    try:
        record = inputs.read_json(path, what, LOAD_FIX, _MAX_BYTES)
    except inputs.InputError as error:
        raise RecordError(str(error)) from None
    return check(record, source or f"{what} {path}", complete)
