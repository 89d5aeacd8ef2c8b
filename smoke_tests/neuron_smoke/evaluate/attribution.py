"""Which module an op belongs to, forward and backward: the module whose forward produced it.

Forward, the owner is the innermost module whose forward is running, kept as a stack by forward pre and post hooks
on every module, the root included (so code in the root's own `forward` is the root's, not the last child's).
Backward, the owner of an op is the module whose forward made the autograd node being run: each module's post hook
claims the nodes its forward created (walking back from its outputs' grad_fn over nodes newer than its start, inner
modules claiming first), and during backward torch._C._current_autograd_node() says which node runs. torch's
ModuleTracker names the module whose backward hook ran last instead, so a softmax's backward could land in the
dropout that followed it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import nn

from neuron_smoke.evaluate.stepmode import outside, unwatched

ROOT = "(root)"
_ACCUMULATE = torch._C._functions.AccumulateGrad  # type: ignore[attr-defined]  # a leaf's gradient sink


_peek_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)  # this thread's next number, untaken


def next_sequence_nr() -> int:
    """The sequence number the next autograd node will get: autograd's own counter (asked at every module call),
    else a throwaway node's number plus one (making it takes one)."""
    if _peek_sequence_nr is not None:
        return int(_peek_sequence_nr())
    with outside(), torch.enable_grad():
        probe = torch.zeros((), requires_grad=True).view(())
    assert probe.grad_fn is not None
    return int(probe.grad_fn._sequence_nr()) + 1


def _grad_fns(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [value.grad_fn] if value.grad_fn is not None else []
    if isinstance(value, dict):
        return [g for v in value.values() for g in _grad_fns(v)]
    if isinstance(value, list | tuple):
        return [g for v in value for g in _grad_fns(v)]
    return [g for v in getattr(value, "__dict__", {}).values() if isinstance(v, torch.Tensor) for g in _grad_fns(v)]


def made_since(roots: list[Any], start: int) -> Iterator[Any]:
    """Each autograd node made since sequence number `start` that leads to `roots` (a call's outputs' grad_fns), once:
    the nodes of the call that made them, its inner modules' included. Nodes are told apart by their Python object:
    autograd hands out the same one for a node while one is alive, and `seen` keeps them."""
    todo, seen = list(roots), set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node) is _ACCUMULATE or node._sequence_nr() < start:
            continue
        yield node
        todo.extend(n for n, _ in node.next_functions)


class Listener(Protocol):
    """Told of each module call Nesting sees, so a second set of hooks need not walk the same graph again."""

    def entered(self, label: str, inputs: tuple[Any, dict[str, Any]], start: int) -> None:
        """A call starts: its (args, kwargs) and the sequence number of its first node (-1: none will be made)."""

    def left(self, label: str, inputs: tuple[Any, dict[str, Any]], output: Any, made: list[Any]) -> None:
        """A call ended: `made` its autograd nodes and its inner modules' (made_since its start)."""


class Nesting:
    """The modules whose forward is running (innermost last) and the owner of each autograd node made in them.

    `stack` is left as it was when a forward raised (the post hooks did not run), so it names where an error happened.
    A `listener` is told of each call after Nesting has taken it in.
    """

    def __init__(self, model: nn.Module, listener: Listener | None = None) -> None:
        self.stack: list[str] = []
        # node -> its module. Keyed by the node's Python object, which this keeps alive, so autograd hands out the
        # same one during backward (_current_autograd_node); a key made of its number and name took two calls a look.
        self.owner: dict[Any, str] = {}
        self.listener = listener
        self._starts: list[int] = []
        self._handles: list[Any] = []
        for name, module in model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._enter(name or ROOT), with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._leave, with_kwargs=True))

    def _enter(self, label: str) -> Callable[..., None]:
        def hook(_module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
            with unwatched():
                self.stack.append(label)
                transformed = torch._C._functorch.peek_interpreter_stack() is not None
                start = next_sequence_nr() if torch.is_grad_enabled() and not transformed else -1
                self._starts.append(start)
                if self.listener is not None:
                    self.listener.entered(label, (args, kwargs), start)

        return hook

    def _leave(self, _module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if not self.stack:
            return
        with unwatched():
            label, start = self.stack.pop(), self._starts.pop()
            made = list(made_since(_grad_fns(output), start)) if start >= 0 else []
            for node in made:  # an inner module's nodes stay its own, but the walk goes through them to reach nodes
                self.owner.setdefault(node, label)  # this module made before calling it
            if self.listener is not None:
                self.listener.left(label, (args, kwargs), output, made)

    def where(self) -> tuple[str, str]:
        """(module, phase): the innermost module running forward, or the owner of the node running backward (ROOT
        outside both), and "forward" or "backward"; one look at the autograd engine, as it is asked for every op."""
        node = torch._C._current_autograd_node()
        if node is not None:
            return self.owner.get(node, ROOT), "backward"
        return self.stack[-1] if self.stack else ROOT, "forward"

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self) -> Nesting:
        return self

    def __exit__(self, *_: Any) -> None:
        self.remove()
