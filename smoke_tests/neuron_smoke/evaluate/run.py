"""verify-device --record DIR | --baseline DIR | --shapes LIST: the evaluation of a team's model, end to end."""

from __future__ import annotations

import datetime
import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from neuron_smoke import EXIT_CHECK_FAILED, EXIT_DEVICE_MISSING, EXIT_OK, release_facts
from neuron_smoke.backends import Backend, resolve
from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import (
    SCHEMA,
    baseline,
    capture,
    compare,
    failure,
    identity,
    parity,
    precision,
    readiness,
    sweep,
    verdict,
)
from neuron_smoke.evaluate.shapes import SWEEP_STEPS
from neuron_smoke.evaluate.steps import resolve as resolve_steps
from neuron_smoke.evaluate.tensors import DEFAULT_FULL_LIMIT
from neuron_smoke.host import host_facts
from neuron_smoke.models import ModelSpec
from neuron_smoke.stage_environment import installed_version


@dataclass
class EvalOptions:
    device: str
    record: Path | None = None
    baseline: Path | None = None
    shapes: list[tuple[int, ...]] | None = None
    out_dir: Path | None = None  # Markdown, HTML and JSON reports
    report: Path | None = None  # the JSON report (--report)
    rtol: float | None = None  # --model-rtol; None: the bound of the precision (precision.bound)
    precision: str | None = None  # --precision; None: the release's compiler default (release_facts)
    fail_on: tuple[str, ...] = verdict.DEFAULT_FAIL_ON
    iterations: int = 10
    warmup: int = 3
    full_tensor_limit: int = DEFAULT_FULL_LIMIT
    compile_backend: str | None = None
    steps: int | None = None  # --steps; None: the baseline's (1 without one: the single step only)
    sweep_steps: int = SWEEP_STEPS


def versions(backend: Backend) -> dict[str, str]:
    found = {"python": sys.version.split()[0], "torch": torch.__version__}
    for dist in ("torch-neuronx", "neuronx-cc", "nki", "transformers", "safetensors"):
        found[dist] = installed_version(dist) or "not installed"
    if backend.name == "cuda" and torch.cuda.is_available():
        found["cuda"] = str(torch.version.cuda)
        found["gpu"] = torch.cuda.get_device_name(0)
    return found


def _open_device(backend: Backend) -> Any:
    """The device module (False when the backend has none), or None when the device is not present."""
    module = backend.import_module()
    nodes = backend.device_nodes()
    if (nodes is not None and not nodes) or backend.device_count() < 1:
        return None
    return module if module is not None else False


class Phases:
    """Seconds per phase of the run, for the report and the overhead benchmark."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 4)
        self._last = now


def evaluate(opts: EvalOptions, spec: ModelSpec) -> int:
    phases = Phases()
    opts.precision = opts.precision or release_facts.default_precision()
    base = baseline.load(opts.baseline) if opts.baseline else None
    opts.steps = resolve_steps(opts.steps, base.index if base is not None else {}, opts.baseline)
    current = identity.fingerprint(spec)
    if base is not None:
        identity.check(base.index["model"], current, str(opts.baseline))
    if opts.shapes:
        sweep.check(spec, opts.shapes)
    backend = resolve(opts.device)
    try:
        module = _open_device(backend)
    except ImportError as exc:
        print(f"verify-device: {backend.name}: cannot import {backend.module}: {exc}. {backend.missing_help}",
              file=sys.stderr)  # fmt: skip
        return EXIT_DEVICE_MISSING
    if module is None:
        print(f"verify-device: no {backend.name} device here. {backend.missing_help}", file=sys.stderr)
        return EXIT_DEVICE_MISSING
    data = _header(opts, spec, backend, current, base)
    phases.done("load")
    print(f"neuron-eval: {spec.name} on {backend.name} ({data['mode']}, precision {opts.precision}, rtol "
          f"{data['rtol']:g})", flush=True)  # fmt: skip
    dev = _measure(data, opts, spec, backend, module, phases)
    if dev is not None and opts.steps > 1:
        _parity(data, opts, spec, backend, base)
        phases.done("parity")
    if dev is not None and (base is not None or backend.device_type != "cpu"):
        try:
            _compare(data, spec, dev, base, opts)
        except failure.StepFailed as exc:  # the same-machine CPU step
            data["failure"] = exc.finding | {"phase": f"CPU reference {exc.finding['phase']}"}
        phases.done("compare")
    elif dev is not None and dev.copy.lost:  # nothing compared, but the report and a recording still say so
        data["missing"] = {"changed_in_step": sorted(dev.copy.lost)}
        _print_lost(data["missing"])
    if dev is not None and opts.record and "failure" not in data:
        _save(data, opts, dev)
        phases.done("save")
    data["verdict"] = verdict.judge(data, opts.fail_on)
    data["exit_code"] = EXIT_CHECK_FAILED if data["verdict"]["answer"] == "not ready" else EXIT_OK
    for line in verdict.top_findings(data):
        print(f"  - {line}", flush=True)
    print(data["verdict"]["banner"], flush=True)
    data["phases_s"] = phases.seconds  # the reports' own writing is not in them: it happens after
    _write(data, opts)
    return int(data["exit_code"])


def _save(data: dict[str, Any], opts: EvalOptions, dev: capture.Capture) -> None:
    assert opts.record is not None
    keys = ("model", "device", "host", "versions", "timing", "started", "inventory")
    index = {k: data[k] for k in keys} | {"precision": opts.precision, "order": dev.order}
    if dev.copy.lost:
        index["changed_in_step"] = sorted(dev.copy.lost)
    index |= parity.for_baseline(data.get("parity"))
    try:
        baseline.save(opts.record, index, dev.tensors, opts.full_tensor_limit)
    except UsageError:
        raise
    except Exception as exc:  # nothing half-written (save writes beside and moves in place); the report says why
        data["failure"] = failure.finding(exc, "saving the baseline", None, None)
        print(f"  baseline not written: {data['failure']['error']}", flush=True)
        return
    data["baseline_written"] = str(opts.record)
    print(f"  baseline: {len(dev.tensors)} tensors -> {opts.record}", flush=True)


def _parity(
    data: dict[str, Any], opts: EvalOptions, spec: ModelSpec, backend: Backend, base: baseline.Baseline | None
) -> None:
    """--steps N: the loss curve on the device against the baseline's (and this machine's CPU's)."""
    recorded = base.index.get("parity") if base is not None else None
    try:
        data["parity"] = parity.measure(spec, backend.device_type, int(opts.steps or 1), str(opts.precision),
                                        float(opts.rtol or 0.0), recorded, backend.synchronize)  # fmt: skip
    except failure.StepFailed as exc:
        data["failure"] = exc.finding
        print(f"  loss parity: step failed ({exc.finding['phase']}): {exc.finding['error']}", flush=True)
        return
    print(f"  {parity.summary(data['parity'])}", flush=True)


def _header(
    opts: EvalOptions, spec: ModelSpec, backend: Backend, current: dict[str, Any], base: baseline.Baseline | None
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "mode": "compare" if base is not None else ("record" if opts.record else "scan"),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": current,
        "device": {
            "requested": opts.device,
            "backend": backend.name,
            "compile_backend": opts.compile_backend or backend.compile_backend,
        },
        "host": host_facts(),
        "versions": versions(backend),
        "precision": _precision(opts, spec, base),
        "rtol": opts.rtol,
    }


def _precision(opts: EvalOptions, spec: ModelSpec, base: baseline.Baseline | None) -> dict[str, Any]:
    """The precision compared at, its note, and the bound (set in opts.rtol): --model-rtol, else the precision's, or
    the wider of it and the baseline's when the baseline was recorded at another precision."""
    assert opts.precision is not None
    recorded = str(base.index.get("precision", "fp32")) if base is not None else None
    used = {opts.precision, recorded or opts.precision}
    bound = max(precision.bound(p, spec.model) for p in used)
    given = opts.rtol is not None
    opts.rtol = opts.rtol if given else bound
    return {
        "name": opts.precision,
        "note": precision.NOTES[opts.precision],
        "baseline": recorded,
        "bound_from": "--model-rtol" if given else " and ".join(sorted(used)),
    }


def _locate(error: BaseException, spec: ModelSpec, device_type: str, at: str) -> dict[str, Any]:
    """Where the step failed: the instrumented step says (op, module, line); a failure in the bare first step is
    located by running the instrumented step once more."""
    if isinstance(error, failure.StepFailed):
        return error.finding
    try:
        capture.train_step(spec, device_type, with_inventory=True, at=at)
    except failure.StepFailed as located:
        return located.finding
    except failure.USER_ERRORS:
        pass
    return failure.finding(error, "forward", None, None)


def _step_failed(data: dict[str, Any], found: dict[str, Any], spec: ModelSpec) -> None:
    data["failure"] = found
    data.update(timing=None, inventory=[], fallback_ops=None, random_ops={})
    data["readiness"] = readiness.scan(spec.model, None, None, None) | {"compile_tried": False, "untied": []}
    print(f"  step failed ({found['phase']}): {found['error']}; module {found['module'] or '-'}, op "
          f"{found['op'] or '-'}, at {found['where'] or '-'}", flush=True)  # fmt: skip


def _measure(
    data: dict[str, Any], opts: EvalOptions, spec: ModelSpec, backend: Backend, module: Any, phases: Phases
) -> capture.Capture | None:
    """The instrumented step (inventory, activations, fallback), the bare timed steps, the sweep, readiness."""
    tracker = module if backend.tracks_fallback and hasattr(module, "get_fallback_ops") else None
    sync = backend.synchronize
    steps: list[capture.Capture] = []
    at = str(opts.precision)

    def instrumented(moved: capture.Moved | None) -> None:  # after the cold first call, as the first warm-up step
        phases.done("timed_steps")
        steps.append(capture.train_step(spec, backend.device_type, with_inventory=True, tracker=tracker,
                                        synchronize=sync, at=at, moved=moved))  # fmt: skip
        phases.done("instrumented_step")

    try:
        data["timing"] = capture.time_steps(
            spec, backend.device_type, opts.warmup, opts.iterations, sync, instrumented, at=at
        )
    except failure.USER_ERRORS as exc:  # the user's model raised (or exited): a finding, and the report still written
        _step_failed(data, _locate(exc, spec, backend.device_type, at), spec)
        return None
    dev = steps[0]
    assert dev.inventory is not None
    data["inventory"] = dev.inventory.to_list()
    data["fallback_ops"] = dev.fallback_ops
    data["random_ops"] = dev.random_ops
    _print_timing(data["timing"])
    phases.done("timed_steps")
    compile_error = None
    if opts.shapes:
        compile_backend = data["device"]["compile_backend"]
        data["sweep"], compile_error = sweep.run(
            spec, opts.shapes, backend.device_type, compile_backend, opts.sweep_steps, sync, module or None, at
        )
        print(f"  sweep: {sweep.summary(data['sweep'])}", flush=True)
        phases.done("sweep")
    data["readiness"] = readiness.scan(spec.model, dev.inventory, dev.fallback_ops, compile_error)
    data["readiness"]["compile_tried"] = bool(opts.shapes)
    data["readiness"]["untied"] = dev.untied
    data["readiness"]["findings"] += len(dev.untied)
    return dev


def _compare(
    data: dict[str, Any], spec: ModelSpec, dev: capture.Capture, base: baseline.Baseline | None, opts: EvalOptions
) -> None:
    # On the CPU the device run is already the same-machine CPU run; elsewhere a CPU step separates the device's
    # errors from those of the environment the baseline came from.
    rtol = float(opts.rtol or 0.0)
    cpu = dev if dev.device == "cpu" else capture.train_step(spec, "cpu", at=str(opts.precision))
    rows = compare.per_tensor(dev, cpu, base, rtol)
    data["tensors"] = rows
    data["missing"] = compare.missing(dev, cpu, base)
    data["layers"] = compare.per_layer(rows, dev.order)
    data["origins"] = {ref: compare.origins(rows, dev.order, ref, rtol) for ref in compare.REFS}
    data["grad_origins"] = {ref: compare.grad_origins(rows, dev.order, ref, rtol) for ref in compare.REFS}
    if base is not None:
        data["baseline"] = {
            "path": str(base.path),
            "device": base.index["device"],
            "versions": base.index["versions"],
            "timing": base.index["timing"],
            "started": base.index["started"],
        }
    bad = [r for r in rows if not r["ok"]]
    for ref in compare.REFS:
        layers = ", ".join(o["layer"] for o in data["origins"][ref]) or "none"
        print(f"  error starts (vs {ref}): {layers}", flush=True)
        grads = ", ".join(o["layer"] for o in data["grad_origins"][ref]) or "no layer"
        print(f"  gradient error starts in {grads} (vs {ref})", flush=True)
    print(f"  tensors: {len(rows)} compared, {len(bad)} beyond rtol {rtol:g} ({opts.precision})", flush=True)
    _print_lost(data["missing"])


def _print_lost(missing: dict[str, list[str]]) -> None:
    if missing.get("changed_in_step"):
        print(f"  not kept (written during the step where the capture could not see it): "
              f"{', '.join(missing['changed_in_step'])}", flush=True)  # fmt: skip


def _print_timing(t: dict[str, Any]) -> None:
    print(
        f"  timing: first call {t['first_call_s']:.3f}s, p50 {t['p50_ms']:.3g} ms, p95 {t['p95_ms']:.3g} ms "
        f"over {t['iterations']}",
        flush=True,
    )


def _write(data: dict[str, Any], opts: EvalOptions) -> None:
    report = importlib.import_module("neuron_smoke.evaluate.report")
    out_dir = opts.out_dir or opts.record
    if opts.report:
        report.write_json(data, opts.report)
    if out_dir:
        written = report.write_all(data, out_dir)
        print(f"  report: {', '.join(str(p) for p in written)}", flush=True)
    if not opts.report and not out_dir:
        print("  (no --report FILE or --eval-report DIR: nothing written)", flush=True)
