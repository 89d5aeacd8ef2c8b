"""Which NeuronCores this run may use, and how it shares them between this process and the collective ranks.

The Neuron runtime gives NeuronCores to one process, exclusively, when that process initialises it (by default all
cores of the instance); `NEURON_RT_VISIBLE_CORES` / `NEURON_RT_NUM_CORES` restrict a process to some of them
(../shared/NEURON-FACTS.md §13). So verify-device splits the cores it may use before anything touches a device: the
collective ranks get the first `nproc` (rank i: core i, as torch_neuronx's own per-rank default would give them) and
this process takes the next one, setting `NEURON_RT_VISIBLE_CORES` for itself. The ranks' cores are free while the
collectives do not run, so the compile stage's fresh-process probes use them too. With fewer than `nproc + 1` cores this
process keeps them all, and the collectives stage says it cannot run beside it.

The cores this run may use: `NEURON_RT_VISIBLE_CORES` when set, else every logical core of the visible device nodes
(8 physical NeuronCores per Trainium2/Trainium3 device node, `NEURON_LOGICAL_NC_CONFIG` of them per logical core).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

from neuron_smoke.errors import UsageError

PHYSICAL_CORES_PER_DEVICE = 8
LNC_DEFAULT = 2
VISIBLE = "NEURON_RT_VISIBLE_CORES"


@dataclass(frozen=True)
class CorePlan:
    available: tuple[int, ...]  # every core this run may use (all of the visible nodes', or the user's list)
    process: tuple[int, ...]  # this process's cores
    ranks: tuple[int, ...]  # one core per collective rank; empty when too few cores
    user_restricted: bool  # NEURON_RT_VISIBLE_CORES or NEURON_RT_NUM_CORES was set before the run

    def to_dict(self) -> dict[str, object]:
        return {
            "available": len(self.available),
            "process": format_cores(self.process),
            "ranks": format_cores(self.ranks),
            "user_restricted": self.user_restricted,
        }


def lnc() -> int:
    value = os.environ.get("NEURON_LOGICAL_NC_CONFIG", str(LNC_DEFAULT)).strip()
    if value not in ("1", "2"):
        raise UsageError(f"NEURON_LOGICAL_NC_CONFIG={value!r}: the Neuron runtime accepts only 1 or 2")
    return int(value)


def parse_cores(spec: str) -> tuple[int, ...]:
    cores: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match or int(match[2] or match[1]) < int(match[1]):
            raise UsageError(f"{VISIBLE}={spec!r} is not a core list such as 0, 0-3 or 0,2-3")
        cores.extend(range(int(match[1]), int(match[2] or match[1]) + 1))
    return tuple(sorted(set(cores)))


def format_cores(cores: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> '0-2,5': the form NEURON_RT_VISIBLE_CORES takes."""
    runs: list[list[int]] = []
    for core in cores:
        if runs and runs[-1][1] == core - 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def available_cores(node_count: int) -> tuple[tuple[int, ...], bool]:
    """The cores this run may use, and whether the user restricted them."""
    restricted = False
    cores = tuple(range(node_count * PHYSICAL_CORES_PER_DEVICE // lnc()))
    spec = os.environ.get(VISIBLE, "").strip()
    if spec:
        cores, restricted = parse_cores(spec), True
    num = os.environ.get("NEURON_RT_NUM_CORES", "").strip()
    if num:
        if not num.isdigit():
            raise UsageError(f"NEURON_RT_NUM_CORES={num!r} is not a number")
        cores, restricted = cores[: int(num)], True
    return cores, restricted


def plan(node_count: int, nproc: int) -> CorePlan:
    """The ranks take the first `nproc` cores and this process the next; with too few, this process takes them all."""
    available, restricted = available_cores(node_count)
    if len(available) > nproc:
        return CorePlan(available, available[nproc : nproc + 1], available[:nproc], restricted)
    return CorePlan(available, available, (), restricted)


# What prepare() decided for this run: the plan, or why there is none.
_state: dict[str, CorePlan | str | bool | None] = {"plan": None, "error": "", "prepared": False}


def prepare(node_count: int, nproc: int) -> None:
    """Plan the cores and restrict this process to its own; call before anything imports torch_neuronx or touches
    the device. A bad setting is kept for the device stage to report. Only the first call in a process plans: after
    it, NEURON_RT_VISIBLE_CORES holds this process's own cores, not what the run may use."""
    if _state["prepared"]:
        return
    _state["prepared"] = True
    try:
        core_plan = plan(node_count, nproc)
    except UsageError as exc:
        _state.update(plan=None, error=str(exc))
        return
    _state.update(plan=core_plan, error="")
    if core_plan.ranks:
        os.environ[VISIBLE] = format_cores(core_plan.process)
        os.environ.pop("NEURON_RT_NUM_CORES", None)


def prepare_before_torch(device: str, nproc: int) -> None:
    """prepare() for `--device neuron|auto` from the device files alone, before `import torch`: torch imports an
    installed torch_neuronx on its own (device-backend autoload), and whether that reads NEURON_RT_VISIBLE_CORES then or
    at the first device use is not in our sources."""
    nodes = glob.glob(os.environ.get("NEURON_SMOKE_DEV_GLOB", "/dev/neuron*"))
    if device == "neuron" or (device == "auto" and nodes):
        prepare(len(nodes), nproc)


def current() -> CorePlan | None:
    value = _state["plan"]
    return value if isinstance(value, CorePlan) else None


def error() -> str:
    return str(_state["error"] or "")


def rank_env(core_plan: CorePlan, local_rank: int) -> dict[str, str]:
    """The environment a collective rank sets before it imports torch_neuronx."""
    return {VISIBLE: str(core_plan.ranks[local_rank])}
