"""The environment a process needs to run on the simulated neuron device, in one place for the tests
(tests/integration/smoke/conftest.py's sim_env) and the benchmarks (scripts/bench-verify-device.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

SIM_SITE = Path(__file__).resolve().parent / "site"
TEST_MATRIX = SIM_SITE.parents[2] / "constraints" / "test-matrix.toml"


def test_release_facts(folder: Path) -> Path:
    """The test release's instance facts (what `neuron-torch render` writes for a release) in FOLDER: the facts of
    the test bed, whose simulated device's documented peak is its own (constraints/test-matrix.toml)."""
    from neuron_torch.matrix import load_matrix
    from neuron_torch.render import instance_facts

    path = folder / "test-release-facts.json"
    path.write_text(json.dumps(instance_facts(load_matrix(TEST_MATRIX))))
    return path


def sim_environment(env: dict[str, str], folder: Path) -> dict[str, str]:
    """Two simulated neuron device nodes under FOLDER (8 NeuronCores at LNC=2), every runtime rule on
    (tests/simdevice/README.md), a runtime folder and compile cache in FOLDER, the test-only torch_neuronx importable,
    the simulated neuron-ls on PATH and the test release's facts (the device's documented peak: the simulated device
    runs at its share of it, and verify-device's throughput floor is a share of it too)."""
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
        "NEURON_SMOKE_INSTANCE_FACTS": str(test_release_facts(folder)),
        "PATH": f"{SIM_SITE.parent / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    }
