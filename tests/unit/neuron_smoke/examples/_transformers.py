"""The checks the causal-LM examples (gpt2, llama) share: a forward pass gives logits per token, the same twice and
from a second build; the loss starts near a uniform guess and reaches every parameter."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from neuron_smoke.examples import transformer


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
