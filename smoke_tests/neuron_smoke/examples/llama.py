"""transformers' LlamaForCausalLM from a tiny config (2 layers, width 64, 4 heads / 2 KV heads, vocabulary 256)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from neuron_smoke.examples.transformer import VOCAB, make
from neuron_smoke.models import LossFn


def _build(transformers: Any) -> nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, attention_dropout=0.0,
    )  # fmt: skip
    config._attn_implementation = "eager"
    model: nn.Module = transformers.LlamaForCausalLM(config)
    return model


def factory() -> tuple[nn.Module, tuple[torch.Tensor, ...], LossFn]:
    return make(_build)
