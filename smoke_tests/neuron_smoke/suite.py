"""One full run of the stages (registry.py) producing a Report, and the launcher some of them need."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING

import torch

from neuron_smoke import EXIT_CHECK_FAILED, EXIT_DEVICE_MISSING, EXIT_OK, cores, launchers, registry, rendezvous
from neuron_smoke.backends import NEURON, resolve
from neuron_smoke.context import Context, Options, StageLog
from neuron_smoke.host import host_facts
from neuron_smoke.launchers import Launcher
from neuron_smoke.results import FAIL, SCHEMA, Report, StageResult
from neuron_smoke.runner import Stage, hard_grace, run_all

if TYPE_CHECKING:
    from neuron_smoke.models import ModelSpec


# The stages in the table's order (registry.py), each bound to its code.
def _runner(entry: registry.Entry) -> Callable[[Context, StageLog], None]:
    """The row's run(ctx, log), resolved when the stage starts (see registry.Entry.run)."""

    def run(ctx: Context, log: StageLog) -> None:
        registry.resolve(entry.run)(ctx, log)

    return run


STAGES = [Stage(entry.name, entry.title, _runner(entry), entry.after) for entry in registry.TABLE]


def exit_code(results: list[StageResult]) -> int:
    if any(r.device_missing for r in results):
        return EXIT_DEVICE_MISSING
    return EXIT_CHECK_FAILED if any(r.status == FAIL for r in results) else EXIT_OK


@contextmanager
def collectives_launcher(options: Options) -> Iterator[Launcher | None]:
    """The collectives launcher, when a selected stage needs it (registry.LAUNCHER), closed on exit. Enter it before
    loading the model or touching a device: the fork launcher must be forked while this process is still
    single-threaded and device-free, and on neuron this process restricts itself to its own NeuronCore here, leaving
    the others to the ranks."""
    try:
        wanted = set(registry.needing(registry.LAUNCHER)).intersection(options.stages)
        launcher = launchers.start(options.launcher) if wanted else None
    except ImportError:  # a torch without torch.distributed: the stages that need it fail naming the import
        launcher = None
    if resolve(options.device).name == "neuron":
        # NeuronCores belong to one process: split them between this process and the ranks first (see cores.py).
        cores.prepare(len(NEURON.device_nodes() or []), options.nproc)
    try:
        yield launcher
    finally:
        if launcher is not None:
            launcher.close()


def run_suite(
    options: Options,
    spec: ModelSpec | None,
    on_result: Callable[[StageResult], None],
    launcher: Launcher | None = None,
    on_progress: Callable[[Report], None] | None = None,
) -> Report:
    """One full run. Without a `launcher` one is started here (see `collectives_launcher`) and closed at the end.
    `on_progress` gets the report before each stage (that stage marked hung: what stays on disk if the watchdog ends
    the process) and after each stage."""
    if launcher is None:
        with collectives_launcher(options) as own:
            return _run(options, spec, on_result, own, on_progress)
    return _run(options, spec, on_result, launcher, on_progress)


def provisional(report: Report, done: list[StageResult], running: Stage | None, options: Options) -> Report:
    """The report as it stands: finished stages, the running one marked hung, later ones not run."""
    stages = list(done)
    if running is not None:
        ended = options.timeout_s + hard_grace(options.timeout_s)
        message = (
            f"{running.name}: did not finish; the watchdog ended the process {ended:g}s after the stage started "
            "(a call that never returned held the GIL; every thread's stack is on stderr)"
        )
        stages.append(StageResult(running.name, running.title, status=FAIL, failures=[message], hung=True))
    names = {s.name for s in stages}
    reason = f"not run: stage {running.name} hung" if running else "not run yet"
    stages += [StageResult(s.name, s.title, reason=reason) for s in STAGES if s.name not in names]
    report.stages = stages
    report.exit_code = exit_code(stages)
    return report


def _run(
    options: Options,
    spec: ModelSpec | None,
    on_result: Callable[[StageResult], None],
    launcher: Launcher | None,
    on_progress: Callable[[Report], None] | None = None,
) -> Report:
    backend = resolve(options.device)
    ctx = Context(options=options, backend=backend, launcher=launcher)
    ctx.shared["model_spec"] = spec
    started = time.perf_counter()
    report = Report(
        schema=SCHEMA,
        started=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        host=host_facts(),
        versions={"torch": torch.__version__},
        device={
            "requested": options.device,
            "backend": backend.name,
            "compile_backend": ctx.compile_backend(),
            "process_group": backend.process_group,
            "fallback_tracking": backend.module if backend.tracks_fallback else None,
        },
        options=_options_dict(options),
        cluster=cluster_section(options),
    )
    done: list[StageResult] = []

    def before(stage: Stage) -> None:
        if on_progress is not None:
            on_progress(provisional(report, done, stage, options))

    def after(result: StageResult) -> None:
        done.append(result)
        report.cluster = cluster_section(options)
        on_result(result)
        if on_progress is not None:
            on_progress(provisional(report, done, None, options))

    report.stages = run_all(STAGES, ctx, after, before)
    env = ctx.results["environment"].numbers.get("versions")
    if env:
        report.versions = env
    report.device["count"] = ctx.results["device"].numbers.get("device_count")
    report.device["instance_type"] = ctx.instance_type()
    report.duration_s = round(time.perf_counter() - started, 3)
    report.exit_code = exit_code(report.stages)
    return report


def cluster_section(options: Options) -> dict[str, object] | None:
    """Multi-node mode: this node's place in the run, and once joined, the members, the missing and the faults
    seen on peers (rendezvous.Session.summary)."""
    spec = options.cluster
    if spec is None:
        return None
    joined = rendezvous.current()
    if joined is not None:
        return {**joined.summary(), "sources": spec.sources}
    return {"nnodes": spec.nnodes, "node_rank": spec.node_rank, "master": spec.master, "sources": spec.sources}


def _options_dict(options: Options) -> dict[str, object]:
    data = asdict(options)
    data["cell"] = options.cell.get("id") if options.cell else None
    data["allow_fallback"] = sorted(options.allow_fallback)
    data["stages"] = list(options.stages)
    return data
