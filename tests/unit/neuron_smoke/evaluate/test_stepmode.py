"""neuron_smoke.evaluate.stepmode: one dispatch mode does the inventory, the shared random draws and the bf16 matmul
rounding of a step, as the three did as separate modes; a captured step runs under that one mode only."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from neuron_smoke.evaluate import capture, inventory, precision, randomness
from neuron_smoke.evaluate.stepmode import StepMode
from neuron_smoke.models import ModelSpec


class Dropped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.nn.functional.dropout(self.fc(x), 0.5)
        return out


def test_one_mode_records_draws_and_rounds_as_the_three_did() -> None:
    model, x = Dropped(), torch.randn(4, 16)
    drawer = randomness.SameRandom()
    mode = StepMode(drawer=drawer, rounding=precision.rounding("bf16-matmul", "cpu"))
    with mode, inventory.recording(model, mode=mode) as recorded:
        got = model(x)
    with StepMode(drawer=randomness.SameRandom()):  # the draws alone: the same mask
        mask = torch.nn.functional.dropout(torch.ones(4, 16), 0.5) != 0
    bf = [t.to(torch.bfloat16).float() for t in (x, model.fc.weight)]
    expected = torch.addmm(model.fc.bias, bf[0], bf[1].t()) * mask * 2
    assert torch.allclose(got, expected, rtol=0, atol=1e-6)
    assert dict(drawer.calls) == {"aten::bernoulli_.float": 1}
    ops = {(r.op, r.module) for r in recorded.records}
    assert ("aten::addmm.default", "fc") in ops and ("aten::bernoulli_.float", "(root)") in ops
    assert not any(r.op.startswith("aten::_to_copy") for r in recorded.records)  # the rounding's own ops: unseen
    assert mode.recorder is None  # the inventory leaves the caller's mode as it found it


def test_the_op_that_raised_is_named_with_its_module_and_phase() -> None:
    model = nn.Linear(3, 3)
    with pytest.raises(RuntimeError), inventory.recording(model) as recorded:
        model(torch.randn(2, 4))
    assert recorded.recorder is not None and recorded.recorder.failed == ("aten::addmm.default", "(root)", "forward")


def test_a_captured_step_with_everything_on_runs_under_one_dispatch_mode() -> None:
    seen: list[int] = []

    def loss(out: Any) -> torch.Tensor:
        seen.append(len(_get_current_dispatch_mode_stack()))
        result: torch.Tensor = out.sum()
        return result

    spec = ModelSpec(Dropped(), (torch.randn(4, 16),), {}, loss, "dropped")
    cap = capture.train_step(spec, "cpu", with_inventory=True, at="bf16-matmul")
    assert seen == [1] and cap.inventory is not None and cap.random_ops == {"aten::bernoulli_.float": 1}


class Compiled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    @torch.compile(backend="eager")  # type: ignore[untyped-decorator]  # a model's own compile, as a team writes it
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * 2


@pytest.mark.parametrize("compiled_before", [True, False], ids=["compiled-before-the-step", "first-call-in-the-step"])
def test_a_models_own_torch_compile_never_compiles_the_modes_handler(compiled_before: bool) -> None:
    # Dynamo's callback stays set while a compiled forward runs eagerly under the mode, and the mode's handler runs
    # with the mode popped: unguarded, Dynamo compiled 8 graphs of the handler in this step.
    import torch._dynamo

    torch._dynamo.reset()
    model, x = Compiled(), torch.randn(3, 4)
    if compiled_before:
        model(x)
    counters = torch._dynamo.utils.counters
    before = dict(counters["stats"])
    spec = ModelSpec(model=model, args=(x,), kwargs={}, loss_fn=lambda o: o.sum(), name="compiled")
    cap = capture.train_step(spec, "cpu", with_inventory=True, at="bf16-matmul")
    assert dict(counters["stats"]) == before
    assert cap.inventory is not None and any(r.op == "aten::addmm.default" for r in cap.inventory.records)
    torch._dynamo.reset()
