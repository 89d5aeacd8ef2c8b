"""Shape sweep: torch.compile(dynamic=False) over several input shapes, compile apart from steady state.

With dynamic=False every new input shape is a new graph to compile (AWS advises padding or bucketing). Compiles
are counted twice: by a counting wrapper around the compile backend (each call is one graph Dynamo compiled), and,
where the device module offers it, by the device's own compile cache (`compile_cache_stats()`: graphs compiled and
loaded from the cache; the simulated device has it, the real torch_neuronx has no such call). The report says
whether the device's count was there and whether it agrees.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate.capture import move

# Dynamo stops recompiling a frame after this many graphs and falls back to eager, which would hide compiles.
RECOMPILE_LIMIT = 64


# A model's example inputs: positional arguments and keyword arguments (ModelSpec.args, ModelSpec.kwargs).
Example = tuple[tuple[Any, ...], dict[str, Any]]


def inputs_for(example: Example, shape: tuple[int, ...], seed: int) -> Example:
    """The example with its first input tensor (the first positional one, else the first keyword one) at `shape`,
    seeded; integer inputs keep the example's value range (token ids stay valid)."""
    leaves, tree = pytree.tree_flatten(example)
    index = _resized(leaves, shape)
    first = leaves[index]
    gen = torch.Generator().manual_seed(seed)
    if first.is_floating_point():
        new = torch.randn(shape, generator=gen).to(first.dtype)
    else:
        high = int(first.max()) + 1 if first.numel() else 2
        new = torch.randint(int(first.min()) if first.numel() else 0, max(high, 1), shape, generator=gen)
        new = new.to(first.dtype)
    leaves[index] = new
    args, kwargs = pytree.tree_unflatten(leaves, tree)
    return tuple(args), dict(kwargs)


def _resized(leaves: list[Any], shape: tuple[int, ...]) -> int:
    """The index of the input leaf a shape resizes; a usage error when there is none or the rank differs."""
    index = next((i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)), None)
    if index is None:
        raise UsageError("--shapes: the model has no input tensor to resize")
    first = leaves[index]
    if len(shape) != first.dim():
        raise UsageError(
            f"--shapes: {'x'.join(map(str, shape))} has {len(shape)} dimensions, the model's first input "
            f"{'x'.join(map(str, first.shape))} has {first.dim()}"
        )
    return index


def check(example: Example, shapes: list[tuple[int, ...]]) -> None:
    """Before any step: every shape fits the model's input (a usage error names the first that does not)."""
    leaves = pytree.tree_leaves(example)
    for shape in shapes:
        _resized(leaves, shape)


def _on(example: Example, device: str) -> Example:
    def move(t: Any) -> Any:
        return t.to(device) if isinstance(t, torch.Tensor) else t

    args, kwargs = pytree.tree_map(move, example)
    return tuple(args), dict(kwargs)


class CountingBackend:
    """A torch.compile backend that counts the graphs handed to the real one."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.compiles = 0
        from torch._dynamo import lookup_backend

        self._backend = lookup_backend(name)

    def __call__(self, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        self.compiles += 1
        return self._backend(gm, example_inputs, **kwargs)


def device_cache(module: Any) -> dict[str, int] | None:
    """Graphs the device's compile cache compiled and loaded so far, when its module reports them (None otherwise)."""
    stats = getattr(module, "compile_cache_stats", None)
    if not callable(stats):
        return None
    value = stats()
    if not isinstance(value, dict) or "compiles" not in value:
        return None
    return {"compiles": int(value["compiles"]), "hits": int(value.get("hits", 0))}


def _device_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, Any]:
    if before is None or after is None:
        return {"device_compiles": None, "device_cache_hits": None, "device_recompiles": None}
    compiles, hits = after["compiles"] - before["compiles"], after["hits"] - before["hits"]
    return {"device_compiles": compiles, "device_cache_hits": hits, "device_recompiles": max(compiles + hits - 1, 0)}


def run(
    model: torch.nn.Module,
    example: Example,
    shapes: list[tuple[int, ...]],
    device: str,
    backend: str,
    iterations: int,
    synchronize: Callable[[], None],
    device_module: Any = None,
) -> tuple[dict[str, Any], BaseException | None]:
    """The sweep's numbers, and the exception torch.compile raised (the sweep stops at the first), if any."""
    torch._dynamo.reset()
    counter = CountingBackend(backend)
    module = move(model, device)[0].eval()
    old_limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(old_limit, RECOMPILE_LIMIT)
    dev_before = device_cache(device_module)
    rows = []
    error: BaseException | None = None
    try:
        compiled = torch.compile(module, backend=counter, dynamic=False)
        for i, shape in enumerate(shapes):
            inputs = _on(inputs_for(example, shape, seed=1000 + i), device)
            try:
                rows.append(_one_shape(compiled, inputs, shape, counter, iterations, synchronize))
            except Exception as exc:  # a readiness finding: the op that failed is looked up in the inventory
                error = exc
                break
    finally:
        torch._dynamo.config.recompile_limit = old_limit
    dev_after = device_cache(device_module)
    distinct = len({r["shape"] for r in rows})
    result = {
        "backend": backend,
        "dynamic": False,
        "shapes": rows,
        "compiles": counter.compiles,
        "recompiles": max(counter.compiles - 1, 0),
        **_device_delta(dev_before, dev_after),
        "distinct_shapes": distinct,
        "buckets": suggest_buckets([tuple(int(d) for d in r["shape"].split("x")) for r in rows]),
        "failed_at": None if error is None else "x".join(map(str, shapes[len(rows)])),
    }
    return result, error


def cache_note(sw: dict[str, Any]) -> str:
    """What the device's own compile cache counted during the sweep, or why there is no such count."""
    if sw.get("device_compiles") is None:
        return "device compile cache: not reported (no compile_cache_stats() on the device module; counts are Dynamo's)"
    graphs = sw["device_compiles"] + sw["device_cache_hits"]
    agree = "agrees" if graphs == sw["compiles"] else f"DIFFERS from Dynamo's {sw['compiles']}"
    return (
        f"device compile cache: {sw['device_compiles']} compile(s), {sw['device_cache_hits']} cache hit(s), "
        f"{sw['device_recompiles']} recompile(s) ({agree})"
    )


def _one_shape(
    compiled: Any,
    inputs: Example,
    shape: tuple[int, ...],
    counter: CountingBackend,
    iterations: int,
    synchronize: Callable[[], None],
) -> dict[str, Any]:
    before = counter.compiles
    with torch.no_grad():
        start = time.perf_counter()
        compiled(*inputs[0], **inputs[1])
        synchronize()
        first = time.perf_counter() - start
        times = []
        for _ in range(iterations):
            start = time.perf_counter()
            compiled(*inputs[0], **inputs[1])
            synchronize()
            times.append(time.perf_counter() - start)
    p50 = statistics.median(times)
    return {
        "shape": "x".join(map(str, shape)),
        "compiled_graphs": counter.compiles - before,
        "first_call_s": first,
        "compile_s": max(first - p50, 0.0),
        "steady_p50_ms": p50 * 1e3,
        "steady_max_ms": max(times) * 1e3,
    }


def suggest_buckets(shapes: list[tuple[int, ...]]) -> dict[str, Any]:
    """Power-of-two bucket boundaries per varying dimension, and the compiles padding to them would take."""
    distinct = sorted(set(shapes))
    if len(distinct) < 2:
        return {"note": "one shape: nothing to bucket", "boundaries": {}, "compiles_now": len(distinct)}
    ndim = len(distinct[0])
    boundaries: dict[str, list[int]] = {}
    for d in range(ndim):
        values = {s[d] for s in distinct}
        if len(values) > 1:
            boundaries[str(d)] = sorted({_bucket(v) for v in values})
    bucketed = {tuple(_bucket(v) if str(d) in boundaries else v for d, v in enumerate(s)) for s in distinct}
    saving = len(distinct) - len(bucketed)
    dims = ", ".join(f"dim {d}: {b}" for d, b in boundaries.items())
    note = (
        f"padding to buckets ({dims}) would compile {len(bucketed)} graph(s) instead of {len(distinct)}"
        if saving > 0
        else f"padding to power-of-two buckets ({dims}) would not save compiles: {len(distinct)} graph(s) either way"
    )
    return {"boundaries": boundaries, "compiles_now": len(distinct), "compiles_bucketed": len(bucketed), "note": note}


def _bucket(value: int) -> int:
    return 1 << max(0, math.ceil(math.log2(value)))
