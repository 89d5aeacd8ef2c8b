"""Test-only stand-in for torch_neuronx: registers the simulated `neuron` device, its op tracking, a `neuron`
torch.compile backend and a `neuron` process-group backend, with the public names the smoke suite uses."""

from __future__ import annotations

import types

import neuron_sim
import neuron_sim_faults
import torch

__version__ = "2.13.3.0.0+sim"
NEURON_TORCH_FIXTURE = True

neuron_sim.load()


def get_fallback_ops() -> list[str]:
    return list(torch.ops.neuron_sim.get_fallback_ops())


def get_executed_ops() -> list[str]:
    return list(torch.ops.neuron_sim.get_executed_ops())


def clear_op_tracking() -> None:
    torch.ops.neuron_sim.clear_op_tracking()


def _device_module() -> types.ModuleType:
    module = types.ModuleType("torch.neuron")
    # torch.accelerator.device_count() asks this module, so the count must come from the library itself.
    module.device_count = lambda: int(torch.ops.neuron_sim.device_count())  # type: ignore[attr-defined]
    module.is_available = lambda: module.device_count() > 0  # type: ignore[attr-defined]
    module.current_device = torch.accelerator.current_device_index  # type: ignore[attr-defined]
    module.set_device = torch.accelerator.set_device_index  # type: ignore[attr-defined]
    module.synchronize = lambda device=None: None  # type: ignore[attr-defined]
    module.is_initialized = lambda: bool(torch.ops.neuron_sim.runtime_initialized())  # type: ignore[attr-defined]
    module._is_in_bad_fork = lambda: False  # type: ignore[attr-defined]
    module.manual_seed_all = lambda seed: None  # type: ignore[attr-defined]
    module.get_amp_supported_dtype = lambda: [torch.float16, torch.bfloat16]  # type: ignore[attr-defined]
    return module


torch._register_device_module("neuron", _device_module())

from torch_neuronx import _autocast, _compile, _distributed  # noqa: E402  (they need the device registered first)

if "no_cache_stats" not in neuron_sim_faults.selected():  # the injector: as the real torch_neuronx, without it
    from torch_neuronx._compile import compile_cache_stats  # noqa: F401  (the twin's own: see _compile.py)

_autocast.register()
_compile.register()
_distributed.register()
