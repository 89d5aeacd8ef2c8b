"""A fresh process's first torch.compile call: the compile stage's cold (empty cache) and warm-cache numbers.

`python -m neuron_smoke.compile_probe --device neuron --backend neuron [--model pkg.mod:factory]` runs the model's
forward once eagerly, then compiles it as the compile stage does, times the compiled first call and prints one JSON
line: the NEFF entries (`*.neff`) under TORCH_NEURONX_NEFF_CACHE_DIR before and after that call, and the graphs the
device's own counters say it compiled and loaded (None where the device module reports none). The compile stage runs
it twice with the same, initially empty, cache folder: the first run compiles, the second should only load.

Why the eager forward first: TorchNeuron's persistent cache holds eager kernels and compiled graphs in one namespace,
each entry a hash-named `.neff` with nothing in its name that says which it is (pre-release PersistentCacheBackend.cpp;
NEURON-FACTS section 8), and eager mode compiles each new kernel on first use. After an eager run of the same forward
on the same inputs those kernels are in the cache, so the entries the compiled call adds are its graphs: a backend
that compiles nothing and runs the graph op by op adds none.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402  (after the filter)

from neuron_smoke import models  # noqa: E402
from neuron_smoke.backends import BACKENDS  # noqa: E402
from neuron_smoke.evaluate.sweep import device_cache  # noqa: E402

CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"


def cache_entries(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*.neff")) if folder.is_dir() else 0


def graph_counts(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, int | None]:
    """Graphs compiled and loaded between two readings of the device's counters (None: the device reports none)."""
    if before is None or after is None:
        return {"graphs_compiled": None, "graphs_loaded": None}
    return {"graphs_compiled": after["compiles"] - before["compiles"], "graphs_loaded": after["hits"] - before["hits"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", required=True, choices=sorted(BACKENDS))
    parser.add_argument("--backend", required=True)
    parser.add_argument("--model", default=None)
    opts = parser.parse_args()
    backend = BACKENDS[opts.device]
    module = backend.import_module()
    spec = models.load(opts.model)
    model = spec.model.to(backend.device_type).eval()
    args, kwargs = spec.inputs_on(backend.device_type)
    cache = Path(os.environ[CACHE_ENV])
    with torch.no_grad():
        model(*args, **kwargs)  # the eager kernels into the cache first (see the module's docstring)
        backend.synchronize()
    compiled = torch.compile(model, backend=opts.backend, dynamic=False)
    before, counters = cache_entries(cache), device_cache(module)
    with torch.no_grad():
        start = time.perf_counter()
        compiled(*args, **kwargs)
        backend.synchronize()
        first = time.perf_counter() - start
    result: dict[str, Any] = {"first_call_s": first, "entries_before": before, "entries_after": cache_entries(cache)}
    result.update(graph_counts(counters, device_cache(module)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
