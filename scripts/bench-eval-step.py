#!/usr/bin/env python3
"""Prints what the evaluation's instrumented step costs over a bare step, part by part.

scripts/bench-eval.py prints the whole evaluation against bare steps; this takes its largest part, the one
instrumented step, apart. Each row adds one part to the row above it, and all rows run in turn in this process
(after untimed warm-up rounds) on the same copy of the model, so the machine's drift moves them alike:

  bare           forward, loss, backward: a timed step of the evaluation
  dispatch mode  the same under one StepMode that does nothing with the ops: the floor of any step that sends
                 every op through Python, as the inventory, the shared random draws and the rounding need
  step           capture.train_step without activations, inventory or rounding: the mode with the shared random
                 draws and the kept values told of writes, the module hooks of attribution.Nesting, the step's
                 own SGD and the copies of its weights, gradients, loss and output
  + activations  each module call's inputs and outputs and the gradients at them (capture._Keeper)
  + inventory    the op inventory (a note per op, the torch-function watch)
  + precision    the step at the evaluation's precision (bf16-matmul: the matmul inputs rounded; bf16-autocast:
                 the forward under autocast): the instrumented step as the evaluation runs it

Each row is the median of --rounds, in ms and in bare steps, with what it adds to the row above. Prints numbers; it
is not a pass/fail test.

Usage: scripts/bench-eval-step.py [--model PKG.MOD:FACTORY] [--rounds N] [--precision NAME]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "smoke_tests"))

import torch

from neuron_smoke import models, release_facts
from neuron_smoke.argtypes import positive
from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import PRECISIONS, capture
from neuron_smoke.evaluate.stepmode import StepMode
from neuron_smoke.host import interpreter


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="neuron_smoke.examples.gpt2:factory")
    parser.add_argument("--rounds", type=positive(int), default=60)
    parser.add_argument("--precision", choices=PRECISIONS, help="default: the release's")
    args = parser.parse_args()
    try:
        spec = models.load(args.model)
    except UsageError as exc:
        parser.error(str(exc))
    at = args.precision or release_facts.default_precision()
    moved = capture.move(spec.model, "cpu")
    model = moved[0]
    inputs, kwargs = spec.inputs_on("cpu")

    def bare(mode: StepMode | None = None) -> float:
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        with mode if mode is not None else nullcontext():
            torch.autograd.backward(spec.loss_fn(model(*inputs, **kwargs)))
        return time.perf_counter() - start

    def step(**flags: object) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            capture.train_step(spec, "cpu", moved=moved, **flags)  # type: ignore[arg-type]
            return time.perf_counter() - start

        return run

    rows: dict[str, Callable[[], float]] = {
        "bare": bare,
        "dispatch mode": lambda: bare(StepMode()),
        "step": step(activations=False, with_inventory=False, at="fp32"),
        "+ activations": step(activations=True, with_inventory=False, at="fp32"),
        "+ inventory": step(activations=True, with_inventory=True, at="fp32"),
        f"+ precision ({at})": step(activations=True, with_inventory=True, at=at),
    }
    for _ in range(5):  # untimed: lazy initialisation, the allocator's first sizes
        for run in rows.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, run in rows.items():
            times[name].append(run())
    medians = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    base = medians["bare"]
    print(f"model {spec.name} on cpu (Python {interpreter()}, torch {torch.__version__}), precision {at}: "
          f"the instrumented step part by part (median of {args.rounds})")  # fmt: skip
    before = None
    for name, ms in medians.items():
        added = "" if before is None else f"   adds {ms - before:+6.2f} ms"
        print(f"  {name:28s} {ms:7.2f} ms = {ms / base:5.2f} bare steps{added}")
        before = ms
    return 0


if __name__ == "__main__":
    sys.exit(main())
