"""Finding the cell (the expected pins) and comparing installed versions against it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from neuron_cell import cellrecord
from neuron_cell.cellrecord import PINNED
from neuron_cell.locktext import canonical
from neuron_smoke.errors import UsageError

DEFAULT_CELL_FILE = "/etc/neuron-torch/cell.json"
NEURON_DISTRIBUTIONS = frozenset({"torch-neuronx", "neuronx-cc", "nki"})


def load_cell(cell_file: str | None, cell_id: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The cell and where it came from: --cell-file, $NEURON_TORCH_CELL_FILE, --cell, then the installed file."""
    path = cell_file or os.environ.get("NEURON_TORCH_CELL_FILE")
    if path:
        cell = _read(Path(path), "cell file" if cell_file else "cell file ($NEURON_TORCH_CELL_FILE)")
        if cell_id and cell.get("id") != cell_id:
            raise UsageError(f"--cell {cell_id} does not match the id {cell.get('id')!r} in {path}")
        return cell, path
    if cell_id:
        return _from_cli(cell_id), f"neuron-torch cell {cell_id} --json"
    default = Path(os.environ.get("NEURON_SMOKE_DEFAULT_CELL_FILE", DEFAULT_CELL_FILE))
    if default.is_file():
        return _read(default, "cell file"), str(default)
    return None, None


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        return cellrecord.load(path, what=what)
    except cellrecord.RecordError as error:
        raise UsageError(str(error)) from error


def _checked(data: Any, source: str) -> dict[str, Any]:
    try:
        return cellrecord.check(data, source)
    except cellrecord.RecordError as error:
        raise UsageError(str(error)) from error


def _from_cli(cell_id: str) -> dict[str, Any]:
    exe = shutil.which("neuron-torch")
    if exe is None:
        raise UsageError(
            f"--cell {cell_id}: the neuron-torch CLI is not on PATH to resolve it; pass --cell-file FILE "
            "(the output of `neuron-torch cell ID --json`) instead"
        )
    proc = subprocess.run([exe, "cell", cell_id, "--json"], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise UsageError(f"`neuron-torch cell {cell_id} --json` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise UsageError(f"`neuron-torch cell {cell_id} --json` did not print JSON: {exc}") from exc
    return _checked(data, f"`neuron-torch cell {cell_id} --json`")


def expected_pins(cell: dict[str, Any]) -> list[tuple[str, str]]:
    """(distribution, pin) pairs: the cell's named pins, then every entry of `locked` (exact versions from the hash
    lock), so a family pattern such as `2.14.3.0.*` and its locked build are both checked. A pin given twice (torch
    named and locked at the same version, as an image's record has it) is one pair: checked once, reported once."""
    pins = [(dist, str(cell[key])) for key, dist in PINNED.items() if cell.get(key)]
    pins += [(canonical(name), str(version)) for name, version in sorted((cell.get("locked") or {}).items())]
    return list(dict.fromkeys(pins))
