"""What verify-device knows of the release it checks: `neuron_instances.json` beside this file, rendered from
constraints/matrix.toml by `neuron-torch render` (device counts per instance type, the peak of one physical
NeuronCore per instance type, the instance types it supports, the fabric provider and EFA device counts).
`NEURON_SMOKE_INSTANCE_FACTS=FILE` reads another release's rendering instead (the test release's, whose fabric is
libfabric's `tcp` and whose peak is the simulated device's): the provider and the peak are always the release's, never
an option of its own. Torch-free."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from neuron_cell.boundary import quote
from neuron_cell.instances import InstanceTable
from neuron_smoke.errors import UsageError

ENV = "NEURON_SMOKE_INSTANCE_FACTS"
PACKAGED = Path(__file__).with_name("neuron_instances.json")


def path() -> Path:
    named = os.environ.get(ENV, "").strip()
    return Path(named) if named else PACKAGED


def check() -> None:
    """A usage error (before torch) when $NEURON_SMOKE_INSTANCE_FACTS names no readable facts file."""
    if os.environ.get(ENV, "").strip():
        load.cache_clear()
        load()


@cache
def load() -> dict[str, Any]:
    where = path()
    try:
        data = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(
            f"{ENV}={quote(str(where))}: not a readable instance facts file ({error}); name a file `neuron-torch "
            "render` wrote (smoke_tests/neuron_smoke/neuron_instances.json), or unset it"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("logical_devices"), dict):
        raise UsageError(f"{ENV}={quote(str(where))}: not an instance facts file (no logical_devices table)")
    return data


def logical_devices() -> dict[str, int]:
    return {str(k): int(v) for k, v in load()["logical_devices"].items()}


def instance_table() -> InstanceTable:
    """The instance types the release supports and the families it refuses (neuron_cell.instances.judge reads it)."""
    found = load().get("support")
    if not isinstance(found, dict):
        raise UsageError(
            f"{path()}: the release facts name no supported instance types (no support table); render them again "
            "with `neuron-torch render`"
        )
    return InstanceTable(
        release=str(load().get("release") or "the release"),
        known={str(k): str(v) for k, v in (found.get("known") or {}).items()},
        families=[str(f) for f in found.get("families") or []],
        unsupported={str(k): str(v) for k, v in (found.get("unsupported") or {}).items()},
    )


def fabric() -> dict[str, Any]:
    """{"provider", "note", "efa_devices": {type: n}, "efa_undocumented": [...]}; provider "" when not named."""
    found = load().get("fabric")
    table = found if isinstance(found, dict) else {}
    return {
        "provider": str(table.get("provider") or ""),
        "note": str(table.get("note") or ""),
        "efa_devices": {str(k): int(v) for k, v in (table.get("efa_devices") or {}).items()},
        "efa_undocumented": [str(t) for t in table.get("efa_undocumented") or []],
        "source": str(path()),
    }


def default_precision() -> str:
    """The precision the release's compiler computes float32 at by default (the model evaluation's --precision), or
    a usage error when the facts name none."""
    found = load().get("compiler")
    precision = str(found.get("default_precision") or "") if isinstance(found, dict) else ""
    if not precision:
        raise UsageError(f"{path()}: the release facts name no default compiler precision; pass --precision")
    return precision


def core_peaks() -> dict[str, dict[str, float]]:
    """Dense peak TFLOP/s of one physical NeuronCore, per instance type, per dtype name."""
    table = load().get("core_peak_tflops") or {}
    return {str(t): {str(d): float(v) for d, v in peaks.items()} for t, peaks in table.items()}


def device_peak(instance_type: str | None, dtype: str, lnc: int) -> tuple[float | None, str]:
    """The documented peak of one logical device (LNC physical cores) of `instance_type`, and where it is from. An
    instance type the release gives no peak for (or none known) gets the lowest documented one of the release: the
    floor stays a floor on every instance type."""
    peaks = {t: p[dtype] for t, p in core_peaks().items() if dtype in p}
    release = str(load().get("release") or "the release")
    if instance_type in peaks:
        return peaks[instance_type] * lnc, f"{instance_type} per logical device at LNC={lnc} ({release}, dense)"
    if not peaks:
        return None, ""
    lowest = min(peaks, key=lambda t: peaks[t])
    why = f"instance type {instance_type} has none documented" if instance_type else "instance type unknown"
    return peaks[lowest] * lnc, f"{lowest} per logical device at LNC={lnc} ({release}, dense; {why})"
