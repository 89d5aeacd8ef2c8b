"""The Neuron runtime's rules for the simulated device, worked out from the environment (tests only).

Each rule is listed with its source in tests/simdevice/README.md. All are on by default; a test that needs one off
names it in NEURON_SIM_RULES_OFF (comma-separated): device_nodes, core_ownership, compile_cache, eager_fallback,
compile_unsupported, float64.

What the real runtime reads at nrt_init, the simulated device reads when torch_neuronx is imported (never later):
NEURON_RT_VISIBLE_CORES, NEURON_RT_NUM_CORES, NEURON_LOGICAL_NC_CONFIG and TORCH_NEURONX_NEFF_CACHE_DIR. The cores
are claimed at the first device use (an allocation, a copy or an op), not at import.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import neuron_sim_env

RULES = ("device_nodes", "core_ownership", "compile_cache", "eager_fallback", "compile_unsupported", "float64")
PHYSICAL_CORES_PER_DEVICE = 8  # Trainium2 and Trainium3: 8 NeuronCores per chip, one /dev/neuronN per chip
LNC_DEFAULT = 2
NEFF_CACHE_DEFAULT = "/tmp/neff_cache"
RUNTIME_DIR_DEFAULT = "/tmp/neuron-sim-runtime"
# Ops the pre-release torch_neuronx registers as CPU fallbacks (cpu_fallback_registrations.py): linear algebra.
DEFAULT_EAGER_FALLBACK_OPS = (
    "aten::linalg_qr", "aten::_linalg_svd", "aten::_linalg_eigh", "aten::linalg_cholesky_ex", "aten::linalg_inv_ex",
    "aten::linalg_lu_factor_ex", "aten::linalg_ldl_factor_ex", "aten::_linalg_slogdet", "aten::_linalg_det",
    "aten::cholesky_inverse", "aten::triangular_solve",
)  # fmt: skip
DEFAULT_COMPILE_UNSUPPORTED_OPS = DEFAULT_EAGER_FALLBACK_OPS
EAGER_COMPILE_MS_DEFAULT = 20.0
GRAPH_COMPILE_MS_DEFAULT = 300.0
CACHE_LOAD_MS_DEFAULT = 1.0


class RuleError(ValueError):
    """A setting the simulated device (like the runtime) refuses."""


@dataclass
class Plan:
    device_count: int
    enforce: bool = False
    nodes: list[str] = field(default_factory=list)
    core_locks: list[str] = field(default_factory=list)
    core_labels: list[str] = field(default_factory=list)
    init_error: str = ""


def rules_off() -> set[str]:
    return neuron_sim_env.names("NEURON_SIM_RULES_OFF", RULES, "rule(s)", RuleError)


def is_on(rule: str) -> bool:
    return rule not in rules_off()


def device_nodes(dev_dir: Path) -> list[Path]:
    """`neuron<N>` device nodes in `dev_dir`, by number (what the driver creates, or what a container was given)."""
    found = [p for p in dev_dir.glob("neuron*") if re.fullmatch(r"neuron\d+", p.name)]
    return sorted(found, key=lambda p: int(p.name.removeprefix("neuron")))


def parse_cores(spec: str, available: int) -> list[int]:
    """NEURON_RT_VISIBLE_CORES: "2", "0-3" or "0,2-3"; every core must exist."""
    cores: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise RuleError(f"NEURON_RT_VISIBLE_CORES={spec!r} is not a core list such as 0, 0-3 or 0,2-3")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise RuleError(f"NEURON_RT_VISIBLE_CORES={spec!r}: range {first}-{last} is reversed")
        cores.extend(range(first, last + 1))
    missing = [c for c in cores if c >= available]
    if missing:
        raise RuleError(
            f"NRT: NEURON_RT_VISIBLE_CORES={spec} names NeuronCore(s) {missing} but only {available} are present"
        )
    return sorted(set(cores))


def lnc() -> int:
    value = os.environ.get("NEURON_LOGICAL_NC_CONFIG", str(LNC_DEFAULT)).strip()
    if value not in ("1", "2"):
        raise RuleError(f"NEURON_LOGICAL_NC_CONFIG={value!r}: only 1 or 2 are accepted")
    return int(value)


def plan_cores() -> Plan:
    """Which logical cores this process sees and which physical cores it would claim."""
    if not is_on("device_nodes"):
        return Plan(device_count=int(os.environ.get("NEURON_SIM_DEVICES", "2")))
    try:
        per_device = PHYSICAL_CORES_PER_DEVICE // lnc()
        nodes = device_nodes(Path(os.environ.get("NEURON_SIM_DEV_DIR", "/dev")))
        logical = [(node, i) for node in nodes for i in range(per_device)]
        visible = list(range(len(logical)))
        spec = os.environ.get("NEURON_RT_VISIBLE_CORES", "").strip()
        if spec:
            visible = parse_cores(spec, len(logical))
        num = os.environ.get("NEURON_RT_NUM_CORES", "").strip()
        if num:
            if not num.isdigit() or int(num) > len(visible):
                raise RuleError(f"NRT: NEURON_RT_NUM_CORES={num}: only {len(visible)} NeuronCore(s) available")
            visible = visible[: int(num)]
    except RuleError as exc:
        # NRT fails at nrt_init, so the error waits for the first device use; no device is visible meanwhile.
        return Plan(device_count=0, enforce=True, init_error=str(exc))
    plan = Plan(device_count=len(visible), enforce=is_on("core_ownership"))
    runtime_dir = Path(os.environ.get("NEURON_SIM_RUNTIME_DIR", RUNTIME_DIR_DEFAULT))
    width = PHYSICAL_CORES_PER_DEVICE // per_device
    for index in visible:
        node, core = logical[index]
        if str(node) not in plan.nodes:
            plan.nodes.append(str(node))
        plan.core_labels.append(f"nc{index}")
        # Locks are per physical core, so processes at LNC=1 and LNC=2 collide as they would on the chip.
        stem = str(node.resolve()).strip("/").replace("/", "_")
        plan.core_locks += [str(runtime_dir / f"{stem}-pc{core * width + k}.lock") for k in range(width)]
    if plan.enforce and plan.core_locks:
        runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o1777)
    return plan


def ms_env(name: str, default: float) -> int:
    """A latency in milliseconds from the environment, as microseconds."""
    raw = os.environ.get(name, str(default))
    try:
        value = float(raw)
    except ValueError:
        raise RuleError(f"{name}={raw!r} is not a number of milliseconds") from None
    if value < 0:
        raise RuleError(f"{name}={raw!r} must be >= 0")
    return int(value * 1000)


def neff_cache_dir() -> str:
    """The persistent compile cache (TORCH_NEURONX_NEFF_CACHE_DIR); '' when TORCH_NEURONX_DISABLE_NEFF_CACHE=1."""
    if os.environ.get("TORCH_NEURONX_DISABLE_NEFF_CACHE", "0").strip().lower() in ("1", "true"):
        return ""
    path = Path(os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR") or NEFF_CACHE_DEFAULT)
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def neff_path(cache: str, key: str) -> Path:
    """Where the NEFF cache keeps the entry of a 32-hex-digit key: TorchNeuron's layout (pre-release
    PersistentCacheBackend.cpp, GetShardedPath), <cache>/<key[0:2]>/<key[2:4]>/<key>.neff, one namespace for eager
    kernels and torch.compile graphs alike (csrc/neuron_sim.cpp's neff_path stores eager kernels so)."""
    return Path(cache) / key[:2] / key[2:4] / f"{key}.neff"


def op_list(env: str, default: tuple[str, ...]) -> list[str]:
    raw = os.environ.get(env)
    if raw is None:
        return list(default)
    return [n.strip() for n in raw.split(",") if n.strip()]


def compile_unsupported_ops() -> list[str]:
    return (
        op_list("NEURON_SIM_COMPILE_UNSUPPORTED_OPS", DEFAULT_COMPILE_UNSUPPORTED_OPS)
        if is_on("compile_unsupported")
        else []
    )
