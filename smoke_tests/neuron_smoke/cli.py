"""`python -m neuron_smoke`: run the stages, print a summary, write --report/--junit, exit 0/1/2/3."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from neuron_cell.boundary import OneLineParser, clip, guard
from neuron_smoke import EXIT_USAGE, output, registry, validate
from neuron_smoke.argtypes import non_negative, positive, seconds
from neuron_smoke.context import Options
from neuron_smoke.errors import UsageError
from neuron_smoke.launchers import LAUNCHERS, Launcher
from neuron_smoke.model_contract import CONTRACT, SHAPES
from neuron_smoke.results import Report, StageResult, interrupted

if TYPE_CHECKING:
    from neuron_smoke.models import ModelSpec

EPILOG = (
    """exit codes: 0 all checks passed (skips allowed), 1 a check failed (or timed out),
2 usage error, 3 the requested device is not present, 130 interrupted (the report says so).
env: NEURON_SMOKE_DEVICE (default --device), NEURON_TORCH_CELL_FILE (pins), NEURON_SMOKE_IMDS=0 (no IMDS lookup),
NEURON_SMOKE_DEV_GLOB (where to look for Neuron device files, default /dev/neuron*).
--model contract: """
    + CONTRACT
    + """; a factory that breaks it
is a usage error (exit 2). Both sides of the comparison run with dropout disabled and the same seed.
"""
    + SHAPES
    + "."
)


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="verify-device",
        description="Prove a TorchNeuron (or CUDA/CPU) environment works, stage by stage.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--device", choices=validate.DEVICES, help="default: $NEURON_SMOKE_DEVICE, else neuron")
    p.add_argument("--cell", help="cell ID, resolved with `neuron-torch cell ID --json`")
    p.add_argument("--cell-file", help="cell JSON file (pins); see the README for the order of sources")
    p.add_argument("--instance-type", help="instance type for the expected device count (default: from IMDS)")
    p.add_argument("--expected-devices", type=positive(int), help="expected device count (overrides the table)")
    p.add_argument("--allow-fallback", type=_csv, default=[], metavar="OP1,OP2", help="ops allowed to run on the CPU")
    p.add_argument(
        "--model",
        metavar="PACKAGE.MODULE:FACTORY",
        help=f"your model for the {'/'.join(registry.needing(registry.MODEL))} stages",
    )
    p.add_argument("--report", type=Path, metavar="FILE", help="write the JSON report here")
    p.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML here")
    p.add_argument("--timeout", type=seconds, default=300.0, metavar="SECONDS", help="per stage (300)")
    p.add_argument(
        "--stages",
        type=_csv,
        default=list(registry.NAMES),
        metavar="A,B",
        help=f"run these stages and those they run after; all, in the order they run: {', '.join(registry.NAMES)}",
    )
    _add_tuning(p)
    from neuron_smoke import cluster
    from neuron_smoke.evaluate.options import add_arguments

    cluster.add_arguments(p)
    add_arguments(p)
    return p


def _add_tuning(p: argparse.ArgumentParser) -> None:
    """The options that tune the stages: timing, bounds, floors, the collectives' ranks."""
    p.add_argument("--iterations", type=positive(int), default=10, help="timed calls for steady state (10)")
    p.add_argument("--warmup", type=non_negative(int), default=3, help="untimed calls before timing (3)")
    p.add_argument("--throughput-size", type=positive(int), help="N for the NxNxN throughput matmul")
    p.add_argument("--peak-tflops", type=positive(float), help="device peak TFLOP/s for the throughput dtype")
    p.add_argument("--compile-backend", help="override the backend table's torch.compile backend")
    p.add_argument("--matmul-tolerance-scale", type=positive(float), default=1.0, help="multiplies the bound (1)")
    p.add_argument(
        "--model-rtol",
        type=positive(float),
        help="model/compile normwise rtol (default: from the dtype computed and the reduction size)",
    )
    p.add_argument(
        "--strict-fp32",
        action="store_true",
        help="fail float32 matmuls computed at bfloat16 precision (neuronx-cc's auto-cast default otherwise passes)",
    )
    p.add_argument(
        "--throughput-floor",
        type=float,
        default=10.0,
        metavar="PERCENT",
        help="on neuron, fail throughput under this percent of the documented peak (10; 0 turns it off)",
    )
    p.add_argument("--nproc", type=int, default=2, help="ranks for the collectives stage (2)")
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="fork",
        help="how the collectives stage starts its ranks: fork (default, fast) or torchrun (the full launcher)",
    )


def parse_options(argv: Sequence[str] | None) -> tuple[Options, argparse.Namespace]:
    args = build_parser().parse_args(argv)
    if not args.stages:  # `--stages "$UNSET"` would run nothing and pass
        raise UsageError(f"--stages: no stage named; name some of {', '.join(registry.NAMES)}, or leave --stages out "
                         "to run them all")  # fmt: skip
    unknown = sorted(set(args.stages) - set(registry.NAMES))
    if unknown:
        raise UsageError(f"--stages: unknown stage(s) {', '.join(unknown)}; known: {', '.join(registry.NAMES)}")
    stages, added = registry.with_prerequisites(args.stages)
    args.stages_added = list(added)
    if args.nproc < 2:
        raise UsageError("--nproc must be at least 2")
    if not 0 <= args.throughput_floor < 100:
        raise UsageError(f"--throughput-floor must be a percentage in [0, 100): {args.throughput_floor:g}")
    args.device = validate.device(args)
    validate.check_environment()
    spec = validate.check_cluster(args)
    validate.check_instance_type(args)
    validate.check_throughput_size(args)
    validate.check_outputs(args)
    validate.check_evaluation(args)
    from neuron_smoke.cells import load_cell

    cell, source = load_cell(args.cell_file, args.cell)
    options = Options(
        device=args.device,
        cell=cell,
        cell_source=source,
        instance_type=args.instance_type,
        expected_devices=args.expected_devices,
        allow_fallback=frozenset(args.allow_fallback),
        model=args.model,
        timeout_s=args.timeout,
        stages=stages,
        iterations=args.iterations,
        warmup=args.warmup,
        throughput_size=args.throughput_size,
        peak_tflops=args.peak_tflops,
        compile_backend=args.compile_backend,
        matmul_tolerance_scale=args.matmul_tolerance_scale,
        model_rtol=args.model_rtol,
        strict_fp32=args.strict_fp32,
        throughput_floor=args.throughput_floor,
        nproc=args.nproc,
        launcher=args.launcher,
        cluster=spec,
        allreduce_max_bytes=args.allreduce_max_bytes,
    )
    return options, args


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point: the run inside the error boundary (one line on stderr for whatever goes wrong)."""
    return guard("verify-device", lambda: run(argv), "a --report written so far marks the run as interrupted")


def run(argv: Sequence[str] | None) -> int:
    try:
        options, args = parse_options(argv)
    except UsageError as exc:
        print(f"verify-device: error: {clip(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    from neuron_smoke import cores
    from neuron_smoke.evaluate.options import evaluation_requested

    if args.stages_added and not evaluation_requested(args):
        print(f"verify-device: --stages: also running {', '.join(args.stages_added)}, which the stages named run "
              "after", flush=True)  # fmt: skip
    # NeuronCores belong to one process: take this process's own before torch (and so torch_neuronx) is imported.
    cores.prepare_before_torch(options.device, options.nproc)
    if not evaluation_requested(args):
        registry.start_early(options.stages)  # beside `import torch` (the environment stage's pip check)
    try:
        import torch  # noqa: F401  (everything below needs it)
    except ImportError as exc:
        return _report_without_torch(options, args, exc)
    from neuron_smoke.evaluate.options import run_evaluation
    from neuron_smoke.suite import collectives_launcher

    if evaluation_requested(args):  # --record/--baseline/--shapes: the model evaluation instead of the stages
        return run_evaluation(options, args)
    with collectives_launcher(options) as launcher:
        return _run(options, args, launcher)


def _load_model(name: str | None) -> ModelSpec | None:
    """The model the model stages run, or None when this torch cannot even load the harness's model code (a torch
    without torch.nn): those stages then fail naming the import, and the others still run and report."""
    try:
        from neuron_smoke import models
    except ImportError:
        return None
    return models.load(name)


def _report_without_torch(options: Options, args: argparse.Namespace, error: ImportError) -> int:
    from neuron_smoke import torchless

    report = torchless.report_for(options, error)
    output.print_header(options.device, options.device, "not importable")
    for stage in report.stages:
        output.print_stage(stage)
    output.print_footer(report)
    _write(report, args)
    return report.exit_code


def _write(report: Report, args: argparse.Namespace) -> None:
    if args.report:
        output.write_json(report, args.report)
    if args.node_report:  # multi-node mode: --report-dir DIR/node-<rank>.json
        output.write_json(report, args.node_report)
    if args.junit:
        output.write_junit(report, args.junit)


def _run(options: Options, args: argparse.Namespace, launcher: Launcher | None) -> int:
    import torch

    from neuron_smoke.backends import resolve
    from neuron_smoke.suite import run_suite

    spec = None
    if set(registry.needing(registry.MODEL)).intersection(options.stages):  # load the model only for its stages
        try:
            spec = _load_model(options.model)
        except UsageError as exc:
            print(f"verify-device: error: {clip(str(exc))}", file=sys.stderr)
            return EXIT_USAGE

    output.print_header(options.device, resolve(options.device).name, torch.__version__)
    progress: list[Report] = []
    finished: list[StageResult] = []

    def on_result(result: StageResult) -> None:
        finished.append(result)
        output.print_stage(result)

    def on_progress(partial: Report) -> None:
        progress[:] = [partial]
        _write(partial, args)

    from neuron_smoke import rendezvous

    try:
        report = run_suite(options, spec, on_result, launcher, on_progress)
    except KeyboardInterrupt:
        if progress:  # the report on disk marks the running stage hung (the watchdog's case): say what happened
            _write(interrupted(progress[0], finished), args)
        raise
    finally:
        rendezvous.close()  # after the stages; node 0 keeps the store up until the members are done
    output.print_footer(report)
    _write(report, args)
    return report.exit_code
