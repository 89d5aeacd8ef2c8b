"""neuron_smoke.evaluate.attribution: ops owned by the module whose forward produced them, forward and backward."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from neuron_smoke.evaluate import attribution


class _Owners(TorchDispatchMode):  # type: ignore[no-untyped-call]  # untyped in torch
    def __init__(self, nesting: attribution.Nesting) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.nesting = nesting
        self.seen: list[tuple[str, str, str]] = []  # (op, module, phase)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen.append((func._schema.name, *self.nesting.where()))
        return func(*args, **(kwargs or {}))

    def modules(self, op: str, phase: str) -> set[str]:
        return {m for o, m, p in self.seen if o == op and p == phase}


class Attend(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


class Net(nn.Module):
    """Softmax in one module, dropout in the next, and code of the root's own between them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.attend, self.drop = nn.Linear(4, 4), Attend(), nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x)  # the root's own, before the first child
        out: torch.Tensor = self.drop(self.attend(self.fc(h)) * 3.0)
        return out


def _step(model: nn.Module) -> _Owners:
    nesting = attribution.Nesting(model)
    with nesting, _Owners(nesting) as owners:
        model(torch.randn(2, 4, requires_grad=True)).sum().backward()
    return owners


def test_backward_ops_belong_to_the_module_whose_forward_made_them() -> None:
    owners = _step(Net())
    assert owners.modules("aten::_softmax", "forward") == {"attend"}
    assert owners.modules("aten::_softmax_backward_data", "backward") == {"attend"}
    assert owners.modules("aten::addmm", "forward") == {"fc"}
    assert "fc" in owners.modules("aten::mm", "backward")  # the weight's gradient
    # the root's own code: the tanh before any child and the scaling between two children, both ways
    assert owners.modules("aten::tanh", "forward") == {attribution.ROOT}
    assert owners.modules("aten::tanh_backward", "backward") == {attribution.ROOT}
    assert attribution.ROOT in owners.modules("aten::mul", "forward")
    assert "drop" in owners.modules("aten::mul", "forward")  # dropout's mask
    assert "attend" not in owners.modules("aten::mul", "backward")


def test_a_module_called_twice_owns_both_calls_and_the_hooks_go_away() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.GELU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.act(self.act(x) + 1)
            return out

    model = Twice()
    owners = _step(model)
    assert owners.modules("aten::gelu_backward", "backward") == {"act"}
    assert [o for o, m, p in owners.seen if o == "aten::gelu_backward"] == ["aten::gelu_backward"] * 2
    assert owners.modules("aten::add", "forward") == {attribution.ROOT}
    assert not model._forward_hooks and not model.act._forward_pre_hooks


def test_a_forward_on_a_thread_with_numbers_of_its_own_is_owned_as_well() -> None:
    """Autograd numbers the nodes per thread. A forward run again in backward (activation checkpointing) runs on the
    device's backward thread (seen on the simulated device: its numbers start at 0), so an outermost call's numbers
    may be lower than those of the call before it: each keeps its own."""
    model = Net()
    x = torch.randn(2, 4, requires_grad=True)
    for _ in range(50):  # this thread's numbers run well ahead of a new thread's
        x = x * 1.0
    nesting = attribution.Nesting(model)
    outputs: list[torch.Tensor] = []
    with nesting:
        outputs.append(model(x))
        worker = threading.Thread(target=lambda: outputs.append(model(torch.randn(2, 4, requires_grad=True))))
        worker.start()
        worker.join()
        assert len(outputs) == 2
        for out in outputs:
            with _Owners(nesting) as owners:
                out.sum().backward()
            assert owners.modules("aten::_softmax_backward_data", "backward") == {"attend"}
            assert owners.modules("aten::tanh_backward", "backward") == {attribution.ROOT}
            assert "fc" in owners.modules("aten::mm", "backward")


def test_a_checkpointed_module_owns_the_backward_of_its_forward_run_again() -> None:
    class Checkpointed(Net):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = checkpoint(self.attend, self.fc(torch.tanh(x)), use_reentrant=False)
            out: torch.Tensor = self.drop(h * 3.0)
            return out

    owners = _step(Checkpointed())
    assert owners.modules("aten::_softmax", "forward") == {"attend"}
    assert owners.modules("aten::_softmax_backward_data", "backward") == {"attend"}
    assert "fc" in owners.modules("aten::mm", "backward")


def test_the_stack_names_where_a_forward_raised() -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("bad")

    model = nn.Sequential(nn.Linear(2, 2), Fails())
    with attribution.Nesting(model) as nesting, pytest.raises(ValueError, match="bad"):
        model(torch.ones(1, 2))
    assert nesting.stack == [attribution.ROOT, "1"]
    assert nesting.where() == ("1", "forward")


def test_no_grad_forward_claims_nothing() -> None:
    model = Net()
    with attribution.Nesting(model) as nesting, torch.no_grad():
        model(torch.randn(2, 4))
    assert nesting.owner == {} and nesting.stack == []


@pytest.mark.parametrize("counter", [True, False], ids=["autograd-counter", "probe"])
def test_next_sequence_nr_is_the_number_the_next_node_gets(counter: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not counter:
        monkeypatch.setattr(attribution, "_peek_sequence_nr", None)
    else:
        assert attribution._peek_sequence_nr is not None  # this torch has the counter: the cheap path is in use
    x = torch.ones(2, requires_grad=True)
    for _ in range(3):
        expected = attribution.next_sequence_nr()
        y = x * 2
        assert y.grad_fn is not None and y.grad_fn._sequence_nr() == expected
