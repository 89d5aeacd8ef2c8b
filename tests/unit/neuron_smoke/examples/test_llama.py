"""neuron_smoke.examples.llama: transformers' LlamaForCausalLM from the tiny config, built offline; its grouped-query
attention, forward shape, determinism (seeded, dropout off) and causal-LM loss."""

from __future__ import annotations

import pytest

from neuron_smoke.examples import llama, transformer
from tests.unit.neuron_smoke.examples import _transformers

pytest.importorskip("transformers", reason="the Llama example needs the `eval` extra (transformers)")

CONFIG = transformer.MODELS["llama"][2]
example = _transformers.example_of(llama.factory)


def test_the_model_is_llama_at_the_tiny_config_with_grouped_query_attention(example: transformer.Example) -> None:
    model = _transformers.assert_built(example, "LlamaForCausalLM", CONFIG["vocab_size"])
    layers = model.model.layers
    assert len(layers) == CONFIG["num_hidden_layers"]
    head_dim = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
    attn, mlp = layers[0].self_attn, layers[0].mlp
    assert attn.q_proj.out_features == CONFIG["num_attention_heads"] * head_dim == CONFIG["hidden_size"]
    assert attn.k_proj.out_features == attn.v_proj.out_features == CONFIG["num_key_value_heads"] * head_dim
    assert (mlp.up_proj.in_features, mlp.up_proj.out_features) == (CONFIG["hidden_size"], CONFIG["intermediate_size"])
    assert model.lm_head.out_features == CONFIG["vocab_size"]


def test_a_forward_pass_gives_logits_per_token_and_is_deterministic(example: transformer.Example) -> None:
    _transformers.assert_logits_per_token_and_deterministic(example, llama.factory, CONFIG["vocab_size"])


def test_the_loss_starts_near_uniform_and_reaches_every_parameter(example: transformer.Example) -> None:
    _transformers.assert_loss_near_uniform_reaching_every_parameter(example, CONFIG["vocab_size"])
