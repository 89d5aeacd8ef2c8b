"""neuron_smoke.evaluate.copies: a captured step's values, kept on the CPU as the tensors themselves only while nothing
else can change them."""

from __future__ import annotations

import threading

import numpy
import pytest
import torch
from torch import nn

from neuron_smoke.evaluate import capture, compare, copies
from neuron_smoke.evaluate.stepmode import StepMode
from neuron_smoke.models import ModelSpec


def test_a_cpu_tensor_only_the_capture_holds_is_kept_as_itself_detached() -> None:
    kept = copies.Copies()
    t = torch.randn(3, requires_grad=True) * 2
    memory = t.data_ptr()
    kept.tensors["a"] = kept.keep(t)
    kept.tensors["b"] = kept.keep(t)  # the same value under a second name
    del t
    kept.settle()
    a, b = kept.tensors["a"], kept.tensors["b"]
    assert a is b and a.data_ptr() == memory and not a.requires_grad and a.grad_fn is None


def test_a_tensor_someone_else_holds_a_view_an_alias_or_foreign_memory_is_copied_at_settle() -> None:
    """Each kept here as a temporary (no name of this test holds it), but reachable otherwise."""
    held, base, aliased = torch.ones(3), torch.ones(4), torch.ones(2)
    array, buffer = numpy.ones(3, dtype=numpy.float32), bytearray(numpy.ones(2, dtype=numpy.float32).tobytes())
    kept = copies.Copies()
    kept.tensors["held"] = kept.keep(held)
    kept.tensors["view"] = kept.keep(base[1:])
    kept.tensors["alias"] = kept.keep(aliased.detach())
    kept.tensors["numpy"] = kept.keep(torch.from_numpy(array))
    kept.tensors["buffer"] = kept.keep(torch.frombuffer(buffer, dtype=torch.float32))
    shared = torch.ones(2).share_memory_()  # another process may write it
    memory = shared.data_ptr()
    kept.tensors["shared"] = kept.keep(shared)
    del shared
    kept.settle()
    for t in (held, base, aliased, torch.from_numpy(array), torch.frombuffer(buffer, dtype=torch.float32)):
        t.add_(1)  # each changed after the step, through another tensor on the same memory: the capture's values not
    for name, value in kept.tensors.items():
        assert bool((value == 1).all()), name
    assert kept.tensors["shared"].data_ptr() != memory


def test_a_device_tensor_or_a_subclass_is_copied_when_kept() -> None:
    class Tagged(torch.Tensor):
        pass

    kept = copies.Copies()
    t = torch.ones(2).as_subclass(Tagged)
    value = kept.keep(t)
    assert value is not t and value.data_ptr() != t.data_ptr()


def test_an_op_that_writes_a_kept_tensor_or_a_view_of_it_copies_it_first() -> None:
    """In place on the kept tensor, through a view of it, and through `.data` (another version counter)."""
    kept = copies.Copies()
    a, b, c = torch.zeros(3), torch.zeros(2, 2), torch.zeros(3)
    for name, t in {"a": a, "b": b, "c": c}.items():
        kept.tensors[name] = kept.keep(t)
    with StepMode(writes=kept):
        a.add_(1)
        b[0].fill_(5)
        c.data.mul_(0).add_(7)
    assert [float(kept.tensors[n].abs().sum()) for n in "abc"] == [0.0, 0.0, 0.0]
    assert kept.tensors["a"] is not a and float(a.sum()) == 3.0 and float(c.sum()) == 21.0
    kept.settle()
    assert [float(kept.tensors[n].abs().sum()) for n in "abc"] == [0.0, 0.0, 0.0]


def test_a_tensor_written_where_the_mode_cannot_see_is_dropped_and_named_lost() -> None:
    """A write from another thread (the mode is the step's thread's): the value when kept is gone."""
    kept = copies.Copies()
    t = torch.zeros(3)
    kept.tensors["act/m/out/0"] = kept.keep(t)
    with StepMode(writes=kept):
        worker = threading.Thread(target=lambda: t.add_(1))
        worker.start()
        worker.join()
    kept.settle()
    assert "act/m/out/0" not in kept.tensors and kept.lost == ["act/m/out/0"]


def test_a_tensor_found_changed_behind_the_mode_when_kept_again_or_copied_loses_its_earlier_names() -> None:
    kept = copies.Copies()
    a, b = torch.zeros(2), torch.zeros(2)
    kept.tensors["a/1"] = kept.keep(a)
    kept.tensors["b/1"] = kept.keep(b)
    for t in (a, b):
        worker = threading.Thread(target=t.add_, args=(1,))  # no step mode on this thread
        worker.start()
        worker.join()
    kept.tensors["a/2"] = kept.keep(a)  # the value a later module read: kept
    kept.tensors["b/2"] = kept(b)  # a copy asked for now: of the value now
    kept.settle()
    assert sorted(kept.lost) == ["a/1", "b/1"] and sorted(kept.tensors) == ["a/2", "b/2"]
    assert bool((kept.tensors["a/2"] == 1).all()) and bool((kept.tensors["b/2"] == 1).all())


class Stashing(nn.Module):
    """Keeps its last output (as a cache might) and changes it in place on its next call."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.last: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.last is not None:
            self.last.zero_()
        out: torch.Tensor = self.fc(x)
        self.last = out.detach()
        return out * 2


class ParameterIn(nn.Module):
    """Hands its own parameter to a submodule as the input (which the step's SGD then writes)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.ones(2, 3))
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.act(self.table) * x
        return out


def test_values_the_model_or_its_sgd_changes_after_they_were_kept_are_those_of_the_step() -> None:
    torch.manual_seed(0)
    stash = Stashing()
    spec = ModelSpec(stash, (torch.randn(2, 3),), {}, lambda out: out.sum(), "stash")
    moved = capture.move(stash, "cpu")
    cap = capture.train_step(spec, "cpu", moved=moved)
    fc_out = cap.tensors["act/fc/out/0"].clone()
    assert bool(fc_out.abs().sum() > 0)
    moved[0](*spec.args)  # the model's next call zeroes what it stashed: the capture's value stays
    assert torch.equal(cap.tensors["act/fc/out/0"], fc_out)

    given = ParameterIn()
    spec = ModelSpec(given, (torch.full((2, 3), 0.5),), {}, lambda out: out.sum(), "param-in")
    cap = capture.train_step(spec, "cpu")
    assert torch.equal(cap.tensors["act/act/in/0"], torch.ones(2, 3))  # as the forward read it, before SGD
    assert not torch.equal(cap.tensors["weight/table"], torch.ones(2, 3))


def test_a_captured_step_keeps_its_activations_and_gradients_without_copying_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The point of the module: most of a CPU step's values are its own tensors, not copies."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    spec = ModelSpec(model, (torch.randn(3, 4),), {}, lambda out: out.square().sum(), "seq")
    made: list[int] = []
    original = copies.cpu_copy

    def counted(t: torch.Tensor) -> torch.Tensor:
        made.append(t.numel())
        return original(t)

    monkeypatch.setattr(copies, "cpu_copy", counted)
    cap = capture.train_step(spec, "cpu")
    monkeypatch.undo()
    values = {id(t) for t in cap.tensors.values()}
    weights = len(list(model.parameters()))
    assert len(made) < len(values) and len(made) <= weights + 3  # the weights, the loss, the output, the input
    reference = capture.train_step(spec, "cpu")
    assert all(torch.equal(cap.tensors[n], reference.tensors[n]) for n in cap.tensors)


def test_a_lost_value_is_named_apart_and_not_counted_missing() -> None:
    device = capture.Capture(device="cpu", tensors={"a": torch.ones(1)})
    cpu = capture.Capture(device="cpu", tensors={"a": torch.ones(1), "b": torch.ones(1)})
    device.copy.lost.append("b")
    gone = compare.missing(device, cpu, None)
    assert gone == {"only_in_cpu_run": [], "changed_in_step": ["b"]}


class SparseOut(nn.Module):
    """A submodule whose output is a sparse tensor (its storage cannot be asked for)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).to_sparse()


class Densify(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = SparseOut()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).to_dense()


def test_a_sparse_value_is_copied_when_kept_and_a_write_to_a_sparse_tensor_copies_all_kept_first() -> None:
    torch.manual_seed(0)
    spec = ModelSpec(Densify(), (torch.randn(2, 3),), {}, lambda out: out.sum(), "sparse-out")
    cap = capture.train_step(spec, "cpu")
    sparse = cap.tensors["act/inner/out/0"]
    assert sparse.layout == torch.sparse_coo and torch.equal(sparse.to_dense(), cap.tensors["act/inner.fc/out/0"])
    kept = copies.Copies()
    dense, target = torch.zeros(2), torch.zeros(2).to_sparse()
    kept.tensors["dense"] = kept.keep(dense)
    with StepMode(writes=kept):
        target.add_(torch.ones(2).to_sparse())
    assert kept.tensors["dense"] is not dense  # copied before the write it could not place
