"""What verify-device checks after parsing its options and before importing torch: the environment variables it
reads (like flags), every output path (writable, a file where a file is meant), and the evaluation's inputs."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from neuron_cell import outputs
from neuron_cell.boundary import quote
from neuron_smoke import paths
from neuron_smoke.errors import UsageError

if TYPE_CHECKING:
    from neuron_smoke.cluster import ClusterSpec

DEVICES = ("neuron", "cuda", "cpu", "auto")
# The switches read as "0" or "1" (empty: unset).
SWITCHES = {"NEURON_SMOKE_IMDS": "0 turns the IMDS lookup off", "NEURON_SMOKE_CONTAINER": "1 or 0 forces it"}


def device(args: argparse.Namespace) -> str:
    """--device, else $NEURON_SMOKE_DEVICE, else neuron; the variable is checked as the flag is."""
    if args.device:
        return str(args.device)
    value = os.environ.get("NEURON_SMOKE_DEVICE", "").strip()
    if value and value not in DEVICES:
        raise UsageError(f"NEURON_SMOKE_DEVICE={quote(value)}: must be one of {', '.join(DEVICES)} (or unset)")
    return value or "neuron"


def check_environment() -> None:
    for name, meaning in SWITCHES.items():
        value = os.environ.get(name, "").strip()
        if value not in ("", "0", "1"):
            raise UsageError(f"{name}={quote(value)}: must be 0 or 1 ({meaning}), or unset")


def check_cluster(args: argparse.Namespace) -> ClusterSpec | None:
    """The multi-node settings (flags, else Slurm's or torchrun's environment), and this node's report file."""
    from neuron_smoke import cluster, release_facts

    release_facts.check()
    spec = cluster.from_args(args, os.environ)
    limit, total = args.allreduce_max_bytes, _host_memory()
    if limit is not None and limit < 8:
        raise UsageError(f"--allreduce-max-bytes must be at least 8: {limit}")
    if limit is not None and limit > total:  # the allocator's error at the stage's largest size, otherwise
        raise UsageError(
            f"--allreduce-max-bytes {limit}: {_gib(limit)}, more than this host's {_gib(total)} of memory; "
            "give a smaller N, or leave it out for the device's default"
        )
    args.node_report = spec.report_file() if spec else None
    if args.node_report is not None:
        paths.output_folder(args.node_report.parent, "--report-dir")
        if args.report is not None and args.report.resolve() == args.node_report.resolve():
            args.report = None  # the same file: written once
        if args.junit is not None and args.junit.resolve() == args.node_report.resolve():
            raise UsageError(f"--junit {args.junit} is this node's JSON report in --report-dir; name another file")
    return spec


def check_instance_type(args: argparse.Namespace) -> None:
    """--instance-type on neuron: one the release supports (a Trn1 type is refused with the release's reason)."""
    if args.instance_type is None or args.device != "neuron":
        return  # cuda has its own table; on the CPU the device stage notes it is not used
    from neuron_cell.instances import UnsupportedInstance, judge
    from neuron_smoke import release_facts

    try:
        judge(release_facts.instance_table(), args.instance_type)
    except UnsupportedInstance as exc:
        raise UsageError(f"--instance-type: {exc}") from None


def check_throughput_size(args: argparse.Namespace) -> None:
    """--throughput-size N whose two NxN float32 inputs (made on the host, then moved to the device) need more than
    the host's whole memory can never run: a usage error, not the allocator's error at the throughput stage."""
    n = args.throughput_size
    if n is None:
        return
    need = 2 * n * n * 4
    total = _host_memory()
    if need > total:
        raise UsageError(
            f"--throughput-size {n}: the two {n}x{n} float32 inputs need {_gib(need)}, more than this host's "
            f"{_gib(total)} of memory; give a smaller N, or leave --throughput-size out for the device's default"
        )


def _host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _gib(size: int) -> str:
    return f"{size / 2**30:,.1f} GiB"


def check_outputs(args: argparse.Namespace) -> None:
    for option, path in (("--report", args.report), ("--junit", args.junit)):
        if path is not None:
            paths.output_file(path, option)
    if args.report is not None and args.report == args.junit:
        raise UsageError(f"--report and --junit both name {args.report}; give each its own file")
    for option, path in (("--record", args.record), ("--eval-report", args.eval_report)):
        if path is not None:
            paths.output_folder(path, option)
    record = args.record
    if record is not None and outputs.is_current_folder(record):
        # the baseline is written beside it and renamed into place: this folder would be replaced under the shell
        raise UsageError(f"--record {record} is the current folder; name a folder for the baseline, e.g. --record base")
    if record is not None and record.is_dir() and any(record.iterdir()) and not (record / "index.json").is_file():
        raise UsageError(f"--record {record}: exists and is not a baseline directory; choose a new directory")


def check_evaluation(args: argparse.Namespace) -> None:
    """The evaluation's own rules, before torch: one of --record/--baseline, a model, a baseline that is whole."""
    from neuron_smoke.evaluate import steps
    from neuron_smoke.evaluate.options import evaluation_requested
    from neuron_smoke.evaluate.shapes import parse_shapes

    if not evaluation_requested(args):  # the stages would ignore the evaluation's own options
        own = {
            "--eval-report DIR": args.eval_report,
            "--precision": args.precision,
            "--fail-on": args.fail_on,
            "--full-tensor-limit": args.full_tensor_limit,
            "--sweep-steps": args.sweep_steps,
        }
        given = [option for option, value in own.items() if value is not None]
        if given:
            stages = "; the stages take --strict-fp32" if given[0] == "--precision" else ""
            raise UsageError(f"{given[0]} goes with --record, --baseline or --shapes (the model evaluation){stages}")
        return
    if args.sweep_steps is not None and not args.shapes:
        raise UsageError("--sweep-steps goes with --shapes (the timed steps of each swept shape)")
    if args.record and args.baseline:
        raise UsageError("--record and --baseline: record a baseline first, then compare in a second run")
    if args.model is None:
        raise UsageError("--record/--baseline/--shapes/--steps need --model PACKAGE.MODULE:FACTORY")
    if args.shapes:
        parse_shapes(args.shapes)
    if args.baseline:
        paths.check_baseline(args.baseline)
        index = paths.read_json(args.baseline / "index.json", "baseline index", "record the baseline again")
        steps.resolve(args.steps, index, args.baseline)
