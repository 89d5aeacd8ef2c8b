"""Stage 6: torch.compile(model, backend=..., dynamic=False): first call, steady state, compiled vs eager.

The graph is stage 4's compiled training step, compiled once: its first call (forward, loss and backward, where
Dynamo and AOT Autograd trace and compile) is the first call reported here; the steady state and the comparison with
eager are further forward calls of the same compiled module in the mode it was compiled in (training, grad enabled),
so nothing compiles twice.

The stage proves that graphs were compiled, never taking eager kernels for them: TorchNeuron's NEFF cache holds both
in one namespace (compile_probe.py). This process's graphs compiled and loaded (`graphs_compiled`, `graphs_loaded`:
with a cache a cluster shares, a node started after another compiled the same graphs compiles none) come from the
device's own compile counters; where the device module reports none they are unknown and the report says so. A
backend that compiled and loaded no graph for stage 4's step ran it eagerly: the stage fails.

On neuron the first call is also measured in two fresh processes sharing an initially empty compile cache
(TORCH_NEURONX_NEFF_CACHE_DIR): cold (everything compiles) and warm (a new process loading what the first stored),
on one of the NeuronCores the collective ranks own, which are free while the collectives do not run (see cores.py).
The cold one must compile a graph (the counters, else the cache entries its compiled call added after an eager run of
the same forward); the warm one hits the cache when it compiles none.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from neuron_smoke import cores, stage_model
from neuron_smoke.compile_probe import CACHE_ENV
from neuron_smoke.context import Context, StageLog
from neuron_smoke.evaluate.sweep import device_cache
from neuron_smoke.models import ModelSpec
from neuron_smoke.numerics import normwise_error
from neuron_smoke.stage_model import CompiledStep, Mode, _leaves


def timed(ctx: Context, fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    ctx.backend.synchronize()
    return out, time.perf_counter() - start


def steady_state(ctx: Context, fn: Callable[[], Any]) -> list[float]:
    for _ in range(ctx.options.warmup):
        fn()
    ctx.backend.synchronize()
    return [timed(ctx, fn)[1] for _ in range(ctx.options.iterations)]


def run(ctx: Context, log: StageLog) -> None:
    step: CompiledStep | None = ctx.shared.get("compiled_step")
    if step is None:  # stage 4 compiles its training step; only a caller running this stage alone gets here
        spec: ModelSpec = ctx.shared["model_spec"]
        stage_model.train_step(spec, ctx.device, ctx, Mode("compiled", compile_backend=ctx.compile_backend()))
        step = ctx.shared["compiled_step"]
    args, kwargs = step.args, step.kwargs
    # Grad mode and training mode as compiled: a change of either is a guard failure and would compile again.
    got = step.compiled(*args, **kwargs)
    want = step.model(*args, **kwargs)
    compiled_times = steady_state(ctx, lambda: step.compiled(*args, **kwargs))
    eager_times = steady_state(ctx, lambda: step.model(*args, **kwargs))
    errors = [normwise_error(g, w) for g, w in zip(_leaves(got), _leaves(want), strict=False)]
    worst = max(errors, default=0.0)
    log.numbers = {
        "backend": step.backend,
        "first_call_s": step.first_call_s,
        "first_call_of": "training step (forward, loss, backward) of stage 4",
        "steady_median_ms": statistics.median(compiled_times) * 1e3,
        "eager_median_ms": statistics.median(eager_times) * 1e3,
        "iterations": ctx.options.iterations,
        "max_normwise_err_vs_eager": worst,
    }
    if len(_leaves(got)) != len(_leaves(want)):
        log.fail(f"compiled model returned {len(_leaves(got))} tensors, eager {len(_leaves(want))}")
    rtol = ctx.eager_rtol()
    if worst > rtol:
        log.fail(f"compiled output differs from eager by {worst:.3g} (rtol {rtol:g})")
    node_graphs(ctx, log, step.backend)
    fresh = fresh_process_first_calls(ctx, log, step.backend) if ctx.backend.name == "neuron" else ""
    log.summary = (
        f"backend {step.backend}: first call (training step) {step.first_call_s:.2f}s{fresh}, steady forward "
        f"{log.numbers['steady_median_ms']:.3g} ms (eager {log.numbers['eager_median_ms']:.3g} ms)"
    )


def node_graphs(ctx: Context, log: StageLog, backend: str) -> None:
    """This process's graphs compiled and loaded so far (stage 4's step), from the device's compile counters."""
    counts = device_cache(ctx.backend.import_module())
    log.numbers.update(
        compile_cache_dir=os.environ.get(CACHE_ENV) or None,  # None: TorchNeuron's default (/tmp/neff_cache)
        graphs_compiled=None if counts is None else counts["compiles"],
        graphs_loaded=None if counts is None else counts["hits"],
    )
    if ctx.backend.name != "neuron":
        return
    if counts is None:
        log.note("the device module reports no compile counters: the graphs this node compiled and loaded are unknown")
    elif counts["compiles"] + counts["hits"] == 0 and backend == ctx.backend.compile_backend:
        log.fail(
            f"torch.compile(backend={backend!r}) compiled no graph and loaded none for stage 4's training step (the "
            "device's compile counters): the backend ran it eagerly, op by op"
        )


def _compiled(probe: dict[str, Any]) -> tuple[int, str]:
    """The graphs a probe compiled, and how that is known: the device's counters, else the cache entries its compiled
    call added after an eager run of the same forward (compile_probe.py)."""
    if probe.get("graphs_compiled") is not None:
        return int(probe["graphs_compiled"]), "the device's compile counters"
    return int(probe["entries_after"] - probe["entries_before"]), f"new entries under {CACHE_ENV}"


def _probe(ctx: Context, env: dict[str, str], backend: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "neuron_smoke.compile_probe", "--device", ctx.backend.name, "--backend", backend]
    cmd += ["--model", ctx.options.model] if ctx.options.model else []
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=max(10.0, ctx.options.timeout_s * 0.4), check=False
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"the fresh-process compile probe exited {proc.returncode}: {tail}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def fresh_process_first_calls(ctx: Context, log: StageLog, backend: str) -> str:
    """Cold and warm-cache first calls in new processes; the summary's words for them ('' when not measured)."""
    plan = cores.current()
    if plan is None or not plan.ranks:
        log.note("no NeuronCore free besides this process's own: cold and warm-cache first calls not measured")
        return ""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory(prefix="neuron-smoke-neff-") as cache:
        env = dict(os.environ, **{CACHE_ENV: cache, cores.VISIBLE: str(plan.ranks[0])})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        cold = _probe(ctx, env, backend)
        warm = _probe(ctx, env, backend)
    (stored, source), (added, _) = _compiled(cold), _compiled(warm)
    hit = None if stored == 0 else added == 0 and warm.get("graphs_loaded") != 0
    log.numbers.update(
        cold_first_call_s=cold["first_call_s"],
        warm_first_call_s=warm["first_call_s"],
        cold_graphs_compiled=stored,
        warm_graphs_compiled=added,
        warm_graphs_loaded=warm.get("graphs_loaded"),
        warm_cache_hit=hit,
    )
    if hit is None and backend == ctx.backend.compile_backend:
        log.fail(
            f"torch.compile(backend={backend!r}) compiled no graph in a fresh process with an empty compile cache "
            f"({source}: 0): the backend ran the model eagerly, op by op"
        )
    elif hit is None:
        log.note(f"backend {backend!r} compiled no graph for the device's cache: whether it is reused is unknown")
    elif not hit:
        log.note(f"the warm run compiled {added} graph(s) again: the persistent compile cache was not hit")
    words = {None: "NO GRAPH COMPILED", True: "cache hit", False: "cache MISSED"}[hit]
    return f" (new process: cold {cold['first_call_s']:.2f}s, warm {warm['first_call_s']:.2f}s, {words})"
