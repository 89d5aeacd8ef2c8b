"""neuron_smoke.evaluate.sweep: every input resized along the swept sizes (or a factory's own inputs per shape), the
compiled training step per shape, recompiles apart from graph breaks, throughput and spread, the device's count."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch._dynamo import register_backend
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import sweep
from neuron_smoke.models import ModelSpec, mean_square_loss

# What the test backend compiled, in order: "fw" or "bw", and the shapes of the graph's inputs.
COMPILED: list[tuple[str, set[tuple[int, ...]]]] = []
CODE: list[str] = []  # the code of each graph compiled


def _recording(kind: str) -> Callable[[Any, Any], Any]:
    def compiler(gm: Any, inputs: Any) -> Any:
        COMPILED.append((kind, {tuple(x.shape) for x in inputs}))
        CODE.append(str(gm.code))
        return make_boxed_func(gm.forward)

    return compiler


register_backend(
    name="sweep_test", compiler_fn=aot_autograd(fw_compiler=_recording("fw"), bw_compiler=_recording("bw"))
)


class Cache:
    """A device module whose compile cache counts every forward and backward graph the test backend compiled."""

    def compile_cache_stats(self) -> dict[str, int]:
        return {"compiles": len(COMPILED), "hits": 0}


def _spec(model: nn.Module, *args: Any, factory: Callable[..., Any] | None = None, **kwargs: Any) -> ModelSpec:
    return ModelSpec(model, args, kwargs, mean_square_loss, "test", factory=factory)


def _sweep(
    spec: ModelSpec, shapes: list[tuple[int, ...]], steps: int = 3, at: str = "fp32"
) -> tuple[dict[str, Any], Any]:
    COMPILED.clear()
    CODE.clear()
    return sweep.run(spec, shapes, "cpu", "sweep_test", steps, lambda: None, Cache(), at)


def test_a_float_input_is_redrawn_at_the_shape_seeded_and_in_its_dtype() -> None:
    example = ((torch.zeros(2, 3, dtype=torch.bfloat16), torch.ones(1)), {"scale": 2.0})
    args, kwargs = sweep.inputs_for(example, (5, 3), seed=7)
    assert args[0].shape == (5, 3) and args[0].dtype == torch.bfloat16 and args[1] is example[0][1]
    assert kwargs == {"scale": 2.0}
    again, _ = sweep.inputs_for(example, (5, 3), seed=7)
    other, _ = sweep.inputs_for(example, (5, 3), seed=8)
    assert torch.equal(again[0], args[0]) and not torch.equal(other[0], args[0])
    assert example[0][0].shape == (2, 3)  # the example itself is not changed


def test_an_integer_input_keeps_the_value_range_of_the_example() -> None:
    ids = torch.tensor([[3, 4, 9]])
    (new,), _ = sweep.inputs_for(((ids,), {}), (4, 50), seed=0)
    assert new.shape == (4, 50) and new.dtype == ids.dtype
    assert int(new.min()) >= 3 and int(new.max()) <= 9
    (from_empty,), _ = sweep.inputs_for(((torch.zeros(0, 2, dtype=torch.int32),), {}), (3, 2), seed=0)
    assert from_empty.dtype == torch.int32 and set(from_empty.flatten().tolist()) <= {0, 1}


def test_every_input_with_a_swept_size_is_resized_with_the_first() -> None:
    """A mask and labels of the same batch and length follow the ids; a tensor of other sizes is kept."""
    ids, mask, labels, bias = torch.arange(10).reshape(2, 5), torch.ones(2, 5), torch.zeros(2, 5, 5), torch.ones(3)
    args, kwargs = sweep.inputs_for(((ids,), {"mask": mask, "pair": (labels, bias)}), (4, 7), seed=0)
    assert args[0].shape == (4, 7) and kwargs["mask"].shape == (4, 7) and kwargs["mask"].dtype == torch.float32
    assert kwargs["pair"][0].shape == (4, 7, 7) and kwargs["pair"][1] is bias
    _, only_keywords = sweep.inputs_for(((), {"ids": ids, "mask": mask}), (3, 5), seed=0)  # the first keyword leads
    assert only_keywords["ids"].shape == only_keywords["mask"].shape == (3, 5)
    assert int(only_keywords["ids"].min()) >= 0 and int(only_keywords["ids"].max()) <= 9


def test_a_size_the_shape_sends_two_ways_is_refused_when_another_input_has_it() -> None:
    square = ((torch.zeros(4, 4), torch.zeros(4)), {})
    with pytest.raises(UsageError, match="dimensions of size 4 to 2 and 4, so another input's dimension of size 4"):
        sweep.inputs_for(square, (2, 4), seed=0)
    assert sweep.inputs_for(((torch.zeros(4, 4),), {}), (2, 4), seed=0)[0][0].shape == (2, 4)  # nothing else to resize


def test_a_model_without_an_input_tensor_or_of_another_rank_cannot_be_swept() -> None:
    with pytest.raises(UsageError, match="--shapes: the model has no input tensor to resize"):
        sweep.inputs_for(((1, "a"), {"n": 3}), (2,), seed=0)
    with pytest.raises(UsageError, match="has 3 dimensions, the model's first input 2x4 has 2"):
        sweep.check(_spec(nn.Linear(4, 2), torch.zeros(2, 4)), [(2, 4), (1, 2, 3)])


class Normed(nn.Module):
    """A model whose forward changes its own state in training (BatchNorm's statistics and batch count)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.norm, self.drop = nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.drop(self.norm(self.fc(x)))
        return out


def test_a_shape_the_models_forward_refuses_is_a_usage_error_before_any_step() -> None:
    # --shapes 1x128 on a model of width 32 was swept and reported as "torch.compile failed"
    model = Normed()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.random.get_rng_state()
    with pytest.raises(UsageError, match=r"--shapes: 8x5 does not fit the model: its forward at 8x5 raised "
                                         r"RuntimeError: .*\(the example's first input is 2x4\)"):  # fmt: skip
        sweep.check(_spec(model, torch.zeros(2, 4)), [(8, 4), (8, 5)])
    sweep.check(_spec(model, torch.zeros(2, 4)), [(8, 4), (3, 4)])
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in state.items())  # running stats and num_batches_tracked too
    assert torch.equal(torch.random.get_rng_state(), rng)


class ItemInForward(nn.Module):
    """A forward meta tensors cannot run (it reads a value): the shape is tried with data before it is refused."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(x) * (2.0 if float(x.abs().sum()) >= 0 else 1.0)
        return out


def test_a_forward_that_reads_values_is_checked_with_data_not_refused() -> None:
    model = ItemInForward()
    weight = model.fc.weight.detach().clone()
    sweep.check(_spec(model, torch.zeros(2, 4)), [(5, 4)])
    assert torch.equal(model.fc.weight, weight)
    with pytest.raises(UsageError, match="--shapes: 5x3 does not fit the model"):
        sweep.check(_spec(model, torch.zeros(2, 4)), [(5, 3)])


class Scaled(nn.Module):
    """Two inputs of one batch: features and a per-row scale."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(x) * scale
        return out


def test_a_two_input_model_sweeps_every_shape_without_a_false_compile_failure() -> None:
    result, error = _sweep(_spec(Scaled(), torch.zeros(2, 4), torch.ones(2, 1)), [(2, 4), (5, 4)])
    assert error is None and result["failed_at"] is None
    assert [r["shape"] for r in result["shapes"]] == ["2x4", "5x4"]


def test_the_training_step_is_compiled_forward_and_backward_per_shape() -> None:
    result, error = _sweep(_spec(Scaled(), torch.zeros(2, 4), torch.ones(2, 1)), [(2, 4), (5, 4), (2, 4)])
    assert error is None and result["step"] == "forward, loss, backward"
    assert [kind for kind, _ in COMPILED] == ["fw", "bw", "fw", "bw"]  # the repeat of 2x4 compiles none
    assert (5, 1) in COMPILED[2][1] and (5, 2) in COMPILED[3][1]  # the scale input at 5x4; the output's gradient
    assert [r["device_graphs"] for r in result["shapes"]] == [2, 2, 0]
    assert (result["compiles"], result["recompiles"], result["device_recompiles"], result["graph_breaks"]) == (
        2,
        1,
        1,
        0,
    )
    assert result["device_graphs"] == 4 and "4 graph(s) compiled or loaded, 1 recompile(s) (agrees)" in sweep.summary(
        result
    )


@pytest.mark.parametrize(("at", "autocast"), [("bf16-autocast", True), ("fp32", False), ("bf16-matmul", False)])
def test_the_step_is_compiled_at_the_evaluations_precision(at: str, autocast: bool) -> None:
    """Under bf16-autocast the evaluation's other steps run their forward and loss in autocast: so does the sweep's."""
    _, error = _sweep(_spec(nn.Linear(4, 2), torch.zeros(2, 4)), [(2, 4)], steps=1, at=at)
    assert error is None and ("torch.bfloat16" in CODE[0]) is autocast


class Broken(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        torch._dynamo.graph_break()
        out: torch.Tensor = self.b(h)
        return out


def test_a_graph_break_is_counted_apart_with_its_reason_not_as_a_recompile() -> None:
    result, error = _sweep(_spec(Broken(), torch.zeros(2, 4)), [(2, 4)])
    assert error is None and result["compiles"] == 2  # two graphs for one forward, compiled once
    assert (result["recompiles"], result["device_recompiles"], result["graph_breaks"]) == (0, 0, 1)
    (row,) = result["shapes"]
    assert row["graph_breaks"] == 1 and len(row["break_reasons"]) == 1
    assert row["break_reasons"][0]["where"].endswith(f"test_sweep.py:{_line_of('torch._dynamo.graph_break()')}")
    assert "0 recompile(s), 1 graph break(s)" in sweep.summary(result)
    (line,) = sweep.break_lines(result)
    assert line.startswith("graph break at ") and line.endswith("(shapes 2x4)")
    again, _ = _sweep(_spec(Broken(), torch.zeros(2, 4)), [(2, 4), (3, 4)])
    assert (again["compiles"], again["recompiles"], again["graph_breaks"]) == (4, 1, 1)


def test_each_shape_has_its_throughput_and_spread_over_the_timed_steps() -> None:
    result, _ = _sweep(_spec(nn.Linear(4, 2), torch.zeros(2, 4)), [(2, 4), (6, 4)], steps=5)
    assert result["steps"] == 5
    for row, items in zip(result["shapes"], (2, 6), strict=True):
        assert 0 < row["p50_ms"] <= row["p95_ms"]
        assert row["items_per_s"] == pytest.approx(items / (row["p50_ms"] / 1e3))
        assert row["first_call_s"] > 0 and row["compile_s"] >= 0


def test_a_factory_with_a_shape_keyword_makes_each_shapes_inputs_and_loss() -> None:
    asked: list[tuple[int, ...] | None] = []

    def factory(shape: tuple[int, ...] | None = None) -> tuple[nn.Module, torch.Tensor, Callable[[Any], Any]]:
        asked.append(shape)
        batch = shape[0] if shape else 2
        target = torch.zeros(batch, dtype=torch.long)  # a loss of the shape's batch: an example's would not fit
        return nn.Linear(4, 3), torch.zeros(batch, 4), lambda out: nn.functional.cross_entropy(out, target)

    model, x, loss = factory()
    spec = ModelSpec(model, (x,), {}, loss, "test", factory=factory)
    sweep.check(spec, [(3, 4, 1)])  # the factory decides what a shape means
    result, error = sweep.run(spec, [(3, 4), (5, 4)], "cpu", "eager", 1, lambda: None)
    assert error is None and asked == [None, (3, 4), (5, 4)] and result["device_graphs"] is None
    broken = ModelSpec(model, (x,), {}, loss, "pkg:broken", factory=lambda shape=None: 1 / 0)
    with pytest.raises(UsageError, match=r"pkg:broken\(shape=\(3, 4\)\) raised ZeroDivisionError"):
        sweep.example_at(broken, (3, 4), 0)
    exits = ModelSpec(model, (x,), {}, loss, "pkg:exits", factory=lambda shape=None: sys.exit(1))
    with pytest.raises(UsageError, match=r"pkg:exits\(shape=\(3, 4\)\) exited \(sys.exit\(1\)\)"):
        sweep.example_at(exits, (3, 4), 0)  # a SystemExit ended verify-device silently
    assert not sweep.takes_shape(lambda: None) and not sweep.takes_shape(None)


class Stats:
    def __init__(self, value: object) -> None:
        self.value = value

    def compile_cache_stats(self) -> object:
        return self.value


def test_the_device_cache_count_is_read_only_when_the_module_reports_one() -> None:
    assert sweep.device_cache(Stats({"compiles": 3, "hits": 2, "other": 1})) == {"compiles": 3, "hits": 2}
    assert sweep.device_cache(Stats({"compiles": "4"})) == {"compiles": 4, "hits": 0}
    assert sweep.device_cache(Stats({"hits": 1})) is None
    assert sweep.device_cache(Stats([3])) is None
    assert sweep.device_cache(None) is None and sweep.device_cache(object()) is None


def test_without_a_device_count_the_note_says_so_and_a_disagreement_is_named() -> None:
    result, error = sweep.run(_spec(nn.Linear(4, 2), torch.zeros(2, 4)), [(2, 4)], "cpu", "eager", 1, lambda: None)
    assert error is None and result["device_graphs"] is None
    assert "not reported (no compile_cache_stats() on the device module" in sweep.cache_note(result)
    other = {**result, "recompiles": 2, "device_graphs": 3, "device_recompiles": 1}
    assert "1 recompile(s) (DIFFERS from Dynamo's 2)" in sweep.cache_note(other)


def test_the_counting_backend_counts_each_graph_it_is_handed() -> None:
    counter = sweep.CountingBackend("eager")
    gm = torch.fx.symbolic_trace(nn.ReLU())
    compiled = counter(gm, [torch.zeros(2)])
    counter(gm, [torch.zeros(3)])
    assert counter.compiles == 2 and counter.name == "eager"
    assert torch.equal(compiled(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 2.0]))


class NoBatchOfThree(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 3:
            raise ValueError("no lowering for a batch of 3")
        out: torch.Tensor = self.fc(x)
        return out


def test_the_sweep_stops_at_the_first_failing_shape_and_restores_dynamo() -> None:
    limit = torch._dynamo.config.recompile_limit
    result, error = sweep.run(
        _spec(NoBatchOfThree(), torch.zeros(2, 4)), [(2, 4), (3, 4), (5, 4)], "cpu", "eager", 1, lambda: None
    )
    assert isinstance(error, ValueError) and "no lowering for a batch of 3" in str(error)
    assert result["failed_at"] == "3x4" and [r["shape"] for r in result["shapes"]] == ["2x4"]
    assert result["failed_in"] == sweep.PHASES[0]
    assert result["backend"] == "eager" and result["dynamic"] is False and result["compiles"] >= 1
    assert result["device_graphs"] is None and result["distinct_shapes"] == 1
    assert torch._dynamo.config.recompile_limit == limit


class _RaiseInBackwardOnThree(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.rows = x.shape[0]
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        if ctx.rows == 3:
            raise ValueError("no backward lowering for a batch of 3")
        return grad


class NoBackwardOfThree(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    @torch.compiler.disable  # the custom backward runs as written, outside the compiled graph
    def _guard(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _RaiseInBackwardOnThree.apply(x)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self._guard(self.fc(x))
        return out


def test_a_sweep_failure_names_the_part_of_the_training_step_it_happened_in() -> None:
    result, error = sweep.run(
        _spec(NoBackwardOfThree(), torch.zeros(2, 4)), [(2, 4), (3, 4)], "cpu", "eager", 1, lambda: None
    )
    assert isinstance(error, ValueError) and "no backward lowering" in str(error)
    assert (result["failed_at"], result["failed_in"]) == ("3x4", "backward")
    assert (
        sweep.run(_spec(NoBackwardOfThree(), torch.zeros(2, 4)), [(2, 4)], "cpu", "eager", 1, lambda: None)[0][
            "failed_in"
        ]
        is None
    )


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "_line_of" not in line)
