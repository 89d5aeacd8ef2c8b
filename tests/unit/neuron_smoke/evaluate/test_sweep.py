"""neuron_smoke.evaluate.sweep: shape parsing, resized seeded inputs, the device's compile-cache count, bucket
suggestions, and a sweep that stops at the first shape torch.compile fails on."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuron_smoke.errors import UsageError
from neuron_smoke.evaluate import sweep


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


def test_a_model_without_an_input_tensor_cannot_be_swept() -> None:
    with pytest.raises(UsageError, match="--shapes: the model has no input tensor to resize"):
        sweep.inputs_for(((1, "a"), {"n": 3}), (2,), seed=0)


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


def test_bucket_suggestions_for_one_shape_and_for_shapes_padding_cannot_merge() -> None:
    assert sweep.suggest_buckets([(8, 128), (8, 128)]) == {
        "note": "one shape: nothing to bucket",
        "boundaries": {},
        "compiles_now": 1,
    }
    found = sweep.suggest_buckets([(1, 100), (2, 100), (4, 100)])  # already powers of two in dim 0
    assert found["boundaries"] == {"0": [1, 2, 4]} and found["compiles_bucketed"] == found["compiles_now"] == 3
    assert "would not save compiles: 3 graph(s) either way" in found["note"]


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
        NoBatchOfThree(), ((torch.zeros(2, 4),), {}), [(2, 4), (3, 4), (5, 4)], "cpu", "eager", 1, lambda: None
    )
    assert isinstance(error, ValueError) and "no lowering for a batch of 3" in str(error)
    assert result["failed_at"] == "3x4" and [r["shape"] for r in result["shapes"]] == ["2x4"]
    assert result["backend"] == "eager" and result["dynamic"] is False and result["compiles"] >= 1
    assert result["device_compiles"] is None and result["distinct_shapes"] == 1
    assert torch._dynamo.config.recompile_limit == limit
