"""The one Python dispatch mode of an evaluated step: the op inventory, the shared random draws, the bf16 matmul
inputs and the capture's kept values, each the work of its own module.

Every Python dispatch mode on the stack sends each op of the step through Python once more: on the GPT-2 example
(a bare CPU step of about 8 ms) the first mode adds about 8 ms and each further one about 4 ms. So a step that needs
the inventory, the random draws and the rounding enters one StepMode, and the modules only say what to do with an
op: inventory's recorder notes it, randomness draws it on the CPU, precision rounds its inputs. The order is the
one the separate modes had: the inventory sees the op as the model called it (the helper ops of a draw or a rounding
run below the mode and are not seen), then the capture is told of the tensors the op is about to write (a value it
keeps as the tensor itself is copied first, copies.Copies), then the op is drawn or rounded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

Key = tuple[str, str, str]  # (op, module, phase)
Rounding = Callable[[Any, tuple[Any, ...]], tuple[Any, ...]]  # (op, args) -> args at the matmul engine's precision
T = TypeVar("T")


def per_op(compute: Callable[[Any], T]) -> Callable[[Any], T]:
    """`compute(op)` kept per op, for what is asked of every dispatched op: by the op's id, the op kept beside its
    value (an OpOverload's own hash is a Python call)."""
    known: dict[int, tuple[Any, T]] = {}

    def lookup(func: Any) -> T:
        found = known.get(id(func))
        if found is None or found[0] is not func:
            found = known[id(func)] = (func, compute(func))
        return found[1]

    return lookup


# op -> the (position, name) of each argument its schema says it writes (in-place ops' self, out=, a running mean)
written_places = per_op(
    lambda func: tuple(
        (i, a.name) for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write
    )
)


def written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors the op is about to write, by its schema (none for most ops: one cached lookup)."""
    found: list[torch.Tensor] = []
    for i, name in written_places(func):
        arg = args[i] if i < len(args) else kwargs.get(name)
        if isinstance(arg, torch.Tensor):
            found.append(arg)
        elif isinstance(arg, list | tuple):
            found.extend(t for t in arg if isinstance(t, torch.Tensor))
    return found


class Recorder(Protocol):
    failed: Key | None  # the first op that raised

    def note(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Key: ...


class Writes(Protocol):
    def writing(self, tensors: Sequence[torch.Tensor]) -> None:
        """The tensors an op is about to write (before it runs)."""


class Drawer(Protocol):
    def draws(self, func: Any, args: Any, kwargs: dict[str, Any]) -> bool: ...

    def run(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any: ...


def _dynamo_guard() -> tuple[Callable[[], Any], Callable[[Any], None]] | None:
    """(the thread's Dynamo frame callback, a way to mark a code object as never compiled), or None where this torch
    has neither (torch's own per-call guard is kept there).

    torch wraps every dispatch mode's __torch_dispatch__ in a Dynamo-disable wrapper, because a model's own
    torch.compile leaves Dynamo's callback set while a compiled function runs eagerly under a mode, and the handler
    runs with its mode popped, where Dynamo would compile it (seen: 8 graphs of this handler for one step of a compiled
    Linear). That wrapper sets and restores the callback around each op, some 1 us each (0.5 ms of a GPT-2 step,
    measured by A/B). StepMode instead marks its handler's frame as never compiled and hands an op to the wrapped
    handler only while a callback is set."""
    try:
        from torch._C._dynamo import eval_frame
    except ImportError:
        return None
    callback = getattr(eval_frame, "get_eval_frame_callback", None)
    set_strategy = getattr(eval_frame, "set_code_exec_strategy", None)
    strategy, action = getattr(eval_frame, "_FrameExecStrategy", None), getattr(eval_frame, "_FrameAction", None)
    if callback is None or set_strategy is None or strategy is None or action is None:
        return None
    skip = strategy(action.SKIP, action.DEFAULT)  # this frame only: what it calls is guarded when a callback is set
    return callback, lambda code: set_strategy(code, skip)


_GUARD = _dynamo_guard()


class StepMode(TorchDispatchMode):  # type: ignore[no-untyped-call]  # untyped in torch
    """Set `recorder`, `drawer`, `rounding` and `writes` for what the step needs (None: not done); they may change while
    the mode is entered (the inventory is taken over part of a step)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return _GUARD is None  # torch's wrapper only where StepMode cannot guard itself (_dynamo_guard)

    def __init__(
        self,
        *,
        recorder: Recorder | None = None,
        drawer: Drawer | None = None,
        rounding: Rounding | None = None,
        writes: Writes | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.recorder = recorder
        self.drawer = drawer
        self.rounding = rounding
        self.writes = writes

    def _dispatch(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        recorder = self.recorder
        key = recorder.note(func, args, kwargs) if recorder is not None else None
        try:
            if self.writes is not None and written_places(func):
                self.writes.writing(written(func, args, kwargs))
            if self.drawer is not None and self.drawer.draws(func, args, kwargs):
                return self.drawer.run(func, args, kwargs)
            if self.rounding is not None:
                args = self.rounding(func, args)
            return func(*args, **kwargs)
        except Exception:
            if recorder is not None and recorder.failed is None:
                recorder.failed = key
            raise

    _guarded = torch._disable_dynamo(_dispatch, recursive=True)  # type: ignore[attr-defined]  # torch's per-op guard

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if _GUARD is not None and _GUARD[0]() is not None:  # a compiled function runs: nothing below it compiled
            return self._guarded(func, types, args, kwargs)
        return self._dispatch(func, types, args, kwargs)


if _GUARD is not None:
    _GUARD[1](StepMode.__torch_dispatch__.__code__)


_PYTHON_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def outside(*tensors: torch.Tensor) -> AbstractContextManager[Any]:
    """A block whose ops on `tensors` (ours, not the model's: copies, sums, probes) no dispatch mode sees. For plain
    tensors it excludes the Python dispatch key, which only the modes use for them: a copy costs about 12 us more,
    against about 36 us for popping every mode and pushing them back, and a captured GPT-2 step makes some 600. A
    tensor subclass dispatches through that key itself, so with one the modes are popped instead."""
    if all(type(t) in _PLAIN for t in tensors):
        return torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEY)
    return _disable_current_modes()


def unwatched() -> AbstractContextManager[Any]:
    """A block of our own bookkeeping (a hook reading its tensors' dtype, grad_fn or version, copying, registering)
    whose torch functions no torch-function mode or subclass sees: the op inventory's watch (inventory.py) would
    take each one, about 3 us apiece and some 590 in a captured GPT-2 step, and none of them is the model's."""
    return torch._C.DisableTorchFunction()
