"""The `neuron` torch.compile backend of the simulated device: Dynamo and AOT Autograd, then eager kernels.

Like TorchNeuron's backend it compiles each graph once per input signature (a latency, cached on disk under
TORCH_NEURONX_NEFF_CACHE_DIR so that a second process loads instead of compiling), and a graph holding an op it cannot
lower raises unless TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 (then that graph runs eagerly, with a warning).
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from typing import Any

# Graphs compiled or loaded in this process: {"compiled": n, "loaded": n, "failed": n}.
STATS = {"compiled": 0, "loaded": 0, "failed": 0}


class NeuronCompileError(RuntimeError):
    """A graph the backend cannot lower (raised when fallback execution is disabled, the 2.33 default)."""


def _unsupported(graph: Any) -> list[str]:
    import neuron_sim_rules

    banned = set(neuron_sim_rules.compile_unsupported_ops())
    found = []
    for node in graph.graph.nodes:
        name = getattr(getattr(node.target, "_schema", None), "name", None)
        if node.op == "call_function" and name in banned:
            found.append(str(name))
    return sorted(set(found))


def _fallback_disabled() -> bool:
    value = os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1").strip().lower()
    return value not in ("0", "false")


def _compile_or_load(graph: Any, inputs: Any) -> None:
    import neuron_sim_rules as rules

    if not rules.is_on("compile_cache"):
        return
    signature = [graph.code, *(f"{getattr(x, 'dtype', '')}{list(getattr(x, 'shape', []))}" for x in inputs)]
    key = hashlib.sha256("\n".join(map(str, signature)).encode()).hexdigest()[:32]
    cache = rules.neff_cache_dir()
    neff = rules.neff_path(cache, key) if cache else None
    if neff is not None and neff.is_file():
        STATS["loaded"] += 1
        time.sleep(rules.ms_env("NEURON_SIM_CACHE_LOAD_MS", rules.CACHE_LOAD_MS_DEFAULT) * 10 / 1e6)
        return
    STATS["compiled"] += 1
    time.sleep(rules.ms_env("NEURON_SIM_GRAPH_COMPILE_MS", rules.GRAPH_COMPILE_MS_DEFAULT) / 1e6)
    if neff is not None:
        neff.parent.mkdir(parents=True, exist_ok=True)
        tmp = neff.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(graph.code)
        tmp.replace(neff)


def neuron_backend(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    # Found by Dynamo through the `torch_dynamo_backends` entry point, so importing torch_neuronx stays cheap.
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def compiler(graph: Any, inputs: Any) -> Any:
        bad = _unsupported(graph)
        if bad:
            STATS["failed"] += 1
            message = f"neuron backend: cannot lower {', '.join(bad)} to StableHLO; the graph did not compile"
            if _fallback_disabled():
                raise NeuronCompileError(
                    f"{message}. Set TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 to run such graphs eagerly."
                )
            warnings.warn(f"{message}; running it eagerly (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0)", stacklevel=2)
            return make_boxed_func(graph.forward)
        _compile_or_load(graph, inputs)
        return make_boxed_func(graph.forward)

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)(gm, example_inputs, **kwargs)


def compile_cache_stats() -> dict[str, int]:
    """What the simulated compile cache did in this process: torch.compile graphs compiled (`compiles`), loaded from
    the NEFF cache (`hits`) and refused (`failed`), and eager (op, shapes, dtypes) compiles and cache hits.

    The twin's own inspection API: the real torch_neuronx has no such call, so callers must look for it.
    """
    import torch

    eager_compiles, eager_hits = (int(v) for v in torch.ops.neuron_sim.compile_stats())
    return {
        "compiles": STATS["compiled"],
        "hits": STATS["loaded"],
        "failed": STATS["failed"],
        "eager_compiles": eager_compiles,
        "eager_hits": eager_hits,
    }


def register() -> None:
    """Nothing to do eagerly: the entry point in torch_neuronx's dist-info registers the backend."""
