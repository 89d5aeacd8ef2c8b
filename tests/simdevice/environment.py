"""The environment a process needs to run on the simulated neuron device, in one place for the tests
(tests/integration/smoke/conftest.py's sim_env) and the benchmarks (scripts/bench-verify-device.py)."""

from __future__ import annotations

import os
from pathlib import Path

SIM_SITE = Path(__file__).resolve().parent / "site"


def sim_environment(env: dict[str, str], folder: Path) -> dict[str, str]:
    """Two simulated neuron device nodes under FOLDER (8 NeuronCores at LNC=2), every runtime rule on
    (tests/simdevice/README.md), a runtime folder and compile cache in FOLDER, the test-only torch_neuronx importable
    and the simulated neuron-ls on PATH."""
    dev = folder / "dev"
    dev.mkdir(exist_ok=True)
    for i in range(2):
        (dev / f"neuron{i}").touch()
    return {
        **env,
        "PYTHONPATH": str(SIM_SITE),
        "NEURON_SMOKE_DEV_GLOB": str(dev / "neuron*"),
        "NEURON_SIM_DEV_DIR": str(dev),
        "NEURON_SIM_RUNTIME_DIR": str(folder / "neuron-runtime"),
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(folder / "neff-cache"),
        "NEURON_SMOKE_CONTAINER": "0",
        "PATH": f"{SIM_SITE.parent / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    }
