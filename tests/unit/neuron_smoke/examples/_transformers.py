"""What the tests of the causal-LM examples (gpt2, llama) share: their example, built once, and the checks that it is
built as transformer.make builds it; that a forward pass gives logits per token, the same twice and from a second
build; that the loss starts near a uniform guess and reaches every parameter."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from neuron_smoke.examples import transformer


def example_of(factory: Callable[[], transformer.Example]) -> Callable[[], transformer.Example]:
    """A module fixture `example`: the factory's example, built once."""

    @pytest.fixture(scope="module")
    def example() -> transformer.Example:
        return factory()

    return example


def assert_built(example: transformer.Example, model_class: str, vocab_size: int) -> Any:
    """The example's model is transformers' `model_class` in training mode with eager attention, and its batch is
    (BATCH, SEQ) token ids in the vocabulary; the model."""
    model, (ids,), _ = example
    assert type(model).__name__ == model_class and model.training
    assert model.config._attn_implementation == "eager"
    assert ids.shape == (transformer.BATCH, transformer.SEQ) and int(ids.max()) < vocab_size
    return model


def assert_logits_per_token_and_deterministic(
    example: transformer.Example, factory: Callable[[], transformer.Example], vocab_size: int
) -> None:
    model, (ids,), _ = example
    with torch.no_grad():
        logits = model(ids).logits
        again = model(ids).logits  # in training mode: (attention) dropout is off, so the same
    assert logits.shape == (transformer.BATCH, transformer.SEQ, vocab_size)
    assert torch.equal(logits, again)
    other, (ids2,), _ = factory()
    with torch.no_grad():
        assert torch.equal(ids2, ids) and torch.equal(other(ids2).logits, logits)  # a second build: the same model


def assert_loss_near_uniform_reaching_every_parameter(example: transformer.Example, vocab_size: int) -> None:
    model, (ids,), loss_fn = example
    model.zero_grad()
    loss = loss_fn(model(ids))
    # small random weights: logits near zero, so about the cross entropy of a uniform guess
    assert loss.shape == () and float(loss.detach()) == pytest.approx(math.log(vocab_size), rel=0.05)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
