"""The cell record as the toolkit reads it: neuron_cell.cellrecord's one checked loader (its schema file,
neuron_cell/cell.schema.json, is the definition), every required key wanted, its refusals as NeuronTorchError.

Its `schema` const is the version every record carries (`neuron-torch render`, `cell --json`, the images' and
hosts' /etc/neuron-torch/cell.json); a reader checks it before anything else and refuses a version it does not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuron_cell import cellrecord
from neuron_cell.cellrecord import SCHEMA_FILE, schema_version
from neuron_cell.cellrecord import schema as cell_schema
from neuron_torch.errors import NeuronTorchError

__all__ = ["SCHEMA_FILE", "cell_schema", "check_record", "read_cell_record", "schema_version"]


def check_record(data: object, source: str) -> dict[str, Any]:
    """The record, once its schema version is the one this neuron-torch reads and its required keys are there."""
    try:
        return cellrecord.check(data, source, complete=True)
    except cellrecord.RecordError as error:
        raise NeuronTorchError(str(error)) from error


def read_cell_record(path: Path) -> dict[str, Any]:
    """The record in `path`, through neuron_cell's one loader (size, encoding and JSON checked first)."""
    try:
        return cellrecord.load(path, str(path), complete=True, what="cell record")
    except cellrecord.RecordError as error:
        raise NeuronTorchError(str(error)) from error
