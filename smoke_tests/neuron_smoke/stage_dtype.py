"""Stage 7: what float64 (and int64) do on the device. TorchNeuron runs float64 as float32 in this release, so
this stage records and reports; it fails only when the device does not answer (timeout)."""

from __future__ import annotations

import torch

from neuron_smoke.context import Context, StageLog

# 1 + 2^-40 is exact in float64 and rounds to 1.0 in float32; 2^40 + 1 needs more than 32 bits.
F64_PROBE = 1.0 + 2.0**-40
I64_PROBE = 2**40 + 1


def _probe(log: StageLog, key: str, fn: object) -> object:
    try:
        return fn()  # type: ignore[operator]
    except Exception as exc:
        log.numbers[key] = f"error: {type(exc).__name__}: {exc}"
        return None


def run(ctx: Context, log: StageLog) -> None:
    dev = ctx.device
    f64 = _probe(log, "float64", lambda: torch.full((4,), 1.0, dtype=torch.float64, device=dev) + 2.0**-40)
    if isinstance(f64, torch.Tensor):
        back = f64.cpu().double()  # compared in float64: a float32 result must not round the probe to match
        preserved = f64.dtype == torch.float64 and bool((back == F64_PROBE).all())
        log.numbers["float64"] = {
            "device_dtype": str(f64.dtype),
            "value": float(back[0]),
            "precision_preserved": preserved,
            "behaviour": "float64" if preserved else "computed at reduced precision (float32)",
        }
    i64 = _probe(log, "int64", lambda: torch.full((4,), I64_PROBE - 1, dtype=torch.int64, device=dev) + 1)
    if isinstance(i64, torch.Tensor):
        value = int(i64.cpu()[0])
        log.numbers["int64"] = {"device_dtype": str(i64.dtype), "value": value, "exact": value == I64_PROBE}
    f = log.numbers.get("float64")
    i = log.numbers.get("int64")
    f_text = f["behaviour"] if isinstance(f, dict) else str(f)
    i_text = ("exact" if i["exact"] else "truncated") if isinstance(i, dict) else str(i)
    if isinstance(f, dict) and not f["precision_preserved"]:
        log.note("float64 on this device runs as float32: keep float64 work on the CPU")
    log.summary = f"float64: {f_text}; int64: {i_text}"
