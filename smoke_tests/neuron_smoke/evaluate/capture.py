"""One training step of the model on a device, with every tensor the comparison needs, and the step's timing.

The step is the one stage 4 runs (forward, loss, backward, one SGD step with momentum), plus forward hooks that keep
each named module's floating-point inputs and outputs, so errors can be placed in the layer where they start.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from neuron_smoke.evaluate import attribution, failure, precision, randomness
from neuron_smoke.evaluate import inventory as inv
from neuron_smoke.evaluate.copies import Copies
from neuron_smoke.evaluate.stepmode import StepMode, outside, unwatched
from neuron_smoke.modelcopy import deep_copy
from neuron_smoke.models import ModelSpec

LR = 0.1  # as stage 4: SGD keeps the update linear in the gradient
Moved = tuple[nn.Module, list[str]]  # a copy of the model on a device, and the ties restored on it (move)


def move(model: nn.Module, device: str) -> Moved:
    """A copy of the model on `device`, with shared (tied) parameters shared again if the move untied them.

    Module.to() keeps a parameter shared only when it can swap the tensor in place; across some device types it
    makes one new Parameter per module instead (seen on the simulated device with GPT-2's lm_head/wte), so the
    model would train two separate weights. The returned notes name each pair re-tied, for the readiness scan.
    """
    groups: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    moved = deep_copy(model).to(device)
    notes = []
    for names in (g for g in groups.values() if len(g) > 1):
        first = moved.get_parameter(names[0])
        for other in names[1:]:
            if moved.get_parameter(other) is not first:
                owner, _, attr = other.rpartition(".")
                setattr(moved.get_submodule(owner), attr, first)
                notes.append(f"{other} was untied from {names[0]} by .to({device!r}); tied again")
    return moved, notes


@dataclass
class Capture:
    device: str
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> CPU tensor
    layer_of: dict[str, str] = field(default_factory=dict)  # tensor name -> module it belongs to
    order: list[str] = field(default_factory=list)  # modules in the order their forward finished
    inventory: inv.Inventory | None = None
    fallback_ops: list[str] | None = None
    untied: list[str] = field(default_factory=list)
    under_transform: set[str] = field(default_factory=set)  # modules run inside torch.func transforms: not captured
    random_ops: dict[str, int] = field(default_factory=dict)  # op -> calls drawn from the shared seeded generator
    copy: Copies = field(init=False, repr=False)  # makes the values kept in `tensors` (copies.py)

    def __post_init__(self) -> None:
        self.copy = Copies(self.tensors)


def float_leaves(value: Any) -> list[torch.Tensor]:
    """Floating-point tensors in nested tuples, lists, dicts and model-output mappings, in order."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in float_leaves(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in float_leaves(v)]
    return []


def _adder(cap: Capture, layer: str, name: str) -> Callable[[torch.Tensor], None]:
    """Keep a gradient as `name`, adding it to what is kept there already (a call passes an input's gradient on along
    each of its nodes that read the input); the value kept (copies.py) and the sum are ours, kept out of the op
    inventory."""

    def add(grad: torch.Tensor) -> None:
        with unwatched():
            copy, kept = cap.copy.keep(grad), cap.tensors.get(name)
            if kept is not None:
                with outside(kept, copy):
                    copy = kept + copy
        cap.tensors[name] = copy
        cap.layer_of[name] = layer

    return add


def _keep_output_grads(cap: Capture, layer: str, call: str, outputs: list[torch.Tensor]) -> None:
    """actgrad/<call>/out/<i>: the gradient reaching each output in backward, from whatever used it."""
    for i, t in enumerate(outputs):
        if t.requires_grad:
            t.register_hook(_adder(cap, layer, f"actgrad/{call}/out/{i}"))  # type: ignore[no-untyped-call]


def _input_edges(inputs: list[torch.Tensor]) -> dict[tuple[Any, int], list[int]]:
    """Where each input's gradient goes, taken as the call starts (an in-place op in the call moves the tensor's
    grad_fn on): its autograd node and output number -> the input's place among the call's floating inputs. The node
    is kept as its Python object: autograd hands out the same object for a node while one is alive (this dict keeps
    it), so the call's edges are matched by identity, not by a key made of two calls for every edge."""
    edges: dict[tuple[Any, int], list[int]] = {}
    for i, t in enumerate(inputs):
        if t.grad_fn is not None:
            edges.setdefault((t.grad_fn, t.output_nr), []).append(i)
    return edges


def _at_slot(keep: Callable[[torch.Tensor], None], slot: int) -> Callable[..., None]:
    """A node hook that keeps the gradient the node sends along its edge number `slot`."""

    def hook(grad_inputs: tuple[torch.Tensor | None, ...], _grad_outputs: Any) -> None:
        grad = grad_inputs[slot]
        if grad is not None:
            keep(grad)

    return hook


class _Call(NamedTuple):
    """A module call as the capture keeps it (its Listener token)."""

    layer: str  # the module
    name: str  # the call's name in the tensors kept: the module, then #2, #3 for its later calls
    inputs: dict[tuple[Any, int], list[int]]  # its input edges (_input_edges)


class _Keeper:
    """Keeps each module call's floating-point inputs and outputs (act/<call>/in|out/<i>) and, in backward, the
    gradients at them (actgrad/<call>/in|out/<i>: `out` the gradient reaching the call from what used its outputs,
    `in` the one the call passes on to its inputs); an attribution.Listener, told of every module's calls, the root's
    included (as ROOT), and of the nodes they made."""

    def __init__(self, cap: Capture) -> None:
        self.cap = cap
        self.seen: dict[str, int] = {}

    def entered(self, label: str, inputs: tuple[Any, dict[str, Any]], start: int) -> _Call | None:
        """The call's token, or None inside a torch.func transform."""
        if inv.transform_active():
            return None
        count = self.seen[label] = self.seen.get(label, 0) + 1
        call = label if count == 1 else f"{label}#{count}"
        edges = _input_edges(float_leaves(inputs)) if start >= 0 else {}  # none when the call makes no nodes
        return _Call(label, call, edges)

    def left(self, label: str, inputs: tuple[Any, dict[str, Any]], output: Any, token: _Call | None) -> None:
        cap = self.cap
        if token is None or inv.transform_active():  # batched or functional tensors: no own values
            cap.under_transform.add(label)
            return
        call = token.name
        cap.order.append(call)
        for i, t in enumerate(float_leaves(inputs)):
            cap.tensors[f"act/{call}/in/{i}"] = cap.copy.keep(t)
            cap.layer_of[f"act/{call}/in/{i}"] = label
        outputs = float_leaves(output)
        for i, t in enumerate(outputs):
            cap.tensors[f"act/{call}/out/{i}"] = cap.copy.keep(t)
            cap.layer_of[f"act/{call}/out/{i}"] = label
        _keep_output_grads(cap, label, call, outputs)

    def made(self, node: Any, edges: tuple[Any, ...], tokens: list[_Call | None]) -> None:
        """actgrad/<call>/in/<i>: the gradient the call passes on to each input, its own part only (a tensor that
        other modules read too gets the sum of all their parts), taken from the edges of the call's own nodes (its
        inner calls' included) into the input; no node is added to the graph, so the model's backward runs as it
        would. Inputs that are leaves get none."""
        for call in tokens:
            if call is None or not call.inputs:
                continue
            for slot, edge in enumerate(edges):
                for i in call.inputs.get(edge, ()):
                    node.register_hook(_at_slot(_adder(self.cap, call.layer, f"actgrad/{call.name}/in/{i}"), slot))


def _moved(
    spec: ModelSpec, device: str, moved: Moved | None
) -> tuple[nn.Module, list[str], tuple[Any, ...], dict[str, Any]]:
    """The model and inputs on `device` (`moved`: a copy there already, its gradients cleared here); a move that fails
    (a sparse buffer the device has no layout for) names the first tensor of the model not in the strided layout, or
    the model."""
    try:
        model, untied = moved if moved is not None else move(spec.model, device)
        model.zero_grad(set_to_none=True)
        args, kwargs = spec.inputs_on(device)
    except failure.USER_ERRORS as exc:
        named = [*spec.model.named_parameters(), *spec.model.named_buffers()]
        odd = next((n for n, t in named if t.layout != torch.strided), None)
        module = (odd.rpartition(".")[0] or inv.ROOT) if odd else None
        found = failure.finding(exc, f"moving the model to {device}", module, f"{odd} ({named_layout(spec, odd)})")
        raise failure.StepFailed(found if odd else found | {"op": None}) from exc
    return model, untied, args, kwargs


def named_layout(spec: ModelSpec, name: str | None) -> str:
    if name is None:
        return "-"
    tensor = dict([*spec.model.named_parameters(), *spec.model.named_buffers()])[name]
    return str(tensor.layout).removeprefix("torch.")


def train_step(
    spec: ModelSpec,
    device: str,
    *,
    activations: bool = True,
    with_inventory: bool = False,
    tracker: Any = None,
    synchronize: Callable[[], None] = lambda: None,
    at: str = "fp32",
    moved: Moved | None = None,
) -> Capture:
    """One step on `device` at precision `at` (precision.py); every tensor in the Capture is on the CPU. `tracker` is
    torch_neuronx (or None). `moved`: a copy of the model on `device` to train (time_steps lends its own), else the
    step makes one. A step that raises raises failure.StepFailed, naming the op, module and line."""
    cap = Capture(device=device)
    model, cap.untied, args, kwargs = _moved(spec, device, moved)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    nesting = attribution.Nesting(model, _Keeper(cap) if activations else None)
    if tracker is not None:
        tracker.clear_op_tracking()
    device_type = torch.device(device).type  # here: under the op inventory's watch, torch.device() is one more call
    with ExitStack() as stack:
        drawer = randomness.SameRandom()
        mode = stack.enter_context(
            StepMode(drawer=drawer, rounding=precision.rounding(at, device_type), writes=cap.copy)
        )
        recorded = stack.enter_context(inv.recording(model, nesting, mode) if with_inventory else nullcontext())
        phase = "forward"
        try:
            with precision.forward(at, device_type):
                output = model(*args, **kwargs)
                loss = spec.loss_fn(output)
            phase = "backward"
            torch.autograd.backward(loss)
            with unwatched():
                grads = {n: cap.copy.keep(p.grad) for n, p in model.named_parameters() if p.grad is not None}
            phase = "optimizer step"
            # The step's own SGD (the updated weights are checked), not the model's optimizer: its ops are ours, as
            # the copies are, so neither the inventory nor the mode sees them (some 84 ops a GPT-2 step).
            with unwatched():
                params = [p for p in model.parameters() if p.grad is not None]
            with outside(*params), recorded.unwatched() if isinstance(recorded, inv.Inventory) else nullcontext():
                cap.copy.writing(params)  # the mode does not see these writes
                optimizer.step()
            synchronize()
        except failure.USER_ERRORS as exc:
            raise _failed(exc, phase, nesting.stack, recorded) from exc
        finally:
            nesting.remove()
    if tracker is not None:
        cap.fallback_ops = sorted({str(op) for op in tracker.get_fallback_ops()})
    cap.random_ops = dict(sorted(drawer.calls.items()))
    cap.inventory = recorded if isinstance(recorded, inv.Inventory) else None
    _keep(cap, model, output, loss, grads)
    # The gradients are the capture's now: the model's next step clears them first anyway, and a value kept as itself
    # (copies.py) is copied at settle() when anything else still holds it.
    del grads
    model.zero_grad(set_to_none=True)
    cap.copy.settle()
    return cap


def _failed(error: BaseException, phase: str, active: list[str], recorded: Any) -> failure.StepFailed:
    raised = recorded.recorder.failed if isinstance(recorded, inv.Inventory) and recorded.recorder else None
    module = active[-1] if active else (raised[1] if raised else None)
    return failure.StepFailed(failure.finding(error, phase, module, raised[0] if raised else None))


def _keep(cap: Capture, model: nn.Module, output: Any, loss: torch.Tensor, grads: dict[str, torch.Tensor]) -> None:
    for i, t in enumerate(float_leaves(output)):
        cap.tensors[f"output/{i}"] = cap.copy(t)
    cap.tensors["loss"] = cap.copy(loss)
    for n, g in grads.items():
        cap.tensors[f"grad/{n}"] = g
        cap.layer_of[f"grad/{n}"] = n.rpartition(".")[0] or inv.ROOT
    for n, p in model.named_parameters():
        cap.tensors[f"weight/{n}"] = cap.copy(p)
        cap.layer_of[f"weight/{n}"] = n.rpartition(".")[0] or inv.ROOT


def time_steps(
    spec: ModelSpec,
    device: str,
    warmup: int,
    iterations: int,
    synchronize: Callable[[], None],
    warm_step: Callable[[Moved | None], None] | None = None,
    at: str = "fp32",
) -> dict[str, Any]:
    """Forward, loss and backward, bare: the first call, then p50/p95 over `iterations` after `warmup`.

    `warm_step` (the instrumented step: the same forward, loss and backward, with its optimizer step) runs right after
    the first call and counts as the first of the `warmup` steps, so the first call stays the process's cold one. It
    is lent the timed copy when the first call left that copy's tensors as they were (Unchanged), so it needs no copy
    of its own; else it is given None and makes one (a BatchNorm's statistics or a lazy module's weights moved on).
    The steps after it run on the weights it updated: the timing does not depend on their values.
    """
    moved = move(spec.model, device)
    model = moved[0]
    args, kwargs = spec.inputs_on(device)
    as_copied = Unchanged(model)

    def step() -> float:
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        with precision.forward(at, torch.device(device).type):
            loss = spec.loss_fn(model(*args, **kwargs))
        torch.autograd.backward(loss)
        synchronize()
        return time.perf_counter() - start

    first = step()
    if warm_step is not None:
        warm_step(moved if as_copied.holds(model) else None)
    for _ in range(warmup - 1 if warm_step is not None and warmup > 0 else warmup):
        step()
    times = sorted(step() for _ in range(iterations))
    return {
        "first_call_s": first,
        "p50_ms": statistics.median(times) * 1e3,
        "p95_ms": _percentile(times, 95) * 1e3,
        "iterations": iterations,
        "warmup": warmup,
    }


class Unchanged:
    """Whether a model still has the tensors it had when this was made: the same parameter and buffer objects, none
    changed in place (their version counters), none lazy (a lazy module's first call draws its weights)."""

    def __init__(self, model: nn.Module) -> None:
        # the tensors themselves are kept, so none of them is freed and its id reused
        self.tensors = [(t, t._version) for t in (*model.parameters(), *model.buffers())]
        self.lazy = any(is_lazy(t) for t, _ in self.tensors)

    def holds(self, model: nn.Module) -> bool:
        now = [*model.parameters(), *model.buffers()]
        return (
            not self.lazy
            and len(now) == len(self.tensors)
            and all(t is was and t._version == version for t, (was, version) in zip(now, self.tensors, strict=True))
        )


def _percentile(sorted_times: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, -(-len(sorted_times) * pct // 100))
    return sorted_times[int(rank) - 1]


def run_bare(spec: ModelSpec, device: str, steps: int, synchronize: Callable[[], None]) -> float:
    """Seconds for `steps` bare forward/loss/backward steps on a fresh copy (the benchmark's reference)."""
    model = move(spec.model, device)[0]
    args, kwargs = spec.inputs_on(device)
    start = time.perf_counter()
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        torch.autograd.backward(spec.loss_fn(model(*args, **kwargs)))
    synchronize()
    return time.perf_counter() - start
