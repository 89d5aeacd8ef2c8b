#!/usr/bin/env python3
"""Prints how long a full `verify-device --device cpu` run takes against a baseline of `import torch` plus one
1024x1024x1024 float32 matmul, each in a fresh process (goal: the full run at most 3x the baseline).

Usage: scripts/bench-verify-device.py [--repeat N] [extra verify-device options...]
Uses NEURON_TORCH_PYTHON (default: this interpreter). Prints numbers; it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = "import torch; a = torch.randn(1024, 1024); b = torch.randn(1024, 1024); (a @ b).sum().item()"


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args, extra = parser.parse_known_args()
    python = os.environ.get("NEURON_TORCH_PYTHON", sys.executable)
    env = {**os.environ, "NEURON_TORCH_PYTHON": python, "NEURON_SMOKE_IMDS": os.environ.get("NEURON_SMOKE_IMDS", "0")}
    verify = [str(HERE / "verify-device.sh"), "--device", "cpu", *extra]
    base, full = [], []
    for _ in range(args.repeat):
        base.append(timed([python, "-c", BASELINE], env)[0])
        seconds, rc = timed(verify, env)
        if rc != 0:
            print(f"verify-device exited {rc}; run it directly to see why", file=sys.stderr)
            return rc
        full.append(seconds)
    b, f = statistics.median(base), statistics.median(full)
    print(f"baseline (import torch + 1024^3 matmul): median {b:.2f}s  runs {', '.join(f'{x:.2f}' for x in base)}")
    print(f"verify-device --device cpu (all stages): median {f:.2f}s  runs {', '.join(f'{x:.2f}' for x in full)}")
    print(f"ratio: {f / b:.2f}x (goal <= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
