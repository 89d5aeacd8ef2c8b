#!/usr/bin/env python3
"""Prints the overhead of `verify-device --record` and `--baseline` against the same model steps run bare
(goal: at most 1.5x for the transformer example with the op inventory on).

Bare: first call + --warmup + --iterations forward/loss/backward steps on a fresh copy, and nothing else. The
evaluation runs as many steps, the first warm-up step being the instrumented one (op inventory, activations);
--record adds saving the baseline, --baseline a CPU step (none when the device is the CPU: the device run is the CPU
run) and the comparison. Both then write their reports (JSON, Markdown, HTML, plots): a fixed cost that does not
grow with the model (importing matplotlib and drawing), so the ratio against the goal leaves it out and it is
printed on its own, with the total. On a loaded machine the bare runs and the evaluations drift apart, so the ratio
is also printed against the evaluation's own bare timed steps (scaled to the same step count), and each run against
the bare run just before it (paired). Everything runs in
this process after one untimed warm-up step, so interpreter start-up and `import torch` count for neither side; each
number is the median of --repeat runs (9: a run is about 0.1 s, and on a shared VM three runs move the ratio by
0.3x), with the spread of the runs' own ratios (p25-p75). Prints numbers; it is not a pass/fail test.

Usage: scripts/bench-eval.py [--model PKG.MOD:FACTORY] [--device cpu|neuron] [--repeat N] [--iterations N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "smoke_tests"))

import torch

from neuron_smoke import models, validate
from neuron_smoke.argtypes import non_negative, positive
from neuron_smoke.backends import resolve
from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import capture
from neuron_smoke.evaluate.run import EvalOptions, evaluate
from neuron_smoke.host import interpreter


def timed_eval(opts: EvalOptions, spec: models.ModelSpec) -> tuple[float, dict[str, float]]:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = evaluate(opts, spec)
    seconds = time.perf_counter() - start
    if rc not in (0, 1):
        raise SystemExit(f"bench-eval: the evaluation exited {rc}")
    report = opts.out_dir or opts.record
    assert report is not None
    import json

    phases: dict[str, float] = json.loads((report / "report.json").read_text())["phases_s"]
    return seconds, phases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="neuron_smoke.examples.gpt2:factory")
    parser.add_argument("--device", default="cpu", choices=validate.DEVICES)
    parser.add_argument("--repeat", type=positive(int), default=9)
    parser.add_argument("--iterations", type=positive(int), default=10)
    parser.add_argument("--warmup", type=non_negative(int), default=3)
    args = parser.parse_args()
    try:
        spec = models.load(args.model)
    except UsageError as exc:
        parser.error(str(exc))
    backend = resolve(args.device)
    try:
        backend.import_module()
    except ImportError as exc:
        parser.error(f"{backend.name}: cannot import {backend.module}: {exc}. {backend.missing_help}")
    device = backend.device_type
    steps = 1 + args.warmup + args.iterations
    capture.run_bare(spec, device, 1, backend.synchronize)  # untimed: lazy initialisation of both sides
    bare: list[float] = []
    runs: dict[str, list[tuple[float, dict[str, float]]]] = {"record": [], "baseline": []}
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        base_dir = Path(tmp) / "baseline"
        common: dict[str, Any] = {"device": args.device, "iterations": args.iterations, "warmup": args.warmup}
        for i in range(args.repeat):
            bare.append(capture.run_bare(spec, device, steps, backend.synchronize))
            runs["record"].append(timed_eval(EvalOptions(record=base_dir, **common), spec))
            out = Path(tmp) / f"compare-{i}"
            runs["baseline"].append(timed_eval(EvalOptions(baseline=base_dir, out_dir=out, **common), spec))
    bare_s = statistics.median(bare)
    print(f"model {spec.name} on {backend.name} (Python {interpreter()}, torch {torch.__version__}): "
          f"{steps} bare steps {bare_s:.3f} s (median of {args.repeat})")  # fmt: skip
    for mode, results in runs.items():
        total = statistics.median(r[0] for r in results)
        report = statistics.median(r[0] - sum(r[1].values()) for r in results)  # writing JSON/Markdown/HTML/plots
        evaluated = statistics.median(sum(r[1].values()) for r in results)  # each run's, reports left out
        phases = {k: statistics.median(r[1].get(k, 0.0) for r in results) for k in results[0][1]}
        phases["reports"] = report
        print(
            f"--{mode}: {evaluated:.3f} s = {evaluated / bare_s:.2f}x bare (goal <= 1.5x; reports left "
            f"out); writing the reports {report:.3f} s; in all {total:.3f} s = {total / bare_s:.2f}x"
        )
        print("    phases (s): " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()))
        # Each run against the bare steps run just before it: the machine's drift between runs moves both alike.
        pairs = sorted(sum(r[1].values()) / b for r, b in zip(results, bare, strict=True))
        print(f"    paired with the bare run before each: median {statistics.median(pairs):.2f}x (p25-p75 "
              f"{pairs[len(pairs) // 4]:.2f}-{pairs[(3 * len(pairs)) // 4]:.2f}x)")  # fmt: skip
        # The run's own bare steps (one fewer: the instrumented step is its first warm-up step), scaled to `steps`:
        # a reference taken in the same run, so load that drifts between runs moves both sides.
        own_steps = steps - 1 if args.warmup > 0 else steps
        own = phases["timed_steps"] * steps / own_steps
        ratios = sorted(sum(r[1].values()) / (r[1]["timed_steps"] * steps / own_steps) for r in results)
        spread = f"{ratios[len(ratios) // 4]:.2f}-{ratios[(3 * len(ratios)) // 4]:.2f}x"
        print(f"    against the run's own bare steps ({own:.3f} s for {steps}): {evaluated / own:.2f}x "
              f"(p25-p75 of the runs: {spread})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
