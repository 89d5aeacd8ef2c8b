"""Builds, loads and configures the simulated `neuron` PrivateUse1 device (tests only).

The C++ extension is compiled once per (source, torch, Python) content hash into `build/simdevice/<hash>/`, so
later test runs and the subprocesses they start load the cached library instead of rebuilding it.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import torch

SOURCE = Path(__file__).resolve().parents[1] / "csrc" / "neuron_sim.cpp"
REPO_ROOT = Path(__file__).resolve().parents[3]
MATMUL_FAULTS = ("wrong_matmul", "hang")
# What NEURON_SIM_FAULT=fallback makes fall back: ops the smoke suite's matmul and MLP certainly use.
DEFAULT_FALLBACK_OPS = ("aten::addmm", "aten::gelu")

_loaded = False


def build_dir() -> Path:
    base = Path(os.environ.get("NEURON_SIM_BUILD_DIR", REPO_ROOT / "build" / "simdevice"))
    key = hashlib.sha256()
    key.update(SOURCE.read_bytes())
    key.update(f"{torch.__version__}|{sys.version_info[:2]}".encode())
    return base / key.hexdigest()[:16]


def library_path() -> Path:
    return build_dir() / "neuron_sim.so"


def build() -> Path:
    """Compile the extension unless the cached build for this source and torch is present."""
    target = library_path()
    if target.exists():
        return target
    from torch.utils.cpp_extension import load

    target.parent.mkdir(parents=True, exist_ok=True)
    load(
        name="neuron_sim",
        sources=[str(SOURCE)],
        build_directory=str(target.parent),
        is_python_module=False,
        extra_cflags=["-O1"],
        verbose=False,
    )
    return target


def load() -> None:
    """Load the device library once, name the backend `neuron` and apply the fault settings from the env."""
    global _loaded
    if _loaded:
        return
    torch.ops.load_library(str(build()))
    torch.utils.rename_privateuse1_backend("neuron")
    torch.utils.generate_methods_for_privateuse1_backend()
    _loaded = True
    configure_from_env()


def configure_from_env() -> None:
    faults = {f.strip() for f in os.environ.get("NEURON_SIM_FAULT", "").split(",") if f.strip()}
    unknown = faults - {"wrong_matmul", "hang", "fallback", "no_device"}
    if unknown:
        raise ValueError(f"unknown NEURON_SIM_FAULT value(s): {sorted(unknown)}")
    import neuron_sim_rules  # beside this file; imported here so that the builder alone loads without it

    plan = neuron_sim_rules.plan_cores()
    devices = 0 if "no_device" in faults else plan.device_count
    torch.ops.neuron_sim.configure(devices, "wrong_matmul" in faults, "hang" in faults)
    torch.ops.neuron_sim.configure_runtime(plan.enforce, plan.nodes, plan.core_locks, plan.core_labels, plan.init_error)
    configure_compile()
    configure_speed()
    fallback = os.environ.get("NEURON_SIM_FALLBACK_OPS")
    if fallback is not None:
        names = [n.strip() for n in fallback.split(",") if n.strip()]
    else:
        names = list(neuron_sim_rules.DEFAULT_EAGER_FALLBACK_OPS) if neuron_sim_rules.is_on("eager_fallback") else []
        names += list(DEFAULT_FALLBACK_OPS) if "fallback" in faults else []
    torch.ops.neuron_sim.set_fallback_set(names)
    import neuron_sim_faults  # Python-level injectors (NEURON_SIM_INJECT), in the module beside this one

    neuron_sim_faults.install_from_env()


def configure_compile() -> None:
    """First-use compile latency with the persistent NEFF cache, the fallback warning and float64 as float32."""
    import neuron_sim_rules as rules

    cache = rules.is_on("compile_cache")
    torch.ops.neuron_sim.configure_compile(
        cache,
        rules.neff_cache_dir() if cache else "",
        rules.ms_env("NEURON_SIM_COMPILE_MS", rules.EAGER_COMPILE_MS_DEFAULT),
        rules.ms_env("NEURON_SIM_CACHE_LOAD_MS", rules.CACHE_LOAD_MS_DEFAULT),
        rules.is_on("eager_fallback"),
        rules.is_on("float64"),
    )


# The simulated device reaches this share of its documented matmul peak (a real one reaches a share of it too).
EFFICIENCY = 0.5
# NEURON_SIM_INJECT=slow_device: square bfloat16 matmuls up to SLOW_MAX_DIM (the throughput stage's size in the
# tests) SLOW_FACTOR times slower; the matmul stage's large cases would take minutes at that speed.
SLOW_FACTOR = 20.0
SLOW_MAX_DIM = 512


def configure_speed() -> None:
    """The device's matmul speed from the release verify-device reads ($NEURON_SMOKE_INSTANCE_FACTS, the test release's
    rendering): EFFICIENCY of a logical device's documented peak, the lowest documented instance type's (the twin names
    no instance type; verify-device takes the same one). Unset: host speed."""
    import json

    import neuron_sim_faults
    import neuron_sim_rules

    named = os.environ.get("NEURON_SMOKE_INSTANCE_FACTS", "").strip()
    if not named:
        return
    table = json.loads(Path(named).read_text(encoding="utf-8")).get("core_peak_tflops") or {}
    share = EFFICIENCY * neuron_sim_rules.lnc()
    slow = "slow_device" in neuron_sim_faults.selected()

    def speed(dtype: str) -> float:
        peaks = [float(p[dtype]) for p in table.values() if dtype in p]
        return min(peaks) * share if peaks else 0.0

    factor, max_dim = (SLOW_FACTOR, SLOW_MAX_DIM) if slow else (1.0, 0)
    torch.ops.neuron_sim.configure_speed(speed("bfloat16"), speed("float32"), factor, max_dim)
