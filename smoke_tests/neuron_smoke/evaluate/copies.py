"""The values a captured step keeps: CPU copies of its tensors, or on the CPU the tensors themselves while nothing can
change them.

A copy costs more than its call: GPT-2's instrumented step made some 120 copies (3 MB of fresh memory), which added
3.4 ms to a 13 ms step against keeping no value at all. A CPU tensor the step made is kept as itself instead
(Copies.keep), under three rules:

- before an op of the step writes to a kept tensor's memory (through any view of it, by the op's schema), the step
  mode tells Copies (stepmode.Writes) and the tensor is copied first, as it was when kept;
- before the step's own SGD writes the parameters (the mode does not see it), the same is done for them;
- when the step ends (settle), a kept tensor stays as it is only if nothing but the capture can reach it or its
  memory: no reference outside the capture, no view of it, no other tensor on its memory (a view is always copied:
  its base is one), memory torch allocated for this process alone (not numpy's, a buffer's or shared memory).
  Otherwise it is copied then, so nothing after the step can change it.

A kept tensor whose version moved without the mode seeing a write (a write from another thread) has lost the value it
had when kept: wherever that is found (kept again, copied, or at the step's end) its names so far are dropped from the
capture and named in `lost`, so they are not compared.

Elsewhere (another device, a tensor subclass, a sparse or nested tensor) `keep` copies at once, as `__call__` does; a
write to a sparse or nested tensor copies every kept tensor first.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from neuron_smoke.evaluate.stepmode import outside

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_storage_users: Any = getattr(torch._C, "_storage_Use_Count", None)


def cpu_copy(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy, kept out of the op inventory (the copy is ours, not the model's)."""
    with outside(t):
        return t.detach().to("cpu", copy=True)


def _memory(t: torch.Tensor) -> int:
    """Where the tensor's storage starts."""
    return int(t.untyped_storage().data_ptr())


def _counts(objects: list[Any]) -> list[int]:
    """Each object's Python reference count, taken the one way both _OWN and _unreached take it."""
    return [sys.getrefcount(o) for o in objects]


# The count of an object only a list holds, as _counts reports it on this interpreter (measured, not assumed: an
# interpreter that borrows a reference where another takes one counts fewer); a free-threaded build's counts are not
# exact, so there nothing is taken to be unreached.
_OWN = _counts([torch.empty(0)])[0]
_EXACT = _storage_users is not None and getattr(sys, "_is_gil_enabled", lambda: True)()


def _unreached(t: list[torch.Tensor], held: int) -> bool:
    """Whether nothing but the capture reaches the kept tensor `t[0]` or its memory. Python: its references are its
    `held` names in the capture, Copies' record of it and the list `t`. C++: its TensorImpl is held by its Python
    object alone (a view of it would hold it too), and its storage by that TensorImpl and the temporary storage object
    asked (no other tensor on that memory), which torch allocated for this process alone. A view is not unreached:
    its base is another tensor on its memory."""
    if not _EXACT or not hasattr(t[0], "_use_count") or t[0]._base is not None:
        return False
    if _counts(t) != [_OWN + 1 + held]:
        return False
    storage = t[0].untyped_storage()
    # memory torch did not allocate (numpy's, a buffer's, DLPack's) or shares with other processes is reachable
    # without any tensor: its owner may write it
    foreign = not storage.resizable() or storage.is_shared()
    return t[0]._use_count() == 1 and bool(_storage_users(storage._cdata) == 2) and not foreign


def _names(tensors: dict[str, torch.Tensor], kept: dict[int, Any]) -> dict[int, list[str]]:
    """The names each kept tensor has in `tensors`."""
    names: dict[int, list[str]] = {}
    for name, value in tensors.items():
        if id(value) in kept:
            names.setdefault(id(value), []).append(name)
    return names


class Copies:
    """A captured step's values, one per tensor value: a tensor kept again unchanged (the same object with the same
    version counter; a module's input is most often the output of the one before it) gets the value kept already, so
    it is neither copied from the device nor stored in a baseline twice. For a copy, a weak reference tells the object
    apart from a later one at the same id without keeping the device's tensor alive. `tensors` is the capture's
    name -> value map, whose values settle() and a write may swap for copies (see the module docstring)."""

    def __init__(self, tensors: dict[str, torch.Tensor] | None = None) -> None:
        self.tensors = tensors if tensors is not None else {}
        self._made: dict[int, tuple[weakref.ref[torch.Tensor], int, torch.Tensor]] = {}
        # id -> (a tensor kept as itself, its version then, where its storage starts: asked once, not at every write)
        self._kept: dict[int, tuple[torch.Tensor, int, int]] = {}
        self.lost: list[str] = []  # names whose values changed behind the mode (module docstring)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        """A copy of `t` as it is now (the one made already when `t` is unchanged since)."""
        kept = self._kept.get(id(t))
        if kept is not None and kept[0] is t:
            return self._copy_kept(id(t))
        made = self._made_already(t)
        if made is not None:
            return made
        copy = cpu_copy(t)
        self._made[id(t)] = (weakref.ref(t), t._version, copy)
        return copy

    def keep(self, t: torch.Tensor) -> torch.Tensor:
        """The value of `t` as it is now: on the CPU `t` itself (copied later only if the rules say so), else a copy."""
        if t.device.type != "cpu" or type(t) not in _PLAIN or t.layout is not torch.strided or t.is_nested:
            return self(t)
        kept = self._kept.get(id(t))
        if kept is not None and kept[0] is t:
            if kept[1] == t._version:
                return t
            self._copy_kept(id(t))  # changed behind the mode since: its earlier names lose their value
        made = self._made_already(t)
        if made is not None:
            return made
        self._kept[id(t)] = (t, t._version, _memory(t))
        return t

    def _made_already(self, t: torch.Tensor) -> torch.Tensor | None:
        """The copy made of `t` already, if `t` is unchanged since."""
        made = self._made.get(id(t))
        return made[2] if made is not None and made[0]() is t and made[1] == t._version else None

    def writing(self, tensors: Sequence[torch.Tensor]) -> None:
        """Copy each kept tensor on the memory of `tensors` before they are written (a stepmode.Writes)."""
        if not self._kept:
            return
        cpu = [t for t in tensors if t.device.type == "cpu"]
        if any(t.layout is not torch.strided or t.is_nested for t in cpu):  # no one memory to tell: copy them all
            chosen = list(self._kept)
        else:
            memories = {_memory(t) for t in cpu}
            chosen = [k for k, (_, _, memory) in self._kept.items() if memory in memories]
        for key in chosen:
            self._copy_kept(key)

    def _copy_kept(self, key: int) -> torch.Tensor:
        """A copy of a kept tensor, now under each of its names. One that changed behind the mode since it was kept
        (its version moved) is a copy of its value now: its names lose theirs (`lost`)."""
        t, version, _ = self._kept.pop(key)
        copy = cpu_copy(t)
        names = [n for n, value in self.tensors.items() if value is t]
        if t._version != version:
            self._lose(names)
            return copy
        for name in names:
            self.tensors[name] = copy
        self._made[key] = (weakref.ref(t), version, copy)
        return copy

    def _lose(self, names: list[str]) -> None:
        """Names whose value changed behind the mode: dropped from the capture, listed in `lost`."""
        for name in names:
            del self.tensors[name]
        self.lost.extend(names)

    def settle(self) -> None:
        """At the step's end: copy the kept tensors something else can still reach; drop those changed behind the
        mode (`lost`). The values left are the capture's alone, detached as a copy is."""
        kept, self._kept = self._kept, {}
        self._made.clear()
        names = _names(self.tensors, kept)  # a function: no name here is left holding a tensor
        changed = [key for key in names if kept[key][0]._version != kept[key][1]]
        for key in changed:
            self._lose(names.pop(key))
        for key, where in names.items():
            one = [kept[key][0]]
            value = one[0].detach() if _unreached(one, len(where)) else cpu_copy(one[0])
            for name in where:
                self.tensors[name] = value
