"""stage_dtype.py: on the CPU float64 keeps its precision and int64 is exact; a device that holds float64 at float32
precision (stood in by a tensor subclass that rounds every float64 result) is reported with a note, never failed; a
probe that raises is recorded as its error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from neuron_smoke import stage_dtype
from neuron_smoke.backends import CPU
from neuron_smoke.context import Context, Options, StageLog


def _ctx() -> Context:
    return Context(options=Options(device="cpu"), backend=CPU)


class HeldAtFloat32(torch.Tensor):
    """float64 in name, float32 in precision: every float64 result is rounded to float32 and back."""

    @classmethod
    def __torch_function__(
        cls, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.dtype == torch.float64:
            out = out.float().double()
        return out


def _device_full(monkeypatch: pytest.MonkeyPatch, make: Callable[[torch.Tensor], torch.Tensor]) -> None:
    real_full = torch.full

    def full(size: Any, value: Any, dtype: torch.dtype | None = None, device: Any = None) -> torch.Tensor:
        return make(real_full(size, value, dtype=dtype, device=device))

    monkeypatch.setattr(torch, "full", full)


def test_the_cpu_keeps_float64_and_int64() -> None:
    log = StageLog()
    stage_dtype.run(_ctx(), log)
    assert log.numbers["float64"]["precision_preserved"] and log.numbers["float64"]["value"] == stage_dtype.F64_PROBE
    assert log.numbers["int64"] == {"device_dtype": "torch.int64", "value": stage_dtype.I64_PROBE, "exact": True}
    assert log.failures == [] and log.notes == []
    assert log.summary == "float64: float64; int64: exact"


def test_float64_held_at_float32_is_reported_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    _device_full(monkeypatch, lambda t: t.as_subclass(HeldAtFloat32) if t.dtype == torch.float64 else t)
    log = StageLog()
    stage_dtype.run(_ctx(), log)
    f64 = log.numbers["float64"]
    assert (f64["device_dtype"], f64["value"], f64["precision_preserved"]) == ("torch.float64", 1.0, False)
    assert log.numbers["int64"]["exact"]
    assert log.failures == [] and len(log.notes) == 1 and "float32" in log.notes[0]
    assert log.summary == f"float64: {f64['behaviour']}; int64: exact"


def test_a_probe_that_raises_is_recorded_as_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(t: torch.Tensor) -> torch.Tensor:
        if t.dtype == torch.int64:
            raise RuntimeError("int64 not supported")
        return t

    _device_full(monkeypatch, refuse)
    log = StageLog()
    stage_dtype.run(_ctx(), log)
    assert log.numbers["int64"] == "error: RuntimeError: int64 not supported"
    assert log.failures == [] and log.summary.endswith("int64: error: RuntimeError: int64 not supported")


def test_float64_returned_as_float32_is_not_reported_as_preserved(monkeypatch: pytest.MonkeyPatch) -> None:
    _device_full(monkeypatch, lambda t: t.float() if t.dtype == torch.float64 else t)
    log = StageLog()
    stage_dtype.run(_ctx(), log)
    f64 = log.numbers["float64"]
    assert (f64["device_dtype"], f64["value"]) == ("torch.float32", 1.0)
    assert f64["precision_preserved"] is False
