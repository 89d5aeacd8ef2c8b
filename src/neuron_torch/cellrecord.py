"""The cell record's definition: `cell.schema.json` (a JSON Schema beside this module) is the one source.

Its `schema` const is the version every record carries (`neuron-torch render`, `cell --json`, the images' and
hosts' /etc/neuron-torch/cell.json); a reader checks it before anything else and refuses a version it does not read.
`neuron-torch render` copies the schema to smoke_tests/neuron_smoke/, where verify-device, the testinfra suite and
the Ansible filter plugin read the same version.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from neuron_torch.errors import NeuronTorchError
from neuron_torch.files import read_json

SCHEMA_FILE = Path(__file__).with_name("cell.schema.json")


@cache
def cell_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return schema


def schema_version() -> int:
    """The record version this neuron-torch writes and reads."""
    return int(cell_schema()["properties"]["schema"]["const"])


def check_record(data: object, source: str) -> dict[str, Any]:
    """The record, once its schema version is the one this neuron-torch reads and its required keys are there."""
    if not isinstance(data, dict):
        raise NeuronTorchError(f"{source}: not a cell record (expected a JSON object)")
    known = schema_version()
    if data.get("schema") != known:
        found = f"schema {data['schema']!r}" if "schema" in data else "no 'schema' field"
        raise NeuronTorchError(
            f"{source}: a cell record with {found}; this neuron-torch reads cell record schema {known} only. "
            "Write the record again with this neuron-torch (`neuron-torch render`, or `neuron-torch cell ID --json`)"
        )
    missing = [key for key in cell_schema()["required"] if key not in data]
    if missing:
        raise NeuronTorchError(f"{source}: cell record schema {known} without {', '.join(missing)}: write it again")
    return data


def read_cell_record(path: Path) -> dict[str, Any]:
    data = read_json(path, "cell record", "pass a cell record (`neuron-torch cell ID --json` writes one)")
    return check_record(data, str(path))
