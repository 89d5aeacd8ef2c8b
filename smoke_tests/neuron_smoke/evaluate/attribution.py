"""Which module an op belongs to, forward and backward: the module whose forward produced it.

Forward, the owner is the innermost module whose forward is running, kept as a stack by forward pre and post hooks
on every module, the root included (so code in the root's own `forward` is the root's, not the last child's).
Backward, the owner of an op is the module whose forward made the autograd node being run. Autograd numbers the
nodes a thread makes in order, so each module call made the numbers between its pre and post hooks, its inner calls'
numbers excepted. When the outermost call ends, one walk back from the calls' outputs hands each node it meets to
the call whose numbers hold it; during backward torch._C._current_autograd_node() names the running node. The
numbers are the calling thread's: a forward run again in backward (activation checkpointing) runs on the device's
backward thread, with numbers of its own, so each outermost call keeps its own. torch's ModuleTracker names the
module whose backward hook ran last instead, so a softmax's backward could land in the dropout that followed it.
"""

from __future__ import annotations

from bisect import bisect_right
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


def made_since(roots: list[Any], start: int) -> Iterator[tuple[Any, int, tuple[Any, ...]]]:
    """Each autograd node numbered `start` or later that leads to `roots` (grad_fns), once, with its number and its
    edges (next_functions, a new tuple at every ask). Nodes are told apart by their Python object: autograd hands out
    the same one for a node while one is alive, and `seen` keeps them."""
    todo, seen = list(roots), set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node) is _ACCUMULATE:
            continue
        seq = node._sequence_nr()
        if seq < start:
            continue
        edges = node.next_functions
        yield node, seq, edges
        todo.extend(n for n, _ in edges)


class Listener(Protocol):
    """Told of each module call Nesting sees, and of the autograd nodes the calls made, so a second set of hooks need
    not walk the same graph again."""

    def entered(self, label: str, inputs: tuple[Any, dict[str, Any]], start: int) -> Any:
        """A call starts: its (args, kwargs) and the number of its first node (-1: none will be made). Returns the
        call's token (None: nothing kept), handed back in left() and made()."""

    def left(self, label: str, inputs: tuple[Any, dict[str, Any]], output: Any, token: Any) -> None:
        """A call ended."""

    def made(self, node: Any, edges: tuple[Any, ...], tokens: list[Any]) -> None:
        """After the outermost call ends: an autograd node made inside calls (the tokens of those that made nodes,
        innermost first) and its edges, once per node that leads to a call's outputs."""


class _Call:
    __slots__ = ("label", "parent", "start", "token")

    def __init__(self, label: str, start: int, parent: int, token: Any) -> None:
        self.label, self.start, self.parent, self.token = label, start, parent, token


class Nesting:
    """The modules whose forward is running (innermost last) and the owner of each autograd node made in them.

    `stack` is left as it was when a forward raised (the post hooks did not run), so it names where an error happened.
    A `listener` is told of each call after Nesting has taken it in, and of each node the calls made once the
    outermost call has ended (the same walk).
    """

    def __init__(self, model: nn.Module, listener: Listener | None = None) -> None:
        self.stack: list[str] = []
        self.listener = listener
        # node -> its module. Keyed by the node's Python object, which this keeps alive, so autograd hands out the
        # same one during backward (_current_autograd_node).
        self.owner: dict[Any, str] = {}
        self.calls: list[_Call] = []  # the calls that made nodes (start >= 0), in the order they started
        # Within the outermost call: node numbers where the owner changes, and the owner from there on (an index into
        # calls, -1: none). A call's pre hook starts its numbers, its post hook hands the rest back to the call around
        # it.
        self._seqs: list[int] = []
        self._owners: list[int] = []
        self._open: list[tuple[int, Any]] = []  # per running call: its index in calls (-1: makes none), its token
        self._making: list[int] = []  # the indices of the running calls that make nodes, innermost last
        self._outputs: list[Any] = []  # grad_fns of the calls' outputs since the outermost call started
        self._first = 0  # the first call of the outermost one
        self._handles: list[Any] = []
        for name, module in model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._enter(name or ROOT), with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._leave, with_kwargs=True))

    def _enter(self, label: str) -> Callable[..., None]:
        def hook(_module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
            with unwatched():
                if not self.stack:  # an outermost call: its own numbers (another thread's, maybe)
                    self._first, self._seqs, self._owners = len(self.calls), [], []
                self.stack.append(label)
                transformed = torch._C._functorch.peek_interpreter_stack() is not None
                start = next_sequence_nr() if torch.is_grad_enabled() and not transformed else -1
                token = self.listener.entered(label, (args, kwargs), start) if self.listener is not None else None
                index = -1
                if start >= 0:
                    index = len(self.calls)
                    self.calls.append(_Call(label, start, self._making[-1] if self._making else -1, token))
                    self._making.append(index)
                    self._seqs.append(start)
                    self._owners.append(index)
                self._open.append((index, token))

        return hook

    def _leave(self, _module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if not self.stack:
            return
        with unwatched():
            label = self.stack.pop()
            index, token = self._open.pop()
            if index >= 0:
                self._making.pop()
                self._outputs.extend(_grad_fns(output))
                self._seqs.append(next_sequence_nr())
                self._owners.append(self._making[-1] if self._making else -1)
            if self.listener is not None:
                self.listener.left(label, (args, kwargs), output, token)
            if not self.stack:
                self._walk()

    def _walk(self) -> None:
        """Claim each node the calls since the outermost one started made, and tell the listener of it: one walk from
        all their outputs (an inner call's nodes are its callers' too). A node claimed already keeps its owner (a
        forward run again in backward reaches the first run's nodes too)."""
        roots, self._outputs = self._outputs, []
        if self._first >= len(self.calls):
            return
        listener, owner = self.listener, self.owner
        for node, seq, edges in made_since(roots, self.calls[self._first].start):
            index = self._owner(seq)
            if index < 0:
                continue
            owner.setdefault(node, self.calls[index].label)
            if listener is not None:
                tokens = []
                while index >= 0:
                    call = self.calls[index]
                    tokens.append(call.token)
                    index = call.parent
                listener.made(node, edges, tokens)

    def _owner(self, seq: int) -> int:
        at = bisect_right(self._seqs, seq) - 1
        return self._owners[at] if at >= 0 else -1

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
