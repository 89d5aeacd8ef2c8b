"""The op inventory: every aten op a model step dispatches, with its call count, dtypes and calling module.

A dispatch mode (stepmode.StepMode) sees each op after autograd (forward and backward); attribution.Nesting names
the module whose forward produced it (backward: the module whose forward made the autograd node being run). A
TorchFunctionMode notes torch functions called inside torch.func transforms, which the dispatch mode cannot tell
apart. It is taken over one step only: the timed steps run bare, so the inventory costs one slow step, not a slower
steady state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode, resolve_name

from neuron_smoke.evaluate import attribution
from neuron_smoke.evaluate.stepmode import Key, StepMode, per_op

ROOT = attribution.ROOT


@dataclass
class OpRecord:
    op: str  # aten::addmm.default
    module: str  # the innermost module (parameter-style name) or (root)
    phase: str  # forward | backward
    calls: int = 0
    dtypes: set[str] = field(default_factory=set)
    layouts: set[str] = field(default_factory=set)  # non-strided layouts only (sparse)
    nested: bool = False
    under_transform: bool = False  # a torch function called inside a torch.func transform (vmap, grad, ...)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "module": self.module,
            "phase": self.phase,
            "calls": self.calls,
            "dtypes": sorted(self.dtypes),
            "layouts": sorted(self.layouts),
            "nested": self.nested,
            "under_transform": self.under_transform,
        }


_STRIDED = torch.strided
_DTYPE = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16", torch.int64: "int64"}


op_name = per_op(lambda func: f"{func._schema.name}.{func._overloadname}")  # aten::addmm.default
_SEQUENCES = (list, tuple)


def _note_odd(rec: OpRecord, t: torch.Tensor, dtypes: set[str]) -> None:
    """A tensor in a list argument, or one of a layout other than strided, or nested."""
    dtypes.add(_DTYPE.get(t.dtype) or str(t.dtype).removeprefix("torch."))
    if t.layout is not _STRIDED:
        rec.layouts.add(str(t.layout).removeprefix("torch."))
    if t.is_nested:
        rec.nested = True


_peek = torch._C._functorch.peek_interpreter_stack


def transform_active() -> bool:
    return _peek() is not None


class _Recorder:
    """Notes each op a StepMode sees (a stepmode.Recorder): its call count, dtypes and layouts per op, module, phase."""

    def __init__(self, nesting: attribution.Nesting) -> None:
        self.nesting = nesting
        self.records: dict[Key, OpRecord] = {}
        self.failed: Key | None = None  # (op, module, phase) of an op that raised

    def note(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Key:
        module, phase = self.nesting.where()
        key = (op_name(func), module, phase)
        rec = self.records.get(key)
        if rec is None:
            rec = self.records[key] = OpRecord(*key)
        rec.calls += 1
        # The tensors among the op's arguments, one list level deep (aten schemas nest no further), looked at in
        # place: asked of every op, so no list of them is made (pytree is slower still).
        dtypes = rec.dtypes
        for a in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(a, torch.Tensor):
                dtype = a.dtype
                dtypes.add(_DTYPE.get(dtype) or str(dtype).removeprefix("torch."))
                if a.layout is not _STRIDED or a.is_nested:
                    _note_odd(rec, a, dtypes)
            elif type(a) in _SEQUENCES:
                for t in a:
                    if isinstance(t, torch.Tensor):
                        _note_odd(rec, t, dtypes)
        return key

    def note_transform(self, func: Any) -> None:
        """A torch function called inside a torch.func transform (the dispatch mode sees only the unbatched ops)."""
        key = (resolve_name(func) or getattr(func, "__name__", str(func)), self.nesting.where()[0], "forward")
        rec = self.records.get(key)
        if rec is None:
            rec = self.records[key] = OpRecord(*key, under_transform=True)
        rec.calls += 1


class _TransformWatch(TorchFunctionMode):
    """Sees torch functions above the functorch layers, where a vmap/grad/jacrev interpreter is still active."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if _peek() is not None:  # transform_active(), without a call: asked for every torch function
            self.recorder.note_transform(func)
        return func(*args, **(kwargs or {}))


@dataclass
class Inventory:
    records: list[OpRecord] = field(default_factory=list)
    recorder: _Recorder | None = None  # while recording: where an op raised
    watch: _TransformWatch | None = None  # while recording: the torch-function watch

    @contextmanager
    def unwatched(self) -> Iterator[None]:
        """A part of the recorded block that calls no torch.func transform: its torch functions skip the transform
        watch (about 3 us each; SGD makes some 4 a parameter), while its ops still reach the dispatch mode unless the
        caller keeps them out too (capture.train_step does, for its own SGD step). Paused only while it is the
        innermost torch-function mode: leaving a mode pops whichever is innermost, and the model may have entered one
        (torch.set_default_device in its forward) that must stay as it is."""
        watch = self.watch
        if watch is None or _get_current_function_mode() is not watch:  # type: ignore[no-untyped-call]
            yield
            return
        watch.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # untyped in torch
        try:
            yield
        finally:
            watch.__enter__()  # type: ignore[no-untyped-call]

    def to_list(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in sorted(self.records, key=lambda r: (r.phase != "forward", r.module, r.op))]

    def modules_of(self, op: str) -> list[str]:
        """Modules that called an op, given as `aten::gelu`, `gelu` or `aten::gelu.default`."""
        want = normalize(op)
        return sorted({r.module for r in self.records if normalize(r.op) == want})


def normalize(name: str) -> str:
    return name.removeprefix("aten::").split(".")[0]


@contextmanager
def recording(
    model: torch.nn.Module, nesting: attribution.Nesting | None = None, mode: StepMode | None = None
) -> Iterator[Inventory]:
    """Record the ops dispatched inside the block; the Inventory is filled when the block exits. `nesting`: one the
    caller already keeps on the model (otherwise one is made for the block); `mode`: the StepMode the caller has
    entered already, which records in the block (otherwise one is entered for it: another mode costs every op)."""
    inventory = Inventory()
    made = nesting is None
    nesting = attribution.Nesting(model) if nesting is None else nesting
    recorder = inventory.recorder = _Recorder(nesting)
    own = StepMode() if mode is None else mode
    own.recorder = recorder
    watch = inventory.watch = _TransformWatch(recorder)
    try:
        with own if mode is None else nullcontext(), watch:
            yield inventory
    finally:
        own.recorder = None
        inventory.watch = None
        if made:
            nesting.remove()
    inventory.records = list(recorder.records.values())
    inventory.recorder = None
