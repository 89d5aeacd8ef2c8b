"""Python-level fault injectors for the simulated `neuron` device (tests only).

`NEURON_SIM_INJECT=name[,name...]` selects them; `neuron_sim.configure_from_env()` calls `install_from_env()`.
They override aten kernels for PrivateUse1 with `torch.library` (a Python kernel takes precedence over the C++ boxed
fallback, so the C++ device stays untouched) or patch the tracking and process-group surface. Each imitates a fault a
sceptical platform team would try (issue 13); none makes the device kinder than a real one.

| injector      | what the device then does                                                                    |
|---------------|----------------------------------------------------------------------------------------------|
| bf16_addmm    | bfloat16 `addmm` (every `nn.Linear` with bias on 2-D input) returns 10% too large            |
| large_k       | `mm`/`addmm`/`bmm` with an inner dimension K >= 2048 return 10% too large                     |
| fp32_as_bf16  | float32 `mm`/`addmm`/`bmm` round their inputs to bfloat16 first (neuronx-cc's documented      |
|               | `--auto-cast matmult --auto-cast-type bf16` default), accumulating in float32                 |
| blind_tracking| `get_fallback_ops()` and `get_executed_ops()` return nothing while ops run                    |
| gil_hang      | `mm` never returns and holds the GIL (a C call made without releasing it)                    |
| rank_hang     | rank 1's `all_reduce` never returns (the others wait for it)                                  |
| eager_graphs  | the `neuron` torch.compile backend compiles nothing: each graph runs eagerly on the device,   |
|               | op by op, so the cache holds only eager kernels and the backend's counters stay at zero       |
| no_cache_stats| `torch_neuronx.compile_cache_stats()` (the twin's own counters) is absent, as in the real     |
|               | torch_neuronx: only the NEFF cache's entries can tell a compiled graph                        |
| fp32_biased   | float32 `mm`/`addmm`/`bmm` return 0.5% too large, every time (within the bfloat16-input bound)|
| noisy_matmul  | `mm`/`addmm`/`bmm` results carry 1e-3 relative run-to-run noise (a fresh draw each call)      |
| layer_norm_2pct | `native_layer_norm`'s output is 2% too large                                                |
| softmax_2pct  | `_softmax`'s output is 2% too large                                                           |
| slow_device   | square bfloat16 matmuls up to 512 run 20x slower than documented (neuron_sim.configure_speed) |

Python kernels bypass the device's op tracking: ops they replace are neither executed nor fallback ops.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

import neuron_sim_env
import torch

INJECTORS = (
    "bf16_addmm",
    "large_k",
    "fp32_as_bf16",
    "blind_tracking",
    "gil_hang",
    "rank_hang",
    "eager_graphs",
    "no_cache_stats",
)
# The faults the numerics and throughput stages must see although they are quiet (issue 28); slow_device is read by
# neuron_sim.configure_speed.
QUIET = ("fp32_biased", "noisy_matmul", "layer_norm_2pct", "softmax_2pct", "slow_device")
QUIET_MATMUL = {"fp32_biased", "noisy_matmul"}
BIAS_FACTOR = 1.005
NOISE = 1e-3
OFF_2PCT = 1.02
MATMUL_OPS = ("mm", "addmm", "bmm")
LARGE_K = 2048
WRONG_FACTOR = 1.1

_libraries: list[torch.library.Library] = []  # kept alive: a Library's kernels go away with it


def selected() -> set[str]:
    return neuron_sim_env.names("NEURON_SIM_INJECT", INJECTORS + QUIET, "value(s):", ValueError)


def install_from_env() -> None:
    active = selected()
    kernel_faults = active & {"bf16_addmm", "large_k", "fp32_as_bf16", "gil_hang", *QUIET_MATMUL}
    if kernel_faults:
        lib = torch.library.Library("aten", "IMPL")  # kernels for PrivateUse1 only
        for op in MATMUL_OPS:
            lib.impl(op, _matmul_kernel(op, kernel_faults), "PrivateUse1")
        _libraries.append(lib)
    _install_normalisation_faults(active)
    if "blind_tracking" in active:
        torch.ops.neuron_sim.get_fallback_ops = lambda: []
        torch.ops.neuron_sim.get_executed_ops = lambda: []
    if "rank_hang" in active and os.environ.get("RANK") == "1":
        import torch.distributed as dist

        dist.all_reduce = _hang_forever  # type: ignore[assignment]
    if "eager_graphs" in active:
        _compile_nothing()


def _inner_dim(op: str, args: tuple[Any, ...]) -> int:
    mat1 = args[1] if op == "addmm" else args[0]
    return int(mat1.shape[-1])


def _matmul_kernel(op: str, faults: set[str]) -> Callable[..., torch.Tensor]:
    aten = getattr(torch.ops.aten, op).default

    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        device = args[0].device
        host = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
        if "gil_hang" in faults and op == "mm":
            _hold_gil_forever()
        if "fp32_as_bf16" in faults and host[-1].dtype == torch.float32:
            first = 1 if op == "addmm" else 0
            for i in (first, first + 1):
                host[i] = host[i].to(torch.bfloat16).to(torch.float32)
        out = aten(*host, **kwargs)
        wrong = ("bf16_addmm" in faults and op == "addmm" and out.dtype == torch.bfloat16) or (
            "large_k" in faults and _inner_dim(op, args) >= LARGE_K
        )
        if wrong:
            out = (out.float() * WRONG_FACTOR).to(out.dtype)
        return _quiet_matmul_fault(out, faults).to(device)

    return kernel


def _quiet_matmul_fault(out: torch.Tensor, faults: set[str]) -> torch.Tensor:
    """fp32_biased and noisy_matmul: errors within the bfloat16 bounds, one systematic, one different every call."""
    if "fp32_biased" in faults and out.dtype == torch.float32:
        out = out * BIAS_FACTOR
    if "noisy_matmul" in faults and out.is_floating_point():
        out = (out.float() * (1 + NOISE * torch.randn(out.shape))).to(out.dtype)
    return out


def _install_normalisation_faults(active: set[str]) -> None:
    """layer_norm_2pct and softmax_2pct: the op's output 2% too large, on the device only."""
    if not active & {"layer_norm_2pct", "softmax_2pct"}:
        return
    lib = torch.library.Library("aten", "IMPL")
    if "layer_norm_2pct" in active:
        lib.impl("native_layer_norm", _layer_norm_2pct, "PrivateUse1")
    if "softmax_2pct" in active:
        lib.impl("_softmax", _softmax_2pct, "PrivateUse1")
    _libraries.append(lib)


def _host(args: tuple[Any, ...]) -> list[Any]:
    return [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]


def _layer_norm_2pct(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    device = args[0].device
    out, mean, rstd = torch.ops.aten.native_layer_norm.default(*_host(args), **kwargs)
    return (out * OFF_2PCT).to(device), mean.to(device), rstd.to(device)


def _softmax_2pct(*args: Any, **kwargs: Any) -> torch.Tensor:
    device = args[0].device
    out = torch.ops.aten._softmax.default(*_host(args), **kwargs)
    return (out * OFF_2PCT).to(device)


def _hold_gil_forever() -> None:
    # A ctypes.PyDLL call keeps the GIL: no other Python thread runs again, like a hung extension call.
    libc = ctypes.PyDLL(None)
    while True:
        libc.sleep(3600)


def _hang_forever(*args: object, **kwargs: object) -> None:
    while True:
        time.sleep(3600)


def _compile_nothing() -> None:
    """The backend's graphs run as traced, eagerly: what a backend that lowers nothing (or falls back silently) does.
    torch_neuronx is still importing when this runs; its _compile module needs nothing of it."""
    from torch_neuronx import _compile

    _compile._compile_or_load = lambda graph, inputs: None
