"""A fresh process's first torch.compile call: the compile stage's cold (empty cache) and warm-cache numbers.

`python -m neuron_smoke.compile_probe --device neuron --backend neuron [--model pkg.mod:factory]` compiles the model
as the compile stage does, times the first call and counts the compiled artifacts (`*.neff`) under
TORCH_NEURONX_NEFF_CACHE_DIR before and after it, and prints one JSON line. The compile stage runs it twice with the
same, initially empty, cache folder: the first run compiles, the second should only load.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402  (after the filter)

from neuron_smoke import models  # noqa: E402
from neuron_smoke.backends import BACKENDS  # noqa: E402

CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"


def cache_entries(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*.neff")) if folder.is_dir() else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", required=True, choices=sorted(BACKENDS))
    parser.add_argument("--backend", required=True)
    parser.add_argument("--model", default=None)
    opts = parser.parse_args()
    backend = BACKENDS[opts.device]
    backend.import_module()
    spec = models.load(opts.model)
    model = spec.model.to(backend.device_type).eval()
    args, kwargs = spec.inputs_on(backend.device_type)
    compiled = torch.compile(model, backend=opts.backend, dynamic=False)
    cache = Path(os.environ[CACHE_ENV])
    before = cache_entries(cache)
    with torch.no_grad():
        start = time.perf_counter()
        compiled(*args, **kwargs)
        backend.synchronize()
        first = time.perf_counter() - start
    print(json.dumps({"first_call_s": first, "entries_before": before, "entries_after": cache_entries(cache)}))


if __name__ == "__main__":
    main()
