"""Shape sweep: the compiled training step (forward, loss, backward) over several input shapes, as the device stage
compiles it: torch.compile(model, backend=..., dynamic=False), the loss and backward eager around it.

With dynamic=False every new input shape is a new graph to compile (AWS advises padding or bucketing). Each shape's
inputs are the example's with every input tensor resized along the swept dimensions (`inputs_for`), or, from a
factory that takes a `shape` keyword, the factory's own inputs and loss at that shape (model_contract.SHAPES).

Per shape: the first step (the compile) apart from N timed steps (p50, p95, items/s, items being the shape's first
dimension). Graphs are counted by a counting wrapper around the compile backend (each call is one graph Dynamo
compiled) and, where the device module offers it, by the device's own compile cache (`compile_cache_stats()`: graphs
compiled and loaded; the simulated device has it, the real torch_neuronx has no such call). A recompile is a shape
after the first that compiled or loaded any graph. Graph breaks are counted apart, with their reasons, by
`torch._dynamo.explain` on each distinct shape's forward before the sweep (explain resets Dynamo), so that the
several graphs of a broken forward are not taken for recompiles.
"""

from __future__ import annotations

import functools
import inspect
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch.utils import _pytree as pytree

from neuron_smoke import modelcopy, models
from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import buckets, failure, precision
from neuron_smoke.evaluate.capture import _percentile, move
from neuron_smoke.model_contract import CONTRACT

# Dynamo stops recompiling a frame after this many graphs and falls back to eager, which would hide compiles.
RECOMPILE_LIMIT = 64

# A model's example inputs: positional arguments and keyword arguments (ModelSpec.args, ModelSpec.kwargs).
Example = tuple[tuple[Any, ...], dict[str, Any]]


def inputs_for(example: Example, shape: tuple[int, ...], seed: int) -> Example:
    """The example at `shape`, seeded: its first input tensor (the first positional one, else the first keyword
    one) at `shape`, and every other input tensor with each dimension whose size the first one's changes from
    (a mask or labels of the same batch and length) resized alike; integer inputs keep the example's value range
    (token ids stay valid). Tensors with no such dimension are kept as they are."""
    leaves, tree = pytree.tree_flatten(example)
    index = _resized(leaves, shape)
    sizes = _size_map(leaves, index, shape)
    gen = torch.Generator().manual_seed(seed)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            new = shape if i == index else tuple(sizes.get(d, d) for d in leaf.shape)
            if i == index or new != tuple(leaf.shape):
                leaves[i] = _redrawn(leaf, new, gen)
    args, kwargs = pytree.tree_unflatten(leaves, tree)
    return tuple(args), dict(kwargs)


def _redrawn(like: torch.Tensor, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    if like.is_floating_point():
        return torch.randn(shape, generator=gen).to(like.dtype)
    low = int(like.min()) if like.numel() else 0
    high = int(like.max()) + 1 if like.numel() else 2
    return torch.randint(low, max(high, 1), shape, generator=gen).to(like.dtype)


def _size_map(leaves: list[Any], index: int, shape: tuple[int, ...]) -> dict[int, int]:
    """Old size -> new size of the first input's dimensions; a usage error when a size another input has would go
    two ways (32x32 swept to 8x32: is another input's 32 the batch or the length?)."""
    targets: dict[int, set[int]] = {}
    for was, size in zip(leaves[index].shape, shape, strict=True):
        targets.setdefault(int(was), set()).add(size)
    others = {int(d) for i, x in enumerate(leaves) if i != index and isinstance(x, torch.Tensor) for d in x.shape}
    for was, sizes in targets.items():
        if len(sizes) > 1 and was in others:
            raise UsageError(
                f"--shapes: {_name(shape)} resizes the first input's dimensions of size {was} to "
                f"{' and '.join(map(str, sorted(sizes)))}, so another input's dimension of size {was} cannot be "
                "resized alike; give the factory a `shape` keyword (smoke_tests/README.md)"
            )
    return {was: next(iter(sizes)) for was, sizes in targets.items() if sizes != {was}}


def _resized(leaves: list[Any], shape: tuple[int, ...]) -> int:
    """The index of the input leaf a shape resizes; a usage error when there is none or the rank differs."""
    index = next((i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)), None)
    if index is None:
        raise UsageError("--shapes: the model has no input tensor to resize")
    first = leaves[index]
    if len(shape) != first.dim():
        raise UsageError(
            f"--shapes: {_name(shape)} has {len(shape)} dimensions, the model's first input "
            f"{_name(first.shape)} has {first.dim()}"
        )
    return index


def takes_shape(factory: Callable[..., Any] | None) -> bool:
    """Whether a `--model` factory takes a `shape` keyword (then it makes each swept shape's inputs itself)."""
    try:
        return factory is not None and "shape" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a callable without a signature Python can read
        return False


def check(spec: models.ModelSpec, shapes: list[tuple[int, ...]]) -> None:
    """Before any step: every shape fits the model's inputs and its forward (a usage error names the first that does
    not), so that a shape the model cannot take is not swept and reported as a failed compile."""
    if takes_shape(spec.factory):
        return
    leaves = pytree.tree_leaves((spec.args, spec.kwargs))
    for shape in shapes:
        _size_map(leaves, _resized(leaves, shape), shape)
    for shape in dict.fromkeys(shapes):
        _forward_fits(spec, shape, leaves[_resized(leaves, shape)])


def _forward_fits(spec: models.ModelSpec, shape: tuple[int, ...], first: torch.Tensor) -> None:
    """The model's forward at `shape`, on meta tensors (shapes only: no data, no compute; functional_call leaves the
    model's own tensors as they are); where that raises, on the CPU with data, on a copy of the model and with the
    random state kept, so that what meta tensors cannot run (a value read, a tensor the model holds outside its
    parameters and buffers) is not taken for a shape the model refuses."""
    example = inputs_for((spec.args, spec.kwargs), shape, seed=0)
    model = spec.model

    def meta(t: Any) -> Any:
        return t.to("meta") if isinstance(t, torch.Tensor) else t

    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            state = {name: meta(t) for name, t in (*model.named_parameters(), *model.named_buffers())}
            args, kwargs = pytree.tree_map(meta, example)
            torch.func.functional_call(model, state, tuple(args), dict(kwargs))
        return
    except failure.USER_ERRORS:  # an error meta tensors alone may cause: tried with data below
        pass
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            modelcopy.deep_copy(model)(*example[0], **example[1])
    except failure.USER_ERRORS as exc:
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise UsageError(
            f"--shapes: {_name(shape)} does not fit the model: its forward at {_name(shape)} raised "
            f"{type(exc).__name__}: {first_line} (the example's first input is {_name(first.shape)}); give shapes "
            "the model takes, or a factory with a `shape` keyword (smoke_tests/README.md)"
        ) from None


def example_at(spec: models.ModelSpec, shape: tuple[int, ...], seed: int) -> tuple[Example, models.LossFn]:
    """The inputs and loss of one swept shape: the factory's at `shape` when it takes one, else the example's inputs
    resized (`inputs_for`) and the mean square of the output: the factory's loss_fn was made for the example's
    shape (its targets), and the compiled graphs (the model's forward and backward) are the same for any loss."""
    if not takes_shape(spec.factory):
        return inputs_for((spec.args, spec.kwargs), shape, seed), models.mean_square_loss
    assert spec.factory is not None
    try:
        made = spec.factory(shape=shape)
    except SystemExit as exc:
        raise UsageError(f"--shapes: {spec.name}(shape={shape}) {models.exited(exc)}") from None
    except Exception as exc:
        raise UsageError(f"--shapes: {spec.name}(shape={shape}) raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(made, tuple) or len(made) < 2:
        raise UsageError(f"--shapes: {spec.name}(shape={shape}) returned {type(made).__name__}; {CONTRACT}")
    loss_fn = made[2] if len(made) > 2 and callable(made[2]) else models.mean_square_loss
    return models._split_inputs(spec.name, made[1]), loss_fn


def _on(example: Example, device: str) -> Example:
    def to(t: Any) -> Any:
        return t.to(device) if isinstance(t, torch.Tensor) else t

    args, kwargs = pytree.tree_map(to, example)
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


def graph_breaks(model: torch.nn.Module, inputs: Example) -> dict[str, Any]:
    """The forward's graph breaks at these inputs and their distinct reasons (reason, user file:line), from
    torch._dynamo.explain (which resets Dynamo before and after)."""
    try:
        found = torch._dynamo.explain(model)(*inputs[0], **inputs[1])
    except failure.USER_ERRORS as exc:  # the compiled step meets the same error and reports it
        return {"graph_breaks": None, "break_reasons": [], "explain_error": f"{type(exc).__name__}: {exc}"}
    reasons: list[dict[str, str | None]] = []
    for r in found.break_reasons:
        frame = r.user_stack[-1] if r.user_stack else None
        item = {
            "reason": str(r.reason).strip().splitlines()[0],
            "where": f"{frame.filename}:{frame.lineno}" if frame else None,
        }
        if item not in reasons:
            reasons.append(item)
    return {"graph_breaks": int(found.graph_break_count), "break_reasons": reasons}


def run(
    spec: models.ModelSpec,
    shapes: list[tuple[int, ...]],
    device: str,
    backend: str,
    steps: int,
    synchronize: Callable[[], None],
    device_module: Any = None,
    at: str = "fp32",
) -> tuple[dict[str, Any], BaseException | None]:
    """The sweep's numbers, and the exception the compiled step raised (the sweep stops at the first), if any.
    `at`: the evaluation's precision (bf16-autocast runs each forward and loss under autocast, as its other steps)."""
    module = move(spec.model, device)[0].train()
    seeds = {s: 1000 + shapes.index(s) for s in shapes}
    made = {s: example_at(spec, s, seeds[s]) for s in seeds}
    autocast = functools.partial(precision.forward, at, torch.device(device).type)
    with autocast():
        breaks = {s: graph_breaks(module, _on(made[s][0], device)) for s in made}
    torch._dynamo.reset()
    counter = CountingBackend(backend)
    old_limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(old_limit, RECOMPILE_LIMIT)
    rows: list[dict[str, Any]] = []
    error: BaseException | None = None
    try:
        compiled = torch.compile(module, backend=counter, dynamic=False)
        timer = _Step(compiled, module, synchronize, device_module, autocast)
        for shape in shapes:
            inputs, loss_fn = made[shape]
            try:
                rows.append(timer.shape(_on(inputs, device), loss_fn, shape, counter, steps) | breaks[shape])
            except failure.USER_ERRORS as exc:  # a readiness finding: the op that failed is looked up in the inventory
                error = exc
                break
    finally:
        torch._dynamo.config.recompile_limit = old_limit
    return _summary(rows, shapes, backend, steps, error, timer.phase), error


# The parts of a training step, in order: a failure names the one it happened in (the compile of a shape's graph is
# in its first forward; the backward graph is compiled in its first backward).
PHASES = ("forward (compiled on a new shape)", "loss", "backward", "device synchronize")


class _Step:
    """One shape's compiled training steps: the first (the compile) and `steps` timed ones."""

    def __init__(
        self,
        compiled: Any,
        model: torch.nn.Module,
        sync: Callable[[], None],
        device_module: Any,
        autocast: Callable[[], AbstractContextManager[Any]],
    ) -> None:
        self.compiled, self.model, self.sync, self.device_module = compiled, model, sync, device_module
        self.autocast = autocast
        self.phase = PHASES[0]  # the part of the step running: what a failure is reported in

    def once(self, inputs: Example, loss_fn: models.LossFn) -> float:
        self.model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        with self.autocast():
            self.phase = PHASES[0]
            out = self.compiled(*inputs[0], **inputs[1])
            self.phase = PHASES[1]
            loss = loss_fn(out)
        self.phase = PHASES[2]
        torch.autograd.backward(loss)
        self.phase = PHASES[3]
        self.sync()
        return time.perf_counter() - start

    def shape(
        self, inputs: Example, loss_fn: models.LossFn, shape: tuple[int, ...], counter: CountingBackend, steps: int
    ) -> dict[str, Any]:
        before, dev_before = counter.compiles, device_cache(self.device_module)
        first = self.once(inputs, loss_fn)
        times = sorted(self.once(inputs, loss_fn) for _ in range(steps))
        dev_after = device_cache(self.device_module)
        p50 = statistics.median(times)
        return {
            "shape": _name(shape),
            "compiled_graphs": counter.compiles - before,
            "device_graphs": None
            if dev_before is None or dev_after is None
            else _graphs(dev_after) - _graphs(dev_before),
            "first_call_s": first,
            "compile_s": max(first - p50, 0.0),
            "p50_ms": p50 * 1e3,
            "p95_ms": _percentile(times, 95) * 1e3,
            "items_per_s": shape[0] / p50 if p50 > 0 else None,
        }


def _graphs(counts: dict[str, int]) -> int:
    return counts["compiles"] + counts["hits"]


def _summary(
    rows: list[dict[str, Any]],
    shapes: list[tuple[int, ...]],
    backend: str,
    steps: int,
    error: BaseException | None,
    phase: str,
) -> dict[str, Any]:
    """The sweep's numbers; with `error`, the shape it stopped at and the part of the step (`phase`) that raised."""
    device = [r["device_graphs"] for r in rows]
    known = bool(rows) and None not in device
    return {
        "backend": backend,
        "dynamic": False,
        "step": "forward, loss, backward",
        "steps": steps,
        "shapes": rows,
        "compiles": sum(r["compiled_graphs"] for r in rows),
        "recompiles": sum(1 for r in rows[1:] if r["compiled_graphs"]),
        "graph_breaks": max((r["graph_breaks"] or 0 for r in rows), default=0),
        "device_graphs": sum(device) if known else None,
        "device_recompiles": sum(1 for n in device[1:] if n) if known else None,
        "distinct_shapes": len({r["shape"] for r in rows}),
        "buckets": buckets.suggest([tuple(int(d) for d in r["shape"].split("x")) for r in rows]),
        "failed_at": None if error is None else _name(shapes[len(rows)]),
        "failed_in": None if error is None else phase,
    }


def summary(sw: dict[str, Any]) -> str:
    """The sweep in a line: graphs, recompiles, graph breaks, and the device's own count."""
    return (
        f"{sw['compiles']} graph(s) compiled for {sw['distinct_shapes']} distinct shape(s) ({sw['recompiles']} "
        f"recompile(s), {sw['graph_breaks']} graph break(s)); {cache_note(sw)}"
    )


def cache_note(sw: dict[str, Any]) -> str:
    """What the device's own compile cache counted during the sweep, or why there is no such count."""
    if sw.get("device_graphs") is None:
        return "device compile cache: not reported (no compile_cache_stats() on the device module; counts are Dynamo's)"
    agree = "agrees" if sw["device_recompiles"] == sw["recompiles"] else f"DIFFERS from Dynamo's {sw['recompiles']}"
    return (
        f"device compile cache: {sw['device_graphs']} graph(s) compiled or loaded, {sw['device_recompiles']} "
        f"recompile(s) ({agree})"
    )


def break_lines(sw: dict[str, Any]) -> list[str]:
    """One line a distinct graph-break reason, with the shapes it broke at."""
    seen: dict[tuple[str, str | None], list[str]] = {}
    for r in sw["shapes"]:
        for b in r.get("break_reasons", []):
            seen.setdefault((b["reason"], b["where"]), []).append(r["shape"])
    return [f"graph break at {where or '?'}: {reason} (shapes {', '.join(s)})" for (reason, where), s in seen.items()]


def _name(shape: Any) -> str:
    return "x".join(map(str, shape))
