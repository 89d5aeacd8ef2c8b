"""neuron_smoke.evaluate.tensors: the count sketch (fixed, linear, shape-blind), summaries."""

from __future__ import annotations

import math

import pytest
import torch

from neuron_smoke.evaluate import tensors


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_the_sketch_is_fixed_linear_and_depends_only_on_the_element_count(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _randn(6, 50, seed=1), _randn(6, 50, seed=2)
    sk = tensors.sketch(a)
    assert sk.shape == (tensors.SKETCH_WIDTH,) and sk.dtype == torch.float64
    assert torch.allclose(tensors.sketch(a + b), sk + tensors.sketch(b))  # a projection: linear
    assert torch.equal(tensors.sketch(a.reshape(300)), sk)  # the same elements in another shape project alike
    monkeypatch.setattr(tensors, "_plans", {})  # a fresh process: the plan comes from the seed alone
    assert torch.equal(tensors.sketch(a), sk)
    # every element lands, with a random sign, in exactly one bucket (none is dropped, as a sample would)
    for i in range(10):
        one_hot = torch.zeros(10)
        one_hot[i] = 3.0
        nonzero = tensors.sketch(one_hot)[tensors.sketch(one_hot) != 0]
        assert nonzero.abs().tolist() == [3.0], i


def test_a_summary_holds_the_statistics_of_a_float_tensor_and_only_the_shape_of_others() -> None:
    t = torch.tensor([[1.0, -4.0], [2.0, float("inf")]])
    s = tensors.summary(t)
    assert (s["shape"], s["dtype"], s["numel"], s["absmax"], s["nonfinite"]) == ([2, 2], "float32", 4, math.inf, 1)
    finite = tensors.summary(torch.tensor([3.0, 4.0], dtype=torch.float64))
    assert finite["mean"] == 3.5 and finite["l2"] == 5.0 and finite["std"] == pytest.approx(math.sqrt(0.5))
    assert tensors.summary(torch.tensor([2.0]))["std"] == 0.0  # one element: no NaN from the unbiased std
    assert tensors.summary(torch.arange(3)) == {"shape": [3], "dtype": "int64", "numel": 3}
    assert tensors.summary(torch.zeros(0, 4)) == {"shape": [0, 4], "dtype": "float32", "numel": 0}


@pytest.mark.parametrize(
    ("tensor", "expected"),
    [
        (torch.zeros(2), True),
        (torch.zeros(2, dtype=torch.bfloat16), True),
        (torch.zeros(2, dtype=torch.complex64), True),
        (torch.zeros(2, dtype=torch.int64), False),
        (torch.zeros(2, dtype=torch.bool), False),
    ],
)
def test_only_floating_and_complex_tensors_are_comparable(tensor: torch.Tensor, expected: bool) -> None:
    assert tensors.comparable(tensor) is expected
