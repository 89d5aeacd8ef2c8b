"""One small table entry per backend: everything the stages need to know that differs between devices."""

from __future__ import annotations

import glob
import importlib
import os
import shutil
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Backend:
    name: str  # also torch's device type (torch.device(name), torch.autocast(device_type=name))
    compile_backend: str
    process_group: str
    # Module whose import registers the device; it also provides op tracking when `tracks_fallback` is set.
    module: str | None = None
    tracks_fallback: bool = False
    dev_glob: str | None = None
    dev_glob_env: str | None = None
    throughput_dtype: str = "bfloat16"  # a torch dtype's name: read when the stage runs, not at import
    throughput_size: int = 4096
    # Logical devices per instance type, for the device-count check.
    devices_per_instance: dict[str, int] = field(default_factory=dict)
    # Dense peak TFLOP/s per dtype, keyed by a substring of the device name (longest match wins).
    peak_tflops: dict[str, dict[str, float]] = field(default_factory=dict)
    missing_help: str = ""

    @property
    def device_type(self) -> str:
        return self.name

    def device_nodes(self) -> list[str] | None:
        """Device files found, or None when this backend has none to look for."""
        pattern = os.environ.get(self.dev_glob_env, self.dev_glob) if self.dev_glob_env else self.dev_glob
        return None if pattern is None else sorted(glob.glob(pattern))

    def import_module(self) -> object | None:
        return importlib.import_module(self.module) if self.module else None

    def device_count(self) -> int:
        return 1 if self.device_type == "cpu" else torch.accelerator.device_count()

    def synchronize(self) -> None:
        if self.device_type != "cpu":
            torch.accelerator.synchronize()

    def peak_for(self, device_name: str, dtype: torch.dtype) -> float | None:
        key = str(dtype).removeprefix("torch.")
        for name in sorted(self.peak_tflops, key=len, reverse=True):
            if name.lower() in device_name.lower():
                return self.peak_tflops[name].get(key)
        return None


def _neuron_instance_devices() -> dict[str, int]:
    """Logical devices per instance type at the default LNC, rendered from constraints/matrix.toml."""
    from neuron_smoke import release_facts

    return release_facts.logical_devices()


# The container run lines of images/README.md ("Running it"): every device node of the host, or a contiguous subset,
# plus the nodes' group for the image's non-root user (0660 root:neuron under AWS's recommended udev rule).
NEURON_MISSING_HELP = (
    "Check on the host with `neuron-ls` (package aws-neuronx-tools); it must list at least one device. "
    "The Neuron driver (aws-neuronx-dkms) must be installed and loaded on the host (`lsmod | grep neuron`): "
    "a container cannot load it. In a container, pass the devices through, one --device per /dev/neuronN, and "
    "their group: the whole instance with `docker run --rm $(ls /dev/neuron* | sed 's/^/--device=/') "
    '--group-add "$(stat -c %g /dev/neuron0)" IMAGE`, or a contiguous subset (e.g. two Trainium2 devices, '
    '8 NeuronCores) with `docker run --rm --device=/dev/neuron0 --device=/dev/neuron1 --group-add "$(stat -c %g '
    '/dev/neuron0)" IMAGE`. TorchNeuron needs a Trn2 or Trn3 instance, and the native torch-neuronx '
    "(2.13.3.x / 2.14.3.x), not the XLA-based 2.9.x."
)

NEURON = Backend(
    name="neuron",
    compile_backend="neuron",
    process_group="neuron",
    module="torch_neuronx",
    tracks_fallback=True,
    dev_glob="/dev/neuron*",
    dev_glob_env="NEURON_SMOKE_DEV_GLOB",
    # Only documented counts: an instance type without one is reported, not failed (see the matrix's notes).
    devices_per_instance=_neuron_instance_devices(),
    peak_tflops={},  # per logical device, from the release (release_facts.device_peak) and the LNC in effect
    missing_help=NEURON_MISSING_HELP,
)

CUDA = Backend(
    name="cuda",
    compile_backend="inductor",
    process_group="nccl",
    dev_glob="/dev/nvidia[0-9]*",
    devices_per_instance={
        "p4d.24xlarge": 8,
        "p4de.24xlarge": 8,
        "p5.48xlarge": 8,
        "p5e.48xlarge": 8,
        "p5en.48xlarge": 8,
        "g5.xlarge": 1,
        "g6.xlarge": 1,
        "g6e.xlarge": 1,
    },
    # NVIDIA datasheets, dense (no sparsity) tensor-core bf16 and non-tensor fp32; H100 entry is the SXM part.
    peak_tflops={
        "H200": {"bfloat16": 989.0, "float32": 67.0},
        "H100": {"bfloat16": 989.0, "float32": 67.0},
        "H100 PCIe": {"bfloat16": 756.0, "float32": 51.0},
        "A100": {"bfloat16": 312.0, "float32": 19.5},
        "L40S": {"bfloat16": 362.0, "float32": 91.6},
        "A10G": {"bfloat16": 70.0, "float32": 31.2},
        "L4": {"bfloat16": 121.0, "float32": 30.3},
    },
    missing_help="Check with `nvidia-smi`; in a container run with `--gpus all` and the NVIDIA container toolkit.",
)

# Dynamo and AOT Autograd (forward and backward graphs) as on Neuron, without a C++ compiler or Inductor: torch's
# aot_eager with the default partitioner. Plain aot_eager's min-cut partitioner imports Inductor's pattern matcher,
# which doubled the compile (5.4 against 2.6 CPU seconds for the default model's training step, on torch 2.13).
CPU = Backend(
    name="cpu",
    compile_backend="aot_eager_default_partitioner",
    process_group="gloo",
    throughput_dtype="float32",
    throughput_size=1024,
)

BACKENDS: dict[str, Backend] = {b.name: b for b in (NEURON, CUDA, CPU)}


def resolve(requested: str) -> Backend:
    """`auto` picks neuron whenever Neuron device files exist (without torch_neuronx the environment stage then fails
    saying so: testing the CPU of a Trainium host would pass for the wrong reason), then cuda, then cpu."""
    if requested != "auto":
        return BACKENDS[requested]
    if NEURON.device_nodes():
        return NEURON
    if torch.cuda.is_available():
        return CUDA
    return CPU


def have_tool(name: str) -> str | None:
    return shutil.which(name)
