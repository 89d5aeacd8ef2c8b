"""neuron_smoke.examples.gpt2: transformers' GPT2LMHeadModel from the tiny config, built offline; its forward shape,
determinism (seeded, dropout off), tied head and causal-LM loss."""

from __future__ import annotations

import pytest

from neuron_smoke.examples import gpt2, transformer
from tests.unit.neuron_smoke.examples import _transformers

pytest.importorskip("transformers", reason="the GPT-2 example needs the `eval` extra (transformers)")

CONFIG = transformer.MODELS["gpt2"][2]
example = _transformers.example_of(gpt2.factory)


def test_the_model_is_gpt2_at_the_tiny_config(example: transformer.Example) -> None:
    model = _transformers.assert_built(example, "GPT2LMHeadModel", CONFIG["vocab_size"])
    cfg = model.config
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size) == (
        CONFIG["n_layer"],
        CONFIG["n_embd"],
        CONFIG["n_head"],
        CONFIG["vocab_size"],
    )
    assert len(model.transformer.h) == CONFIG["n_layer"]
    assert model.lm_head.weight is model.transformer.wte.weight  # tied: the case capture.move ties again


def test_a_forward_pass_gives_logits_per_token_and_is_deterministic(example: transformer.Example) -> None:
    _transformers.assert_logits_per_token_and_deterministic(example, gpt2.factory, CONFIG["vocab_size"])


def test_the_loss_starts_near_uniform_and_reaches_every_parameter(example: transformer.Example) -> None:
    _transformers.assert_loss_near_uniform_reaching_every_parameter(example, CONFIG["vocab_size"])
