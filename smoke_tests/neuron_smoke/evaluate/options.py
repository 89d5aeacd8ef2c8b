"""verify-device's evaluation options (--record, --baseline, --shapes, ...) and the hand-over from cli.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neuron_smoke import EXIT_USAGE
from neuron_smoke.argtypes import positive
from neuron_smoke.context import Options
from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import PRECISIONS, steps
from neuron_smoke.evaluate.shapes import SWEEP_STEPS


def _fail_on(value: str) -> tuple[str, ...]:
    from neuron_smoke.evaluate.verdict import parse_fail_on

    try:
        return parse_fail_on(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model evaluation (instead of the stages; see smoke_tests/README.md)")
    g.add_argument("--record", type=Path, metavar="DIR", help="record a baseline of --model on --device into DIR")
    g.add_argument("--baseline", type=Path, metavar="DIR", help="compare --model on --device with this baseline")
    g.add_argument("--shapes", metavar="1x128,8x128", help="the compiled training step at each input shape (see below)")
    g.add_argument(
        "--sweep-steps",
        type=positive(int),
        metavar="N",
        help=f"timed steps per --shapes shape for p50/p95 ({SWEEP_STEPS})",
    )
    g.add_argument("--eval-report", type=Path, metavar="DIR", help="report.json/.md/.html here (--record: DIR)")
    g.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="how the device computes float32, which sets the bound and the CPU reference (default: the release's "
        "compiler default, bf16-matmul for neuronx-cc's --auto-cast matmult; see smoke_tests/README.md)",
    )
    g.add_argument(
        "--fail-on",
        type=_fail_on,
        metavar="readiness,fallback,compile,numerics",
        help="the kinds of finding that make the verdict 'not ready' and the exit code 1 (numerics)",
    )
    g.add_argument(
        "--steps",
        type=steps.parse,
        metavar="N",
        help="also train N steps with the model's optimizer (the factory's, else SGD lr 0.1, momentum 0.9) and compare "
        "the loss per step (1: the single step only; with --baseline: the baseline's N)",
    )
    g.add_argument(
        "--full-tensor-limit",
        type=positive(int),
        metavar="N",
        help="tensors above N elements are stored as summaries with a fixed random projection (1048576)",
    )


def evaluation_requested(args: argparse.Namespace) -> bool:
    return bool(args.record or args.baseline or args.shapes or args.steps)


def run_evaluation(options: Options, args: argparse.Namespace) -> int:
    from neuron_smoke import models
    from neuron_smoke.evaluate.run import EvalOptions, evaluate
    from neuron_smoke.evaluate.shapes import parse_shapes
    from neuron_smoke.evaluate.tensors import DEFAULT_FULL_LIMIT
    from neuron_smoke.evaluate.verdict import DEFAULT_FAIL_ON

    try:
        opts = EvalOptions(  # the options were checked before torch was imported (validate.check_evaluation)
            device=options.device,
            record=args.record,
            baseline=args.baseline,
            shapes=parse_shapes(args.shapes) if args.shapes else None,
            out_dir=args.eval_report,
            report=args.report,
            rtol=options.model_rtol,
            precision=args.precision,
            fail_on=args.fail_on or DEFAULT_FAIL_ON,
            iterations=options.iterations,
            warmup=options.warmup,
            full_tensor_limit=args.full_tensor_limit or DEFAULT_FULL_LIMIT,
            steps=args.steps,
            compile_backend=options.compile_backend,
            sweep_steps=args.sweep_steps or SWEEP_STEPS,
        )
        spec = models.load(options.model)
        return evaluate(opts, spec)
    except UsageError as exc:
        print(f"verify-device: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
