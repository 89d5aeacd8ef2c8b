"""neuron_smoke.examples.gpt2: transformers' GPT2LMHeadModel from the tiny config, built offline; its forward shape,
determinism (seeded, dropout off), tied head and causal-LM loss."""

from __future__ import annotations

import pytest
from neuron_smoke.examples import gpt2, transformer

from tests.unit.neuron_smoke.examples._transformers import (
    assert_logits_per_token_and_deterministic,
    assert_loss_near_uniform_reaching_every_parameter,
)

pytest.importorskip("transformers", reason="the GPT-2 example needs the `eval` extra (transformers)")

CONFIG = transformer.MODELS["gpt2"][2]


@pytest.fixture(scope="module")
def example() -> transformer.Example:
    return gpt2.factory()


def test_the_model_is_gpt2_at_the_tiny_config(example: transformer.Example) -> None:
    model, (ids,), _ = example
    assert type(model).__name__ == "GPT2LMHeadModel" and model.training
    cfg = model.config
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size) == (
        CONFIG["n_layer"],
        CONFIG["n_embd"],
        CONFIG["n_head"],
        CONFIG["vocab_size"],
    )
    assert cfg._attn_implementation == "eager" and len(model.transformer.h) == CONFIG["n_layer"]
    assert model.lm_head.weight is model.transformer.wte.weight  # tied: the case capture.move ties again
    assert ids.shape == (transformer.BATCH, transformer.SEQ) and int(ids.max()) < CONFIG["vocab_size"]


def test_a_forward_pass_gives_logits_per_token_and_is_deterministic(example: transformer.Example) -> None:
    assert_logits_per_token_and_deterministic(example, gpt2.factory, CONFIG["vocab_size"])


def test_the_loss_starts_near_uniform_and_reaches_every_parameter(example: transformer.Example) -> None:
    assert_loss_near_uniform_reaching_every_parameter(example, CONFIG["vocab_size"])
