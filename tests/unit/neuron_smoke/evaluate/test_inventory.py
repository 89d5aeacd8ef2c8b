"""neuron_smoke.evaluate.inventory: the aten ops of one step, with calls, dtypes, phase and innermost module."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuron_smoke.evaluate import inventory
from neuron_smoke.examples import gpt2, mlp


def _mlp_step() -> tuple[nn.Module, inventory.Inventory]:
    model, args, loss_fn = mlp.factory()
    with inventory.recording(model) as inv:
        assert inv.records == []  # filled when the block exits
        loss_fn(model(*args)).backward()
    return model, inv


def test_a_step_is_recorded_per_op_module_and_phase() -> None:
    model, inv = _mlp_step()
    linears = sorted(n for n, m in model.named_modules() if isinstance(m, nn.Linear))
    # Linear layers on 2-D inputs run as addmm, each under its own module's parameter-style name
    forward_addmm = {r.module: r for r in inv.records if r.op == "aten::addmm.default" and r.phase == "forward"}
    assert sorted(forward_addmm) == linears
    assert all(r.calls == 1 and r.dtypes == {"float32"} for r in forward_addmm.values())
    assert any(r.phase == "backward" and r.module in linears for r in inv.records)
    assert {r.module for r in inv.records if inventory.normalize(r.op) == "gelu"} == {"act1"}
    # the loss is computed outside every submodule: the root
    assert any(r.module == inventory.ROOT and "nll_loss" in r.op for r in inv.records)
    assert not any(r.layouts or r.nested or r.under_transform for r in inv.records)


def test_modules_of_accepts_the_op_in_any_spelling() -> None:
    model, inv = _mlp_step()
    linears = sorted(n for n, m in model.named_modules() if isinstance(m, nn.Linear))
    for name in ("addmm", "aten::addmm", "aten::addmm.default"):
        assert inv.modules_of(name) == linears, name
    assert inv.modules_of("aten::fft_rfft") == []


def test_the_list_puts_forward_first_then_sorts_by_module_and_op() -> None:
    _, inv = _mlp_step()
    listed = inv.to_list()
    assert len(listed) == len(inv.records)
    keys = [(r["phase"] != "forward", r["module"], r["op"]) for r in listed]
    assert keys == sorted(keys) and listed[0]["phase"] == "forward" and listed[-1]["phase"] == "backward"
    first = listed[0]
    assert set(first) == {"op", "module", "phase", "calls", "dtypes", "layouts", "nested", "under_transform"}
    assert isinstance(first["dtypes"], list) and first["dtypes"] == sorted(first["dtypes"])


class Unusual(nn.Module):
    """A float64 op in a submodule, a sparse tensor and a nested tensor at the root, an op under vmap."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = Wide()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.wide(x)
        s = torch.eye(3).to_sparse()
        y = torch.sparse.mm(s, y)
        nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
        _ = nested * 2
        out: torch.Tensor = torch.func.vmap(torch.cos)(y)
        return out


class Wide(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.double() * 2).float()


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_layouts_nesting_float64_and_transforms_are_noted() -> None:
    model = Unusual()
    with inventory.recording(model) as inv:
        model(torch.ones(3, 3))
    wide = [r for r in inv.records if r.module == "wide"]
    assert any("float64" in r.dtypes for r in wide) and all(r.phase == "forward" for r in wide)
    assert any(r.layouts == {"sparse_coo"} and r.module == inventory.ROOT for r in inv.records)
    assert any(r.nested for r in inv.records)
    transformed = [r for r in inv.records if r.under_transform]
    assert transformed and all(r.module == inventory.ROOT for r in transformed)
    assert any("cos" in r.op for r in transformed)


def test_an_unwatched_part_is_recorded_and_the_watch_comes_back_after_it() -> None:
    model = nn.Linear(3, 3)
    x = torch.ones(2, 3)
    with inventory.recording(model) as inv:
        with inv.unwatched():
            torch.vmap(torch.sin)(x)  # its ops are recorded; its torch functions skip the watch
            torch.cos(x)
        torch.vmap(torch.tan)(x)  # watched again
    ops = {inventory.normalize(r.op) for r in inv.records if not r.under_transform}
    assert {"sin", "cos"} <= ops
    transformed = {r.op for r in inv.records if r.under_transform}
    assert any("tan" in op for op in transformed) and not any("sin" in op for op in transformed)
    assert inv.watch is None  # the block is over: nothing left to pause


def test_a_mode_the_model_entered_stays_innermost_through_an_unwatched_part() -> None:
    from torch.overrides import BaseTorchFunctionMode, _get_current_function_mode

    model, other = nn.Linear(3, 3), BaseTorchFunctionMode()
    with inventory.recording(model) as inv:
        other.__enter__()  # as a forward calling torch.set_default_device leaves one entered
        with inv.unwatched():
            assert _get_current_function_mode() is other  # not popped in the watch's place
        assert _get_current_function_mode() is other
        other.__exit__(None, None, None)


def test_op_names_and_their_normal_form() -> None:
    assert inventory.op_name(torch.ops.aten.add.Tensor) == "aten::add.Tensor"
    assert inventory.op_name(torch.ops.aten.addmm.default) == "aten::addmm.default"
    assert inventory.normalize("aten::add.Tensor") == inventory.normalize("add") == "add"
    record = inventory.OpRecord("aten::mul.Tensor", "fc", "backward", 3, {"float32", "bfloat16"})
    assert record.to_dict()["dtypes"] == ["bfloat16", "float32"] and record.to_dict()["calls"] == 3


def test_backward_ops_are_the_modules_whose_forward_made_them_not_the_last_one_run() -> None:
    # torch's ModuleTracker put GPT-2's softmax backward under the dropout that ran last in the block (issue 28)
    model, args, loss_fn = gpt2.factory()[:3]
    with inventory.recording(model) as inv:
        loss_fn(model(*args)).backward()
    attention = ["transformer.h.0.attn", "transformer.h.1.attn"]
    assert inv.modules_of("_softmax") == inv.modules_of("_softmax_backward_data") == attention
    assert inv.modules_of("tanh_backward") == ["transformer.h.0.mlp.act", "transformer.h.1.mlp.act"]
    assert not model.transformer.h[0].attn._forward_pre_hooks  # the recording's own hooks are gone


def test_the_dtypes_of_tensors_in_list_and_keyword_arguments_are_noted() -> None:
    """aten::cat takes its tensors as a list; an out= tensor is a keyword-only argument."""
    model = nn.Identity()
    a, out = torch.ones(2, dtype=torch.float64), torch.empty(2, dtype=torch.bfloat16)
    with inventory.recording(model) as inv:
        torch.cat([a, a])
        torch.add(torch.ones(2), torch.ones(2), out=out)
    dtypes = {inventory.normalize(r.op): r.dtypes for r in inv.records}
    assert dtypes["cat"] == {"float64"} and dtypes["add"] == {"float32", "bfloat16"}
