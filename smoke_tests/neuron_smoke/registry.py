"""The verify-device stages: one table, in the order they run. Every consumer reads it: the suite's run order, the
CLI's `--stages` choices and help, the report's stages not run, and which stages need the model or the launcher.

A new stage is one module `stage_<name>.py` with `run(ctx, log)` and one row here. Every stage needs torch: when the
Python cannot import it, the environment stage fails saying so and the others are skipped (torchless.py). Torch-free,
so that parsing options and `--help` need no torch.
"""

from __future__ import annotations

import importlib
import keyword
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# What the CLI prepares before any stage runs, and only when a selected stage needs it:
MODEL = "model"  # the --model factory's model and inputs (ctx.shared["model_spec"])
LAUNCHER = "launcher"  # the collectives launcher (launchers.py), started while the process is still device-free
NEEDS = frozenset({MODEL, LAUNCHER})


@dataclass(frozen=True)
class Entry:
    name: str
    title: str
    # "module:function" of this package, called with (ctx, log); imported when the stage starts, not before, so that
    # a broken torch still gets the stages it can run and the others fail naming the import that failed.
    run: str
    # The stages that must have passed first (earlier rows); otherwise this one is skipped, naming the first.
    after: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()  # of NEEDS
    # "module:function" called without arguments before torch is imported, when the stage is selected.
    early: str | None = None


ON_DEVICE = ("environment", "device")  # the stages that prove the Python and the device

TABLE = (
    Entry(
        "environment",
        "versions against the cell's pins, pip check",
        "stage_environment:run",
        early="stage_environment:start_pip_check",  # pip check's process overlaps `import torch`
    ),
    Entry("device", "device files, neuron-ls, torch.accelerator, device count", "stage_device:run"),
    Entry("matmul", "matmul vs float64 CPU reference", "stage_matmul:run", after=ON_DEVICE),
    Entry("model", "forward/backward/optimizer step vs CPU", "stage_model:run", after=ON_DEVICE, needs=(MODEL,)),
    Entry("fallback", "ops that fell back to the CPU", "stage_fallback:run", after=("matmul", "model"), needs=(MODEL,)),
    Entry(
        "compile",
        "torch.compile first call, steady state, vs eager",
        "stage_compile:run",
        after=("model",),
        needs=(MODEL,),
    ),
    Entry("dtype", "float64 and int64 behaviour (reported, never fails)", "stage_dtype:run", after=ON_DEVICE),
    Entry(
        "collectives",
        "all_reduce across ranks over the process group",
        "stage_collectives:run",
        after=ON_DEVICE,
        needs=(LAUNCHER,),
    ),
    Entry("throughput", "steady-state matmul TFLOP/s", "stage_throughput:run", after=("matmul",)),
    Entry("fabric", "cluster: the release's libfabric provider, EFA device count", "stage_fabric:run"),
    Entry("consistency", "cluster: one version and one graph on every node", "stage_consistency:run"),
    Entry("allreduce", "cluster: all_reduce across nodes checked, bus bandwidth", "stage_allreduce:run"),
    Entry("nccom", "cluster: Neuron's nccom-test all_reduce across the nodes, --check", "stage_nccom:run"),
)


def check(table: Iterable[Entry]) -> None:
    """Raise ValueError naming the first row that cannot run as written."""
    seen: list[str] = []
    for entry in table:
        problem = _problem(entry, seen)
        if problem:
            raise ValueError(f"stage {entry.name}: {problem}")
        seen.append(entry.name)


def _problem(entry: Entry, earlier: list[str]) -> str:
    if entry.name in earlier:
        return "a second row of this name"
    for name in entry.after:
        if name not in earlier:
            return f"after {name}, which is not an earlier row (it would not have run)"
    for need in entry.needs:
        if need not in NEEDS:
            return f"needs {need}, which is not one of {', '.join(sorted(NEEDS))}"
    for target in (entry.run, entry.early):
        if target is not None and not _target(target):
            return f"{target!r} is not module:function"
    return ""


def _target(target: str) -> bool:
    module, _, function = target.partition(":")
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in (*module.split("."), function))


check(TABLE)
NAMES = tuple(entry.name for entry in TABLE)


def needing(need: str) -> tuple[str, ...]:
    """The stages that need `need` (one of NEEDS), in the table's order: it is prepared only when one is selected."""
    return tuple(entry.name for entry in TABLE if need in entry.needs)


def with_prerequisites(selected: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The selected stages with every stage they run after (and those stages' own), in the table's order; and the ones
    that were added. A stage whose prerequisite is not run is skipped, so `--stages matmul` alone would run nothing."""
    wanted = set(selected)
    chosen = set(wanted)
    for entry in reversed(TABLE):  # a row's `after` names earlier rows (check): one pass from the end closes the set
        if entry.name in chosen:
            chosen.update(entry.after)
    stages = tuple(entry.name for entry in TABLE if entry.name in chosen)
    return stages, tuple(name for name in stages if name not in wanted)


def resolve(target: str) -> Callable[..., Any]:
    """The function a row names (`module:function`, a module of this package), its module imported now."""
    module, _, function = target.partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(f"{__package__}.{module}"), function)
    return found


def start_early(stages: Iterable[str]) -> None:
    """Call the early function of each selected stage that has one, in the table's order (before `import torch`)."""
    selected = set(stages)
    for entry in TABLE:
        if entry.early and entry.name in selected:
            resolve(entry.early)()
