"""verify-device's file arguments, checked before torch is imported: every output path can be written (a folder is
not given where a file is expected, nor the reverse), and every input file is what it claims to be. Nothing is left
behind by a check."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from neuron_cell import inputs, outputs
from neuron_cell.boundary import quote
from neuron_smoke.errors import UsageError

MAX_INPUT_BYTES = 32 * 1024 * 1024  # a cell file or a baseline index is a few kilobytes


def output_file(path: Path, option: str) -> None:
    """A file to write (its missing folders are made when it is written): neuron_cell.outputs' check."""
    try:
        outputs.output_file(path, option, "report.json")
    except outputs.OutputError as error:
        raise UsageError(str(error)) from None


def output_folder(path: Path, option: str) -> None:
    """A folder to write into (made when missing): neuron_cell.outputs' check."""
    try:
        outputs.output_folder(path, option)
    except outputs.OutputError as error:
        raise UsageError(str(error)) from None


def read_json(path: Path, what: str, fix: str) -> Any:
    """A small JSON file, through neuron_cell.inputs (the one bounded reader); a usage error naming the problem."""
    try:
        return inputs.read_json(path, what, fix, MAX_INPUT_BYTES)
    except inputs.InputError as error:
        raise UsageError(str(error)) from None


def check_safetensors(path: Path, option: str) -> None:
    """The structure of a safetensors file (an 8-byte header length, a JSON header, the data it indexes), read without
    torch: a truncated or foreign file is named before the model is loaded."""
    fix = "record the baseline again"
    try:
        with path.open("rb") as f:
            head = f.read(8)
            size = path.stat().st_size
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if not 0 < length <= min(size - 8, 100_000_000):
                raise UsageError(f"{option}: {path} is no safetensors file (bad header length); {fix}")
            header = json.loads(f.read(length))
    except OSError as error:
        raise UsageError(f"{option}: cannot read {path} ({error.strerror}); {fix}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UsageError(f"{option}: {path} is no safetensors file (its header is not JSON); {fix}") from None
    if not isinstance(header, dict):
        raise UsageError(f"{option}: {path} is no safetensors file (its header is not an object); {fix}")
    needed = 8 + length + max((_data_end(name, entry, path, option) for name, entry in header.items()), default=0)
    if size < needed:
        raise UsageError(f"{option}: {path} is truncated ({size} of {needed} bytes); {fix}")


def _data_end(name: str, entry: object, path: Path, option: str) -> int:
    """Where a header entry's data ends (0 for the metadata)."""
    if name == "__metadata__":
        return 0
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        raise UsageError(f"{option}: {path}: tensor {quote(name)} has no data offsets; record the baseline again")
    return int(offsets[1])


def check_baseline(path: Path) -> None:
    """--baseline DIR: an index.json of the expected schema and complete tensors, before torch is imported."""
    from neuron_smoke.evaluate import BASELINE_READS

    index_file = path / "index.json"
    if not index_file.is_file():
        raise UsageError(f"--baseline {path}: no index.json there; record one with --record {path}")
    index = read_json(index_file, "baseline index", f"record the baseline again with --record {path}")
    if not isinstance(index, dict) or index.get("schema") not in BASELINE_READS:
        found = quote(index.get("schema")) if isinstance(index, dict) else "not a JSON object"
        raise UsageError(
            f"--baseline {path}: index.json schema {found}, expected {' or '.join(map(repr, BASELINE_READS))}"
        )
    tensors = path / ("tensors.safetensors" if index.get("format") == "safetensors" else "tensors.pt")
    if not tensors.is_file():
        raise UsageError(f"--baseline {path}: {tensors.name} is missing; record the baseline again")
    if tensors.suffix == ".safetensors":
        check_safetensors(tensors, f"--baseline {path}")
