"""Options from the command line and the state the stages share during one run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from neuron_smoke.registry import NAMES
from neuron_smoke.results import StageResult

if TYPE_CHECKING:  # importing this module (and so parsing options) must not need torch
    from neuron_smoke.backends import Backend
    from neuron_smoke.cluster import ClusterSpec
    from neuron_smoke.launchers import Launcher

DEFAULT_EAGER_RTOL = 1e-3


@dataclass
class Options:
    device: str = "neuron"
    cell: dict[str, Any] | None = None
    cell_source: str | None = None
    instance_type: str | None = None
    expected_devices: int | None = None
    allow_fallback: frozenset[str] = frozenset()
    model: str | None = None
    timeout_s: float = 300.0
    stages: tuple[str, ...] = NAMES
    iterations: int = 10
    warmup: int = 3
    throughput_size: int | None = None
    peak_tflops: float | None = None
    compile_backend: str | None = None
    matmul_tolerance_scale: float = 1.0
    model_rtol: float | None = None  # None: from the dtype computed and the reduction size (numerics.model_rtol)
    strict_fp32: bool = False
    throughput_floor: float = 10.0  # percent of the documented peak
    nproc: int = 2
    launcher: str = "fork"
    cluster: ClusterSpec | None = None  # multi-node mode (cluster.py); None: one host, the cluster stages skip
    allreduce_max_bytes: int | None = None  # None: the backend's default (stage_allreduce.MAX_BYTES)


@dataclass
class StageLog:
    """What a stage writes while it runs; the runner turns it into a StageResult."""

    numbers: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summary: str = ""
    # Failures that fail the run but do not stop the stages that need this one (e.g. an unrelated `pip check` problem).
    advisories: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def fail_nonblocking(self, message: str) -> None:
        self.advisories.append(message)

    def note(self, message: str) -> None:
        self.notes.append(message)


@dataclass
class Context:
    options: Options
    backend: Backend
    results: dict[str, StageResult] = field(default_factory=dict)
    # Shared between stages: the matmul cases and the model run, so that `fallback` can repeat them.
    shared: dict[str, Any] = field(default_factory=dict)
    # Starts the collectives stage's ranks; started before any stage runs (see launchers.py).
    launcher: Launcher | None = None

    @property
    def device(self) -> str:
        return self.backend.device_type

    def instance_type(self) -> str | None:
        """--instance-type, else the type the device stage read from IMDS: one lookup a run (None: unknown)."""
        device = self.results.get("device")
        return self.options.instance_type or (device.numbers.get("instance_type") if device else None)

    def compile_backend(self) -> str:
        return self.options.compile_backend or self.backend.compile_backend

    def eager_rtol(self) -> float:
        """The bound for compiled vs eager on the device: --model-rtol, else the model stage's float32 bound."""
        return self.options.model_rtol or float(self.shared.get("model_rtol", DEFAULT_EAGER_RTOL))
