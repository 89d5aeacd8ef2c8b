"""A baseline directory: `index.json` (what was recorded, where, how) and `tensors.safetensors` (the values).

Tensors up to the size limit are stored whole; larger ones as a summary in the index plus their sketch
(tensors.py) under `sketch:<name>`. A value the capture keeps under several names (one tensor object: a module's
output that is the next one's input) is stored once, under its first name; the others' entries say `same_as` it
(schema /2; /1 baselines, which have none, are read too). Without the safetensors package the values go to
`tensors.pt`, written with torch.save and read back with torch.load(weights_only=True), so loading never runs
pickled code.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import BASELINE_READS, BASELINE_SCHEMA, tensors

st: Any
safetensors: Any
try:
    st = importlib.import_module("safetensors.torch")
    safetensors = importlib.import_module("safetensors")
except ImportError:  # the optional `eval` extra is not installed
    st = safetensors = None


@dataclass
class Baseline:
    path: Path
    index: dict[str, Any]
    values: dict[str, torch.Tensor]  # full tensors and sketches, on the CPU

    def full(self, name: str) -> torch.Tensor | None:
        return self.values.get(name)

    def sketch(self, name: str) -> torch.Tensor | None:
        return self.values.get(f"sketch:{name}")

    @property
    def names(self) -> list[str]:
        return list(self.index["tensors"])


def save(path: Path, index: dict[str, Any], captured: dict[str, torch.Tensor], limit: int) -> None:
    """Write the baseline into a fresh directory next to `path`, then move it in place: nothing half-written."""
    entries: dict[str, Any] = {}
    values: dict[str, torch.Tensor] = {}
    first: dict[int, str] = {}  # a value's id (alive in `captured`) -> the first name it is stored under
    for name, t in captured.items():
        same = first.setdefault(id(t), name)
        if t.numel() <= limit or not tensors.comparable(t):
            entry = {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "stored": "full"}
            if same == name:
                values[name] = t.contiguous()
        else:  # the values are not kept: keep their statistics beside the projection
            entry = {**(tensors.summary(t) if same == name else entries[same]), "stored": "sketch"}
            if same == name:
                values[f"sketch:{name}"] = tensors.sketch(t)
        entries[name] = entry if same == name else entry | {"same_as": same}
    index = {**index, "schema": BASELINE_SCHEMA, "full_tensor_limit": limit, "tensors": entries}
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        if st is not None:
            _save_safetensors(values, tmp / "tensors.safetensors")
            index["format"] = "safetensors"
        else:
            torch.save(values, tmp / "tensors.pt")
            index["format"] = "torch.save"
        # Compact: the indented encoder is pure Python and costs more than the step it records.
        (tmp / "index.json").write_text(json.dumps(index, separators=(",", ":")) + "\n", encoding="utf-8")
        _user_modes(tmp)
        if path.exists():
            shutil.rmtree(path) if _is_baseline(path) else _refuse_overwrite(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _save_safetensors(values: dict[str, torch.Tensor], file: Path) -> None:
    """The file safetensors' torch writer makes, written from each tensor's own memory (safetensors' TensorSpec): its
    torch writer spends some 10 us a tensor finding that memory through numpy (1.2 ms of GPT-2's 118 values), and its
    numpy writer has no bfloat16."""
    metadata = {"schema": BASELINE_SCHEMA}
    if sys.byteorder != "little":  # the file is little-endian: the torch writer swaps the bytes
        st.save_file(values, str(file), metadata=metadata)
        return
    kept = {n: t if t.device.type == "cpu" and t.is_contiguous() else t.cpu().contiguous() for n, t in values.items()}
    specs = {
        name: safetensors.TensorSpec(
            dtype=str(t.dtype).removeprefix("torch."), shape=t.shape, data_ptr=t.data_ptr(), data_len=t.nbytes
        )
        for name, t in kept.items()
    }
    safetensors.serialize_file(specs, str(file), metadata=metadata)  # `kept` holds the memory until here


def _user_modes(folder: Path) -> None:
    """The modes the user's umask gives new files: mkdtemp makes the folder 0700 and safetensors its file 0600, but a
    baseline is made to be handed to a colleague."""
    mask = os.umask(0o22)
    os.umask(mask)
    folder.chmod(0o777 & ~mask)
    for f in folder.iterdir():
        f.chmod(0o666 & ~mask)


def _is_baseline(path: Path) -> bool:
    return path.is_dir() and (path / "index.json").is_file()


def _refuse_overwrite(path: Path) -> None:
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()
        return
    raise UsageError(f"--record {path}: exists and is not a baseline directory; choose a new directory")


def load(path: Path) -> Baseline:
    index_file = path / "index.json"
    if not index_file.is_file():
        raise UsageError(f"--baseline {path}: no index.json there; record one with --record {path}")
    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--baseline {path}: unreadable index.json ({exc}); record the baseline again") from exc
    if index.get("schema") not in BASELINE_READS:
        expected = " or ".join(map(repr, BASELINE_READS))
        raise UsageError(f"--baseline {path}: schema {index.get('schema')!r}, expected {expected}")
    if index.get("format") == "safetensors" and st is None:
        raise UsageError(
            f"--baseline {path}: stored with safetensors, which is not installed here; "
            "pip install safetensors (the neuron-torch `eval` extra)"
        )
    try:
        values = _values(path, index.get("format"))
        for name, entry in index["tensors"].items():
            if "same_as" in entry:
                prefix = "sketch:" if entry["stored"] == "sketch" else ""
                values[prefix + name] = values[prefix + entry["same_as"]]
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UsageError(
            f"--baseline {path}: cannot read its tensors ({type(exc).__name__}: {first}); record it again"
        ) from None
    return Baseline(path=path, index=index, values=values)


def _values(path: Path, stored: object) -> dict[str, torch.Tensor]:
    if stored == "safetensors":
        # Read whole, then parsed: load_file's per-tensor reads from its memory map take 2-3x as long (GPT-2's 2.8 MB:
        # 1.6-2.7 against 0.8 ms); a baseline's size is bounded by its full-tensor limit.
        values: dict[str, torch.Tensor] = st.load((path / "tensors.safetensors").read_bytes())
        return values
    return dict(torch.load(path / "tensors.pt", weights_only=True))
