"""neuron_smoke.evaluate.randomness: random ops drawn from one seeded CPU generator, whatever the global state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from neuron_smoke.evaluate.randomness import SEED, SameRandom
from neuron_smoke.evaluate.stepmode import StepMode


@contextmanager
def same_random(seed: int = SEED) -> Iterator[Counter[str]]:
    """Random ops drawn as a captured step draws them (and nothing else done to the ops); their counts per op."""
    drawer = SameRandom(seed)
    with StepMode(drawer=drawer):
        yield drawer.calls


def _draw() -> list[torch.Tensor]:
    x = torch.ones(64)
    in_place = torch.empty(64).uniform_()
    return [torch.nn.functional.dropout(x, 0.5), in_place, torch.randn(3, 4), torch.randint(0, 9, (5,))]


def test_each_block_draws_the_same_numbers_and_counts_them() -> None:
    torch.manual_seed(1)
    with same_random() as first_calls:
        first = _draw()
    torch.manual_seed(2)
    state = torch.get_rng_state()
    with same_random() as second_calls:
        second = _draw()
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert torch.equal(torch.get_rng_state(), state)  # the caller's generator is left as it was
    assert first_calls == second_calls and sum(first_calls.values()) == 4
    assert first_calls["aten::uniform_.default"] == 1 and first_calls["aten::randn.default"] == 1
    with same_random(seed=7):
        assert not torch.equal(_draw()[2], first[2])  # another seed, other numbers


def test_deterministic_uses_of_random_ops_are_not_drawn() -> None:
    x = torch.randn(8, 4, 16)
    with same_random() as calls:
        torch.nn.functional.dropout(x, 0.0)
        torch.nn.functional.dropout(x, 0.5, training=False)
        torch.nn.functional.scaled_dot_product_attention(x, x, x)
    assert not calls
